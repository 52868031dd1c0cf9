//! `fusegrpo dist-check`: data parallelism's own check, run under the
//! launcher a real run uses (`mpirun -n N fusegrpo dist-check ...`): each
//! loss aggregation's and SFT's gradient and AdamW update with the ranks
//! against one process's on the same episodes (rank 0 computes both), within
//! 1e-6 relative. Episodes from `--episodes` (`fusegrpo rollout --out`) or
//! random ones over the model's vocabulary. On GPUs in a build with NCCL, it
//! first checks one NCCL all-reduce (which also runs on one GPU:
//! `mpirun -n 1`); the gradient sums then go through NCCL.

use anyhow::{Context, Result};
use std::path::PathBuf;
use trainer::dist;
use apps::dist_check as check;
use lm::weights::load_weights;
use lm::ModelConfig;

#[derive(clap::Args)]
pub struct Args {
    /// Run configuration: its model, [grpo], [train] micro-batching, [optim] and group size.
    #[arg(long)]
    pub config: PathBuf,
    #[command(flatten)]
    pub set: super::common::SetArgs,
    /// Episodes (JSONL of `fusegrpo rollout --out`), groups of `rollout.group` in order.
    #[arg(long)]
    pub episodes: Option<PathBuf>,
    /// Episodes per group (default: the config's rollout.group).
    #[arg(long)]
    pub group: Option<usize>,
    /// Without --episodes: this many random groups.
    #[arg(long, default_value_t = 6)]
    pub groups: usize,
    /// Seed of the random episodes.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Write rank 0's cases as JSON here.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

pub fn run(args: Args) -> Result<()> {
    let mut inputs = vec![("--config", args.config.as_path())];
    inputs.extend(args.episodes.as_deref().map(|e| ("--episodes", e)));
    trainer::files::check_outputs(&inputs, &args.out.iter().map(|o| ("--out", o.as_path())).collect::<Vec<_>>())?;
    let group_flag = args.group.map(|g| trainer::run_config::Override::flag(format!("--group {g}"), "rollout.group", g)).transpose()?;
    let cfg = args.set.load_with(&args.config, group_flag.into_iter().collect())?;
    let dir = lm::hub::resolve_model_dir(&cfg.model.path)?;
    let model_cfg = ModelConfig::from_file(&dir.join("config.json"))?;
    let device = trainer::device::open_with_kernels(cfg.model.device, cfg.model.cuda_kernels)?;
    let weights = load_weights(&dir, &model_cfg, cfg.model.dtype.into(), &device)?;
    let episodes = match &args.episodes {
        Some(path) => trainer::episodes::jsonl::read(path)?,
        None => check::synthetic_episodes(model_cfg.vocab_size, args.groups, cfg.rollout.group, args.seed),
    };
    let group = cfg.rollout.group; // >= 1: checked at config load
    anyhow::ensure!(
        !episodes.is_empty() && episodes.len() % group == 0,
        "{} episodes do not make whole groups of rollout.group = {group}",
        episodes.len()
    );
    let d = dist::current();
    // GPUs in a build with NCCL: the communicator and one all-reduce first.
    #[cfg(feature = "nccl")]
    if let candle_core::Device::Cuda(gpu) = &device {
        let line = dist::nccl::self_check(&*d, gpu, 1_000_003)?;
        if d.rank() == 0 {
            outln!("{line}");
        }
    }
    let groups = episodes.len() / group;
    say!("rank {} of {}: groups {:?} of {groups}", d.rank(), d.world(), dist::share(&*d, groups));
    let cases = check::run(&d, &cfg, &model_cfg, &weights, &episodes)?;
    if d.rank() != 0 {
        return Ok(());
    }
    out!("{}", check::table(&cases, &*d));
    if let Some(out) = &args.out {
        std::fs::write(out, serde_json::to_string_pretty(&cases)?).with_context(|| format!("writing {}", out.display()))?;
    }
    let failed: Vec<&str> = cases.iter().filter(|c| !c.passed()).map(|c| c.name.as_str()).collect();
    anyhow::ensure!(failed.is_empty(), "dist-check: {} beyond {:.0e}: {}", failed.len(), check::TOLERANCE, failed.join(", "));
    Ok(())
}
