//! Tasks: SWE-bench-style JSONL rows, gold derived from patches, filters,
//! and tasks mined from a repository's own history.

pub mod check;
pub mod gold;
pub mod history;
pub mod import;
pub mod patch;
pub mod place;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::reward::Gold;

/// One task (a superset of SWE-bench rows; unknown fields are ignored).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Task {
    /// Unique id, e.g. `psf__requests-1142`.
    pub instance_id: String,
    /// `owner/name`.
    pub repo: String,
    /// The commit whose tree the agent searches.
    pub base_commit: String,
    /// The issue text.
    pub problem_statement: String,
    /// Unified diff of the fix (gold is derived from it when `gold` is absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch: Option<String>,
    /// Explicit gold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gold: Option<Gold>,
}

/// Why tasks could not be loaded.
#[derive(Debug, Error)]
pub enum TaskError {
    /// The file cannot be read.
    #[error("reading {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A line is not a task.
    #[error("{path}:{line}: {source}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// serde_json's error.
        source: serde_json::Error,
    },
    /// A task with neither `patch` nor `gold`.
    #[error("{path}:{line}: task '{instance_id}' has neither 'patch' nor 'gold'")]
    NoGold {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// The task.
        instance_id: String,
    },
    /// A task whose `instance_id` is empty (or blank).
    #[error("{path}:{line}: the task's 'instance_id' is empty")]
    EmptyId {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
    },
    /// Two tasks with one `instance_id`: which one a result is of would be
    /// ambiguous.
    #[error("{path}:{line}: task '{instance_id}' again (first at line {first}): instance ids must be unique")]
    DuplicateId {
        /// The file.
        path: PathBuf,
        /// 1-based line of the repeat.
        line: usize,
        /// 1-based line of the first.
        first: usize,
        /// The id.
        instance_id: String,
    },
}

/// Loads a JSONL file of tasks (blank lines skipped).
pub fn load_tasks(path: &Path) -> Result<Vec<Task>, TaskError> {
    Ok(load_task_lines(path)?.into_iter().map(|(_, t)| t).collect())
}

/// Loads a JSONL file of tasks, each with its 1-based line (blank lines
/// skipped); an empty or repeated `instance_id` is refused by line.
pub fn load_task_lines(path: &Path) -> Result<Vec<(usize, Task)>, TaskError> {
    let text = std::fs::read_to_string(path).map_err(|source| TaskError::Io { path: path.into(), source })?;
    let mut tasks = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let task: Task = serde_json::from_str(line)
            .map_err(|source| TaskError::Parse { path: path.into(), line: i + 1, source })?;
        if task.patch.is_none() && task.gold.is_none() {
            return Err(TaskError::NoGold { path: path.into(), line: i + 1, instance_id: task.instance_id });
        }
        tasks.push((i + 1, task));
    }
    check_ids(path, tasks.iter().map(|(line, t)| (*line, t.instance_id.as_str())))?;
    Ok(tasks)
}

/// Refuses the first empty (or blank) id, and the first id seen twice, of
/// the rows of `path` given as (1-based line, id).
pub fn check_ids<'a>(path: &Path, ids: impl IntoIterator<Item = (usize, &'a str)>) -> Result<(), TaskError> {
    let mut seen = std::collections::HashMap::new();
    for (line, id) in ids {
        if id.trim().is_empty() {
            return Err(TaskError::EmptyId { path: path.into(), line });
        }
        if let Some(first) = seen.insert(id, line) {
            return Err(TaskError::DuplicateId { path: path.into(), line, first, instance_id: id.to_string() });
        }
    }
    Ok(())
}
