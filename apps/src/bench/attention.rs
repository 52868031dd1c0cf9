//! `fusegrpo bench attention`: causal grouped-query attention of one row,
//! forward (and with `--backward` the gradients of q, k, v for
//! `sum(out * g)`), through the fused op or the reference composition.
//! Prints `{"seconds": median, "checksum": ..}` plus the peak RSS growth
//! over the inputs; the counterpart is `scripts/bench_attention_torch.py`.
//! `--direct` calls the op's forward and backward without autograd, so the
//! peak over the inputs and outputs is the op's own working memory.
//! `--device cuda --dtype bf16` runs it on the GPU (the fused op where the
//! CUDA kernels are on, else the reference composition: `kernel` in the
//! JSON says which was asked for and `backend` which ran: `cudnn`, `kernel`
//! (the fused CUDA kernel), `cpu` or `reference`); the clock is read after
//! synchronizing the device, and the checksums are taken after the clock.

use std::io::Write;
use super::{median, reset_peak_rss, rss_kib, set_threads, Clock};
use anyhow::{ensure, Result};
use candle_core::{DType, Device, Tensor, Var};
use kernels::attention::{attention_ran, attention_reference, Ran, Visibility};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;

/// Which implementation runs.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Mode {
    /// `kernels::attention::attention`: blocks, online softmax, no `[t, t]` scores.
    Fused,
    /// The reference composition (scores, mask, softmax, values; autograd backward).
    Unfused,
}

