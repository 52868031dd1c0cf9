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
    let mut cfg = args.set.load(&args.config)?;
    args.run.apply(&mut cfg);
    let data = args.data.clone().or_else(|| cfg.sft.data.clone()).context("no trajectories: pass --data or set sft.data in the config")?;
    let run_dir = args.out.clone().unwrap_or_else(|| PathBuf::from("checkpoints").join(format!("{}-sft", cfg.name)));
    let tasks_path = cfg.pipeline.as_ref().and_then(|p| p.tasks.clone()).or_else(|| cfg.train.tasks.clone());
    let tasks = match tasks_path {
        Some(p) => rollout::tasks::load_tasks(&p)?,
        None => Vec::new(),
    };
    let opts = args.run.options();
    trainer::run::sft::sft(&cfg, &data, &run_dir, &tasks, &opts)?.into_result()
}


