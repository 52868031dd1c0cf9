//! `fusegrpo plan`: the memory planner's table for a run config, and
//! whether it fits a device's memory.

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use trainer::plan::{bytes, phases::for_run};
use trainer::run_config::RunConfig;
use lm::ModelConfig;

#[derive(clap::Args)]
pub struct Args {
    /// Run configuration (TOML; see configs/).
    #[arg(long)]
    pub config: PathBuf,
    #[command(flatten)]
    pub set: super::common::SetArgs,
    /// Device memory to check against, with its unit: 141GB (10^9 bytes each) or 80GiB (2^30) (default: no check). The exit status is 1 when the run does not fit.
    #[arg(long, value_parser = bytes::parse)]
    pub gpu_memory: Option<u64>,
    /// The model's config.json, when the config's model is a hub id not downloaded yet.
    #[arg(long)]
    pub model_config: Option<PathBuf>,
    /// Data-parallel ranks, one GPU each (`mpirun -n N`): the plan is per
    /// rank, each rolling out its share of a step's tasks and, under
    /// `[optim] zero_stage = 1`, keeping its shard of the optimizer state.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pub gpus: u64,
    /// Plan with the CUDA kernels on or off instead of the config's
    /// [model] cuda_kernels (auto: as the config says).
    #[arg(long, value_parser = apps::args::choice::<trainer::gpu_check::CudaKernels>(&trainer::gpu_check::CudaKernels::NAMES))]
    pub cuda_kernels: Option<trainer::gpu_check::CudaKernels>,
    /// CPU threads the run will use (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// One JSON line instead of the table.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: Args) -> Result<()> {
    let kernels = a.cuda_kernels.map(|k| trainer::run_config::Override::flag(format!("--cuda-kernels {}", serde_json::to_value(k).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()), "model.cuda_kernels", k)).transpose()?;
    let cfg = a.set.load_with(&a.config, kernels.into_iter().collect())?;
    let model = model_config(&cfg, a.model_config.as_deref())?;
    let threads = a.threads.unwrap_or_else(rayon::current_num_threads);
    let plan = for_run(&cfg, &model, threads, a.gpus as usize)?;
    if a.json {
        outln!("{}", plan.json(a.gpu_memory));
    } else {
        out!("{}", plan.table(a.gpu_memory));
    }
    // Not fitting is a failure a script can see, with the settings to lower.
    if let Some(limit) = a.gpu_memory {
        plan.check(limit, "--gpu-memory")?;
    }
    Ok(())
}

/// The model's shape: `--model-config`, else the config's model folder (or
/// its hub cache), else the published shape of a known hub id.
pub fn model_config(cfg: &RunConfig, explicit: Option<&Path>) -> Result<ModelConfig> {
    if let Some(path) = explicit {
        return Ok(ModelConfig::from_file(path)?);
    }
    let local = Path::new(&cfg.model.path).join("config.json");
    if local.is_file() {
        return Ok(ModelConfig::from_file(&local)?);
    }
    if let Some(known) = trainer::plan::known::published(&cfg.model.path) {
        return Ok(known);
    }
    let dir = lm::hub::resolve_model_dir(&cfg.model.path)
        .with_context(|| format!("[model] path = {:?}: no config.json to plan from; pass --model-config", cfg.model.path))?;
    Ok(ModelConfig::from_file(&dir.join("config.json"))?)
}
