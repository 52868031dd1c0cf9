//! Repository snapshots: the tree of one commit, read from git objects into
//! memory once and shared (`Arc<Snapshot>`) by every episode on that commit.
//!
//! Nothing is checked out and nothing is written. Paths come only from the
//! tree itself (git refuses `.git` and `..` entries in trees), symlinks are
//! kept as their target text and never followed, submodules and binary files
//! are kept as markers.

mod folder;
mod load;
pub mod path;
mod snapshot;
mod store;
mod worktree;

pub use folder::{load_folder, FOLDER};
pub use load::{load_snapshot, open_repository, open_repository_path, repo_dir_name, resolve_commit};
pub use snapshot::{FileEntry, FileKind, Snapshot, SnapshotConfig};
pub use store::SnapshotStore;
pub use worktree::{load_worktree, WORKTREE};

use std::path::PathBuf;
use thiserror::Error;

/// Why a snapshot could not be had.
#[derive(Debug, Error)]
pub enum RepoError {
    /// `repo` is not `owner/name` with plain components.
    #[error("repository name '{0}' is not of the form owner/name")]
    BadName(String),
    /// None of `<owner>__<name>`, `<owner>__<name>.git` exists under the repos dir.
    #[error("repository '{repo}' not found under {dir} (looked for {tried})")]
    NotFound {
        /// The `owner/name` asked for.
        repo: String,
        /// The repos dir searched.
        dir: PathBuf,
        /// The candidate directory names.
        tried: String,
    },
    /// The directory exists but git could not open it.
    #[error("cannot open git repository {path}: {source}")]
    Open {
        /// The directory.
        path: PathBuf,
        /// libgit2's error.
        source: git2::Error,
    },
    /// The revision does not name a commit in this repository.
    #[error("revision '{rev}' not found in {repo}: {why} (a branch, a tag or a commit id of that repository)")]
    MissingCommit {
        /// The `owner/name`.
        repo: String,
        /// The revision asked for.
        rev: String,
        /// libgit2's message, without its class and code.
        why: String,
    },
    /// A plain folder (not a git repository) could not be read.
    #[error("cannot read the folder {path}: {message}")]
    Folder {
        /// The folder.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// Reading a tree or blob failed (a corrupt or shallow repository).
    #[error("reading '{path}' at {commit} in {repo}: {source}")]
    Read {
        /// The `owner/name`.
        repo: String,
        /// The commit id.
        commit: String,
        /// The tree path being read.
        path: String,
        /// libgit2's error.
        source: git2::Error,
    },
}
