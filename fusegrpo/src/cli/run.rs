//! The flags `train` and `sft` share: how a run starts and stops.

use std::path::PathBuf;
use trainer::run::{MemoryCheck, RunOptions};
use trainer::run_config::RunConfig;

/// How `train` and `sft` start and stop (their shared flags).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct RunArgs {
    /// `auto` (newest complete checkpoint in the run folder, if any) or a checkpoint folder.
    #[arg(long)]
    pub resume: Option<String>,
    /// Stop after this many steps in total (default: the config's, train.steps or all of SFT's epochs).
    #[arg(long)]
    pub max_steps: Option<u64>,
    /// Save every N steps (default: the config's save_every).
    #[arg(long)]
    pub save_every: Option<u64>,
    /// Resume even if the run config changed since the checkpoint.
    #[arg(long)]
    pub allow_config_change: bool,
    /// Delete the run that --out holds (its checkpoints after the starting
    /// step, its metrics) and start over; without it such a folder is refused.
    #[arg(long)]
    pub overwrite: bool,
    #[command(flatten)]
    pub memory: MemoryArgs,
    /// Start from this model instead of the config's [model] path: a folder
    /// (e.g. a full-weight SFT run's checkpoint) or a hub id.
    #[arg(long)]
    pub model: Option<String>,
    /// Start from this LoRA adapter instead of the config's [model] adapter
    /// (e.g. a LoRA SFT run's checkpoint).
    #[arg(long)]
    pub adapter: Option<PathBuf>,
    /// Also write every scalar of metrics.jsonl, per step, as TensorBoard
    /// event files into DIR (`[log] tensorboard = true` writes them into
    /// <run>/tensorboard); view with `tensorboard --logdir DIR`.
    #[arg(long, value_name = "DIR")]
    pub tensorboard: Option<PathBuf>,
}

impl RunArgs {
    /// The config with `--model` and `--adapter` in place of its own.
    pub fn apply(&self, cfg: &mut RunConfig) {
        if let Some(m) = &self.model {
            cfg.model.path = m.clone();
        }
        if let Some(a) = &self.adapter {
            cfg.model.adapter = Some(a.clone());
        }
    }

    pub fn options(&self) -> RunOptions {
        RunOptions {
            resume: self.resume.clone(),
            max_steps: self.max_steps,
            save_every: self.save_every,
            allow_config_change: self.allow_config_change,
            overwrite: self.overwrite,
            memory: self.memory.check(),
            tensorboard: self.tensorboard.clone(),
        }
    }
}

/// `--gpu-memory` and `--no-memory-check` of `train` and `sft`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct MemoryArgs {
    /// Check the memory plan against this much device memory (e.g. 141GB)
    /// instead of the device's free memory.
    #[arg(long, value_parser = trainer::plan::bytes::parse)]
    pub gpu_memory: Option<u64>,
    /// Skip the memory plan's check at start.
    #[arg(long)]
    pub no_memory_check: bool,
}

impl MemoryArgs {
    pub fn check(&self) -> MemoryCheck {
        MemoryCheck::from_args(self.gpu_memory, self.no_memory_check)
    }
}

