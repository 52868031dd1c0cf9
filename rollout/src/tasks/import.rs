//! Tasks from published rows (`fusegrpo tasks import`): SWE-bench and
//! SWE-Gym rows (the patch is the fix, the tree is the base commit's) and
//! SWE-smith rows (the patch *introduces* the bug: the episode's tree is the
//! base commit with the patch applied, written here as a commit with a fixed
//! author and date so that its id is the same on every machine, and the fix
//! is that commit's diff back to the base).
//!
//! A patch applies as `git apply` applies it: a hunk whose lines sit some
//! lines above or below its recorded position is taken there
//! ([`super::place`]), and the task's patch is the row's with that hunk's
//! header moved to where it applies (byte for byte the row's when every hunk
//! is where it says), so that its gold and every later reader see the lines
//! the fix changes.
//!
//! A row that cannot become a task (its commit is missing, its patch does
//! not apply to that commit, whatever the format, its gold is empty) is an [`ImportError`] for that row alone;
//! the caller names it and goes on.

use std::collections::BTreeSet;

use git2::{Diff, Oid, Repository, Signature, Time};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::gold::{derive_gold, GoldFlag, GoldReport};
use super::history::{diff_text, TreeFiles};
use super::place::{place_hunks, PlaceError};
use super::Task;

/// The conventions of the rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ImportFormat {
    /// SWE-bench rows: `patch` is the fix at `base_commit`.
    SweBench,
    /// SWE-Gym rows: as SWE-bench.
    SweGym,
    /// SWE-smith rows: `patch` introduces the bug onto `base_commit` (an
    /// abbreviated id); `edited_entities` is their gold.
    SweSmith,
}

impl std::str::FromStr for ImportFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "swe-bench" => Ok(ImportFormat::SweBench),
            "swe-gym" => Ok(ImportFormat::SweGym),
            "swe-smith" => Ok(ImportFormat::SweSmith),
            other => Err(format!("`{other}`: expected swe-bench, swe-gym or swe-smith")),
        }
    }
}

/// One published row (unknown fields ignored).
#[derive(Clone, Debug, Deserialize)]
pub struct Row {
    /// The row's id.
    pub instance_id: String,
    /// `owner/name`.
    pub repo: String,
    /// A full or abbreviated commit id.
    pub base_commit: String,
    /// The issue text.
    pub problem_statement: String,
    /// A unified diff (the fix, or for SWE-smith the bug).
    pub patch: String,
    /// SWE-smith's gold functions (`path:Class.method`).
    #[serde(default)]
    pub edited_entities: Option<Vec<String>>,
}

