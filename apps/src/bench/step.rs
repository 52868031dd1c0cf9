//! `fusegrpo bench step`: one training micro-batch of a random model, as SFT
//! and GRPO run it: forward, the mean NLL over every predicted token folded
//! into the fused token log-prob op, backward into every parameter's gradient
//! (`backward_micro_batch`). One warm-up step, then `--reps` timed steps;
//! prints `{"seconds": median, "loss": .., "peak_rss_mib": ..}`. The
//! counterpart is `scripts/bench_step_torch.py` (same shape, same token ids).

use super::shape::Shape;
use super::{median, minor_faults, rss_kib, set_threads};
use anyhow::{ensure, Result};
use candle_core::{DType, Tensor};
use std::time::Instant;
use trainer::backward::{backward_micro_batch, EntropyMetric, LinearLoss, LogprobPass};
use trainer::optim::Gradients;
use lm::CausalLm;

/// How the backward pass gets the layers' activations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Recompute {
    Off,
    PerLayer,
}

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub shape: Shape,
    /// Rows of the micro-batch.
    #[arg(long, default_value_t = 2)]
    pub rows: usize,
    /// Tokens per row.
    #[arg(long, default_value_t = 1024)]
    pub tokens: usize,
    #[arg(long, value_enum, default_value_t = Recompute::Off)]
    pub recompute: Recompute,
    /// Backpropagate the mean NLL through the log-prob op's own backward
    /// (which recomputes the logits: four vocabulary-sized products) instead
    /// of folding the loss into the op (three), for before/after figures.
    #[arg(long)]
    pub unfolded: bool,
    /// Timed steps after the warm-up step.
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Seed of the random weights.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Train a LoRA adapter of this rank (alpha = 2r, all seven projections,
    /// B drawn non-zero) over the frozen random base instead of every weight.
    #[arg(long)]
    pub lora_r: Option<usize>,
    /// Threads (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Leave out the AdamW step after the timed ones (and its figures), so
    /// that a peak sampled from outside (the GPU's, in scripts/gpu-check) is
    /// the micro-batch's, the one the memory planner predicts.
    #[arg(long)]
    pub no_optimizer: bool,
    /// Device and dtype of the random model (on CUDA the RSS figures are the
    /// host's; scripts/gpu-check samples the GPU's memory from outside).
    #[command(flatten)]
    pub on: crate::args::RunOn,
}

