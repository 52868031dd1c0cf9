//! Indexes kept per snapshot: built once per (repository, commit) and
//! shared; a working tree or plain folder (whose "commit" is a label, not
//! an id) is keyed by a hash of its paths and contents, so an edit
//! rebuilds it and an unchanged tree does not.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::{Index, IndexConfig};
use crate::repo::{Snapshot, FOLDER, WORKTREE};

type Slot = Arc<Mutex<Option<Arc<Index>>>>;

/// Default [`IndexCache`] capacity: indexes kept after their last use.
pub const MAX_CACHED_INDEXES: usize = 16;

/// Indexes by (repository, commit id or content key), least recently used dropped first.
pub struct IndexCache {
    config: IndexConfig,
    capacity: usize,
    slots: Mutex<(HashMap<(String, String), (Slot, u64)>, u64)>,
    builds: AtomicUsize,
}

impl Default for IndexCache {
    fn default() -> Self {
        IndexCache::new(IndexConfig::default(), MAX_CACHED_INDEXES)
    }
}

/// A key for a snapshot's contents: a hash of every path and text, hex.
pub fn content_key(snapshot: &Snapshot) -> String {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for f in snapshot.files() {
        f.path.hash(&mut h);
        f.text().hash(&mut h);
    }
    format!("content-{:016x}", h.finish())
}

/// The process's shared cache ([`IndexCache::shared`]).
static SHARED: std::sync::LazyLock<Arc<IndexCache>> = std::sync::LazyLock::new(Arc::default);

impl IndexCache {
    /// The one cache of this process (default settings): the `search`
    /// tool, `--policy search` and the guided teacher build a snapshot's
    /// index once between them.
    pub fn shared() -> Arc<IndexCache> {
        Arc::clone(&SHARED)
    }

    /// A cache of at most `capacity` (at least 1) indexes built under `config`.
    pub fn new(config: IndexConfig, capacity: usize) -> IndexCache {
        IndexCache { config, capacity: capacity.max(1), slots: Mutex::new((HashMap::new(), 0)), builds: AtomicUsize::new(0) }
    }

    /// Indexes built so far (a cache hit builds none).
    pub fn builds(&self) -> usize {
        self.builds.load(Ordering::Relaxed)
    }

    /// The key `snapshot` is kept under.
    pub fn key(snapshot: &Snapshot) -> (String, String) {
        let commit = snapshot.commit();
        let key = if commit == WORKTREE || commit == FOLDER { content_key(snapshot) } else { commit.to_string() };
        (snapshot.repo().to_string(), key)
    }

    /// The index of `snapshot`, built on first use; concurrent callers for
    /// one key wait for one build.
    pub fn get(&self, snapshot: &Snapshot) -> Arc<Index> {
        let slot = self.slot(Self::key(snapshot));
        let mut guard = slot.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(index) = guard.as_ref() {
            return Arc::clone(index);
        }
        let started = std::time::Instant::now();
        let index = Arc::new(Index::build(snapshot, &self.config));
        self.builds.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(
            repo = snapshot.repo(),
            commit = snapshot.commit(),
            files = index.files.len(),
            entities = index.entities.len(),
            heap_bytes = index.heap_bytes(),
            seconds = started.elapsed().as_secs_f64(),
            "search index built"
        );
        *guard = Some(Arc::clone(&index));
        index
    }

    fn slot(&self, key: (String, String)) -> Slot {
        let mut guard = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        let (slots, clock) = &mut *guard;
        *clock += 1;
        let now = *clock;
        let slot = match slots.get_mut(&key) {
            Some((slot, used)) => {
                *used = now;
                Arc::clone(slot)
            }
            None => {
                let slot = Slot::default();
                slots.insert(key, (Arc::clone(&slot), now));
                slot
            }
        };
        while slots.len() > self.capacity {
            let Some(oldest) = slots.iter().min_by_key(|(_, (_, used))| *used).map(|(k, _)| k.clone()) else { break };
            slots.remove(&oldest);
        }
        slot
    }
}