#[derive(clap::Args)]
pub struct Args {
    /// Sequence length T (queries = keys).
    #[arg(long, default_value_t = 2048)]
    pub tokens: usize,
    #[arg(long, default_value_t = 32)]
    pub heads: usize,
    #[arg(long, default_value_t = 8)]
    pub kv_heads: usize,
    #[arg(long, default_value_t = 128)]
    pub head_dim: usize,
    #[arg(long, value_enum)]
    pub mode: Mode,
    /// Also the backward pass.
    #[arg(long)]
    pub backward: bool,
    /// Fused only, with --backward: call the op's forward and backward
    /// directly (no autograd graph, the upstream gradient given), so the peak
    /// growth over the inputs and outputs is the op's own working memory.
    #[arg(long)]
    pub direct: bool,
    /// Timed runs after the warm-up runs.
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Untimed warm-up runs.
    #[arg(long, default_value_t = 1)]
    pub warmup: usize,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Threads (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Device and dtype of q, k, v (on CUDA the RSS figures are the host's).
    #[command(flatten)]
    pub on: crate::args::RunOn,
}

pub fn run(a: Args, out: &mut dyn Write) -> Result<()> {
    ensure!(a.tokens > 0 && a.head_dim > 0 && a.reps > 0, "--tokens, --head-dim and --reps must be positive");
    ensure!(a.kv_heads > 0 && a.heads.is_multiple_of(a.kv_heads), "--heads must be a positive multiple of --kv-heads");
    ensure!(!a.direct || (a.backward && matches!(a.mode, Mode::Fused)), "--direct needs --mode fused --backward");
    set_threads(a.threads)?;
    let (device, dtype) = (a.on.open()?, DType::from(a.on.dtype));
    ensure!(!a.direct || (device.is_cpu() && dtype == DType::F32), "--direct runs on the CPU in f32 only (--device cpu --dtype f32)");
    let (t, d) = (a.tokens, a.head_dim);
    let mut rng = ChaCha8Rng::seed_from_u64(a.seed);
    let mut random = |shape: (usize, usize, usize, usize)| -> Result<Var> {
        let n = shape.0 * shape.1 * shape.2 * shape.3;
        let data: Vec<f32> = (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect();
        if device.is_cpu() && dtype == DType::F32 {
            return Ok(Var::from_vec(data, shape, &device)?);
        }
        Ok(Var::from_tensor(&Tensor::from_vec(data, shape, &Device::Cpu)?.to_dtype(dtype)?.to_device(&device)?)?)
    };
    let q = random((1, a.heads, t, d))?;
    let k = random((1, a.kv_heads, t, d))?;
    let v = random((1, a.kv_heads, t, d))?;
    let g = random((1, t, a.heads, d))?.as_tensor().reshape((1, t, a.heads * d))?;
    let pos: Vec<i64> = (0..t as i64).collect();
    let vis = Arc::new(Visibility::new(1, pos.clone(), pos)?);
    let scale = 1.0 / (d as f64).sqrt();
    // What `attention` runs here: the fused op, or (CUDA kernels off, or a
    // dtype it has no kernel for) the reference composition.
    let fused_runs = kernels::has_native_path(&device) && kernels::attention::fused_dtype(&device, dtype);
    let kernel = match a.mode {
        Mode::Fused if fused_runs => "fused",
        Mode::Fused | Mode::Unfused => "reference",
    };
    let rss_inputs = rss_kib("VmRSS");
    let peak_reset = reset_peak_rss();
    // q, k, v, the upstream gradient, and (direct) the output and 3 gradients.
    let input_bytes = 4 * (2 * a.heads + 2 * a.kv_heads) * t * d;
    let sum = |x: &Tensor| -> Result<f64> { Ok(x.to_dtype(DType::F32)?.sum_all()?.to_scalar::<f32>()? as f64) };
    let settings = a.on.placement().attention;
    // Which implementation ran (the last run's; every run takes the same path).
    let ran = std::cell::Cell::new(None::<Ran>);
    let once = || -> Result<(f64, f64)> {
        let clock = Clock::start(&device)?;
        let (qt, kt, vt) = (q.as_tensor(), k.as_tensor(), v.as_tensor());
        if a.direct {
            let (out, dq, dk, dv) = kernels::attention::forward_backward(qt, kt, vt, &vis, scale, &g)?;
            let secs = clock.seconds()?;
            ran.set(Some(Ran::Cpu));
            let mut checksum = 0.0;
            for x in [&out, &dq, &dk, &dv] {
                checksum += sum(x)?;
            }
            return Ok((secs, checksum));
        }
        let (out, which) = match a.mode {
            Mode::Fused => attention_ran(qt, kt, vt, &vis, scale, settings)?,
            Mode::Unfused => (attention_reference(qt, kt, vt, &vis, scale)?, Ran::Reference),
        };
        ran.set(Some(which));
        if !a.backward {
            let secs = clock.seconds()?;
            return Ok((secs, sum(&out)?));
        }
        let grads = (&out * &g)?.sum_all()?.backward()?;
        let secs = clock.seconds()?;
        let mut checksum = sum(&out)?;
        for x in [qt, kt, vt] {
            let gx = grads.get(x).ok_or_else(|| anyhow::anyhow!("no gradient"))?;
            checksum += sum(gx)?;
        }
        Ok((secs, checksum))
    };
    let mut first = None;
    for _ in 0..a.warmup {
        first.get_or_insert(once()?.0);
    }
    let mut checksum = f64::NAN;
    let mut times = Vec::with_capacity(a.reps);
    for _ in 0..a.reps {
        let (secs, c) = once()?;
        times.push(secs);
        checksum = c;
    }
    let peak = rss_kib("VmHWM");
    let report = serde_json::json!({
        "seconds": median(&times),
        "all_seconds": times,
        "first_seconds": first,
        "checksum": checksum,
        "mode": format!("{:?}", a.mode).to_lowercase(),
        "kernel": kernel,
        "backend": ran.get().map(Ran::name),
        "device": a.on.device.name(),
        "dtype": format!("{dtype:?}").to_lowercase(),
        "backward": a.backward,
        "tokens": t, "heads": a.heads, "kv_heads": a.kv_heads, "head_dim": d,
        "rss_inputs_mib": rss_inputs / 1024,
        "peak_growth_mib": peak_reset.then(|| peak.saturating_sub(rss_inputs) / 1024),
        "direct": a.direct,
        // Direct: the op's working memory, the peak less the output and the three gradients.
        "peak_over_inputs_outputs_mib": (peak_reset && a.direct).then(|| (peak.saturating_sub(rss_inputs) as usize).saturating_sub(input_bytes / 1024) / 1024),
        "threads": rayon::current_num_threads(),
    });
    writeln!(out, "{report}")?;
    ensure!(checksum.is_finite(), "non-finite result");
    Ok(())
}
