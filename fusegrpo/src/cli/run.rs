//! The flags `train` and `sft` share: how a run starts and stops.

use std::path::PathBuf;
use trainer::run::{MemoryCheck, RunOptions};
use trainer::run_config::{Override, RunConfig};

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
    /// `--model` and `--adapter` as the config keys they set.
    pub fn flags(&self) -> anyhow::Result<Vec<Override>> {
        let mut flags = vec![];
        if let Some(m) = &self.model {
            flags.push(Override::flag(format!("--model {m}"), "model.path", m)?);
        }
        if let Some(a) = &self.adapter {
            flags.push(Override::flag(format!("--adapter {}", a.display()), "model.adapter", a.to_string_lossy())?);
        }
        Ok(flags)
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
            keep: Vec::new(),
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


/// The file of a run folder that keeps the `--set` keys, `--model` and
/// `--adapter` the run was started (or last resumed) with, so that a resume
/// needs none of them again.
pub const KEPT_ARGS_FILE: &str = "run_args.json";

/// What a run keeps of its command line in [`KEPT_ARGS_FILE`].
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct KeptArgs {
    /// Each `--set` as given, in order.
    pub set: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adapter: Option<PathBuf>,
}

/// A run's config, its folder and what to keep of its command line: the
/// config file with `--set`, `--model` and `--adapter` applied, and on a
/// resume (`--resume`) those the run folder kept first, this command's
/// after them (so a resume with none continues the run as it was started,
/// and a value that differs from the run's is refused, as any config
/// change is, unless --allow-config-change). `run_dir` names the folder
/// from the config (`--out`, else a default of the run's name).
pub fn run_config(config: &std::path::Path, set: &super::common::SetArgs, run: &RunArgs, run_dir: impl Fn(&RunConfig) -> PathBuf) -> anyhow::Result<(RunConfig, PathBuf, KeptArgs)> {
    let cfg = set.load_with(config, run.flags()?)?;
    let dir = run_dir(&cfg);
    let given = KeptArgs { set: set.set.iter().map(|o| o.text.clone()).collect(), model: run.model.clone(), adapter: run.adapter.clone() };
    let path = dir.join(KEPT_ARGS_FILE);
    if run.resume.is_none() || !path.is_file() {
        return Ok((cfg, dir, given));
    }
    let text = std::fs::read_to_string(&path).map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?;
    let kept: KeptArgs = serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e} (the --set keys a run keeps; delete it to resume with this command's alone)", path.display()))?;
    let mut all = kept.set.clone();
    all.extend(given.set.iter().filter(|s| !kept.set.contains(s)).cloned());
    let parsed = all
        .iter()
        .map(|s| s.parse::<Override>().map_err(|e| anyhow::anyhow!("{}: --set {s}: {e}", path.display())))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let merged = KeptArgs { set: all, model: run.model.clone().or(kept.model), adapter: run.adapter.clone().or(kept.adapter) };
    let flags = RunArgs { model: merged.model.clone(), adapter: merged.adapter.clone(), ..RunArgs::default() }.flags()?;
    let cfg = super::common::SetArgs { set: parsed }.load_with(config, flags)?;
    let mut reused: Vec<String> = kept.set.iter().filter(|s| !given.set.contains(s)).map(|s| format!("--set {s}")).collect();
    if run.model.is_none() {
        reused.extend(merged.model.as_ref().map(|m| format!("--model {m}")));
    }
    if run.adapter.is_none() {
        reused.extend(merged.adapter.as_ref().map(|a| format!("--adapter {}", a.display())));
    }
    if !reused.is_empty() {
        say!("resuming with the run's {} (kept in {})", reused.join(" "), path.display());
    }
    Ok((cfg, dir, merged))
}

impl KeptArgs {
    /// The file a run keeps them in (`RunOptions::keep`), written once the
    /// run has passed its checks.
    pub fn file(&self) -> anyhow::Result<(String, String)> {
        Ok((KEPT_ARGS_FILE.to_string(), serde_json::to_string_pretty(self)? + "\n"))
    }
}
