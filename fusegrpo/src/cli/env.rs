//! The environment's debugging commands: `fusegrpo tool`, `fusegrpo reward`,
//! `fusegrpo tasks gold` and `fusegrpo tasks from-history` (`tasks synth`:
//! [`super::tasks_synth`]).

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use rollout::answer::parse_answer;
use rollout::efficiency::efficiency;
use rollout::entities::{Entity, EntitySet};
use rollout::repo::SnapshotStore;
use rollout::reward::{score, Gold, RewardConfig};
use rollout::tasks::gold::{derive_gold, GoldFlag};
use rollout::tasks::history::{tasks_from_history, HistoryConfig};
use rollout::tasks::{load_tasks, Task};
use rollout::toolcall::{has_tool_call, parse_tool_calls, ToolCall};
use rollout::tools::ToolRunner;
use serde::{Deserialize, Serialize};

/// `fusegrpo tool`: run one tool call against a repository at a commit.
#[derive(clap::Args)]
pub struct ToolArgs {
    /// Folder holding repositories named `owner__name` (or `owner__name.git`).
    #[arg(long)]
    pub repos_dir: PathBuf,
    /// Repository, `owner/name`.
    #[arg(long)]
    pub repo: String,
    /// Commit (id, branch or tag).
    #[arg(long)]
    pub commit: String,
    /// The call, `{"name": "grep", "arguments": {"pattern": "..."}}`.
    #[arg(long)]
    pub call: String,
}

/// Prints `{"output": ..., "entities": [...], "error": bool}`.
pub fn run_tool(args: ToolArgs) -> Result<()> {
    let call: ToolCall = serde_json::from_str(&args.call).context("--call is not a tool call JSON object")?;
    let snapshot = SnapshotStore::open(&args.repos_dir).get(&args.repo, &args.commit)?;
    let result = ToolRunner::default().run(&snapshot, &call);
    outln!("{}", serde_json::to_string(&result)?);
    Ok(())
}

/// `fusegrpo reward`: score one episode against its task.
#[derive(clap::Args)]
pub struct RewardArgs {
    /// The task: a file holding one JSON object (a JSONL row), or that JSON
    /// itself when the argument starts with `{`. With `gold`, or `patch` plus --repos-dir.
    #[arg(long)]
    pub task: String,
    /// The episode: a file, or the JSON itself when the argument starts with `{`:
    /// `{"turns": ["assistant text", ...], "call_entities": [[...], ...]?}`.
    #[arg(long)]
    pub episode: String,
    /// Repositories, to replay the episode's calls and derive gold from a patch.
    #[arg(long)]
    pub repos_dir: Option<PathBuf>,
    /// Reward weights: a JSON file, or the JSON itself when the argument starts
    /// with `{` (`{"w_file":..,"w_func":..,"alpha":..,"gamma":..}`).
    #[arg(long)]
    pub config: Option<String>,
}

/// An episode as the policy wrote it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Episode {
    /// The assistant turns in order; the last turn without a tool call is the answer.
    turns: Vec<String>,
    /// Entities surfaced by each call, in call order (skips replaying the calls).
    #[serde(default)]
    call_entities: Option<Vec<Vec<Entity>>>,
}

/// Prints `{"f1_file", "f1_func", "f1", "e", "reward"}`.
pub fn run_reward(args: RewardArgs) -> Result<()> {
    let task: Task = read_json("--task", &args.task)?;
    let episode: Episode = read_json("--episode", &args.episode)?;
    let config: RewardConfig = match &args.config {
        Some(arg) => read_json("--config", arg)?,
        None => RewardConfig::default(),
    };
    config.validate()?;
    let store = args.repos_dir.as_ref().map(SnapshotStore::open);
    let gold = task_gold(&task, store.as_ref())?;
    let calls = match episode.call_entities {
        Some(calls) => calls.into_iter().map(|c| c.into_iter().collect()).collect(),
        None => replay(&task, &episode.turns, store.as_ref())?,
    };
    let answer_text = episode.turns.iter().rev().find(|t| !has_tool_call(t)).map_or("", String::as_str);
    let result = score(&parse_answer(answer_text), &gold, &config, efficiency(&calls));
    outln!("{}", serde_json::to_string(&result)?);
    Ok(())
}

