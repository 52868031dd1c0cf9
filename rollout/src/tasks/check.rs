//! Checking a task file before a run starts: every task's repository and
//! base commit, and that its gold (explicit or from its patch) is not
//! empty. A run that would die at step 5 on one bad row among 57 learns it
//! here, with every bad row named at once (file:line, reason).

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use git2::{Oid, Repository};

use super::gold::{derive_gold, GoldError, OldFiles};
use super::{load_task_lines, Task, TaskError};
use crate::repo::{open_repository, RepoError};

/// One row that cannot run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadTask {
    /// 1-based line in the task file.
    pub line: usize,
    /// The task's id.
    pub instance_id: String,
    /// Why it cannot run.
    pub reason: String,
}

/// The tasks of a file that passed, and the rows that did not.
#[derive(Debug)]
pub struct CheckedTasks {
    /// The file.
    pub path: PathBuf,
    /// Good tasks in file order, each with its line.
    pub good: Vec<(usize, Task)>,
    /// Bad rows in file order.
    pub bad: Vec<BadTask>,
}

impl CheckedTasks {
    /// The good tasks.
    pub fn tasks(&self) -> Vec<Task> {
        self.good.iter().map(|(_, t)| t.clone()).collect()
    }

    /// Every bad row, one `file:line: task 'id': reason` line each.
    pub fn report(&self) -> String {
        self.bad.iter().map(|b| format!("{}:{}: task '{}': {}\n", self.path.display(), b.line, b.instance_id, b.reason)).collect()
    }
}

impl fmt::Display for BadTask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: task '{}': {}", self.line, self.instance_id, self.reason)
    }
}

/// Loads `path` and checks every task against the repositories under
/// `repos_dir` (each repository opened once, each commit resolved, each
/// patch's touched files read from the commit's tree, no snapshot built).
/// `prompt_fits` is asked last, for tasks that passed the rest, and returns
/// why a task cannot run in the episode's context, if it cannot.
pub fn check_task_file(path: &Path, repos_dir: &Path, prompt_fits: &dyn Fn(&Task) -> Option<String>) -> Result<CheckedTasks, TaskError> {
    let rows = load_task_lines(path)?;
    let mut good = Vec::new();
    let mut bad = Vec::new();
    let mut repos: BTreeMap<String, Result<Repository, String>> = BTreeMap::new();
    for (line, task) in rows {
        let git = repos.entry(task.repo.clone()).or_insert_with(|| open_repository(repos_dir, &task.repo).map_err(|e| e.to_string()));
        let reason = match git {
            Err(e) => Some(e.clone()),
            Ok(git) => task_problem(git, &task).or_else(|| prompt_fits(&task)),
        };
        match reason {
            Some(reason) => bad.push(BadTask { line, instance_id: task.instance_id.clone(), reason }),
            None => good.push((line, task)),
        }
    }
    Ok(CheckedTasks { path: path.to_path_buf(), good, bad })
}

/// Why `task` cannot run on `git`, if it cannot.
fn task_problem(git: &Repository, task: &Task) -> Option<String> {
    let commit = match crate::repo::resolve_commit(git, &task.repo, &task.base_commit) {
        Ok(c) => c,
        Err(RepoError::MissingCommit { rev, repo, .. }) => return Some(format!("base_commit '{rev}' is not a commit of {repo}")),
        Err(e) => return Some(e.to_string()),
    };
    if let Some(gold) = &task.gold {
        return (gold.files.is_empty() && gold.functions.is_empty()).then(|| "gold lists no file and no function".to_string());
    }
    let patch = task.patch.as_deref().unwrap_or_default();
    match derive_gold(patch, &TreeFiles { git, commit }) {
        Ok(report) if report.gold.files.is_empty() => Some("the patch changes no file (empty gold)".into()),
        Ok(_) => None,
        Err(e) => Some(format!("gold from patch: {e}")),
    }
}

/// A commit's files read on demand from git objects.
struct TreeFiles<'a> {
    git: &'a Repository,
    commit: Oid,
}

impl OldFiles for TreeFiles<'_> {
    fn old_file(&self, path: &str) -> Result<Option<Vec<u8>>, GoldError> {
        let read = |e: git2::Error| GoldError::Read { path: path.to_string(), message: e.to_string() };
        let tree = self.git.find_commit(self.commit).and_then(|c| c.tree()).map_err(read)?;
        let entry = match tree.get_path(Path::new(path)) {
            Ok(entry) => entry,
            Err(e) if e.code() == git2::ErrorCode::NotFound => return Ok(None),
            Err(e) => return Err(read(e)),
        };
        let object = entry.to_object(self.git).map_err(read)?;
        Ok(Some(object.as_blob().map(|b| b.content().to_vec()).unwrap_or_default()))
    }
}