pub fn run(a: Args) -> Result<()> {
    ensure!(a.rows > 0 && a.tokens >= 2 && a.reps > 0, "--rows and --reps must be positive, --tokens at least 2");
    set_threads(a.threads)?;
    let cfg = a.shape.config(a.tokens)?;
    let dev = a.on.open()?;
    let dtype = DType::from(a.on.dtype);
    let w = lm::init::random_weights(&cfg, a.seed, dtype, &dev)?;
    let lora = match a.lora_r {
        None => None,
        Some(r) => {
            ensure!(r > 0, "--lora-r must be at least 1");
            let section = trainer::run_config::LoraSection { r, alpha: 2.0 * r as f64, dropout: 0.0, target_modules: lm::lora::Target::ALL.iter().map(|t| t.name().to_string()).collect(), use_rslora: false, init_seed: a.seed, merge_for_rollouts: false };
            Some(section.validate().map_err(|(k, m)| anyhow::anyhow!("--lora-r: {k}: {m}"))?)
        }
    };
    let (model, params) = match &lora {
        None => CausalLm::trainable(&cfg, &w)?,
        Some(l) => {
            // B non-zero (as after some training), so every adapter tensor's gradient is real work.
            let mut adapter = lm::lora::Adapter::init(l, &cfg, &dev)?;
            for (name, t) in adapter.tensors.iter_mut() {
                if name.contains("lora_B") {
                    *t = (Tensor::randn(0f32, 0.01, t.dims(), &dev)?).to_dtype(DType::F32)?;
                }
            }
            CausalLm::trainable_adapter(&cfg, &w, &adapter)?
        }
    };
    drop(w);
    trainer::malloc::release_free_memory();
    // The ids of scripts/bench_step_torch.py: row-major, (i * 7919 + 13) % vocab.
    let n = a.rows * a.tokens;
    let ids: Vec<u32> = (0..n).map(|i| ((i as u64 * 7919 + 13) % a.shape.vocab as u64) as u32).collect();
    let tokens = Tensor::from_vec(ids, (a.rows, a.tokens), &dev)?;
    let mask = Tensor::ones((a.rows, a.tokens - 1), DType::F32, &dev)?.pad_with_zeros(1, 1, 0)?;
    let predicted = (a.rows * (a.tokens - 1)) as f64;
    // Mean NLL is linear in the log-probs: folded into the log-prob op, as SFT does.
    let coefficients = (&mask * (-1.0 / predicted))?;
    let pass = LogprobPass {
        temperature: 1.0,
        entropy: EntropyMetric::Skip,
        recompute: match a.recompute {
            Recompute::Off => lm::model::recompute::Recompute::Off,
            Recompute::PerLayer => lm::model::recompute::Recompute::PerLayer,
        },
    };
    let positions = lm::model::cache::Positions::sequential(a.rows, a.tokens);
    let rss_model = rss_kib("VmRSS");
    let step = || -> Result<(f64, f64, usize)> {
        let mut grads = Gradients::default();
        let mut loss_value = f64::NAN;
        let t0 = Instant::now();
        backward_micro_batch(&model, &params, &tokens, &positions, pass, &mut grads, (!a.unfolded).then_some(LinearLoss { coefficients: &coefficients, mask: &mask }), |logp, _| {
            let loss = ((logp.to_dtype(DType::F32)? * &mask)?.sum_all()?.neg()? / predicted)?;
            loss_value = loss.to_scalar::<f32>()? as f64;
            Ok(loss)
        })?;
        Ok((t0.elapsed().as_secs_f64(), loss_value, grads.len()))
    };
    let (first_secs, _, got) = step()?;
    ensure!(got == params.len(), "{got} of {} parameters received a gradient", params.len());
    let peak_first = rss_kib("VmHWM");
    let mut times = Vec::with_capacity(a.reps);
    let mut loss = f64::NAN;
    let faults_before = minor_faults();
    for _ in 0..a.reps {
        let (secs, l, _) = step()?;
        times.push(secs);
        loss = l;
    }
    ensure!(loss.is_finite(), "non-finite loss {loss}");
    let faults_per_step = (minor_faults() - faults_before) / a.reps as u64;
    let peak_steps = rss_kib("VmHWM");
    // One AdamW step after the timed ones: the optimizer's state (moments,
    // and f32 masters of a non-f32 model) and the peak with it in memory.
    let optimizer_bytes: Option<usize> = if a.no_optimizer {
        None
    } else {
        let mut opt = trainer::optim::AdamW::new(&params, Default::default())?;
        let mut grads = Gradients::default();
        backward_micro_batch(&model, &params, &tokens, &positions, pass, &mut grads, Some(LinearLoss { coefficients: &coefficients, mask: &mask }), |logp, _| {
            Ok(((logp.to_dtype(DType::F32)? * &mask)?.sum_all()?.neg()? / predicted)?)
        })?;
        opt.step(&params, &grads, 1e-5)?;
        Some(opt.export_state()?.values().map(|t| t.elem_count() * t.dtype().size_in_bytes()).sum())
    };
    let trained: usize = params.values().map(|v| v.as_tensor().elem_count()).sum();
    let mut report = serde_json::json!({
        "seconds": median(&times),
        "all_seconds": times,
        "first_step_seconds": first_secs,
        "loss": loss,
        "peak_rss_mib": peak_steps / 1024,
        "peak_rss_mib_with_optimizer": optimizer_bytes.map(|_| rss_kib("VmHWM") / 1024),
        "optimizer_state_mib": optimizer_bytes.map(|b| b as f64 / (1u64 << 20) as f64),
        "trained_parameters": trained,
        "lora_r": a.lora_r,
        "peak_rss_mib_first_step": peak_first / 1024,
        "rss_model_mib": rss_model / 1024,
        "minor_faults_per_step": faults_per_step,
        "rows": a.rows,
        "folded": !a.unfolded,
        "tokens": a.tokens,
        "recompute": match a.recompute {
            Recompute::Off => "off",
            Recompute::PerLayer => "per-layer",
        },
        "reps": a.reps,
        "device": format!("{:?}", a.on.device).to_lowercase(),
        "dtype": format!("{dtype:?}").to_lowercase(),
        "tokens_per_second": (a.rows * a.tokens) as f64 / median(&times),
        "threads": rayon::current_num_threads(),
    });
    merge(&mut report, a.shape.json());
    // The memory planner's figure for this step, beside the measured peak.
    let target = trainer::plan::run::Target { model: &cfg, dtype, device: a.on.device, threads: rayon::current_num_threads(), lora: None, fused_attention: a.on.device == trainer::device::DeviceKind::Cpu || kernels::cuda_kernels_on() };
    let recompute = match a.recompute {
        Recompute::Off => lm::model::recompute::Recompute::Off,
        Recompute::PerLayer => lm::model::recompute::Recompute::PerLayer,
    };
    let plan = trainer::plan::run::for_bench_step(&target, a.rows, a.tokens, recompute);
    let predicted = plan.peak_bytes() as f64 / (1u64 << 20) as f64;
    // On the CPU the measured peak is the RSS; on CUDA it is the GPU's,
    // which only a sampler outside sees (scripts/gpu-check, with
    // --no-optimizer so that the peak is the micro-batch's).
    let measured = (a.on.device == trainer::device::DeviceKind::Cpu).then(|| (peak_steps / 1024) as f64);
    merge(&mut report, serde_json::json!({"planned_peak_mib": predicted.round(), "planned_vs_measured": measured.map(|m| predicted / m)}));
    println!("{report}");
    Ok(())
}

/// Adds `extra`'s fields to the object `report`.
pub fn merge(report: &mut serde_json::Value, extra: serde_json::Value) {
    if let (Some(r), serde_json::Value::Object(e)) = (report.as_object_mut(), extra) {
        r.extend(e);
    }
}
