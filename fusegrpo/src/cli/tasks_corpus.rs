//! `fusegrpo tasks import` (published rows become tasks over local
//! repositories) and `fusegrpo tasks split` (a corpus split by repository).

use std::collections::{BTreeMap, BTreeSet};
use std::io::BufRead;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use rollout::tasks::import::{import_row, Agreement, ImportFormat, Row};
use rollout::tasks::{load_task_lines, Task};
use serde::Serialize;

/// The twelve repositories of SWE-bench, where localizers are judged: `tasks
/// split` never puts them into training.
pub const SWE_BENCH_REPOS: &[&str] = &[
    "astropy/astropy",
    "django/django",
    "matplotlib/matplotlib",
    "mwaskom/seaborn",
    "pallets/flask",
    "psf/requests",
    "pydata/xarray",
    "pylint-dev/pylint",
    "pytest-dev/pytest",
    "scikit-learn/scikit-learn",
    "sphinx-doc/sphinx",
    "sympy/sympy",
];

/// `fusegrpo tasks import`.
#[derive(clap::Args)]
pub struct ImportArgs {
    /// The rows' conventions: swe-bench or swe-gym (the patch is the fix at base_commit), swe-smith (the patch introduces the bug).
    #[arg(long)]
    pub format: ImportFormat,
    /// The rows (JSONL: instance_id, repo, base_commit, problem_statement, patch[, edited_entities]).
    #[arg(long)]
    pub input: PathBuf,
    /// Folder holding the repositories as owner__name (`fusegrpo repos fetch`); SWE-smith rows write their commit there.
    #[arg(long)]
    pub repos_dir: PathBuf,
    /// Output JSONL of tasks (full base_commit, the fix as patch, gold explicit).
    #[arg(long)]
    pub out: PathBuf,
    /// Also write the summary (imported, skipped rows and why, gold agreement) as JSON here.
    #[arg(long)]
    pub report: Option<PathBuf>,
}

/// What `tasks import` did.
#[derive(Debug, Default, Serialize)]
struct ImportReport {
    rows: usize,
    imported: usize,
    /// `instance_id` -> why it was skipped.
    skipped: BTreeMap<String, String>,
    /// Imported tasks per gold flag.
    flags: BTreeMap<String, usize>,
    /// SWE-smith: our gold functions against `edited_entities`.
    agreement: Option<Agreement>,
}

/// Runs `tasks import`.
pub fn import(args: ImportArgs) -> Result<()> {
    let mut outputs = vec![("--out", args.out.as_path())];
    outputs.extend(args.report.as_deref().map(|r| ("--report", r)));
    trainer::files::check_outputs(&[("--input", &args.input)], &outputs)?;
    let file = std::fs::File::open(&args.input).with_context(|| format!("--input {}", args.input.display()))?;
    let lines = std::io::BufReader::new(file).lines().collect::<std::io::Result<Vec<String>>>().with_context(|| format!("reading {}", args.input.display()))?;
    check_row_ids(&args.input, &lines)?;
    let mut report = ImportReport::default();
    let mut tasks = Vec::new();
    let mut repos: BTreeMap<String, Option<git2::Repository>> = BTreeMap::new();
    let mut pairs = Vec::new();
    for (i, line) in lines.into_iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        report.rows += 1;
        let row: Row = match serde_json::from_str(&line) {
            Ok(row) => row,
            Err(e) => {
                let id = format!("{}:{}", args.input.display(), i + 1);
                say!("skipped {id}: not a row: {e}");
                report.skipped.insert(id, format!("not a row: {e}"));
                continue;
            }
        };
        let git = repos.entry(row.repo.clone()).or_insert_with(|| match rollout::repo::open_repository(&args.repos_dir, &row.repo) {
            Ok(git) => Some(git),
            Err(e) => {
                say!("{}: {e}; its rows are skipped", row.repo);
                None
            }
        });
        let outcome = match git {
            Some(git) => import_row(git, &row, args.format).map_err(|e| e.to_string()),
            None => Err(format!("repository {} is not under {}", row.repo, args.repos_dir.display())),
        };
        match outcome {
            Ok(imported) => {
                for flag in &imported.flags {
                    *report.flags.entry(serde_json::to_value(flag)?.as_str().unwrap_or("?").to_string()).or_default() += 1;
                }
                if let Some(theirs) = imported.published_functions {
                    let ours = imported.task.gold.as_ref().map(|g| g.functions.clone()).unwrap_or_default();
                    pairs.push((ours, theirs));
                }
                tasks.push(imported.task);
            }
            Err(why) => {
                say!("skipped {} ({}:{}): {why}", row.instance_id, args.input.display(), i + 1);
                report.skipped.insert(row.instance_id.clone(), why);
            }
        }
    }
    report.imported = tasks.len();
    if !pairs.is_empty() {
        report.agreement = Some(Agreement::of(pairs.iter().map(|(a, b)| (a, b))));
    }
    trainer::files::write_json_lines(&args.out, &tasks)?;
    say!(
        "tasks import: {} of {} rows imported into {} ({} skipped)",
        report.imported,
        report.rows,
        args.out.display(),
        report.skipped.len()
    );
    if let Some(a) = &report.agreement {
        say!(
            "gold functions against the rows' edited_entities: {} of {} equal, mean Jaccard {:.3}, mean recall {:.3}",
            a.equal, a.rows, a.mean_jaccard, a.mean_recall
        );
    }
    if let Some(path) = &args.report {
        std::fs::write(path, serde_json::to_string_pretty(&report)?).with_context(|| format!("writing --report {}", path.display()))?;
    }
    Ok(())
}

