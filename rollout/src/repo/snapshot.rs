//! The in-memory tree of one commit.

use std::collections::BTreeSet;
use std::sync::{Arc, OnceLock};

use crate::spans::{FileSpans, Language};

/// Limits applied while loading a snapshot.
#[derive(Clone, Debug)]
pub struct SnapshotConfig {
    /// Files larger than this are kept as [`FileKind::TooLarge`] (no contents).
    pub max_file_bytes: usize,
    /// Bytes inspected for a NUL to call a file binary (git's heuristic).
    pub binary_probe_bytes: usize,
}

/// Default [`SnapshotConfig::max_file_bytes`]: 4 MiB.
pub const MAX_FILE_BYTES: usize = 4 << 20;
/// Default [`SnapshotConfig::binary_probe_bytes`]: git's 8000.
pub const BINARY_PROBE_BYTES: usize = 8000;

impl Default for SnapshotConfig {
    fn default() -> Self {
        Self { max_file_bytes: MAX_FILE_BYTES, binary_probe_bytes: BINARY_PROBE_BYTES }
    }
}

/// What a tree entry is.
#[derive(Debug)]
pub enum FileKind {
    /// A text file (no NUL in its first bytes) with its full contents; may
    /// still be invalid UTF-8 (shown lossily).
    Text(Vec<u8>),
    /// A file with a NUL byte near its start: listed, never shown.
    Binary {
        /// Size in bytes.
        size: usize,
    },
    /// A file above [`SnapshotConfig::max_file_bytes`]: listed, never shown.
    TooLarge {
        /// Size in bytes.
        size: usize,
    },
    /// A symbolic link: its target text, never followed.
    Symlink {
        /// The link target as stored in git.
        target: String,
    },
    /// A submodule (gitlink): the commit it pins; its files are not here.
    Submodule {
        /// The pinned commit id.
        commit: String,
    },
    /// A blob the tree lists but the repository does not hold (a partial
    /// or filtered clone leaves out large files): listed, never shown.
    Missing,
}

/// One path of the tree.
#[derive(Debug)]
pub struct FileEntry {
    /// Repo-relative path, `/`-separated.
    pub path: String,
    /// What it is, with contents for text files.
    pub kind: FileKind,
    spans: OnceLock<Option<Arc<FileSpans>>>,
}

impl FileEntry {
    /// A new entry (spans are parsed lazily on first use).
    pub fn new(path: String, kind: FileKind) -> Self {
        Self { path, kind, spans: OnceLock::new() }
    }

    /// Text contents, if this is a text file.
    pub fn text(&self) -> Option<&[u8]> {
        match &self.kind {
            FileKind::Text(bytes) => Some(bytes),
            _ => None,
        }
    }

    /// Function spans of a text file in a language we parse; parsed once.
    pub fn spans(&self) -> Option<&Arc<FileSpans>> {
        self.spans
            .get_or_init(|| {
                let lang = Language::from_path(&self.path)?;
                Some(Arc::new(FileSpans::parse(lang, self.text()?)))
            })
            .as_ref()
    }
}

/// The tree of one commit, sorted by path; cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct Snapshot {
    repo: String,
    commit: String,
    files: Vec<FileEntry>,
    dirs: BTreeSet<String>,
}

impl Snapshot {
    /// Builds a snapshot from entries (sorted and indexed here).
    pub fn new(repo: String, commit: String, mut files: Vec<FileEntry>) -> Self {
        files.sort_by(|a, b| a.path.cmp(&b.path));
        files.dedup_by(|a, b| a.path == b.path);
        let mut dirs = BTreeSet::new();
        for file in &files {
            let mut path = file.path.as_str();
            while let Some(i) = path.rfind('/') {
                path = &path[..i];
                if !dirs.insert(path.to_string()) {
                    break;
                }
            }
        }
        Self { repo, commit, files, dirs }
    }

    /// `owner/name`.
    pub fn repo(&self) -> &str {
        &self.repo
    }

    /// The full commit id.
    pub fn commit(&self) -> &str {
        &self.commit
    }

    /// All entries, sorted by path.
    pub fn files(&self) -> &[FileEntry] {
        &self.files
    }

    /// The entry at exactly `path`.
    pub fn file(&self, path: &str) -> Option<&FileEntry> {
        self.files
            .binary_search_by(|f| f.path.as_str().cmp(path))
            .ok()
            .map(|i| &self.files[i])
    }

    /// Whether `path` is a directory of the tree (the root `""` always is).
    pub fn is_dir(&self, path: &str) -> bool {
        path.is_empty() || self.dirs.contains(path)
    }

    /// Entries at or under `dir` (a contiguous, sorted range).
    pub fn files_under(&self, dir: &str) -> &[FileEntry] {
        if dir.is_empty() {
            return &self.files;
        }
        let prefix = format!("{dir}/");
        let start = self.files.partition_point(|f| f.path.as_str() < prefix.as_str());
        let len = self.files[start..].partition_point(|f| f.path.starts_with(&prefix));
        &self.files[start..start + len]
    }

    /// Total bytes of text contents held in memory.
    pub fn text_bytes(&self) -> usize {
        self.files.iter().filter_map(FileEntry::text).map(<[u8]>::len).sum()
    }
}
