//! A cache of snapshots keyed by (repo, revision): each commit is read from
//! git once, however many episodes use it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::load::{load_snapshot, open_repository};
use super::snapshot::{Snapshot, SnapshotConfig};
use super::RepoError;

type Slot = Arc<Mutex<Option<Arc<Snapshot>>>>;

/// Default [`SnapshotStore`] capacity: snapshots kept after their last use.
pub const MAX_CACHED_SNAPSHOTS: usize = 32;

/// Opens repositories under `repos_dir` and caches their snapshots.
pub struct SnapshotStore {
    repos_dir: PathBuf,
    config: SnapshotConfig,
    capacity: usize,
    slots: Mutex<Cache>,
}

#[derive(Default)]
struct Cache {
    slots: HashMap<(String, String), (Slot, u64)>,
    clock: u64,
}

impl SnapshotStore {
    /// A store over `repos_dir` with default limits.
    pub fn open(repos_dir: impl AsRef<Path>) -> Self {
        Self::with_config(repos_dir, SnapshotConfig::default(), MAX_CACHED_SNAPSHOTS)
    }

    /// A store with explicit load limits and cache capacity (at least 1).
    pub fn with_config(repos_dir: impl AsRef<Path>, config: SnapshotConfig, capacity: usize) -> Self {
        Self {
            repos_dir: repos_dir.as_ref().to_path_buf(),
            config,
            capacity: capacity.max(1),
            slots: Mutex::new(Cache::default()),
        }
    }

    /// The snapshot of `repo` (`owner/name`) at `rev`, loaded on first use.
    /// Concurrent callers for the same key wait for one load; different keys
    /// load in parallel. The least recently used snapshots beyond the
    /// capacity are dropped from the cache (holders keep their `Arc`).
    pub fn get(&self, repo: &str, rev: &str) -> Result<Arc<Snapshot>, RepoError> {
        let slot = self.slot(repo, rev);
        let mut guard = slot.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(snapshot) = guard.as_ref() {
            return Ok(Arc::clone(snapshot));
        }
        let git = open_repository(&self.repos_dir, repo)?;
        let snapshot = Arc::new(load_snapshot(&git, repo, rev, &self.config)?);
        *guard = Some(Arc::clone(&snapshot));
        Ok(snapshot)
    }

    /// Puts a snapshot made elsewhere (a working tree, a repository outside
    /// the repos dir) under `(repo, rev)`, where [`SnapshotStore::get`]
    /// finds it.
    pub fn insert(&self, repo: &str, rev: &str, snapshot: Arc<Snapshot>) {
        let slot = self.slot(repo, rev);
        *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(snapshot);
    }

    fn slot(&self, repo: &str, rev: &str) -> Slot {
        let mut cache = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        cache.clock += 1;
        let now = cache.clock;
        let key = (repo.to_string(), rev.to_string());
        let slot = match cache.slots.get_mut(&key) {
            Some((slot, used)) => {
                *used = now;
                Arc::clone(slot)
            }
            None => {
                let slot = Slot::default();
                cache.slots.insert(key, (Arc::clone(&slot), now));
                slot
            }
        };
        while cache.slots.len() > self.capacity {
            let oldest = cache.slots.iter().min_by_key(|(_, (_, used))| *used).map(|(k, _)| k.clone());
            match oldest {
                Some(k) => cache.slots.remove(&k),
                None => break,
            };
        }
        slot
    }

    /// The repos dir this store reads.
    pub fn repos_dir(&self) -> &Path {
        &self.repos_dir
    }
}