/// The JSON of argument `flag`: inline when it starts with `{`, else read
/// from the file it names.
fn read_json<T: for<'de> Deserialize<'de>>(flag: &str, arg: &str) -> Result<T> {
    if arg.trim_start().starts_with('{') {
        return serde_json::from_str(arg).with_context(|| format!("{flag}: parsing the JSON given inline"));
    }
    let text = std::fs::read_to_string(arg).with_context(|| format!("{flag}: reading the file {arg} (or pass the JSON itself, starting with {{)"))?;
    serde_json::from_str(&text).with_context(|| format!("{flag}: parsing {arg}"))
}

fn task_gold(task: &Task, store: Option<&SnapshotStore>) -> Result<Gold> {
    if let Some(gold) = &task.gold {
        return Ok(gold.clone());
    }
    let (Some(patch), Some(store)) = (&task.patch, store) else {
        bail!("task '{}' has no 'gold'; give --repos-dir to derive it from its patch", task.instance_id);
    };
    let snapshot = store.get(&task.repo, &task.base_commit)?;
    Ok(derive_gold(patch, &*snapshot).with_context(|| format!("gold of '{}'", task.instance_id))?.gold)
}

fn replay(task: &Task, turns: &[String], store: Option<&SnapshotStore>) -> Result<Vec<EntitySet>> {
    let calls_per_turn: Vec<_> = turns.iter().map(|t| parse_tool_calls(t)).collect();
    if calls_per_turn.iter().all(Vec::is_empty) {
        return Ok(Vec::new());
    }
    let Some(store) = store else {
        bail!("the episode has tool calls: give --repos-dir to replay them, or 'call_entities'");
    };
    let snapshot = store.get(&task.repo, &task.base_commit)?;
    let runner = ToolRunner::default();
    let results = calls_per_turn.iter().flat_map(|calls| runner.run_turn(&snapshot, calls));
    Ok(results.map(|r| r.entities).collect())
}

/// `fusegrpo tasks ...`: task data utilities.
#[derive(clap::Subcommand)]
pub enum TasksCommand {
    /// Derive gold files and functions from each row's patch at its base commit.
    Gold(GoldArgs),
    /// Build tasks from a repository's own commits.
    FromHistory(HistoryArgs),
    /// Synthetic tasks: random functions of a tree, an issue written about each (SERA-style).
    Synth(super::tasks_synth::Args),
    /// Tasks from published rows (SWE-bench, SWE-Gym, SWE-smith) over local repositories; rows that cannot be used are named and skipped.
    Import(super::tasks_corpus::ImportArgs),
    /// Split task files by repository: the held-out repositories' tasks, and the rest (never SWE-bench's repositories) for training.
    Split(super::tasks_corpus::SplitArgs),
}

/// `fusegrpo tasks gold`.
#[derive(clap::Args)]
pub struct GoldArgs {
    /// Folder holding repositories named `owner__name`.
    #[arg(long)]
    pub repos_dir: PathBuf,
    /// Task JSONL with `patch`.
    #[arg(long)]
    pub input: PathBuf,
    /// Output JSONL: `{"instance_id", "files", "functions", "flags"}` per row.
    #[arg(long)]
    pub output: PathBuf,
}

