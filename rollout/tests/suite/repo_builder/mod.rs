//! A temp-repo builder in ripgrep's style: real git repositories made with
//! the `git` command under a temporary repos dir, named `owner__name`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use rollout::repo::{Snapshot, SnapshotStore};
use rollout::toolcall::ToolCall;
use rollout::tools::{ToolResult, ToolRunner};
use tempfile::TempDir;

/// A repos dir holding one work-tree repository.
pub struct TempRepo {
    pub repos_dir: TempDir,
    pub repo: String,
    pub work: PathBuf,
    gitlinks: std::cell::RefCell<Vec<(String, String)>>,
}

impl TempRepo {
    /// `git init` of `<repos_dir>/<owner>__<name>` (suffix e.g. "" or ".git").
    pub fn new(repo: &str) -> Self {
        Self::with_dir_suffix(repo, "")
    }

    pub fn with_dir_suffix(repo: &str, suffix: &str) -> Self {
        let repos_dir = tempfile::tempdir().expect("tempdir");
        let work = repos_dir.path().join(format!("{}{suffix}", repo.replace('/', "__")));
        std::fs::create_dir_all(&work).unwrap();
        git(&work, &["init", "-q", "-b", "main"]);
        Self { repos_dir, repo: repo.to_string(), work, gitlinks: Default::default() }
    }

    /// Writes a file (parents created) in the work tree.
    pub fn file(&self, path: &str, contents: impl AsRef<[u8]>) -> &Self {
        let full = self.work.join(path);
        std::fs::create_dir_all(full.parent().unwrap()).unwrap();
        std::fs::write(full, contents).unwrap();
        self
    }

    /// Removes a file from the work tree.
    pub fn remove(&self, path: &str) -> &Self {
        std::fs::remove_file(self.work.join(path)).unwrap();
        self
    }

    /// A symbolic link in the work tree.
    pub fn symlink(&self, path: &str, target: &str) -> &Self {
        let full = self.work.join(path);
        std::fs::create_dir_all(full.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(target, full).unwrap();
        self
    }

    /// A gitlink (submodule entry) pinned at `commit`, staged at the next commit.
    pub fn submodule(&self, path: &str, commit: &str) -> &Self {
        self.gitlinks.borrow_mut().push((path.to_string(), commit.to_string()));
        self
    }

    /// Commits everything; returns the commit id.
    pub fn commit(&self, message: &str) -> String {
        git(&self.work, &["add", "-A"]);
        for (path, commit) in self.gitlinks.borrow_mut().drain(..) {
            git(&self.work, &["update-index", "--add", "--cacheinfo", &format!("160000,{commit},{path}")]);
        }
        git(&self.work, &["commit", "-q", "--allow-empty", "-m", message]);
        git(&self.work, &["rev-parse", "HEAD"]).trim().to_string()
    }

    pub fn store(&self) -> SnapshotStore {
        SnapshotStore::open(self.repos_dir.path())
    }

    pub fn snapshot(&self, rev: &str) -> Arc<Snapshot> {
        self.store().get(&self.repo, rev).expect("snapshot")
    }
}

/// Runs git in `dir` with a fixed identity; panics on failure; returns stdout.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .args(["-c", "user.name=Test", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"])
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .output()
        .expect("git runs");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// A call from a JSON literal `{"name":..,"arguments":..}`.
pub fn call(json: &str) -> ToolCall {
    serde_json::from_str(json).expect("test call JSON")
}

/// Runs one call with the default caps.
pub fn run(snapshot: &Snapshot, json: &str) -> ToolResult {
    ToolRunner::default().run(snapshot, &call(json))
}

/// Entity display strings of a result.
pub fn entity_strings(result: &ToolResult) -> Vec<String> {
    result.entities.iter().map(|e| e.to_string()).collect()
}
