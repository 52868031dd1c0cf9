//! `fusegrpo bench logprob`: forward + backward of per-token log-probs over a
//! random lm_head, through the fused kernel or the unfused composition, so
//! time and peak memory (e.g. `/usr/bin/time -v`) can be compared from outside.
//! One warm-up run, then `--reps` timed runs; `seconds` is their median.
//! The clocks are read after synchronizing the device (CUDA returns before
//! the queued work is done), and the checksums are taken after them. On
//! CUDA `device_peak_mib` is the peak of the GPU memory pool over the timed
//! runs (the RSS figures are the host's).

use std::io::Write;
use anyhow::{ensure, Result};
use super::{device_peak_bytes, median, reset_device_peak, reset_peak_rss, rss_kib, set_threads, Clock};
use candle_core::{Device, Tensor, Var};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Which implementation runs.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Mode {
    /// `kernels::logprobs::weighted_logprob_sum` (weights 1): the sum's
    /// gradient computed in the forward sweep, three product passes,
    /// never the whole `[N, V]` (what training uses for a linear loss).
    Fused,
    /// `kernels::logprobs::token_logprobs`: chunked, the backward recomputes
    /// the logits (four passes; for losses that are not linear in the log-probs).
    Recompute,
    /// matmul, `/ T`, log-softmax, gather through stock Candle ops (autograd backward).
    Unfused,
}