/// Why one row did not become a task.
#[derive(Debug, Error)]
pub enum ImportError {
    /// `base_commit` names no commit in the repository.
    #[error("base commit {commit} is not in the repository")]
    MissingCommit {
        /// The id as the row gives it.
        commit: String,
    },
    /// The patch does not parse or does not apply to the base tree.
    #[error("the patch does not apply to {commit}: {message}")]
    DoesNotApply {
        /// The base commit.
        commit: String,
        /// The hunk that matches nowhere, or libgit2's reason.
        message: String,
    },
    /// Gold could not be derived from the fix.
    #[error("gold: {0}")]
    Gold(#[from] super::gold::GoldError),
    /// The fix touches no file (an empty patch).
    #[error("the fix touches no file")]
    EmptyGold,
    /// The issue text is empty.
    #[error("the problem statement is empty")]
    EmptyStatement,
    /// Another git failure (reading or writing objects).
    #[error("{what}: {source}")]
    Git {
        /// What was being done.
        what: String,
        /// libgit2's error.
        source: git2::Error,
    },
}

fn git_err(what: impl Into<String>) -> impl FnOnce(git2::Error) -> ImportError {
    let what = what.into();
    move |source| ImportError::Git { what, source }
}

/// A row made a task.
#[derive(Clone, Debug)]
pub struct Imported {
    /// The task (full `base_commit`, the fix as `patch` with its hunk
    /// headers where they apply, gold explicit).
    pub task: Task,
    /// The gold report's flags (e.g. the fix adds a function).
    pub flags: BTreeSet<GoldFlag>,
    /// For SWE-smith rows: the published gold functions, beside ours.
    pub published_functions: Option<BTreeSet<String>>,
}

/// Author and committer of the SWE-smith commits; the date is fixed
/// (2000-01-01T00:00:00Z) so the commit id depends on the tree alone.
pub const IMPORT_AUTHOR: (&str, &str) = ("fusegrpo tasks import", "import@fusegrpo.invalid");
const IMPORT_TIME: i64 = 946_684_800;

/// The ref that keeps a SWE-smith row's commit reachable (so no `git gc`
/// drops it), one per id: an id that is already a clean ref name (letters,
/// digits, `-`, `_`, `.`; all of SWE-smith's) is used as it is, as imports
/// always did; any other is cleaned and given `=` and a hash of the exact
/// id (`col x` -> `col_x=<12 hex digits>`), which no clean id contains, so
/// `col x` and `col_x` never share a ref.
pub fn import_ref(instance_id: &str) -> String {
    let clean: String =
        instance_id.chars().map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '_' }).collect();
    // git refuses `..`, a leading or trailing `.` and a `.lock` ending.
    let mut clean = clean.replace("..", "_.").trim_matches('.').to_string();
    if clean.ends_with(".lock") || clean.is_empty() {
        clean.push('_');
    }
    if clean != instance_id {
        let hash = Oid::hash_object(git2::ObjectType::Blob, instance_id.as_bytes()).expect("hashing bytes in memory");
        clean = format!("{clean}={}", &hash.to_string()[..12]);
    }
    format!("refs/fusegrpo/swe-smith/{clean}")
}

/// Makes `row` a task over `git` (the repository of `row.repo`).
pub fn import_row(git: &Repository, row: &Row, format: ImportFormat) -> Result<Imported, ImportError> {
    if row.problem_statement.trim().is_empty() {
        return Err(ImportError::EmptyStatement);
    }
    let base = git
        .revparse_single(&row.base_commit)
        .and_then(|o| o.peel_to_commit())
        .map_err(|_| ImportError::MissingCommit { commit: row.base_commit.clone() })?;
    match format {
        ImportFormat::SweBench | ImportFormat::SweGym => {
            let tree = base.tree().map_err(git_err(format!("tree of {}", base.id())))?;
            // As `git apply --check`: a fix that does not apply is not this commit's.
            let (_, placed) = apply_patch(git, &row.patch, base.id(), &tree)?;
            let report = derive_gold(&placed, &TreeFiles { git, tree: &tree })?;
            Ok(imported(row, base.id(), placed, report, None)?)
        }
        ImportFormat::SweSmith => {
            let (buggy, fix) = apply_bug(git, row, &base)?;
            let buggy_tree = git.find_commit(buggy).and_then(|c| c.tree()).map_err(git_err(format!("tree of {buggy}")))?;
            let report = derive_gold(&fix, &TreeFiles { git, tree: &buggy_tree })?;
            let published = row.edited_entities.as_ref().map(|e| e.iter().cloned().collect());
            Ok(imported(row, buggy, fix, report, published)?)
        }
    }
}

fn imported(
    row: &Row,
    base: Oid,
    fix: String,
    report: GoldReport,
    published_functions: Option<BTreeSet<String>>,
) -> Result<Imported, ImportError> {
    if report.gold.files.is_empty() {
        return Err(ImportError::EmptyGold);
    }
    let task = Task {
        instance_id: row.instance_id.clone(),
        repo: row.repo.clone(),
        base_commit: base.to_string(),
        problem_statement: row.problem_statement.clone(),
        patch: Some(fix),
        gold: Some(report.gold),
    };
    Ok(Imported { task, flags: report.flags, published_functions })
}

