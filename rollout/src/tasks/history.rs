//! Tasks from a repository's own history: each commit's message is the
//! problem statement, its parent the base commit, its diff the patch, and
//! the functions that diff touches the gold.

use std::collections::BTreeSet;

use git2::{Commit, DiffFormat, DiffOptions, Repository, Sort, Tree};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::gold::{derive_gold, GoldError, GoldFlag, OldFiles};
use super::Task;
use crate::repo::repo_dir_name;

/// Which commits become tasks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HistoryConfig {
    /// Where the walk starts (a revision).
    pub rev: String,
    /// Stop after this many tasks.
    pub max_tasks: usize,
    /// Skip commits whose message has fewer characters (after trimming).
    pub min_message_chars: usize,
    /// Skip commits that change more files.
    pub max_files: usize,
    /// Skip commits that add plus remove more lines.
    pub max_changed_lines: usize,
    /// Skip commits whose gold has any of these flags.
    pub drop_flags: BTreeSet<GoldFlag>,
}

impl Default for HistoryConfig {
    fn default() -> Self {
        Self {
            rev: "HEAD".into(),
            max_tasks: 1000,
            min_message_chars: 30,
            max_files: 5,
            max_changed_lines: 200,
            drop_flags: BTreeSet::from([GoldFlag::NoFunctions, GoldFlag::EmptyGold]),
        }
    }
}

/// Why the history walk failed.
#[derive(Debug, Error)]
pub enum HistoryError {
    /// A git operation failed.
    #[error("{what}: {source}")]
    Git {
        /// What was being done.
        what: String,
        /// libgit2's error.
        source: git2::Error,
    },
    /// The repo name is not `owner/name`.
    #[error(transparent)]
    Name(#[from] crate::repo::RepoError),
}

fn git_err(what: impl Into<String>) -> impl FnOnce(git2::Error) -> HistoryError {
    let what = what.into();
    move |source| HistoryError::Git { what, source }
}

/// Walks history from `config.rev` (newest first) and returns tasks with
/// `patch` and `gold` set. Commits with unreadable patches are skipped.
pub fn tasks_from_history(git: &Repository, repo: &str, config: &HistoryConfig) -> Result<Vec<Task>, HistoryError> {
    let prefix = repo_dir_name(repo)?;
    let mut walk = git.revwalk().map_err(git_err("revwalk"))?;
    walk.set_sorting(Sort::TOPOLOGICAL | Sort::TIME).map_err(git_err("revwalk sorting"))?;
    let start = git.revparse_single(&config.rev).map_err(git_err(format!("resolving {}", config.rev)))?;
    walk.push(start.id()).map_err(git_err("revwalk push"))?;
    let mut tasks = Vec::new();
    for oid in walk {
        if tasks.len() >= config.max_tasks {
            break;
        }
        let oid = oid.map_err(git_err("revwalk step"))?;
        let commit = git.find_commit(oid).map_err(git_err(format!("commit {oid}")))?;
        if let Some(task) = commit_task(git, &commit, repo, &prefix, config)? {
            tasks.push(task);
        }
    }
    Ok(tasks)
}

fn commit_task(
    git: &Repository,
    commit: &Commit,
    repo: &str,
    prefix: &str,
    config: &HistoryConfig,
) -> Result<Option<Task>, HistoryError> {
    let message = commit.message().unwrap_or("").trim().to_string();
    if commit.parent_count() != 1 || message.chars().count() < config.min_message_chars {
        return Ok(None);
    }
    let id = commit.id();
    let parent = commit.parent(0).map_err(git_err(format!("parent of {id}")))?;
    let old_tree = parent.tree().map_err(git_err(format!("tree of {}", parent.id())))?;
    let new_tree = commit.tree().map_err(git_err(format!("tree of {id}")))?;
    let mut options = DiffOptions::new();
    options.context_lines(3);
    let diff = git
        .diff_tree_to_tree(Some(&old_tree), Some(&new_tree), Some(&mut options))
        .map_err(git_err(format!("diff of {id}")))?;
    let stats = diff.stats().map_err(git_err(format!("diff stats of {id}")))?;
    if stats.files_changed() > config.max_files || stats.insertions() + stats.deletions() > config.max_changed_lines {
        return Ok(None);
    }
    let patch = diff_text(&diff).map_err(git_err(format!("patch of {id}")))?;
    let base = TreeFiles { git, tree: &old_tree };
    let Ok(report) = derive_gold(&patch, &base) else { return Ok(None) };
    if report.flags.iter().any(|f| config.drop_flags.contains(f)) {
        return Ok(None);
    }
    Ok(Some(Task {
        instance_id: format!("{prefix}-{}", &id.to_string()[..12]),
        repo: repo.to_string(),
        base_commit: parent.id().to_string(),
        problem_statement: message,
        patch: Some(patch),
        gold: Some(report.gold),
    }))
}

/// A diff as unified-patch text (`diff --git` headers, hunks, 3 lines of context as made).
pub(crate) fn diff_text(diff: &git2::Diff<'_>) -> Result<String, git2::Error> {
    let mut patch = String::new();
    diff.print(DiffFormat::Patch, |_, _, line| {
        if matches!(line.origin(), '+' | '-' | ' ') {
            patch.push(line.origin());
        }
        patch.push_str(&String::from_utf8_lossy(line.content()));
        true
    })?;
    Ok(patch)
}

/// Old files read straight from a tree (a parent's, a base commit's).
pub(crate) struct TreeFiles<'a> {
    pub(crate) git: &'a Repository,
    pub(crate) tree: &'a Tree<'a>,
}

impl OldFiles for TreeFiles<'_> {
    fn old_file(&self, path: &str) -> Result<Option<Vec<u8>>, GoldError> {
        let Ok(entry) = self.tree.get_path(std::path::Path::new(path)) else { return Ok(None) };
        let blob = self
            .git
            .find_blob(entry.id())
            .map_err(|e| GoldError::Read { path: path.to_string(), message: e.to_string() })?;
        Ok(Some(blob.content().to_vec()))
    }
}
