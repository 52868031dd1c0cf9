//! Snapshots: plain and bare repositories, names, missing commits, empty
//! repositories, sharing, and what each kind of tree entry becomes.

use crate::repo_builder;

use std::sync::Arc;

use repo_builder::{git, run, TempRepo};
use rollout::repo::{FileKind, RepoError, SnapshotStore};

#[test]
fn plain_bare_and_dot_git_names_all_open() {
    let plain = TempRepo::new("o/plain");
    plain.file("a.py", "x = 1\n");
    let commit = plain.commit("one");
    // A bare clone named owner__name.git in the same repos dir.
    let bare = plain.repos_dir.path().join("o__bare.git");
    git(plain.repos_dir.path(), &["clone", "-q", "--bare", plain.work.to_str().unwrap(), bare.to_str().unwrap()]);
    let store = plain.store();
    for (repo, rev) in [("o/plain", commit.as_str()), ("o/plain", "HEAD"), ("o/plain", &commit[..8]), ("o/bare", "main")] {
        let snap = store.get(repo, rev).unwrap_or_else(|e| panic!("{repo}@{rev}: {e}"));
        assert_eq!(snap.commit(), commit, "{repo}@{rev}");
        assert_eq!(snap.files().len(), 1);
    }
}

#[test]
fn snapshot_is_loaded_once_and_shared() {
    let repo = TempRepo::new("o/shared");
    repo.file("a.py", "x = 1\n");
    let commit = repo.commit("one");
    let store = repo.store();
    let first = store.get("o/shared", &commit).unwrap();
    // Change the repository on disk: a cached snapshot must not re-read git.
    std::fs::remove_dir_all(repo.work.join(".git/objects")).unwrap();
    let again = store.get("o/shared", &commit).unwrap();
    assert!(Arc::ptr_eq(&first, &again));
    let threads: Vec<_> = (0..8).map(|_| store.get("o/shared", &commit).unwrap()).collect();
    assert!(threads.iter().all(|s| Arc::ptr_eq(s, &first)));
}

#[test]
fn snapshot_reads_the_asked_commit_not_the_work_tree() {
    let repo = TempRepo::new("o/hist");
    repo.file("a.py", "old = 1\n");
    let old = repo.commit("one");
    repo.file("a.py", "new = 2\n").file("b.py", "b = 1\n");
    let new = repo.commit("two");
    repo.file("a.py", "uncommitted = 3\n");
    let store = repo.store();
    let at_old = store.get("o/hist", &old).unwrap();
    assert_eq!(at_old.file("a.py").unwrap().text(), Some(&b"old = 1\n"[..]));
    assert!(at_old.file("b.py").is_none());
    let at_new = store.get("o/hist", &new).unwrap();
    assert_eq!(at_new.file("a.py").unwrap().text(), Some(&b"new = 2\n"[..]));
}

#[test]
fn failures_are_typed_errors() {
    let repo = TempRepo::new("o/r");
    let store = repo.store();
    // Empty repository: no commit at all.
    assert!(matches!(store.get("o/r", "HEAD"), Err(RepoError::MissingCommit { .. })));
    repo.file("a.py", "x\n");
    repo.commit("one");
    let missing = "0123456789abcdef0123456789abcdef01234567";
    let err = store.get("o/r", missing).unwrap_err();
    assert!(matches!(err, RepoError::MissingCommit { .. }), "{err}");
    assert!(err.to_string().contains(missing));
    assert!(matches!(store.get("o/other", "HEAD"), Err(RepoError::NotFound { .. })));
    for bad in ["../etc", "o", "o/r/x", "/abs/x", "o/..", "", "o/r;rm"] {
        assert!(matches!(store.get(bad, "HEAD"), Err(RepoError::BadName(_))), "{bad}");
    }
    let not_git = SnapshotStore::open(repo.repos_dir.path());
    std::fs::create_dir(repo.repos_dir.path().join("o__plaindir")).unwrap();
    assert!(matches!(not_git.get("o/plaindir", "HEAD"), Err(RepoError::Open { .. })));
}

