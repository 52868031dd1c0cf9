//! `fusegrpo rollout` and `fusegrpo eval`: run episodes for a task set with
//! a policy (our model, the scripted teacher, or an HTTP teacher).

use super::common::HttpTeacherArgs;
use anyhow::{Context, Result};
use rollout::episode::summary::Summary;
use rollout::tasks::Task;
use std::path::PathBuf;
use trainer::episodes::jsonl::{write_episodes_atomic, write_episodes_made_by, MadeBy};
use trainer::episodes::{run_policy, TeacherOpts};
use trainer::run_config::{Override, PolicyChoice, RunConfig};

#[derive(clap::Args)]
pub struct Args {
    /// Run configuration (TOML; see configs/).
    #[arg(long)]
    pub config: PathBuf,
    #[command(flatten)]
    pub set: super::common::SetArgs,
    /// Tasks (JSONL, SWE-bench-style rows).
    #[arg(long)]
    pub tasks: PathBuf,
    /// Episodes (JSONL), one line per episode (its folders created; checked
    /// writable, and not an input, before any episode runs).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// model | scripted | guided (the scripted teacher guided by the search index) | search (the index of each snapshot, no episode, `eval` only) | combined (the index search and the model's episodes, ranked together, the search first) | http://host:port (OpenAI-compatible teacher). Default: combined for `eval`, model for `rollout` and with --attempts.
    #[arg(long)]
    pub policy: Option<EvalPolicy>,
    /// Each task's ranked, grounded answer (JSONL: files and functions ranked, those not in the repository apart, set F1, the rank of the first gold file and function) per policy (with combined: model, search and combined); `compare` reads it.
    #[arg(long)]
    pub ranked: Option<PathBuf>,
    /// The model's episodes from an earlier `eval --out` (on these tasks, this config) instead of running the model again (policy model or combined).
    #[arg(long)]
    pub reuse: Option<PathBuf>,
    /// Episodes per task (default: the config's rollout.group).
    #[arg(long)]
    pub group: Option<usize>,
    /// The model (a folder, a checkpoint or a hub id) instead of the config's [model] path.
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// A LoRA adapter instead of the config's [model] adapter (PEFT's folder,
    /// or a LoRA run's checkpoint).
    #[arg(long, conflicts_with = "no_adapter")]
    pub adapter: Option<PathBuf>,
    /// The base model alone: no adapter, whatever the config's [model] adapter says.
    #[arg(long)]
    pub no_adapter: bool,
    /// Sampling temperature instead of the config's [sampling] temperature (0: greedy).
    #[arg(long)]
    pub temperature: Option<f64>,
    /// The repositories' folder instead of the config's [env] repos_dir.
    #[arg(long)]
    pub repos_dir: Option<PathBuf>,
    /// Use only the first N tasks.
    #[arg(long)]
    pub max_tasks: Option<usize>,
    #[command(flatten)]
    pub http: HttpTeacherArgs,
    #[command(flatten)]
    pub scaling: super::scaling::ScalingArgs,
    #[command(flatten)]
    pub tasks_check: super::common::TaskCheckArgs,
}

/// `--policy`: one policy, the index search, or the index search and the model combined.
#[derive(Clone, Debug, PartialEq)]
pub enum EvalPolicy {
    One(PolicyChoice),
    /// The index search alone ([`rollout::search`]): a ranking per task, no episode.
    Search,
    Combined,
}

impl std::str::FromStr for EvalPolicy {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "combined" => Ok(EvalPolicy::Combined),
            "search" => Ok(EvalPolicy::Search),
            other => other.parse().map(EvalPolicy::One).map_err(|_| format!("`{other}`: expected model, scripted, guided, combined or an http(s):// URL (or search)")),
        }
    }
}

