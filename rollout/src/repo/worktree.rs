//! A snapshot of a repository's working tree as it is, uncommitted edits
//! included: the index's files read from disk (deleted ones left out) and
//! the untracked files git does not ignore. Nothing is written: not the
//! index, not an object, not a ref (`git status` is unchanged afterwards).

use std::path::Path;

use git2::{Repository, Status, StatusOptions};

use super::load::classify;
use super::snapshot::{FileEntry, FileKind, Snapshot, SnapshotConfig};
use super::RepoError;

/// The label a working-tree snapshot carries in place of a commit id.
pub const WORKTREE: &str = "worktree";

/// Git's file mode of a gitlink (submodule) in the index.
const MODE_GITLINK: u32 = 0o160000;

/// Reads the working tree of `git` (not bare) as `repo`.
pub fn load_worktree(git: &Repository, repo: &str, config: &SnapshotConfig) -> Result<Snapshot, RepoError> {
    let read_err = |path: &str, source| RepoError::Read { repo: repo.to_string(), commit: WORKTREE.into(), path: path.to_string(), source };
    let Some(workdir) = git.workdir() else {
        return Err(read_err("", git2::Error::from_str("a bare repository has no working tree; give a revision")));
    };
    let mut files = Vec::new();
    let index = git.index().map_err(|e| read_err("index", e))?;
    for entry in index.iter() {
        let path = String::from_utf8_lossy(&entry.path).into_owned();
        if entry.mode == MODE_GITLINK {
            files.push(FileEntry::new(path, FileKind::Submodule { commit: entry.id.to_string() }));
            continue;
        }
        if let Some(kind) = read_disk(workdir, &path, config) {
            files.push(FileEntry::new(path, kind));
        }
    }
    let mut options = StatusOptions::new();
    options.include_untracked(true).recurse_untracked_dirs(true).include_ignored(false).exclude_submodules(true);
    let statuses = git.statuses(Some(&mut options)).map_err(|e| read_err("status", e))?;
    for s in statuses.iter().filter(|s| s.status().contains(Status::WT_NEW)) {
        let Ok(path) = s.path() else { continue };
        if let Some(kind) = read_disk(workdir, path, config) {
            files.push(FileEntry::new(path.to_string(), kind));
        }
    }
    Ok(Snapshot::new(repo.to_string(), WORKTREE.into(), files))
}

/// A work-tree file as a snapshot entry; `None` when it is gone (deleted
/// but not yet staged) or is not a file.
fn read_disk(workdir: &Path, path: &str, config: &SnapshotConfig) -> Option<FileKind> {
    let full = workdir.join(path);
    let meta = std::fs::symlink_metadata(&full).ok()?;
    if meta.file_type().is_symlink() {
        let target = std::fs::read_link(&full).ok()?;
        return Some(FileKind::Symlink { target: target.to_string_lossy().into_owned() });
    }
    if !meta.is_file() {
        return None;
    }
    if meta.len() as usize > config.max_file_bytes {
        return Some(FileKind::TooLarge { size: meta.len() as usize });
    }
    std::fs::read(&full).ok().map(|bytes| classify(&bytes, config))
}
