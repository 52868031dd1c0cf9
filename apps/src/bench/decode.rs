//! `fusegrpo bench decode`: batched generation with the KV cache (prefill of
//! `--prompt-len` tokens, then `--new` tokens per row, log-probs kept), of a
//! checkpoint (`--model`) or of random weights of `--hidden ...`'s shape.
//! One warm-up run, then `--reps` timed runs; prints `{"seconds": median,
//! "tokens_per_second": .., ...}`, and with `--output` the generated ids
//! and log-probs (JSONL) for comparison with transformers
//! (`scripts/bench_generate.py` runs both on one checkpoint).

use std::io::Write;
use super::shape::Shape;
use super::step::merge;
use super::{median, rss_kib, set_threads, Clock};
use crate::args::RunOn;
use trainer::files::write_json_lines;
use anyhow::{ensure, Result};
use candle_core::DType;
use rand::SeedableRng;
use std::path::PathBuf;
use lm::generate::{generate, GenerateConfig};
use lm::sampling::SamplerConfig;
use lm::CausalLm;

#[derive(clap::Args)]
pub struct Args {
    /// A model folder; without it, random weights of the shape below.
    #[arg(long)]
    pub model: Option<String>,
    /// A LoRA adapter on `--model`, merged into its weights at load (as every inference command and, by default, rollouts run it).
    #[arg(long)]
    pub adapter: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub shape: Shape,
    #[arg(long, default_value_t = 16)]
    pub rows: usize,
    /// New tokens per row (no stop token: every row generates all of them).
    #[arg(long, default_value_t = 256)]
    pub new: usize,
    #[arg(long, default_value_t = 32)]
    pub prompt_len: usize,
    /// 0 = greedy.
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f64,
    /// Timed runs after one warm-up run.
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// JSONL of the last run's `{"ids": [...], "logprobs": [...]}` per row.
    #[arg(long)]
    pub output: Option<PathBuf>,
    /// Threads (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Device and dtype (scripts/gpu-check decodes on CUDA in bf16).
    #[command(flatten)]
    pub on: RunOn,
}

/// The prompts of `scripts/bench_generate.py`: row r, token j = (131 r + 17 j) % (vocab - 10) + 10.
pub fn prompts(rows: usize, len: usize, vocab: usize) -> Vec<Vec<u32>> {
    let span = vocab.saturating_sub(10).max(1);
    (0..rows).map(|r| (0..len).map(|j| ((r * 131 + j * 17) % span + 10).min(vocab - 1) as u32).collect()).collect()
}

pub fn run(a: Args, out: &mut dyn Write) -> Result<()> {
    ensure!(a.rows > 0 && a.new > 0 && a.prompt_len > 0 && a.reps > 0, "--rows, --new, --prompt-len and --reps must be positive");
    ensure!(a.temperature >= 0.0, "--temperature must be >= 0");
    set_threads(a.threads)?;
    let model = match &a.model {
        Some(m) => trainer::model_policy::load::load_model(m, a.adapter.as_deref(), &a.on.placement())?.0,
        None => {
            let cfg = a.shape.config(a.prompt_len + a.new)?;
            let w = lm::init::random_weights(&cfg, a.seed, DType::from(a.on.dtype), &a.on.open()?)?;
            CausalLm::new(&cfg, &w)?.with_attention(a.on.placement().attention)
        }
    };
    let vocab = model.config().vocab_size;
    let prompts = prompts(a.rows, a.prompt_len, vocab);
    let cfg = GenerateConfig {
        max_new_tokens: a.new,
        sampler: SamplerConfig { temperature: a.temperature, top_p: 1.0, top_k: 0 },
        stop_tokens: vec![],
    };
    let once = || -> Result<(f64, Vec<lm::generate::Generation>)> {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(a.seed);
        let clock = Clock::start(model.device())?;
        let gens = generate(&model, &prompts, &cfg, &mut rng)?;
        Ok((clock.seconds()?, gens))
    };
    let (first, _) = once()?;
    let mut times = Vec::with_capacity(a.reps);
    let mut last = Vec::new();
    for _ in 0..a.reps {
        let (secs, gens) = once()?;
        times.push(secs);
        last = gens;
    }
    let tokens: usize = last.iter().map(|g| g.ids.len()).sum();
    ensure!(tokens == a.rows * a.new, "generated {tokens} tokens, expected {}", a.rows * a.new);
    let logprob_sum: f64 = last.iter().flat_map(|g| &g.logprobs).map(|&x| x as f64).sum();
    if let Some(path) = &a.output {
        let rows: Vec<_> = last.iter().map(|g| serde_json::json!({"ids": g.ids, "logprobs": g.logprobs})).collect();
        write_json_lines(path, &rows)?;
    }
    let secs = median(&times);
    let c = model.config();
    let mut report = serde_json::json!({
        "seconds": secs,
        "tokens_per_second": tokens as f64 / secs,
        "all_seconds": times,
        "first_seconds": first,
        "new_tokens": tokens,
        "logprob_sum": logprob_sum,
        "device": a.on.device.name(), "dtype": format!("{:?}", DType::from(a.on.dtype)).to_lowercase(),
        "rows": a.rows, "new": a.new, "prompt_len": a.prompt_len, "temperature": a.temperature,
        "peak_rss_mib": rss_kib("VmHWM") / 1024,
        "threads": rayon::current_num_threads(),
    });
    merge(&mut report, serde_json::json!({
        "hidden": c.hidden_size, "layers": c.num_hidden_layers, "heads": c.num_attention_heads,
        "kv_heads": c.num_key_value_heads, "head_dim": c.head_dim, "vocab": c.vocab_size,
    }));
    writeln!(out, "{report}")?;
    Ok(())
}
