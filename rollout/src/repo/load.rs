//! Reading a commit's tree from git objects (libgit2, no checkout).

use std::path::{Path, PathBuf};

use git2::{ObjectType, Oid, Repository, TreeWalkMode, TreeWalkResult};

use super::snapshot::{FileEntry, FileKind, Snapshot, SnapshotConfig};
use super::RepoError;

/// `owner/name` -> `owner__name`, refusing anything that is not two plain
/// components (the name becomes a directory name under the repos dir).
pub fn repo_dir_name(repo: &str) -> Result<String, RepoError> {
    let bad = || RepoError::BadName(repo.to_string());
    let (owner, name) = repo.split_once('/').ok_or_else(bad)?;
    let plain = |s: &str| {
        !s.is_empty()
            && s != "."
            && s != ".."
            && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    };
    if !plain(owner) || !plain(name) {
        return Err(bad());
    }
    Ok(format!("{owner}__{name}"))
}

/// Opens `<repos_dir>/<owner>__<name>` or `...__<name>.git` (plain or bare).
pub fn open_repository(repos_dir: &Path, repo: &str) -> Result<Repository, RepoError> {
    let base = repo_dir_name(repo)?;
    let candidates: Vec<PathBuf> =
        [base.clone(), format!("{base}.git")].iter().map(|n| repos_dir.join(n)).collect();
    let path = candidates.iter().find(|p| p.is_dir()).ok_or_else(|| RepoError::NotFound {
        repo: repo.to_string(),
        dir: repos_dir.to_path_buf(),
        tried: format!("{base}, {base}.git"),
    })?;
    Repository::open(path).map_err(|source| RepoError::Open { path: path.clone(), source })
}

/// Opens a repository directory directly (plain or bare).
pub fn open_repository_path(path: &Path) -> Result<Repository, RepoError> {
    Repository::open(path).map_err(|source| RepoError::Open { path: path.to_path_buf(), source })
}

/// Resolves `rev` (a full or short id, a branch, a tag) to a commit id.
pub fn resolve_commit(git: &Repository, repo: &str, rev: &str) -> Result<Oid, RepoError> {
    let missing = |e: git2::Error| RepoError::MissingCommit {
        repo: repo.to_string(),
        rev: rev.to_string(),
        why: e.message().to_string(),
    };
    let object = git.revparse_single(rev).map_err(missing)?;
    let commit = object.peel_to_commit().map_err(missing)?;
    Ok(commit.id())
}

/// Reads the whole tree of `rev` into memory.
pub fn load_snapshot(
    git: &Repository,
    repo: &str,
    rev: &str,
    config: &SnapshotConfig,
) -> Result<Snapshot, RepoError> {
    let oid = resolve_commit(git, repo, rev)?;
    let read_err = |path: &str, source| RepoError::Read {
        repo: repo.to_string(),
        commit: oid.to_string(),
        path: path.to_string(),
        source,
    };
    let tree = git.find_commit(oid).and_then(|c| c.tree()).map_err(|e| read_err("", e))?;
    let mut listed: Vec<(String, Oid, i32)> = Vec::new();
    tree.walk(TreeWalkMode::PreOrder, |root, entry| {
        if entry.kind() == Some(ObjectType::Tree) {
            return TreeWalkResult::Ok;
        }
        let name = String::from_utf8_lossy(entry.name_bytes());
        listed.push((format!("{root}{name}"), entry.id(), entry.filemode()));
        TreeWalkResult::Ok
    })
    .map_err(|e| read_err("", e))?;
    let mut files = Vec::with_capacity(listed.len());
    for (path, id, mode) in listed {
        let kind = read_entry(git, id, mode, config).map_err(|e| read_err(&path, e))?;
        files.push(FileEntry::new(path, kind));
    }
    Ok(Snapshot::new(repo.to_string(), oid.to_string(), files))
}

/// Git file modes: gitlink (submodule) and symlink.
const MODE_GITLINK: i32 = 0o160000;
const MODE_SYMLINK: i32 = 0o120000;

fn read_entry(
    git: &Repository,
    id: Oid,
    mode: i32,
    config: &SnapshotConfig,
) -> Result<FileKind, git2::Error> {
    if mode == MODE_GITLINK {
        return Ok(FileKind::Submodule { commit: id.to_string() });
    }
    let blob = match git.find_blob(id) {
        Ok(blob) => blob,
        Err(e) if e.code() == git2::ErrorCode::NotFound => return Ok(FileKind::Missing),
        Err(e) => return Err(e),
    };
    let bytes = blob.content();
    if mode == MODE_SYMLINK {
        return Ok(FileKind::Symlink { target: String::from_utf8_lossy(bytes).into_owned() });
    }
    Ok(classify(bytes, config))
}

/// Text, binary or too large, from the contents.
pub(crate) fn classify(bytes: &[u8], config: &SnapshotConfig) -> FileKind {
    let size = bytes.len();
    if size > config.max_file_bytes {
        return FileKind::TooLarge { size };
    }
    let probe = &bytes[..size.min(config.binary_probe_bytes)];
    if probe.contains(&0) {
        return FileKind::Binary { size };
    }
    FileKind::Text(bytes.to_vec())
}