/// The config, tasks and teacher options of `args`.
fn inputs(args: &Args, eval: bool) -> Result<(RunConfig, Vec<Task>, TeacherOpts)> {
    // The flags that set config keys: overrides, checked with the config.
    let mut flags = vec![];
    if let Some(model) = &args.model {
        flags.push(Override::flag(format!("--model {}", model.display()), "model.path", model.to_string_lossy())?);
    }
    if let Some(dir) = &args.repos_dir {
        flags.push(Override::flag(format!("--repos-dir {}", dir.display()), "env.repos_dir", dir.to_string_lossy())?);
    }
    if let Some(adapter) = &args.adapter {
        flags.push(Override::flag(format!("--adapter {}", adapter.display()), "model.adapter", adapter.to_string_lossy())?);
    }
    if args.no_adapter {
        flags.push(Override::flag_unset("--no-adapter", "model.adapter"));
    }
    if let Some(t) = args.temperature {
        flags.push(Override::flag(format!("--temperature {t}"), "sampling.temperature", t)?);
    }
    if let Some(g) = args.group {
        flags.push(Override::flag(format!("--group {g}"), "rollout.group", g)?);
    }
    let cfg = args.set.load_with(&args.config, flags)?;
    anyhow::ensure!(args.max_tasks != Some(0), "--max-tasks 0: at least 1 task");
    // `eval` cuts an issue that leaves the model no turn (as `localize`
    // does) instead of refusing it; `rollout` keeps the tasks as given.
    let mut tasks = if eval {
        let (tasks, cut) = trainer::episodes::issue_cut::checked_tasks_cut(&args.tasks, &cfg, args.tasks_check.skip_bad_tasks)?;
        if cut > 0 {
            say!("eval: {cut} issue(s) over the episode's token budget cut to fit (their beginning and end kept)");
        }
        tasks
    } else {
        trainer::episodes::checked_tasks(&args.tasks, &cfg, args.tasks_check.skip_bad_tasks)?
    };
    if let Some(n) = args.max_tasks {
        tasks.truncate(n);
    }
    let teacher = TeacherOpts { http: args.http.endpoint(), vary_scripted: None };
    Ok((cfg, tasks, teacher))
}

/// Runs the episodes of `args` (or, with `--attempts`, the attempts and
/// their selections), prints the table, writes what was asked.
fn run_args(args: &Args, label: &str, out_required: bool) -> Result<()> {
    check_paths(args)?;
    let (cfg, tasks, teacher) = inputs(args, !out_required)?;
    let scaling = args.scaling.config(cfg.sampling.seed)?;
    // `rollout` and test-time scaling (`--attempts`) run the model by default.
    let default = if out_required || scaling.is_some() { EvalPolicy::One(PolicyChoice::Model) } else { EvalPolicy::Combined };
    let policy = args.policy.clone().unwrap_or(default);
    if policy == EvalPolicy::Search {
        anyhow::ensure!(!out_required, "--policy search runs no episodes: it is for `eval` (the ranking per task), not `rollout`");
        anyhow::ensure!(
            scaling.is_none() && args.out.is_none() && args.reuse.is_none() && args.group.is_none(),
            "--policy search runs no episodes: --out, --reuse, --group and --attempts do not apply (--ranked writes its rankings)"
        );
        return search_table(&cfg, &tasks, args.ranked.as_deref());
    }
    if let Some(sc) = scaling {
        let EvalPolicy::One(policy) = &policy else {
            anyhow::bail!("--attempts with --policy combined: give --policy model or scripted (or leave --attempts out)")
        };
        anyhow::ensure!(args.ranked.is_none() && args.reuse.is_none(), "--ranked and --reuse are for runs without --attempts");
        anyhow::ensure!(args.group.is_none(), "--group and --attempts both set the episodes per task: give one");
        anyhow::ensure!(
            !out_required || args.out.is_some() || args.scaling.out_dir.is_some(),
            "--out ATTEMPTS.jsonl or --out-dir DIR is required"
        );
        let judge = args.scaling.judge.clone().unwrap_or(super::scaling::JudgeSpec::Evidence);
        let run = recipe::attempts::run(&cfg, &tasks, policy, &teacher, &judge, &args.scaling.judge_model, &sc)?;
        if let Some(out) = &args.out {
            write_episodes_atomic(out, &run.attempts)?;
        }
        let judge = judge.name();
        if let Some(dir) = &args.scaling.out_dir {
            let policy = policy_name(policy);
            recipe::attempts::write_dir(dir, &run, &sc, &policy, &judge)?;
            apps::plot::scaling::draw_dir(dir, None)?;
            say!("{label}: attempts, selections and scaling.json/png in {}", dir.display());
        }
        out!("{}", recipe::attempts::report(&run, &judge));
        return Ok(());
    }
    let out = if out_required { Some(args.out.clone().context("--out EPISODES.jsonl is required")?) } else { args.out.clone() };
    let group = cfg.rollout.group; // --group's, when given
    let main = match &policy {
        EvalPolicy::One(p) => p.clone(),
        EvalPolicy::Search | EvalPolicy::Combined => PolicyChoice::Model,
    };
    let episodes = match &args.reuse {
        Some(path) => {
            anyhow::ensure!(main == PolicyChoice::Model, "--reuse: the model's episodes, for --policy model or combined");
            reused(path, &tasks, &MadeBy::new(&cfg, &main, group))?
        }
        None => run_policy(&cfg, &tasks, &main, group, &teacher)?,
    };
    // The index search (combined): a ranking per task, no episode.
    let searched = match policy {
        EvalPolicy::Combined => {
            let store = rollout::repo::SnapshotStore::open(&cfg.env.repos_dir);
            Some(recipe::ranked::rank_search(&store, &tasks, &cfg.search)?.0)
        }
        EvalPolicy::One(_) | EvalPolicy::Search => None,
    };
    if let Some(out) = &out {
        write_episodes_made_by(out, &episodes, &MadeBy::new(&cfg, &main, group))?;
    }
    let table = format!("{}\n{}", Summary::HEADER, Summary::of(&episodes).row(label));
    let ranked = ranked_table(&cfg, &tasks, &main, &episodes, searched.as_deref(), args.ranked.as_deref())?;
    let table = format!("{table}\n\n{ranked}");
    if out_required {
        say!("{table}");
    } else {
        outln!("{table}");
    }
    Ok(())
}

