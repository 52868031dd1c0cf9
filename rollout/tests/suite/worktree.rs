//! Working-tree snapshots read nothing outside the repository (issue 52,
//! defect 1): a folder replaced by a symbolic link after it was committed,
//! at the top or deeper, hides the files under it from `read_file`, `grep`
//! and `glob`; a link is an entry naming its target, never its contents;
//! untracked files are read, links among them are not followed.

use crate::repo_builder::{git, run, TempRepo};
use rollout::repo::{load_worktree, FileKind, Snapshot, SnapshotConfig};

const SECRET: &str = "SECRET_42 from outside the repository";

/// A repository whose committed folders `sub` and `a/b` are now links to a
/// folder outside it holding `passwd` and `c.py` with the secret, plus an
/// untracked real folder and an untracked link to the same outside folder.
fn escaped_repo() -> (TempRepo, tempfile::TempDir, Snapshot) {
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("passwd"), format!("{SECRET}\n")).unwrap();
    std::fs::write(outside.path().join("c.py"), format!("def leak():\n    return '{SECRET}'\n")).unwrap();
    let repo = TempRepo::new("acme/wt");
    repo.file("main.py", "def main():\n    return 1\n").file("sub/passwd", "placeholder\n").file("a/b/c.py", "def c():\n    pass\n");
    repo.commit("init");
    for folder in ["sub", "a/b"] {
        std::fs::remove_dir_all(repo.work.join(folder)).unwrap();
        repo.symlink(folder, outside.path().to_str().unwrap());
    }
    repo.file("notes/todo.py", "def todo():\n    return 'untracked'\n");
    repo.symlink("link", outside.path().to_str().unwrap());
    let git2 = git2::Repository::open(&repo.work).unwrap();
    let snapshot = load_worktree(&git2, "acme/wt", &SnapshotConfig::default()).unwrap();
    (repo, outside, snapshot)
}

#[test]
fn a_folder_replaced_by_a_link_is_not_followed() {
    let (repo, _outside, snap) = escaped_repo();
    // git agrees: the files under the links are deleted, the links untracked.
    let status = git(&repo.work, &["status", "--porcelain", "-uall"]);
    assert!(status.contains(" D sub/passwd") && status.contains(" D a/b/c.py"), "{status}");
    for path in ["sub/passwd", "a/b/c.py", "link/passwd"] {
        let r = run(&snap, &format!(r#"{{"name": "read_file", "arguments": {{"path": "{path}"}}}}"#));
        assert!(r.error, "read_file {path} must fail: {}", r.output);
        assert!(!r.output.contains("SECRET_42"), "read_file {path} read outside the repository: {}", r.output);
    }
    let grep = run(&snap, r#"{"name": "grep", "arguments": {"pattern": "SECRET_42"}}"#);
    assert!(!grep.output.contains("SECRET_42"), "grep read outside the repository: {}", grep.output);
    let glob = run(&snap, r#"{"name": "glob", "arguments": {"pattern": "**/*"}}"#);
    for leaked in ["sub/passwd", "a/b/c.py", "link/passwd", "link/c.py"] {
        assert!(!glob.output.contains(leaked), "glob lists {leaked}: {}", glob.output);
    }
}

#[test]
fn links_are_entries_and_untracked_files_are_read() {
    let (_repo, outside, snap) = escaped_repo();
    let kind = |path: &str| snap.files().iter().find(|f| f.path == path).map(|f| &f.kind);
    let target = outside.path().to_str().unwrap();
    // The link git reports as untracked is an entry naming its target.
    for link in ["sub", "a/b", "link"] {
        assert!(matches!(kind(link), Some(FileKind::Symlink { target: t }) if t == target), "{link}: {:?}", kind(link));
    }
    assert!(kind("sub/passwd").is_none() && kind("a/b/c.py").is_none());
    // Ordinary tracked and untracked files are there.
    let todo = run(&snap, r#"{"name": "grep", "arguments": {"pattern": "untracked"}}"#);
    assert!(todo.output.contains("notes/todo.py:2:"), "{}", todo.output);
    let main = run(&snap, r#"{"name": "read_file", "arguments": {"path": "main.py"}}"#);
    assert!(!main.error && main.output.contains("def main"), "{}", main.output);
}
