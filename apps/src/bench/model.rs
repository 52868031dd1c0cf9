//! `fusegrpo bench model`: load time, resident memory and forward time of a
//! full-size architecture with random weights, written as the hub lays it out.

use std::io::Write;
use anyhow::{Context, Result};
use candle_core::{DType, Device, Tensor};
use std::path::PathBuf;
use super::{rss_kib, Clock};
use trainer::device::DTypeKind;
use lm::model::cache::Positions;
use lm::weights::{load_weights, save_checkpoint, ShardPolicy, INDEX_FILE};

/// Architectures with published shapes.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Arch {
    /// Qwen3-4B: hidden 2560, 36 layers, 32 x 128 query heads, 8 KV heads, tied.
    Qwen3_4b,
}

#[derive(clap::Args)]
pub struct Args {
    #[arg(long, value_enum, default_value_t = Arch::Qwen3_4b)]
    pub arch: Arch,
    /// Checkpoint folder; random weights are written there first if absent.
    #[arg(long)]
    pub dir: PathBuf,
    /// Tokens in the timed forward pass (one row).
    #[arg(long, default_value_t = 512)]
    pub tokens: usize,
    /// Dtype of the written checkpoint and of the run.
    #[arg(long, value_parser = crate::args::choice::<DTypeKind>(&DTypeKind::NAMES), default_value = "bf16")]
    pub dtype: DTypeKind,
    /// Safetensors shards to write (the hub uses 3 for Qwen3-4B).
    #[arg(long, default_value_t = 3)]
    pub shards: usize,
}

pub fn run(args: Args, out: &mut dyn Write) -> Result<()> {
    let cfg = match args.arch {
        Arch::Qwen3_4b => lm::init::qwen3_4b_config(),
    };
    let dtype: DType = args.dtype.into();
    if !args.dir.join(INDEX_FILE).exists() {
        let clock = Clock::start(&Device::Cpu)?;
        let w = lm::init::random_weights(&cfg, 0, dtype, &Device::Cpu)?;
        save_checkpoint(&args.dir, &cfg, &w, ShardPolicy::Count(args.shards))
            .with_context(|| format!("writing {}", args.dir.display()))?;
        trainer::progress::say(&format!("wrote random {:?} checkpoint to {} in {:.1}s", args.arch, args.dir.display(), clock.seconds()?));
    }
    let rss_before = rss_kib("VmRSS");
    let clock = Clock::start(&Device::Cpu)?;
    let cfg = lm::ModelConfig::from_file(&args.dir.join("config.json"))?;
    let w = load_weights(&args.dir, &cfg, dtype, &Device::Cpu)?;
    let model = lm::CausalLm::new(&cfg, &w)?;
    drop(w);
    let load_s = clock.seconds()?;
    let rss_loaded = rss_kib("VmRSS");
    let ids: Vec<u32> = (0..args.tokens as u32).map(|i| (i * 7919) % cfg.vocab_size as u32).collect();
    let tokens = Tensor::from_vec(ids, (1, args.tokens), &Device::Cpu)?;
    let clock = Clock::start(&Device::Cpu)?;
    let hidden = model.forward(&tokens, &Positions::sequential(1, args.tokens), None)?;
    let logits = model.logits(&hidden.narrow(1, args.tokens - 1, 1)?)?;
    let finite = logits.to_dtype(DType::F32)?.sum_all()?.to_scalar::<f32>()?.is_finite();
    let forward_s = clock.seconds()?;
    let report = serde_json::json!({
        "arch": format!("{:?}", args.arch),
        "params": lm::params::parameter_count(&cfg),
        "dtype": format!("{:?}", args.dtype),
        "shards": args.shards,
        "load_seconds": load_s,
        "rss_before_load_mib": rss_before / 1024,
        "rss_after_load_mib": rss_loaded / 1024,
        "peak_rss_mib": rss_kib("VmHWM") / 1024,
        "forward_tokens": args.tokens,
        "forward_seconds": forward_s,
        "forward_tokens_per_second": args.tokens as f64 / forward_s,
        "logits_finite": finite,
        "threads": rayon::current_num_threads(),
    });
    writeln!(out, "{report}")?;
    anyhow::ensure!(finite, "non-finite logits");
    Ok(())
}
