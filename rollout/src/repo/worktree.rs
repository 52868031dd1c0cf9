//! A snapshot of a repository's working tree as it is, uncommitted edits
//! included: the index's files read from disk (deleted ones left out) and
//! the untracked files git does not ignore. Nothing is written: not the
//! index, not an object, not a ref (`git status` is unchanged afterwards).
//!
//! Nothing outside the repository is read: every path is opened one
//! component at a time beneath the work tree's folder, following no
//! symbolic link on the way ([`open_beneath`]). A folder replaced by a link
//! (`sub -> /etc`) hides the files git lists under it, as `git status`
//! reports them deleted; a link itself is an entry that names its target,
//! never the target's contents.

use std::io::Read;
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
/// but not yet staged), is not a file, or lies beyond a symbolic link.
pub(super) fn read_disk(workdir: &Path, path: &str, config: &SnapshotConfig) -> Option<FileKind> {
    match open_beneath(workdir, path) {
        Ok(Beneath::File(mut file)) => {
            let size = file.metadata().ok()?.len() as usize;
            if size > config.max_file_bytes {
                return Some(FileKind::TooLarge { size });
            }
            let mut bytes = Vec::with_capacity(size);
            file.read_to_end(&mut bytes).ok()?;
            Some(classify(&bytes, config))
        }
        Ok(Beneath::Symlink(target)) => Some(FileKind::Symlink { target }),
        Ok(Beneath::Outside(link)) => {
            tracing::debug!("work tree: {path} left out: {link} is a symbolic link (git does not follow it either)");
            None
        }
        Ok(Beneath::NotAFile) | Err(_) => None,
    }
}

/// What [`open_beneath`] found at a path.
#[derive(Debug)]
pub(crate) enum Beneath {
    /// A regular file, open for reading.
    File(std::fs::File),
    /// The path itself is a symbolic link, with this target (not followed).
    Symlink(String),
    /// A folder on the way is a symbolic link (this prefix) or not a folder.
    Outside(String),
    /// A folder, a device, a FIFO or a socket.
    NotAFile,
}