/// `eval --policy search`: each task's ranking by the index search, the
/// table, the cost; the rows written to `ranked` when given.
fn search_table(cfg: &RunConfig, tasks: &[Task], ranked: Option<&std::path::Path>) -> Result<()> {
    use recipe::ranked;
    let store = rollout::repo::SnapshotStore::open(&cfg.env.repos_dir);
    let started = std::time::Instant::now();
    let (rows, cost) = ranked::rank_search(&store, tasks, &cfg.search)?;
    if let Some(path) = ranked {
        trainer::files::write_json_lines(path, &rows)?;
    }
    let wall = started.elapsed().as_secs_f64();
    outln!("{}", ranked::markdown(&[("search".into(), rows.as_slice())], &[]));
    outln!(
        "search: {} tasks, {} indexes built, {:.3} s per task in all ({:.3} s searching, index builds included; {:.3} s loading snapshots); {} tasks with nothing to search for",
        cost.tasks,
        cost.indexes_built,
        wall / cost.tasks.max(1) as f64,
        cost.search_seconds / cost.tasks.max(1) as f64,
        cost.snapshot_seconds / cost.tasks.max(1) as f64,
        cost.empty_queries
    );
    Ok(())
}

/// The model's episodes of `tasks` from `path` (an earlier `eval --out`):
/// every task must have some, each (task, sample) once, `want.group` of
/// them per task, and the file must have been made as `want` says (policy,
/// model, adapter, group, the config sections that change episodes). A
/// file written before these were recorded (no `made_by`) is checked for
/// its tasks and group only, with a warning.
fn reused(path: &std::path::Path, tasks: &[Task], want: &MadeBy) -> Result<Vec<rollout::episode::Episode>> {
    let all = trainer::episodes::jsonl::read_unique(path).with_context(|| format!("--reuse {}", path.display()))?;
    let made_by = trainer::episodes::jsonl::read_made_by(path).with_context(|| format!("--reuse {}", path.display()))?;
    let ids: std::collections::BTreeSet<&str> = tasks.iter().map(|t| t.instance_id.as_str()).collect();
    let have: std::collections::BTreeSet<&str> = all.iter().map(|e| e.task_id.as_str()).collect();
    let missing: Vec<&&str> = ids.iter().filter(|t| !have.contains(**t)).collect();
    anyhow::ensure!(
        missing.is_empty(),
        "--reuse {}: no episode of {} of the {} tasks (first: '{}'); run them, or give the file of this task set",
        path.display(),
        missing.len(),
        ids.len(),
        missing.first().map_or("", |m| **m)
    );
    let mut unrecorded = 0;
    for (e, made) in all.iter().zip(&made_by) {
        if !ids.contains(e.task_id.as_str()) {
            continue;
        }
        match made {
            Some(m) => {
                if let Some(why) = m.mismatch(want) {
                    anyhow::bail!("--reuse {}: {why} (task '{}'); rerun without --reuse, or give the file this run would make", path.display(), e.task_id);
                }
            }
            None => unrecorded += 1,
        }
    }
    let mut per_task: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
    for e in all.iter().filter(|e| ids.contains(e.task_id.as_str())) {
        *per_task.entry(e.task_id.as_str()).or_default() += 1;
    }
    if let Some((task, n)) = per_task.iter().find(|(_, n)| **n != want.group) {
        anyhow::bail!(
            "--reuse {}: {n} episodes of task '{task}', but this run's group is {} episodes per task; give --group {n}, or rerun without --reuse",
            path.display(),
            want.group
        );
    }
    if unrecorded > 0 {
        tracing::warn!(
            "--reuse {}: {unrecorded} episodes were written without a record of what made them (an older fusegrpo): their policy, model and settings cannot be checked, only their tasks and group",
            path.display()
        );
    }
    Ok(all.into_iter().filter(|e| ids.contains(e.task_id.as_str())).collect())
}