#[test]
fn empty_tree_commit_gives_empty_snapshot_and_tools_answer() {
    let repo = TempRepo::new("o/empty");
    repo.commit("nothing");
    let snap = repo.snapshot("HEAD");
    assert!(snap.files().is_empty());
    assert_eq!(run(&snap, r#"{"name":"grep","arguments":{"pattern":"x"}}"#).output, "No matches found.\n");
    assert_eq!(run(&snap, r#"{"name":"glob","arguments":{"pattern":"**"}}"#).output, "No files matched.\n");
    assert!(run(&snap, r#"{"name":"read_file","arguments":{"path":"a.py"}}"#).error);
    let empty_file = TempRepo::new("o/emptyfile");
    empty_file.file("e.py", "");
    empty_file.commit("empty file");
    let snap = empty_file.snapshot("HEAD");
    let read = run(&snap, r#"{"name":"read_file","arguments":{"path":"e.py"}}"#);
    assert_eq!((read.output.as_str(), read.error), ("(empty file)\n", false));
}

#[test]
fn entry_kinds() {
    let repo = TempRepo::new("o/kinds");
    repo.file("t.py", "x\n")
        .file("b.bin", b"ab\x00cd")
        .file("latin.txt", b"\xff\xfe plain")
        .file("huge.txt", vec![b'a'; (4 << 20) + 1])
        .symlink("up", "../../outside")
        .submodule("sub", "0123456789abcdef0123456789abcdef01234567");
    repo.commit("kinds");
    let snap = repo.snapshot("HEAD");
    let kind = |p: &str| &snap.file(p).unwrap_or_else(|| panic!("{p} missing")).kind;
    assert!(matches!(kind("t.py"), FileKind::Text(_)));
    assert!(matches!(kind("b.bin"), FileKind::Binary { size: 5 }));
    assert!(matches!(kind("latin.txt"), FileKind::Text(_)));
    assert!(matches!(kind("huge.txt"), FileKind::TooLarge { size } if *size == (4 << 20) + 1));
    assert!(matches!(kind("up"), FileKind::Symlink { target } if target == "../../outside"));
    assert!(matches!(kind("sub"), FileKind::Submodule { commit } if commit.starts_with("0123")));
    let paths: Vec<&str> = snap.files().iter().map(|f| f.path.as_str()).collect();
    assert_eq!(paths, ["b.bin", "huge.txt", "latin.txt", "sub", "t.py", "up"]);
}

/// A partial clone lists blobs it does not hold: the snapshot still loads,
/// the file is [`FileKind::Missing`], glob lists it, grep passes it by, and
/// read_file answers that its contents are not in this clone.
#[test]
fn a_blob_missing_from_the_object_store_is_listed_but_never_shown() {
    let repo = TempRepo::new("o/partial");
    repo.file("src/keep.py", "def kept():\n    return 'needle'\n").file("data/big.py", "def gone():\n    return 'needle'\n");
    repo.commit("two files");
    let blob = git(&repo.work, &["rev-parse", "HEAD:data/big.py"]).trim().to_string();
    let loose = repo.work.join(".git/objects").join(&blob[..2]).join(&blob[2..]);
    assert!(loose.exists(), "the blob is a loose object: {}", loose.display());
    std::fs::remove_file(&loose).unwrap();
    assert!(std::process::Command::new("git").current_dir(&repo.work).args(["cat-file", "-e", &blob]).status().map(|s| !s.success()).unwrap());

    let snap = repo.snapshot("HEAD");
    assert!(matches!(snap.file("data/big.py").expect("listed").kind, FileKind::Missing));
    assert!(matches!(snap.file("src/keep.py").unwrap().kind, FileKind::Text(_)));
    assert_eq!(snap.files().len(), 2);

    let read = run(&snap, r#"{"name":"read_file","arguments":{"path":"data/big.py"}}"#);
    assert!(read.error, "{}", read.output);
    assert!(read.output.contains("data/big.py") && read.output.contains("its contents are not in this clone of the repository"), "{}", read.output);
    assert!(read.entities.is_empty());
    let listed = run(&snap, r#"{"name":"glob","arguments":{"pattern":"**/*.py"}}"#);
    assert!(!listed.error && listed.output.contains("data/big.py") && listed.output.contains("src/keep.py"), "{}", listed.output);
    let grep = run(&snap, r#"{"name":"grep","arguments":{"pattern":"needle"}}"#);
    assert!(!grep.error && grep.output.contains("src/keep.py") && !grep.output.contains("data/big.py"), "{}", grep.output);
}