/// Opens `path` (repository-relative, `/`-separated) under `root` one
/// component at a time, each folder opened relative to the previous one
/// with `O_NOFOLLOW`: a symbolic link anywhere on the way, or a component
/// `..`, stops the walk, so what is opened is inside `root` even while the
/// tree changes underneath (no check-then-open race).
#[cfg(unix)]
pub(crate) fn open_beneath(root: &Path, path: &str) -> std::io::Result<Beneath> {
    use rustix::fs::{openat, readlinkat, statat, AtFlags, FileType, Mode, OFlags, CWD};
    use rustix::io::Errno;
    let dir_flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut dir = openat(CWD, root, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
    let parts: Vec<&str> = path.split('/').collect();
    let Some((last, folders)) = parts.split_last() else { return Ok(Beneath::NotAFile) };
    let bad = |c: &str| c.is_empty() || c == "." || c == "..";
    for (i, folder) in folders.iter().enumerate() {
        let prefix = || parts[..=i].join("/");
        if bad(folder) {
            return Ok(Beneath::Outside(prefix()));
        }
        dir = match openat(&dir, *folder, dir_flags, Mode::empty()) {
            Ok(fd) => fd,
            // ELOOP: a link, refused by O_NOFOLLOW; ENOTDIR: not a folder.
            Err(Errno::LOOP) | Err(Errno::NOTDIR) => return Ok(Beneath::Outside(prefix())),
            Err(e) => return Err(e.into()),
        };
    }
    if bad(last) {
        return Ok(Beneath::NotAFile);
    }
    let stat = statat(&dir, *last, AtFlags::SYMLINK_NOFOLLOW)?;
    match FileType::from_raw_mode(stat.st_mode) {
        FileType::Symlink => {
            let target = readlinkat(&dir, *last, Vec::new())?;
            Ok(Beneath::Symlink(target.to_string_lossy().into_owned()))
        }
        FileType::RegularFile => {
            // O_NONBLOCK: a file swapped for a FIFO since the stat cannot block the open.
            let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
            let file = match openat(&dir, *last, flags, Mode::empty()) {
                Ok(fd) => std::fs::File::from(fd),
                Err(Errno::LOOP) => return Ok(Beneath::Symlink(String::new())),
                Err(e) => return Err(e.into()),
            };
            Ok(if file.metadata()?.is_file() { Beneath::File(file) } else { Beneath::NotAFile })
        }
        _ => Ok(Beneath::NotAFile),
    }
}

/// Elsewhere: every prefix's metadata is read without following links
/// (a check then an open, so a tree changed in between is not guarded).
#[cfg(not(unix))]
pub(crate) fn open_beneath(root: &Path, path: &str) -> std::io::Result<Beneath> {
    let parts: Vec<&str> = path.split('/').collect();
    let mut full = root.to_path_buf();
    for (i, part) in parts.iter().enumerate() {
        if part.is_empty() || *part == "." || *part == ".." {
            return Ok(Beneath::Outside(parts[..=i].join("/")));
        }
        full.push(part);
        let meta = std::fs::symlink_metadata(&full)?;
        let last = i + 1 == parts.len();
        if meta.file_type().is_symlink() {
            if last {
                return Ok(Beneath::Symlink(std::fs::read_link(&full)?.to_string_lossy().into_owned()));
            }
            return Ok(Beneath::Outside(parts[..=i].join("/")));
        }
        if !last && !meta.is_dir() {
            return Ok(Beneath::Outside(parts[..=i].join("/")));
        }
        if last && !meta.is_file() {
            return Ok(Beneath::NotAFile);
        }
    }
    Ok(Beneath::File(std::fs::File::open(full)?))
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    /// A root with `dir/f.txt`, `up -> ..` (a link at a deeper level
    /// pointing out), `fifo` and a link `l -> dir/f.txt`.
    fn tree() -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("root");
        std::fs::create_dir_all(root.join("dir/deeper")).unwrap();
        std::fs::write(root.join("dir/f.txt"), "inside").unwrap();
        std::fs::write(t.path().join("secret.txt"), "outside").unwrap();
        std::os::unix::fs::symlink("../..", root.join("dir/deeper/up")).unwrap();
        std::os::unix::fs::symlink("dir/f.txt", root.join("l")).unwrap();
        rustix::fs::mknodat(rustix::fs::CWD, root.join("fifo"), rustix::fs::FileType::Fifo, rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR, 0).unwrap();
        t
    }

    #[test]
    fn opens_only_what_lies_beneath_the_root() {
        let t = tree();
        let root = t.path().join("root");
        let text = |b: std::io::Result<Beneath>| match b.unwrap() {
            Beneath::File(mut f) => {
                let mut s = String::new();
                f.read_to_string(&mut s).unwrap();
                s
            }
            other => format!("{other:?}"),
        };
        assert_eq!(text(open_beneath(&root, "dir/f.txt")), "inside");
        // Any path whose folders pass through a link stops at the link.
        assert_eq!(text(open_beneath(&root, "dir/deeper/up/secret.txt")), r#"Outside("dir/deeper/up")"#);
        assert_eq!(text(open_beneath(&root, "dir/../../secret.txt")), r#"Outside("dir/..")"#);
        assert_eq!(text(open_beneath(&root, "l")), r#"Symlink("dir/f.txt")"#);
        assert_eq!(text(open_beneath(&root, "dir/f.txt/x")), r#"Outside("dir/f.txt")"#);
        // A FIFO is not a file, and opening it does not block.
        assert_eq!(text(open_beneath(&root, "fifo")), "NotAFile");
        assert_eq!(text(open_beneath(&root, "dir")), "NotAFile");
        assert!(open_beneath(&root, "dir/none.txt").is_err());
    }
}
