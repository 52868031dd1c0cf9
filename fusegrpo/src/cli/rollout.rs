//! `fusegrpo rollout` and `fusegrpo eval`: run episodes for a task set with
//! a policy (our model, the scripted teacher, or an HTTP teacher).

use super::common::HttpTeacherArgs;
use anyhow::{Context, Result};
use rollout::episode::summary::Summary;
use rollout::tasks::Task;
use std::path::PathBuf;
use trainer::rollouts::episodes::write_episodes_atomic;
use trainer::rollouts::{run_policy, TeacherOpts};
use trainer::run_config::{PolicyChoice, RunConfig};

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
    /// model | scripted | http://host:port (OpenAI-compatible teacher).
    #[arg(long, default_value = "model")]
    pub policy: PolicyChoice,
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

/// The config, tasks and teacher options of `args`.
fn inputs(args: &Args) -> Result<(RunConfig, Vec<Task>, TeacherOpts)> {
    let mut cfg = args.set.load(&args.config)?;
    if let Some(model) = &args.model {
        cfg.model.path = model.to_string_lossy().into_owned();
    }
    if let Some(dir) = &args.repos_dir {
        cfg.env.repos_dir = dir.clone();
    }
    if let Some(adapter) = &args.adapter {
        cfg.model.adapter = Some(adapter.clone());
    }
    if args.no_adapter {
        cfg.model.adapter = None;
    }
    if let Some(t) = args.temperature {
        anyhow::ensure!(t >= 0.0 && t.is_finite(), "--temperature {t}: must be >= 0 (0: greedy)");
        cfg.sampling.temperature = t;
    }
    anyhow::ensure!(args.group != Some(0), "--group 0: at least 1 episode per task");
    anyhow::ensure!(args.max_tasks != Some(0), "--max-tasks 0: at least 1 task");
    let mut tasks = trainer::rollouts::checked_tasks(&args.tasks, &cfg, args.tasks_check.skip_bad_tasks)?;
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
    let (cfg, tasks, teacher) = inputs(args)?;
    if let Some(sc) = args.scaling.config(cfg.sampling.seed)? {
        anyhow::ensure!(args.group.is_none(), "--group and --attempts both set the episodes per task: give one");
        anyhow::ensure!(
            !out_required || args.out.is_some() || args.scaling.out_dir.is_some(),
            "--out ATTEMPTS.jsonl or --out-dir DIR is required"
        );
        let judge = args.scaling.judge.clone().unwrap_or(super::scaling::JudgeSpec::Evidence);
        let run = trainer::rollouts::attempts::run(&cfg, &tasks, &args.policy, &teacher, &judge, &args.scaling.judge_model, &sc)?;
        if let Some(out) = &args.out {
            write_episodes_atomic(out, &run.attempts)?;
        }
        let judge = judge.name();
        if let Some(dir) = &args.scaling.out_dir {
            let policy = policy_name(&args.policy);
            trainer::rollouts::attempts::write_dir(dir, &run, &sc, &policy, &judge)?;
            apps::plot::scaling::draw_dir(dir, None)?;
            eprintln!("{label}: attempts, selections and scaling.json/png in {}", dir.display());
        }
        print!("{}", trainer::rollouts::attempts::report(&run, &judge));
        return Ok(());
    }
    let out = if out_required { Some(args.out.clone().context("--out EPISODES.jsonl is required")?) } else { args.out.clone() };
    let group = args.group.unwrap_or(cfg.rollout.group);
    let episodes = run_policy(&cfg, &tasks, &args.policy, group, &teacher)?;
    if let Some(out) = &out {
        write_episodes_atomic(out, &episodes)?;
    }
    let table = format!("{}\n{}", Summary::HEADER, Summary::of(&episodes).row(label));
    if out_required {
        eprintln!("{table}");
    } else {
        println!("{table}");
    }
    Ok(())
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
    trainer::files::check_outputs(&inputs, &outputs)?;
    // Found now, not after every episode has run.
    args.out.as_deref().map_or(Ok(()), |out| trainer::files::check_writable("--out", out))
}

fn policy_name(p: &PolicyChoice) -> String {
    match p {
        PolicyChoice::Model => "model".into(),
        PolicyChoice::Scripted => "scripted".into(),
        PolicyChoice::Http(url) => url.clone(),
    }
}

pub fn run_rollout(args: Args) -> Result<()> {
    run_args(&args, "rollout", true)
}

pub fn run_eval(args: Args) -> Result<()> {
    run_args(&args, "eval", false)
}

