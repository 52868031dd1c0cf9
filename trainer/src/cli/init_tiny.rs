//! `fusegrpo init-tiny`: a random tiny Qwen3 in Hugging Face format, with a
//! tokenizer (a copy of a real one, or a small BPE trained here).

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use trainer::weights::{save_checkpoint, ShardPolicy};
use trainer::Qwen3Config;

/// Size of the vocabulary rows when a real Qwen3 tokenizer is used (the
/// published checkpoints pad 151,669 tokens to 151,936 rows).
const QWEN3_VOCAB_ROWS: usize = 151_936;

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("tok").required(true).args(["tokenizer", "small_vocab"])))]
pub struct Args {
    /// Output folder (created).
    #[arg(long)]
    pub out: PathBuf,
    /// Copy tokenizer.json and tokenizer_config.json from this folder (the real
    /// Qwen3 tokenizer: scripts/fetch-qwen-tokenizer.sh prints where it is).
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
    /// Train a small byte-level BPE of this many ids (Qwen3's special tokens kept).
    #[arg(long)]
    pub small_vocab: Option<usize>,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    #[arg(long, default_value_t = 64)]
    pub hidden_size: usize,
    #[arg(long, default_value_t = 128)]
    pub intermediate_size: usize,
    #[arg(long, default_value_t = 2)]
    pub layers: usize,
    #[arg(long, default_value_t = 4)]
    pub heads: usize,
    #[arg(long, default_value_t = 2)]
    pub kv_heads: usize,
    #[arg(long, default_value_t = 32)]
    pub head_dim: usize,
    /// Separate lm_head weights instead of tying them to the embeddings.
    #[arg(long)]
    pub untied: bool,
    /// Write this many safetensors shards plus an index (1 = model.safetensors).
    #[arg(long, default_value_t = 1)]
    pub shards: usize,
}

pub fn run(args: Args) -> Result<()> {
    std::fs::create_dir_all(&args.out).with_context(|| format!("creating {}", args.out.display()))?;
    let vocab = match (&args.tokenizer, args.small_vocab) {
        (Some(dir), _) => {
            copy_tokenizer(dir, &args.out)?;
            QWEN3_VOCAB_ROWS
        }
        (None, Some(n)) => {
            rollout::chat::write_small_tokenizer(&args.out, n)
                .with_context(|| format!("training a {n}-id tokenizer into {}", args.out.display()))?;
            n
        }
        (None, None) => anyhow::bail!("give --tokenizer DIR or --small-vocab N"),
    };
    let cfg = Qwen3Config::new_tiny(
        vocab,
        args.hidden_size,
        args.intermediate_size,
        args.layers,
        args.heads,
        args.kv_heads,
        args.head_dim,
        !args.untied,
    );
    let cfg = Qwen3Config::from_raw(cfg.raw.clone(), Path::new("<init-tiny arguments>"))?;
    let weights = trainer::init::random_weights(&cfg, args.seed, candle_core::DType::F32, &candle_core::Device::Cpu)?;
    let policy = if args.shards > 1 { ShardPolicy::Count(args.shards) } else { ShardPolicy::Single };
    save_checkpoint(&args.out, &cfg, &weights, policy)?;
    tracing::info!(out = %args.out.display(), params = trainer::params::parameter_count(&cfg), vocab, "wrote tiny Qwen3");
    println!("{}", args.out.display());
    Ok(())
}

fn copy_tokenizer(from: &Path, to: &Path) -> Result<()> {
    for f in ["tokenizer.json", "tokenizer_config.json"] {
        let src = from.join(f);
        std::fs::copy(&src, to.join(f)).with_context(|| format!("copying {}", src.display()))?;
    }
    Ok(())
}