/// Applies the bug onto `base` as a commit (fixed author and date, kept by
/// [`import_ref`]); returns its id and the fix (its diff back to `base`).
fn apply_bug(git: &Repository, row: &Row, base: &git2::Commit<'_>) -> Result<(Oid, String), ImportError> {
    let base_tree = base.tree().map_err(git_err(format!("tree of {}", base.id())))?;
    let (mut index, _) = apply_patch(git, &row.patch, base.id(), &base_tree)?;
    let tree_id = index.write_tree_to(git).map_err(git_err("writing the buggy tree"))?;
    let tree = git.find_tree(tree_id).map_err(git_err("reading the buggy tree"))?;
    if tree_id == base_tree.id() {
        return Err(ImportError::EmptyGold);
    }
    let sig = Signature::new(IMPORT_AUTHOR.0, IMPORT_AUTHOR.1, &Time::new(IMPORT_TIME, 0)).map_err(git_err("signature"))?;
    let message = format!("{}\n\nThe bug of SWE-smith's row, applied onto {}.\n", row.instance_id, base.id());
    let commit = git.commit(None, &sig, &sig, &message, &tree, &[base]).map_err(git_err("writing the buggy commit"))?;
    git.reference(&import_ref(&row.instance_id), commit, true, "fusegrpo tasks import")
        .map_err(git_err(format!("writing {}", import_ref(&row.instance_id))))?;
    let mut options = git2::DiffOptions::new();
    options.context_lines(3);
    let fix = git.diff_tree_to_tree(Some(&tree), Some(&base_tree), Some(&mut options)).map_err(git_err("diff of the fix"))?;
    let text = diff_text(&fix).map_err(git_err("text of the fix"))?;
    Ok((commit, text))
}

/// `patch` applied to `tree` (of commit `base`) in memory, as `git apply
/// --check` would (a hunk at an offset taken there), and the patch with
/// its hunk headers where they applied: [`ImportError::DoesNotApply`] when
/// it does not parse or a hunk matches nowhere.
fn apply_patch(git: &Repository, patch: &str, base: Oid, tree: &git2::Tree<'_>) -> Result<(git2::Index, String), ImportError> {
    let refused = |message: String| ImportError::DoesNotApply { commit: base.to_string(), message };
    let does_not_apply = |e: git2::Error| refused(e.message().to_string());
    Diff::from_buffer(patch.as_bytes()).map_err(does_not_apply)?;
    let placed = match place_hunks(patch, &TreeFiles { git, tree }) {
        Ok(placed) => placed,
        Err(PlaceError::Old(e)) => return Err(e.into()),
        Err(e) => return Err(refused(e.to_string())),
    };
    let diff = Diff::from_buffer(placed.as_bytes()).map_err(does_not_apply)?;
    let index = git.apply_to_tree(tree, &diff, None).map_err(does_not_apply)?;
    Ok((index, placed))
}

/// How our gold functions compare with the published ones over the rows
/// that have both.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Agreement {
    /// Rows compared.
    pub rows: usize,
    /// Rows whose sets are equal.
    pub equal: usize,
    /// Mean Jaccard index of the two sets (1 where both are empty).
    pub mean_jaccard: f64,
    /// Mean share of the published functions that ours contain.
    pub mean_recall: f64,
}

impl Agreement {
    /// Over `pairs` of (ours, published).
    pub fn of<'a>(pairs: impl IntoIterator<Item = (&'a BTreeSet<String>, &'a BTreeSet<String>)>) -> Agreement {
        let mut a = Agreement::default();
        for (ours, theirs) in pairs {
            a.rows += 1;
            a.equal += usize::from(ours == theirs);
            let inter = ours.intersection(theirs).count() as f64;
            let union = ours.union(theirs).count() as f64;
            a.mean_jaccard += if union == 0.0 { 1.0 } else { inter / union };
            a.mean_recall += if theirs.is_empty() { 1.0 } else { inter / theirs.len() as f64 };
        }
        if a.rows > 0 {
            a.mean_jaccard /= a.rows as f64;
            a.mean_recall /= a.rows as f64;
        }
        a
    }
}
