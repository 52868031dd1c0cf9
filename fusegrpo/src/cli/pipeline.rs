//! `fusegrpo pipeline`: the FuseSearch recipe in one command
//! ([`recipe::pipeline::stages`]).

use anyhow::Result;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Run configuration (TOML with [pipeline], [sft], [train], [grpo], [optim]).
    #[arg(long)]
    pub config: PathBuf,
    #[command(flatten)]
    pub set: super::common::SetArgs,
    /// Run folder (default: checkpoints/<run name>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Override the sampling and SFT seeds (runs over several seeds).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Also write each training stage's metrics as TensorBoard event files
    /// into DIR/<stage> (sft, grpo, pilot/lr-<lr>); view with `tensorboard --logdir DIR`.
    #[arg(long, value_name = "DIR")]
    pub tensorboard: Option<PathBuf>,
    #[command(flatten)]
    pub tasks_check: super::common::TaskCheckArgs,
}

pub fn run(args: Args) -> Result<()> {
    let mut flags = vec![];
    if let Some(seed) = args.seed {
        for key in ["sampling.seed", "sft.seed"] {
            flags.push(trainer::run_config::Override::flag(format!("--seed {seed}"), key, seed)?);
        }
    }
    let cfg = args.set.load_with(&args.config, flags)?;
    let run_dir = args.out.clone().unwrap_or_else(|| PathBuf::from("checkpoints").join(&cfg.name));
    let report = recipe::pipeline::stages::run(&cfg, &args.config, &run_dir, args.tasks_check.skip_bad_tasks, args.tensorboard.as_deref())?;
    if trainer::dist::current().rank() == 0 {
        outln!("{}", recipe::pipeline::stages::table(&report));
        outln!("report: {}", run_dir.join("report.json").display());
    }
    Ok(())
}
