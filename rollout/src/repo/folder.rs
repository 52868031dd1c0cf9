//! A snapshot of a plain folder, one that is not a git repository, as it
//! is: every file beneath it that its `.gitignore` files do not exclude,
//! read from disk into memory, as git would list a new repository's
//! untracked files (`git ls-files --others --exclude-standard`). Nothing is
//! written, and nothing outside the folder is read.
//!
//! The walk follows no symbolic link, and every file is opened as the work
//! tree's are ([`super::worktree`]): one component at a time beneath the
//! folder with `O_NOFOLLOW`, so nothing outside it is read; a link is an
//! entry naming its target. A `.git` entry anywhere is left out. The
//! `.gitignore` files are opened the same way, as git 2.32 and later open
//! them: a regular file of at most [`MAX_IGNORE_BYTES`], never through a
//! link, a FIFO or a device (such a `.gitignore` is listed, and obeys
//! nothing). A folder's `.gitignore` outranks those above it; an excluded
//! folder is not entered.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use ignore::gitignore::{Gitignore, GitignoreBuilder};
use ignore::Match;

use super::snapshot::{FileEntry, FileKind, Snapshot, SnapshotConfig};
use super::worktree::read_disk;
use super::RepoError;

/// The label a folder snapshot carries in place of a commit id.
pub const FOLDER: &str = "folder";

/// The largest `.gitignore` obeyed (a larger one is listed and ignored, with a warning).
pub const MAX_IGNORE_BYTES: usize = 1 << 20;

/// Reads the folder `root` (not a git repository) as `repo`.
pub fn load_folder(root: &Path, repo: &str, config: &SnapshotConfig) -> Result<Snapshot, RepoError> {
    if !root.is_dir() {
        return Err(RepoError::Folder { path: root.to_path_buf(), message: "not a folder".into() });
    }
    let mut files = Vec::new();
    // The rules of the open folders' `.gitignore` files, nearest last, and
    // the folders being listed (a stack, not recursion: trees are deep).
    let mut rules: Vec<Gitignore> = Vec::new();
    let mut open = vec![Folder::open(root, String::new(), config, &mut rules)];
    while let Some(top) = open.last_mut() {
        let Some((name, kind)) = top.entries.next() else {
            if top.has_rules {
                rules.pop();
            }
            open.pop();
            continue;
        };
        if name == ".git" {
            continue;
        }
        let Some(name) = name.to_str() else {
            tracing::warn!("folder {}: {} left out: its name is not UTF-8", root.display(), top.abs.join(&name).display());
            continue;
        };
        let path = if top.dir.is_empty() { name.to_string() } else { format!("{}/{name}", top.dir) };
        let is_dir = kind.is_dir();
        if excluded(&rules, &top.abs.join(name), is_dir) {
            continue;
        }
        if is_dir {
            let folder = Folder::open(root, path, config, &mut rules);
            open.push(folder);
        } else if let Some(kind) = read_disk(root, &path, config) {
            files.push(FileEntry::new(path, kind));
        }
    }
    Ok(Snapshot::new(repo.to_string(), FOLDER.into(), files))
}

/// A folder being listed: its entries in name order, links not followed.
struct Folder {
    /// Relative to the root ("" for the root itself).
    dir: String,
    abs: PathBuf,
    entries: std::vec::IntoIter<(OsString, std::fs::FileType)>,
    /// Its `.gitignore` rules were pushed (and are popped when it is done).
    has_rules: bool,
}

impl Folder {
    fn open(root: &Path, dir: String, config: &SnapshotConfig, rules: &mut Vec<Gitignore>) -> Folder {
        let abs = if dir.is_empty() { root.to_path_buf() } else { root.join(&dir) };
        let mut entries: Vec<(OsString, std::fs::FileType)> = match std::fs::read_dir(&abs) {
            Ok(list) => list.filter_map(|e| e.ok().and_then(|e| Some((e.file_name(), e.file_type().ok()?)))).collect(),
            Err(e) => {
                tracing::warn!("folder {}: {}: {e} (left out)", root.display(), abs.display());
                Vec::new()
            }
        };
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        let has_ignore = entries.iter().any(|(n, _)| n == ".gitignore");
        let own = if has_ignore {
            let path = if dir.is_empty() { ".gitignore".to_string() } else { format!("{dir}/.gitignore") };
            ignore_rules(root, &abs, &path, config)
        } else {
            None
        };
        let has_rules = own.is_some();
        rules.extend(own);
        Folder { dir, abs, entries: entries.into_iter(), has_rules }
    }
}

