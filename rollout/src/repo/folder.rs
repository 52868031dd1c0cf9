//! A snapshot of a plain folder, one that is not a git repository, as it
//! is: every file beneath it that its `.gitignore` files (and those of the
//! folders above it) do not exclude, read from disk into memory, as git
//! would list a new repository's untracked files. Nothing is written.
//!
//! The walk follows no symbolic link, and every file is opened as the work
//! tree's are ([`super::worktree`]): one component at a time beneath the
//! folder with `O_NOFOLLOW`, so nothing outside it is read; a link is an
//! entry naming its target. A `.git` entry anywhere is left out.

use std::path::{Component, Path};

use super::snapshot::{FileEntry, Snapshot, SnapshotConfig};
use super::worktree::read_disk;
use super::RepoError;

/// The label a folder snapshot carries in place of a commit id.
pub const FOLDER: &str = "folder";

/// Reads the folder `root` (not a git repository) as `repo`.
pub fn load_folder(root: &Path, repo: &str, config: &SnapshotConfig) -> Result<Snapshot, RepoError> {
    if !root.is_dir() {
        return Err(RepoError::Folder { path: root.to_path_buf(), message: "not a folder".into() });
    }
    let walker = ignore::WalkBuilder::new(root)
        .standard_filters(false)
        .git_ignore(true)
        .parents(true)
        .require_git(false)
        .follow_links(false)
        .filter_entry(|e| e.file_name() != ".git")
        .sort_by_file_name(|a, b| a.cmp(b))
        .build();
    let mut files = Vec::new();
    for entry in walker {
        let entry = match entry {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!("folder {}: {e} (left out)", root.display());
                continue;
            }
        };
        let Some(kind) = entry.file_type() else { continue };
        if kind.is_dir() {
            continue;
        }
        let Some(path) = relative(root, entry.path()) else {
            tracing::warn!("folder {}: {} left out: its path is not UTF-8", root.display(), entry.path().display());
            continue;
        };
        if let Some(kind) = read_disk(root, &path, config) {
            files.push(FileEntry::new(path, kind));
        }
    }
    Ok(Snapshot::new(repo.to_string(), FOLDER.into(), files))
}

/// `path` under `root` as a `/`-separated relative path (`None`: not UTF-8, or not beneath).
fn relative(root: &Path, path: &Path) -> Option<String> {
    let rel = path.strip_prefix(root).ok()?;
    let parts: Option<Vec<&str>> = rel.components().map(|c| if let Component::Normal(s) = c { s.to_str() } else { None }).collect();
    parts.filter(|p| !p.is_empty()).map(|p| p.join("/"))
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn a_plain_folder_is_read_as_it_is_its_gitignore_honoured_and_nothing_outside_it() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("proj");
        std::fs::create_dir_all(root.join("pkg/build")).unwrap();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::write(root.join(".git/config"), "not a repository").unwrap();
        std::fs::write(root.join(".gitignore"), "*.log\n/build/\n").unwrap();
        std::fs::write(root.join("pkg/.gitignore"), "secret.py\n").unwrap();
        std::fs::write(root.join("pkg/mod.py"), "def f():\n    return 1\n").unwrap();
        std::fs::write(root.join("pkg/secret.py"), "x = 1\n").unwrap();
        std::fs::write(root.join("run.log"), "log\n").unwrap();
        std::fs::write(root.join("pkg/build/gen.py"), "y = 2\n").unwrap();
        std::fs::create_dir_all(root.join("build")).unwrap();
        std::fs::write(root.join("build/out.py"), "z = 3\n").unwrap();
        std::fs::write(t.path().join("outside.py"), "outside\n").unwrap();
        std::os::unix::fs::symlink("..", root.join("up")).unwrap();
        std::os::unix::fs::symlink("pkg/mod.py", root.join("alias.py")).unwrap();
        let snap = load_folder(&root, "local/proj", &SnapshotConfig::default()).unwrap();
        let paths: Vec<&str> = snap.files().iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, [".gitignore", "alias.py", "pkg/.gitignore", "pkg/build/gen.py", "pkg/mod.py", "up"], "{paths:?}");
        assert_eq!(snap.commit(), FOLDER);
        let kind = |p: &str| format!("{:?}", snap.files().iter().find(|f| f.path == p).unwrap().kind);
        assert_eq!(kind("up"), r#"Symlink { target: ".." }"#);
        assert_eq!(kind("alias.py"), r#"Symlink { target: "pkg/mod.py" }"#);
        assert_eq!(snap.files().iter().find(|f| f.path == "pkg/mod.py").unwrap().text(), Some(&b"def f():\n    return 1\n"[..]));
        assert!(load_folder(&root.join("pkg/mod.py"), "local/x", &SnapshotConfig::default()).is_err());
    }
}