/// Each task's ranked, grounded answer per policy (with the index
/// search's rankings: model, search and combined, paired), as Markdown;
/// the rows written to `ranked` when given.
fn ranked_table(
    cfg: &RunConfig,
    tasks: &[Task],
    policy: &PolicyChoice,
    episodes: &[rollout::episode::Episode],
    searched: Option<&[rollout::ranking::TaskRanking]>,
    ranked: Option<&std::path::Path>,
) -> Result<String> {
    use recipe::ranked;
    let store = rollout::repo::SnapshotStore::open(&cfg.env.repos_dir);
    let mut columns = vec![(policy_name(policy), ranked::rank_episodes(&store, tasks, episodes, &policy_name(policy))?)];
    let mut pairs = Vec::new();
    if let Some(s) = searched {
        columns.push(("search".into(), s.to_vec()));
        columns.push(("combined".into(), ranked::rank_search_combined(&store, tasks, s, episodes)?));
        pairs = vec![(2, 1), (2, 0)];
    }
    if let Some(path) = ranked {
        let rows: Vec<_> = columns.iter().flat_map(|(_, r)| r.iter()).collect();
        trainer::files::write_json_lines(path, &rows)?;
    }
    let views: Vec<(String, &[rollout::ranking::TaskRanking])> = columns.iter().map(|(l, r)| (l.clone(), r.as_slice())).collect();
    Ok(ranked::markdown(&views, &pairs))
}

/// Refuses an `--out` or `--out-dir` that is one of the inputs (or each
/// other), and an `--out` that could not be written.
fn check_paths(args: &Args) -> Result<()> {
    let mut inputs = vec![("--config", args.config.as_path()), ("--tasks", args.tasks.as_path())];
    inputs.extend(args.model.as_deref().map(|m| ("--model", m)));
    inputs.extend(args.adapter.as_deref().map(|a| ("--adapter", a)));
    let mut outputs = Vec::new();
    outputs.extend(args.out.as_deref().map(|o| ("--out", o)));
    outputs.extend(args.scaling.out_dir.as_deref().map(|o| ("--out-dir", o)));
    outputs.extend(args.ranked.as_deref().map(|o| ("--ranked", o)));
    inputs.extend(args.reuse.as_deref().map(|r| ("--reuse", r)));
    trainer::files::check_outputs(&inputs, &outputs)?;
    // Found now, not after every episode has run.
    args.out.as_deref().map_or(Ok(()), |out| Ok(trainer::files::check_writable("--out", out)?))
}

fn policy_name(p: &PolicyChoice) -> String {
    String::from(p.clone())
}

pub fn run_rollout(args: Args) -> Result<()> {
    run_args(&args, "rollout", true)
}

pub fn run_eval(args: Args) -> Result<()> {
    run_args(&args, "eval", false)
}