/// The rules of `dir`'s `.gitignore` (at `path` under `root`), read as the
/// folder's files are; `None` when there is none or it is not a regular
/// file of at most [`MAX_IGNORE_BYTES`].
fn ignore_rules(root: &Path, dir: &Path, path: &str, config: &SnapshotConfig) -> Option<Gitignore> {
    let capped = SnapshotConfig { max_file_bytes: MAX_IGNORE_BYTES, ..config.clone() };
    let text = match read_disk(root, path, &capped)? {
        FileKind::Text(bytes) => bytes,
        FileKind::Symlink { target } => {
            tracing::warn!("folder {}: {path} is a symbolic link (to {target}): not followed, its rules not applied (as git 2.32 and later)", root.display());
            return None;
        }
        FileKind::TooLarge { size } => {
            tracing::warn!("folder {}: {path} is {size} bytes, over {MAX_IGNORE_BYTES}: its rules not applied", root.display());
            return None;
        }
        _ => return None,
    };
    let mut builder = GitignoreBuilder::new(dir);
    for line in String::from_utf8_lossy(&text).lines() {
        if let Err(e) = builder.add_line(None, line) {
            tracing::warn!("folder {}: {path}: {e} (that line left out)", root.display());
        }
    }
    match builder.build() {
        Ok(rules) => Some(rules),
        Err(e) => {
            tracing::warn!("folder {}: {path}: {e} (its rules not applied)", root.display());
            None
        }
    }
}

/// Whether `path` is excluded: the nearest `.gitignore` with a say decides.
fn excluded(rules: &[Gitignore], path: &Path, is_dir: bool) -> bool {
    for r in rules.iter().rev() {
        match r.matched(path, is_dir) {
            Match::Ignore(_) => return true,
            Match::Whitelist(_) => return false,
            Match::None => {}
        }
    }
    false
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
    /// A `.gitignore` is read as the folder's files are: a FIFO is never
    /// opened (no hang), a link (to /dev/zero, or to a file outside the
    /// folder) is not followed and obeys nothing, and one over the size cap
    /// is not applied; the folder is still listed whole.
    #[test]
    fn a_gitignore_that_is_a_fifo_a_link_or_huge_is_not_read() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("pf");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(root.join("a.py"), "def a():\n    pass\n").unwrap();
        std::fs::write(root.join("hidden.py"), "def h():\n    pass\n").unwrap();
        std::fs::write(root.join("sub/b.py"), "x = 1\n").unwrap();
        std::fs::write(t.path().join("outside-rules"), "hidden.py\n").unwrap();
        assert!(std::process::Command::new("mkfifo").arg(root.join(".gitignore")).status().unwrap().success());
        let listed = |root: &Path| -> Vec<String> {
            let (tx, rx) = std::sync::mpsc::channel();
            let root = root.to_path_buf();
            std::thread::spawn(move || {
                let snap = load_folder(&root, "local/pf", &SnapshotConfig::default()).unwrap();
                let _ = tx.send(snap.files().iter().map(|f| f.path.clone()).collect());
            });
            rx.recv_timeout(std::time::Duration::from_secs(20)).expect("the folder is read without hanging")
        };
        assert_eq!(listed(&root), ["a.py", "hidden.py", "sub/b.py"], "a FIFO .gitignore is left out, unopened");
        std::fs::remove_file(root.join(".gitignore")).unwrap();
        std::os::unix::fs::symlink("/dev/zero", root.join(".gitignore")).unwrap();
        assert_eq!(listed(&root), [".gitignore", "a.py", "hidden.py", "sub/b.py"]);
        std::fs::remove_file(root.join(".gitignore")).unwrap();
        std::os::unix::fs::symlink(t.path().join("outside-rules"), root.join(".gitignore")).unwrap();
        assert_eq!(listed(&root), [".gitignore", "a.py", "hidden.py", "sub/b.py"], "rules outside the folder are not obeyed");
        std::fs::remove_file(root.join(".gitignore")).unwrap();
        let mut huge = "hidden.py\n".to_string();
        huge.push_str(&"# filler\n".repeat(MAX_IGNORE_BYTES / 9 + 1));
        std::fs::write(root.join(".gitignore"), huge).unwrap();
        assert_eq!(listed(&root), [".gitignore", "a.py", "hidden.py", "sub/b.py"]);
        // A regular one is obeyed, and a deeper one outranks it.
        std::fs::write(root.join(".gitignore"), "hidden.py\n*.py\n!a.py\n").unwrap();
        std::fs::write(root.join("sub/.gitignore"), "!b.py\n").unwrap();
        assert_eq!(listed(&root), [".gitignore", "a.py", "sub/.gitignore", "sub/b.py"]);
        // The folder through a link to it: read as the folder (no warning about its path).
        std::os::unix::fs::symlink(&root, t.path().join("linkpf")).unwrap();
        assert_eq!(listed(&t.path().join("linkpf")), [".gitignore", "a.py", "sub/.gitignore", "sub/b.py"]);
    }
}
