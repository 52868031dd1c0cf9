//! `fusegrpo bench ops`: forward + backward time of the fused RMSNorm and
//! rotary-embedding kernels against the stock-op compositions the model
//! uses, at Qwen3-4B's shapes (f32), so the model only switches where the
//! fused op is faster.

use std::io::Write;
use anyhow::Result;
use candle_core::{DType, Device, Tensor, Var};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use lm::model::{ops, rope::RopeTables};
use lm::config::default_inv_freq;
use super::Clock;

#[derive(clap::Args)]
pub struct Args {
    /// Tokens (one row).
    #[arg(long, default_value_t = 512)]
    pub tokens: usize,
    /// Hidden size (RMSNorm width).
    #[arg(long, default_value_t = 2560)]
    pub hidden: usize,
    /// Query heads (rotary embedding of `[1, heads, tokens, head_dim]`).
    #[arg(long, default_value_t = 32)]
    pub heads: usize,
    #[arg(long, default_value_t = 128)]
    pub head_dim: usize,
    /// Timed repetitions (the median is reported).
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
}

pub fn run(args: Args, out: &mut dyn Write) -> Result<()> {
    let mut rng = ChaCha8Rng::seed_from_u64(0);
    let x = Var::from_tensor(&random(&mut rng, &[1, args.tokens, args.hidden])?)?;
    let w = Var::from_tensor(&random(&mut rng, &[args.hidden])?)?;
    let q = Var::from_tensor(&random(&mut rng, &[1, args.heads, args.tokens, args.head_dim])?)?;
    let positions: Vec<i64> = (0..args.tokens as i64).collect();
    let tabs = RopeTables::new(&positions, 1, args.tokens, &default_inv_freq(args.head_dim, 1e6), DType::F32, &Device::Cpu)?;
    let eps = 1e-6;
    let norm_composed = median(args.reps, || backward(ops::rms_norm_composed(&x, &w, eps)?))?;
    let norm_fused = median(args.reps, || backward(kernels::norm::rms_norm(&x, &w, eps)?))?;
    let rope_composed = median(args.reps, || backward(tabs.apply_composed(&q)?))?;
    let rope_fused = median(args.reps, || backward(kernels::rope::rope(&q, &tabs.cos, &tabs.sin)?))?;
    let report = serde_json::json!({
        "tokens": args.tokens,
        "threads": rayon::current_num_threads(),
        "rms_norm_composed_ms": norm_composed * 1e3,
        "rms_norm_fused_ms": norm_fused * 1e3,
        "rope_composed_ms": rope_composed * 1e3,
        "rope_fused_ms": rope_fused * 1e3,
    });
    writeln!(out, "{report}")?;
    Ok(())
}

/// Backward of `sum(y)` (every element of `y` gets gradient 1).
fn backward(y: Tensor) -> Result<()> {
    let grads = y.sum_all()?.backward()?;
    anyhow::ensure!(grads.get_ids().next().is_some(), "no gradients");
    Ok(())
}

/// Median seconds of `reps` runs of `f` (after one warm-up run).
fn median(reps: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    f()?;
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps.max(1) {
        let clock = Clock::start(&Device::Cpu)?;
        f()?;
        times.push(clock.seconds()?);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

fn random(rng: &mut ChaCha8Rng, shape: &[usize]) -> Result<Tensor> {
    let data: Vec<f32> = (0..shape.iter().product()).map(|_| rng.random_range(-1.0f32..1.0)).collect();
    Ok(Tensor::from_vec(data, shape, &Device::Cpu)?)
}