/// `fusegrpo tasks from-history`.
#[derive(clap::Args)]
pub struct HistoryArgs {
    /// A git repository directory, or `owner/name` when --repos-dir is given.
    #[arg(long)]
    pub repo: String,
    /// Folder holding repositories named `owner__name`.
    #[arg(long)]
    pub repos_dir: Option<PathBuf>,
    /// The `owner/name` written into tasks (default: from the directory name).
    #[arg(long)]
    pub name: Option<String>,
    /// Output JSONL of tasks with `patch` and `gold`.
    #[arg(long)]
    pub out: PathBuf,
    /// At most this many tasks.
    #[arg(long, default_value_t = 1000)]
    pub max: usize,
    /// Revision to walk back from.
    #[arg(long, default_value = "HEAD")]
    pub rev: String,
}

/// Runs a `tasks` subcommand.
pub fn run_tasks(command: TasksCommand) -> Result<()> {
    match command {
        TasksCommand::Gold(args) => run_gold(args),
        TasksCommand::FromHistory(args) => run_history(args),
        TasksCommand::Synth(args) => super::tasks_synth::run(args),
        TasksCommand::Import(args) => super::tasks_corpus::import(args),
        TasksCommand::Split(args) => super::tasks_corpus::split(args),
    }
}

#[derive(Serialize)]
struct GoldRow<'a> {
    instance_id: &'a str,
    files: Vec<String>,
    functions: Vec<String>,
    flags: Vec<GoldFlag>,
}

fn run_gold(args: GoldArgs) -> Result<()> {
    trainer::files::check_outputs(&[("--input", &args.input)], &[("--output", &args.output)])?;
    let tasks = load_tasks(&args.input)?;
    let store = SnapshotStore::open(&args.repos_dir);
    let mut out = Vec::new();
    for task in &tasks {
        let Some(patch) = &task.patch else { bail!("task '{}' has no 'patch'", task.instance_id) };
        let snapshot = store
            .get(&task.repo, &task.base_commit)
            .with_context(|| format!("task '{}'", task.instance_id))?;
        let report = derive_gold(patch, &*snapshot).with_context(|| format!("gold of '{}'", task.instance_id))?;
        let row = GoldRow {
            instance_id: &task.instance_id,
            files: report.gold.files.into_iter().collect(),
            functions: report.gold.functions.into_iter().collect(),
            flags: report.flags.into_iter().collect(),
        };
        writeln!(out, "{}", serde_json::to_string(&row)?)?;
    }
    std::fs::write(&args.output, out).with_context(|| format!("writing {}", args.output.display()))?;
    tracing::info!(rows = tasks.len(), output = %args.output.display(), "gold written");
    Ok(())
}

fn run_history(args: HistoryArgs) -> Result<()> {
    let (git, name) = match &args.repos_dir {
        Some(dir) => (rollout::repo::open_repository(dir, &args.repo)?, args.repo.clone()),
        None => {
            let git = rollout::repo::open_repository_path(Path::new(&args.repo))?;
            (git, args.name.clone().unwrap_or_else(|| name_from_dir(&args.repo)))
        }
    };
    let config = HistoryConfig { rev: args.rev, max_tasks: args.max, ..Default::default() };
    let tasks = tasks_from_history(&git, &name, &config)?;
    let mut out = Vec::new();
    for task in &tasks {
        writeln!(out, "{}", serde_json::to_string(task)?)?;
    }
    std::fs::write(&args.out, out).with_context(|| format!("writing {}", args.out.display()))?;
    tracing::info!(tasks = tasks.len(), out = %args.out.display(), "tasks written");
    Ok(())
}

/// `.../owner__name(.git)` -> `owner/name`; otherwise `local/<dir>`.
fn name_from_dir(path: &str) -> String {
    let trimmed = path.trim_end_matches('/');
    let base = trimmed.rsplit('/').next().unwrap_or(trimmed).trim_end_matches(".git");
    match base.split_once("__") {
        Some((owner, name)) if !owner.is_empty() && !name.is_empty() => format!("{owner}/{name}"),
        _ => format!("local/{}", if base.is_empty() { "repo" } else { base }),
    }
}
