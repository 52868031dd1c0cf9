//! `fusegrpo sft`: supervised fine-tuning on teacher trajectories
//! (`fusegrpo synth` output), run by [`trainer::run::sft::sft`].

use anyhow::{Context, Result};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Run configuration (TOML; `[sft]` and `[sft.filter]`).
    #[arg(long)]
    pub config: PathBuf,
    #[command(flatten)]
    pub set: super::common::SetArgs,
    /// Teacher trajectories (JSONL from `fusegrpo synth`; default: sft.data).
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Run folder (default: checkpoints/<run name>-sft).
    #[arg(long)]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub run: super::run::RunArgs,
}

pub fn run(args: Args) -> Result<()> {
    let (cfg, run_dir, kept) = super::run::run_config(&args.config, &args.set, &args.run, |cfg| args.out.clone().unwrap_or_else(|| PathBuf::from("checkpoints").join(format!("{}-sft", cfg.name))))?;
    cfg.check_ranks(trainer::run_config::Job::Sft, trainer::dist::current().world())?;
    let data = args.data.clone().or_else(|| cfg.sft.data.clone()).context("no trajectories: pass --data or set sft.data in the config")?;
    // The task file serves the held-out evaluation alone (sft.eval_tasks).
    let key = if cfg.pipeline.as_ref().is_some_and(|p| p.tasks.is_some()) { "pipeline.tasks" } else { "train.tasks" };
    let tasks_path = cfg.pipeline.as_ref().and_then(|p| p.tasks.clone()).or_else(|| cfg.train.tasks.clone()).filter(|_| cfg.sft.eval_tasks > 0);
    let tasks = match tasks_path {
        Some(p) => rollout::tasks::load_tasks(&p).with_context(|| {
            format!(
                "config key `{key}` = {}: the task file sft's held-out evaluation rolls out (up to sft.eval_tasks = {} of its tasks); point {key} at your task file, or set sft.eval_tasks = 0 to train without that evaluation",
                p.display(),
                cfg.sft.eval_tasks
            )
        })?,
        None => Vec::new(),
    };
    let mut opts = args.run.options();
    opts.keep.push(kept.file()?);
    trainer::run::check_folder(&run_dir, &opts)?;
    Ok(trainer::run::sft::sft(&cfg, &data, &run_dir, &tasks, &opts)?.into_result()?)
}


