//! `fusegrpo merge-adapter`: a base model and a LoRA adapter into one whole
//! Hugging Face model folder (`W + s * B A` in every adapted projection, as
//! PEFT's `merge_and_unload()`), with the base's tokenizer.

use anyhow::{Context, Result};
use candle_core::Device;
use std::path::PathBuf;
use trainer::device::DTypeKind;
use lm::weights::{load_weights, save_checkpoint, ShardPolicy};

#[derive(clap::Args)]
pub struct Args {
    /// The base model (a folder or a hub id).
    #[arg(long)]
    pub model: String,
    /// The adapter (PEFT's folder, or a LoRA run's checkpoint).
    #[arg(long)]
    pub adapter: PathBuf,
    /// The merged model's folder (must not exist or be empty).
    #[arg(long)]
    pub out: PathBuf,
    /// The merged weights' dtype (the merge itself is computed in f32).
    #[arg(long, value_parser = apps::args::choice::<DTypeKind>(&DTypeKind::NAMES), default_value = "f32")]
    pub dtype: DTypeKind,
}

/// Shards of at most 5 GiB, as the hub's models (one file below that).
const SHARD_BYTES: usize = 5 << 30;

pub fn run(args: Args) -> Result<()> {
    trainer::files::check_outputs(&[("--model", args.model.as_ref()), ("--adapter", &args.adapter)], &[("--out", &args.out)])?;
    if args.out.exists() && std::fs::read_dir(&args.out).with_context(|| format!("reading --out {}", args.out.display()))?.next().is_some() {
        anyhow::bail!("--out {} is not empty: nothing was written (choose a new folder)", args.out.display());
    }
    let spec = lm::lora::resolve(&args.model, Some(&args.adapter))?;
    let cfg = lm::ModelConfig::from_file(&spec.base.join("config.json"))?;
    let weights = load_weights(&spec.base, &cfg, candle_core::DType::F32, &Device::Cpu)?;
    let adapter = lm::lora::peft::load(&args.adapter, &cfg, Some(&spec.base), candle_core::DType::F32, &Device::Cpu)?;
    let merged = adapter.merge_into(&cfg, &weights)?;
    // Finite adapter weights and scale can still overflow f32 once multiplied.
    let what = format!("merging {} into {}", args.adapter.display(), spec.base.display());
    let mut sorted: Vec<_> = merged.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    lm::lora::check_finite(&format!("{what} (nothing was written)"), sorted.into_iter())?;
    let dtype: candle_core::DType = args.dtype.into();
    let merged: lm::weights::TensorMap = merged.into_iter().map(|(k, t)| Ok((k, t.to_dtype(dtype)?))).collect::<Result<_>>()?;
    // Into a temporary sibling, renamed once complete.
    // (removed on failure).
    let tmp = args.out.with_file_name(format!(".{}.partial", args.out.file_name().and_then(|n| n.to_str()).unwrap_or("merged")));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).with_context(|| format!("removing {}", tmp.display()))?;
    }
    let tmp = trainer::files::Partial::new(tmp);
    let bytes: usize = merged.values().map(|t: &candle_core::Tensor| t.elem_count() * t.dtype().size_in_bytes()).sum();
    let shards = if bytes <= SHARD_BYTES { ShardPolicy::Single } else { ShardPolicy::MaxBytes(SHARD_BYTES) };
    save_checkpoint(tmp.path(), &cfg, &merged, shards)?;
    trainer::files::copy_tokenizer(&spec.base, tmp.path(), false)?;
    if args.out.exists() {
        std::fs::remove_dir(&args.out).with_context(|| format!("replacing the empty {}", args.out.display()))?;
    }
    tmp.commit(&args.out)?;
    say!(
        "merged {} (r = {}, {} targets, scale {}) into {} -> {}",
        args.adapter.display(),
        adapter.cfg.r,
        adapter.cfg.targets.len(),
        adapter.cfg.scale(),
        spec.base.display(),
        args.out.display()
    );
    Ok(())
}
