//! Writing the practice history with libgit2: trees built from an
//! in-memory file map, commits with fixed signatures and dates (so commit
//! ids depend on the seed only), and a checkout of the last one.

use std::collections::BTreeMap;
use std::path::Path;

use git2::{build::CheckoutBuilder, Oid, Repository, RepositoryInitOptions, Signature, Time};

/// A repository being written commit by commit on branch `main`.
pub struct HistoryWriter {
    repo: Repository,
    head: Option<Oid>,
}

impl HistoryWriter {
    /// Creates a new (non-bare) repository at `path` with HEAD on `main`.
    pub fn init(path: &Path) -> Result<Self, git2::Error> {
        let mut options = RepositoryInitOptions::new();
        options.initial_head("main").no_reinit(true);
        Ok(HistoryWriter { repo: Repository::init_opts(path, &options)?, head: None })
    }

    /// Commits `files` as the whole tree, with `author` (name, email) at `time` (seconds since the epoch, UTC).
    pub fn commit(&mut self, files: &BTreeMap<String, String>, message: &str, author: (&str, &str), time: i64) -> Result<Oid, git2::Error> {
        let tree_id = write_tree(&self.repo, files, "")?;
        let tree = self.repo.find_tree(tree_id)?;
        let sig = Signature::new(author.0, author.1, &Time::new(time, 0))?;
        let parent = self.head.map(|id| self.repo.find_commit(id)).transpose()?;
        let parents: Vec<&git2::Commit> = parent.iter().collect();
        let id = self.repo.commit(Some("HEAD"), &sig, &sig, message, &tree, &parents)?;
        self.head = Some(id);
        Ok(id)
    }

    /// Writes the last commit's files into the work tree.
    pub fn checkout(&self) -> Result<(), git2::Error> {
        self.repo.checkout_head(Some(CheckoutBuilder::new().force()))
    }
}

/// Writes the tree of the files under `prefix` (`""` or `dir/`), recursively.
fn write_tree(repo: &Repository, files: &BTreeMap<String, String>, prefix: &str) -> Result<Oid, git2::Error> {
    let mut builder = repo.treebuilder(None)?;
    let mut dirs: BTreeMap<&str, ()> = BTreeMap::new();
    for (path, content) in files.range(prefix.to_string()..).take_while(|(p, _)| p.starts_with(prefix)) {
        let rest = &path[prefix.len()..];
        match rest.split_once('/') {
            Some((dir, _)) => {
                dirs.insert(dir, ());
            }
            None => {
                let blob = repo.blob(content.as_bytes())?;
                builder.insert(rest, blob, 0o100644)?;
            }
        }
    }
    for dir in dirs.keys() {
        let sub = write_tree(repo, files, &format!("{prefix}{dir}/"))?;
        builder.insert(dir, sub, 0o040000)?;
    }
    builder.write()
}