/// The held-out repositories of `path` (`owner/name` lines, `#` comments),
/// keyed by their lowercase spelling (GitHub's names ignore case).
fn heldout_names(path: &std::path::Path) -> Result<BTreeMap<String, String>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("--heldout-repos {}", path.display()))?;
    let mut held = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let name = line.split('#').next().unwrap_or("").trim();
        if name.is_empty() {
            continue;
        }
        rollout::repo::repo_dir_name(name).with_context(|| format!("{}:{}", path.display(), i + 1))?;
        held.insert(name.to_lowercase(), name.to_string());
    }
    if held.is_empty() {
        bail!("--heldout-repos {}: names no repository", path.display());
    }
    Ok(held)
}

/// Refuses, before any row is imported, an empty or repeated `instance_id`
/// (by line): which row a task is would be ambiguous. Lines that are not
/// rows are left to the import, which names and skips them.
fn check_row_ids(path: &std::path::Path, lines: &[String]) -> Result<()> {
    #[derive(serde::Deserialize)]
    struct Id {
        instance_id: String,
    }
    let ids = lines.iter().enumerate().filter_map(|(i, l)| Some((i + 1, serde_json::from_str::<Id>(l).ok()?.instance_id)));
    let ids: Vec<(usize, String)> = ids.collect();
    rollout::tasks::check_ids(path, ids.iter().map(|(line, id)| (*line, id.as_str()))).map_err(|e| anyhow::anyhow!("{e}; nothing was imported"))
}

/// `fusegrpo tasks split`.
#[derive(clap::Args)]
pub struct SplitArgs {
    /// Task files (JSONL), read in order; a task repeated word for word in a
    /// later file is kept once, an id repeated with other contents refused.
    #[arg(long, required = true, num_args = 1..)]
    pub input: Vec<PathBuf>,
    /// The held-out repositories: a file of `owner/name` lines (`#` starts a
    /// comment), compared ignoring case as GitHub does; each must match a task.
    #[arg(long)]
    pub heldout_repos: PathBuf,
    /// Output: the training tasks (no held-out repository, no SWE-bench repository).
    #[arg(long)]
    pub train: PathBuf,
    /// Output: the held-out repositories' tasks.
    #[arg(long)]
    pub heldout: PathBuf,
    /// Drop tasks whose problem statement is longer (characters): an issue
    /// that fills the episode's context leaves no room to search.
    #[arg(long)]
    pub max_statement_chars: Option<usize>,
}

/// Runs `tasks split`.
pub fn split(args: SplitArgs) -> Result<()> {
    let mut inputs: Vec<(&str, &std::path::Path)> = args.input.iter().map(|p| ("--input", p.as_path())).collect();
    inputs.push(("--heldout-repos", &args.heldout_repos));
    trainer::files::check_outputs(&inputs, &[("--train", &args.train), ("--heldout", &args.heldout)])?;
    let held = heldout_names(&args.heldout_repos)?;
    // id -> where it was first seen, and the task.
    let mut seen: BTreeMap<String, (String, Task)> = BTreeMap::new();
    let (mut train, mut heldout) = (Vec::<Task>::new(), Vec::<Task>::new());
    let (mut swe_bench, mut long, mut repeated) = (0usize, 0usize, 0usize);
    for path in &args.input {
        for (line, task) in load_task_lines(path)? {
            if let Some((first, earlier)) = seen.get(&task.instance_id) {
                anyhow::ensure!(
                    *earlier == task,
                    "{}:{line}: task '{}' is also {first}, with other contents: instance ids must be unique; nothing was written",
                    path.display(),
                    task.instance_id
                );
                repeated += 1;
                continue;
            }
            seen.insert(task.instance_id.clone(), (format!("{}:{line}", path.display()), task.clone()));
            if args.max_statement_chars.is_some_and(|max| task.problem_statement.chars().count() > max) {
                long += 1;
                continue;
            }
            if held.contains_key(&task.repo.to_lowercase()) {
                heldout.push(task);
            } else if SWE_BENCH_REPOS.iter().any(|r| r.eq_ignore_ascii_case(&task.repo)) {
                swe_bench += 1;
            } else {
                train.push(task);
            }
        }
    }
    let count = |tasks: &[Task]| tasks.iter().map(|t| t.repo.to_lowercase()).collect::<BTreeSet<_>>().len();
    let found: BTreeSet<String> = seen.values().map(|(_, t)| t.repo.to_lowercase()).collect();
    let missing: Vec<&String> = held.iter().filter(|(key, _)| !found.contains(*key)).map(|(_, name)| name).collect();
    if !missing.is_empty() {
        bail!(
            "--heldout-repos {}: {missing:?} match no task of the inputs (names are compared as GitHub does, ignoring case); nothing was written",
            args.heldout_repos.display()
        );
    }
    let empty: Vec<&String> = held.iter().filter(|(key, _)| !heldout.iter().any(|t| t.repo.to_lowercase() == **key)).map(|(_, name)| name).collect();
    if !empty.is_empty() {
        say!("tasks split: no task of the held-out repositories {empty:?} is kept (all over --max-statement-chars)");
    }
    if repeated > 0 {
        say!("tasks split: {repeated} tasks repeated word for word in a later input, kept once");
    }
    if long > 0 {
        say!("tasks split: {long} tasks dropped, their problem statement is over --max-statement-chars");
    }
    if swe_bench > 0 {
        say!("tasks split: {swe_bench} tasks of SWE-bench's repositories left out of training");
    }
    trainer::files::write_json_lines(&args.train, &train)?;
    trainer::files::write_json_lines(&args.heldout, &heldout)?;
    say!(
        "tasks split: {} training tasks from {} repositories -> {}; {} held-out tasks from {} repositories -> {}",
        train.len(),
        count(&train),
        args.train.display(),
        heldout.len(),
        count(&heldout),
        args.heldout.display()
    );
    Ok(())
}
