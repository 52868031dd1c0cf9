//! `fusegrpo train`: GRPO, run by [`trainer::run::grpo::grpo`].

use anyhow::{Context, Result};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Run configuration (TOML; see configs/).
    #[arg(long)]
    pub config: PathBuf,
    #[command(flatten)]
    pub set: super::common::SetArgs,
    /// Run folder (default: checkpoints/<run name>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub run: super::run::RunArgs,
    #[command(flatten)]
    pub tasks_check: super::common::TaskCheckArgs,
}

pub fn run(args: Args) -> Result<()> {
    let (cfg, run_dir, kept) = super::run::run_config(&args.config, &args.set, &args.run, |cfg| args.out.clone().unwrap_or_else(|| PathBuf::from("checkpoints").join(&cfg.name)))?;
    cfg.check_ranks(trainer::run_config::Job::Grpo, trainer::dist::current().world())?;
    let tasks_path = cfg.train.tasks.clone().context("train.tasks is not set in the config")?;
    let mut opts = args.run.options();
    opts.keep.push(kept.file()?);
    // Refusals first, before anything is read at length or written.
    trainer::run::check_folder(&run_dir, &opts)?;
    let tasks = trainer::episodes::checked_tasks(&tasks_path, &cfg, args.tasks_check.skip_bad_tasks)?;
    Ok(trainer::run::grpo::grpo(&cfg, &run_dir, &tasks, &opts)?.into_result()?)
}

