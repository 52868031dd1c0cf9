//! `fusegrpo synth`: K teacher episodes per task (the scripted teacher,
//! guided by the search index or not, varied per episode, or an OpenAI-compatible endpoint queried in parallel
//! with retries and a rate limit), each scored: F1_file, F1_func, e, R and
//! calls per turn. The output feeds `fusegrpo sft`.

use trainer::episodes::jsonl::write_episodes_atomic;
use trainer::episodes::{run_policy, TeacherOpts};
use trainer::run_config::PolicyChoice;
use anyhow::Result;
use rollout::episode::summary::Summary;
use rollout::episode::Episode;
use rollout::tasks::Task;
use std::path::{Path, PathBuf};
use trainer::run_config::RunConfig;

#[derive(clap::Args)]
pub struct Args {
    /// Run configuration (TOML; its env, episode limits, reward and sampling are used).
    #[arg(long)]
    pub config: PathBuf,
    #[command(flatten)]
    pub set: super::common::SetArgs,
    /// Tasks (JSONL).
    #[arg(long)]
    pub tasks: PathBuf,
    /// scripted | guided (the scripted teacher guided by the search index; it calls `search` when `[env.tools] search` is on) | http://host:port (OpenAI-compatible chat completions).
    #[arg(long, default_value = "scripted")]
    pub teacher: PolicyChoice,
    /// Episodes per task (K).
    #[arg(long, default_value_t = 4)]
    pub samples: usize,
    /// Trajectories (JSONL), one scored episode per line.
    #[arg(long)]
    pub out: PathBuf,
    /// Use only the first N tasks.
    #[arg(long)]
    pub max_tasks: Option<usize>,
    #[command(flatten)]
    pub http: super::common::HttpTeacherArgs,
    #[command(flatten)]
    pub tasks_check: super::common::TaskCheckArgs,
}

pub fn run(args: Args) -> Result<()> {
    trainer::files::check_outputs(&[("--config", &args.config), ("--tasks", &args.tasks)], &[("--out", &args.out)])?;
    trainer::files::check_writable("--out", &args.out)?;
    anyhow::ensure!(args.teacher != PolicyChoice::Model, "--teacher: expected scripted, guided or an http(s):// URL (use `fusegrpo rollout` for our own model)");
    anyhow::ensure!(args.samples >= 1, "--samples must be at least 1");
    trainer::run_config::check_flag("--samples", args.samples, trainer::run_config::MAX_GROUP)?;
    let cfg = args.set.load(&args.config)?;
    anyhow::ensure!(args.max_tasks != Some(0), "--max-tasks 0: at least 1 task");
    let mut tasks = trainer::episodes::checked_tasks(&args.tasks, &cfg, args.tasks_check.skip_bad_tasks)?;
    if let Some(n) = args.max_tasks {
        tasks.truncate(n);
    }
    let teacher = TeacherOpts { http: args.http.endpoint(), vary_scripted: Some(cfg.sampling.seed) };
    synth(&cfg, &tasks, &args.teacher, args.samples, &teacher, &args.out)?;
    Ok(())
}

/// Run the teacher and write its scored episodes to `out` atomically (a
/// partial file never looks like a finished one).
pub fn synth(cfg: &RunConfig, tasks: &[Task], teacher: &PolicyChoice, samples: usize, opts: &TeacherOpts, out: &Path) -> Result<Vec<Episode>> {
    anyhow::ensure!(!tasks.is_empty(), "synth: no tasks");
    let episodes = run_policy(cfg, tasks, teacher, samples, opts)?;
    write_episodes_atomic(out, &episodes)?;
    say!("{} trajectories ({} tasks x {samples}) -> {}", episodes.len(), tasks.len(), out.display());
    say!("{}\n{}", Summary::HEADER, Summary::of(&episodes).row("teacher"));
    Ok(episodes)
}