#[derive(clap::Args)]
pub struct Args {
    /// Tokens N (rows of the hidden states).
    #[arg(long, default_value_t = 1024)]
    pub tokens: usize,
    /// Hidden size d.
    #[arg(long, default_value_t = 2560)]
    pub hidden: usize,
    /// Vocabulary size V (rows of the lm_head).
    #[arg(long, default_value_t = 151_936)]
    pub vocab: usize,
    #[arg(long, value_enum)]
    pub mode: Mode,
    /// Seed of the random hidden states, lm_head and targets.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Threads (rayon's pool and Candle's matmul); default: all cores.
    #[arg(long)]
    pub threads: Option<usize>,
    /// Softmax temperature.
    #[arg(long, default_value_t = 1.0)]
    pub temperature: f64,
    /// Timed runs after one warm-up run (`seconds` is their median).
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Device and dtype of the hidden states and lm_head (on CUDA the RSS
    /// figures are the host's, not the GPU's).
    #[command(flatten)]
    pub on: crate::args::RunOn,
}

pub fn run(args: Args, out: &mut dyn Write) -> Result<()> {
    ensure!(args.tokens > 0 && args.hidden > 0 && args.vocab > 0 && args.reps > 0, "tokens, hidden, vocab and reps must be positive");
    set_threads(args.threads)?;
    let (device, dtype) = (args.on.open()?, candle_core::DType::from(args.on.dtype));
    let mut rng = ChaCha8Rng::seed_from_u64(args.seed);
    let hidden = random(&mut rng, (args.tokens, args.hidden), 1.0, &device, dtype)?;
    let lm_head = random(&mut rng, (args.vocab, args.hidden), 0.05, &device, dtype)?;
    let targets: Vec<u32> = (0..args.tokens).map(|_| rng.random_range(0..args.vocab as u32)).collect();
    let targets = Tensor::from_vec(targets, args.tokens, &device)?;
    let ones = Tensor::ones(args.tokens, candle_core::DType::F32, &device)?;
    let rss_inputs = rss_kib("VmRSS");
    let peak_reset = reset_peak_rss();

    let (h, w, temp) = (hidden.as_tensor(), lm_head.as_tensor(), args.temperature);
    let once = || -> Result<Run> {
        let clock = Clock::start(&device)?;
        let sum = match args.mode {
            Mode::Fused => kernels::logprobs::weighted_logprob_sum(h, w, &targets, &ones, temp)?.sum,
            Mode::Recompute => kernels::logprobs::token_logprobs(h, w, &targets, temp)?.sum_all()?,
            Mode::Unfused => kernels::logprobs::token_logprobs_reference(h, w, &targets, temp)?.sum_all()?,
        };
        let sum = sum.to_dtype(candle_core::DType::F32)?;
        let forward_seconds = clock.seconds()?;
        let peak_forward = rss_kib("VmHWM");
        let grads = sum.backward()?;
        let seconds = clock.seconds()?;
        let logprob_sum = sum.to_scalar::<f32>()? as f64;
        let (grad_w, grad_h) = (grads.get(w).expect("lm_head gradient"), grads.get(h).expect("hidden gradient"));
        let abs_sum = |g: &Tensor| -> Result<f32> { Ok(g.to_dtype(candle_core::DType::F32)?.abs()?.sum_all()?.to_scalar::<f32>()?) };
        Ok(Run {
            seconds,
            forward_seconds,
            logprob_sum,
            peak_forward,
            grad_w_abs_sum: abs_sum(grad_w)?,
            grad_h_abs_sum: abs_sum(grad_h)?,
            gradient_elems: grad_w.elem_count() + grad_h.elem_count(),
        })
    };
    let first = once()?;
    reset_device_peak(&device)?;
    let runs = (0..args.reps).map(|_| once()).collect::<Result<Vec<_>>>()?;
    let device_peak = device_peak_bytes(&device)?;
    let times: Vec<f64> = runs.iter().map(|r| r.seconds).collect();
    let last = runs.last().unwrap_or(&first);
    let logprob_sum = last.logprob_sum;
    let seconds = median(&times);
    let forward_seconds = median(&runs.iter().map(|r| r.forward_seconds).collect::<Vec<_>>());
    let peak_forward = first.peak_forward;
    let peak = rss_kib("VmHWM");
    // Growth over the inputs' RSS while the op ran (the peak was reset after the inputs were made).
    let growth = |kib: u64| peak_reset.then(|| kib.saturating_sub(rss_inputs) / 1024);

    let report = serde_json::json!({
        "seconds": seconds,
        "all_seconds": times,
        "first_seconds": first.seconds,
        "logprob_sum": logprob_sum,
        "forward_seconds": forward_seconds,
        "mode": format!("{:?}", args.mode).to_lowercase(),
        "tokens": args.tokens,
        "hidden": args.hidden,
        "vocab": args.vocab,
        "device": format!("{:?}", args.on.device).to_lowercase(),
        "dtype": format!("{dtype:?}").to_lowercase(),
        "threads": rayon::current_num_threads(),
        "grad_lm_head_abs_sum": last.grad_w_abs_sum,
        "grad_hidden_abs_sum": last.grad_h_abs_sum,
        "rss_inputs_mib": rss_inputs / 1024,
        "forward_peak_growth_mib": growth(peak_forward),
        "peak_growth_mib": growth(peak),
        "gradient_outputs_mib": last.gradient_elems * 4 / (1 << 20),
        "device_peak_mib": device_peak.map(|b| b as f64 / (1u64 << 20) as f64),
    });
    writeln!(out, "{report}")?;
    ensure!(logprob_sum.is_finite(), "non-finite log-probs");
    Ok(())
}

/// One timed forward + backward.
struct Run {
    seconds: f64,
    forward_seconds: f64,
    logprob_sum: f64,
    /// VmHWM after the forward (KiB).
    peak_forward: u64,
    /// Checksums of the gradients (dropped before the next run, so that
    /// the peak is one run's).
    grad_w_abs_sum: f32,
    grad_h_abs_sum: f32,
    gradient_elems: usize,
}

/// A `shape` variable of uniform values in `[-scale, scale)` on `device`
/// (f32 on the CPU is built in place: no copy).
fn random(rng: &mut ChaCha8Rng, shape: (usize, usize), scale: f32, device: &Device, dtype: candle_core::DType) -> Result<Var> {
    let data: Vec<f32> = (0..shape.0 * shape.1).map(|_| rng.random_range(-scale..scale)).collect();
    if device.is_cpu() && dtype == candle_core::DType::F32 {
        return Ok(Var::from_vec(data, shape, device)?);
    }
    Ok(Var::from_tensor(&Tensor::from_vec(data, shape, &Device::Cpu)?.to_dtype(dtype)?.to_device(device)?)?)
}
