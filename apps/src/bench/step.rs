//! `fusegrpo bench step`: one training micro-batch of a random model, as SFT
//! and GRPO run it: forward, the mean NLL over every predicted token folded
//! into the fused token log-prob op, backward into every parameter's gradient
//! (`backward_micro_batch`). One warm-up step, then `--reps` timed steps;
//! prints `{"seconds": median, "loss": .., "peak_rss_mib": ..}`. The
//! counterpart is `scripts/bench_step_torch.py` (same shape, same token ids).
//! Clocks are read after synchronizing the device. With `--phases N`, N more
//! steps (each with an AdamW step) are profiled after the timed ones
//! (`lm::profile`: the device synchronized around every op, so they are
//! slower than the timed steps and kept apart from them) and `phases` in
//! the JSON gives the seconds of attention, the projections, the log-prob
//! head, norms and rotary, the optimizer and the rest, of the profiled step
//! whose time was the median.

use std::io::Write;
use super::shape::Shape;
use super::{device_peak_bytes, median, minor_faults, reset_device_peak, rss_kib, set_threads, Clock};
use anyhow::{ensure, Result};
use candle_core::{DType, Tensor};
use lm::profile::{self, Phase, Profile};
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
    /// Profile this many more steps (each with an AdamW step) after the
    /// timed ones and report the median one's seconds per phase: attention,
    /// matmul, logprob_head, norm_rope_elementwise, optimizer, other. Off
    /// (0) by default: profiling synchronizes the device around every op.
    #[arg(long, default_value_t = 0)]
    pub phases: usize,
    /// Device and dtype of the random model (on CUDA the RSS figures are the
    /// host's; scripts/gpu-check samples the GPU's memory from outside).
    #[command(flatten)]
    pub on: crate::args::RunOn,
}

pub fn run(a: Args, out: &mut dyn Write) -> Result<()> {
    ensure!(a.rows > 0 && a.tokens >= 2 && a.reps > 0, "--rows and --reps must be positive, --tokens at least 2");
    set_threads(a.threads)?;
    let mut cfg = a.shape.config(a.tokens)?;
    cfg.attention = a.on.placement().attention;
    let dev = a.on.open()?;
    let dtype = DType::from(a.on.dtype);
    let w = lm::init::random_weights(&cfg, a.seed, dtype, &dev)?;
    let lora = match a.lora_r {
        None => None,
        Some(r) => {
            ensure!(r > 0, "--lora-r must be at least 1");
            let section = trainer::run_config::LoraSection { r, alpha: 2.0 * r as f64, dropout: 0.0, target_modules: lm::lora::Target::ALL.to_vec(), use_rslora: false, init_seed: a.seed, merge_for_rollouts: false };
            section.validate().map_err(|(k, m)| anyhow::anyhow!("--lora-r: {k}: {m}"))?;
            Some(section.config())
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
        let mut loss_tensor = None;
        let clock = Clock::start(&dev)?;
        backward_micro_batch(&model, &params, &tokens, &positions, pass, &mut grads, (!a.unfolded).then_some(LinearLoss { coefficients: &coefficients, mask: &mask }), |logp, _| {
            let loss = ((logp.to_dtype(DType::F32)? * &mask)?.sum_all()?.neg()? / predicted)?;
            loss_tensor = Some(loss.detach());
            Ok(loss)
        })?;
        let secs = clock.seconds()?;
        if let Some(l) = loss_tensor {
            loss_value = l.to_scalar::<f32>()? as f64;
        }
        Ok((secs, loss_value, grads.len()))
    };
    let (first_secs, _, got) = step()?;
    ensure!(got == params.len(), "{got} of {} parameters received a gradient", params.len());
    let peak_first = rss_kib("VmHWM");
    let mut times = Vec::with_capacity(a.reps);
    let mut loss = f64::NAN;
    let faults_before = minor_faults();
    reset_device_peak(&dev)?;
    for _ in 0..a.reps {
        let (secs, l, _) = step()?;
        times.push(secs);
        loss = l;
    }
    ensure!(loss.is_finite(), "non-finite loss {loss}");
    let faults_per_step = (minor_faults() - faults_before) / a.reps as u64;
    let peak_steps = rss_kib("VmHWM");
    let device_peak = device_peak_bytes(&dev)?;
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
        "device_peak_mib": device_peak.map(|b| b as f64 / (1u64 << 20) as f64),
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
    let target = trainer::plan::phases::Target { model: &cfg, dtype, device: a.on.device, threads: rayon::current_num_threads(), lora: None, fused_attention: a.on.device == trainer::device::DeviceKind::Cpu || kernels::cuda_kernels_on() };
    let recompute = match a.recompute {
        Recompute::Off => lm::model::recompute::Recompute::Off,
        Recompute::PerLayer => lm::model::recompute::Recompute::PerLayer,
    };
    let plan = trainer::plan::phases::for_bench_step(&target, a.rows, a.tokens, recompute);
    let predicted = plan.peak_bytes() as f64 / (1u64 << 20) as f64;
    // On the CPU the measured peak is the RSS; on CUDA it is the GPU's,
    // which only a sampler outside sees (scripts/gpu-check, with
    // --no-optimizer so that the peak is the micro-batch's).
    let measured = (a.on.device == trainer::device::DeviceKind::Cpu).then_some((peak_steps / 1024) as f64);
    // On CUDA the pool's peak over the timed steps (tensors, not the CUDA
    // context or the pool's cache), where the driver reports it.
    let measured = measured.or(device_peak.map(|b| b as f64 / (1u64 << 20) as f64));
    merge(&mut report, serde_json::json!({"planned_peak_mib": predicted.round(), "planned_vs_measured": measured.map(|m| predicted / m)}));
    if a.phases > 0 {
        let profiled = (0..a.phases)
            .map(|_| {
                let mut opt = trainer::optim::AdamW::new(&params, Default::default())?;
                profiled_step(&dev, &mut opt, || {
                    let mut grads = Gradients::default();
                    backward_micro_batch(&model, &params, &tokens, &positions, pass, &mut grads, (!a.unfolded).then_some(LinearLoss { coefficients: &coefficients, mask: &mask }), |logp, _| {
                        Ok(((logp.to_dtype(DType::F32)? * &mask)?.sum_all()?.neg()? / predicted)?)
                    })?;
                    Ok(grads)
                }, &params)
            })
            .collect::<Result<Vec<_>>>()?;
        merge(&mut report, serde_json::json!({"phases": phases_json(&profiled)}));
    }
    writeln!(out, "{report}")?;
    Ok(())
}

/// One step under the profiler: `micro_batch` (forward and backward), then
/// an AdamW step as [`Phase::Optimizer`]; the step's seconds (synchronized
/// clock) and its profile.
fn profiled_step(
    dev: &candle_core::Device,
    opt: &mut trainer::optim::AdamW,
    micro_batch: impl FnOnce() -> Result<Gradients>,
    params: &std::collections::BTreeMap<String, candle_core::Var>,
) -> Result<(f64, Profile)> {
    let clock = Clock::start(dev)?;
    profile::start(dev)?;
    let run = micro_batch().and_then(|grads| profile::region(Phase::Optimizer, dev, || -> Result<()> { Ok(opt.step(params, &grads, 1e-5)?) }));
    let prof = profile::finish()?;
    run?;
    let secs = clock.seconds()?;
    Ok((secs, prof.ok_or_else(|| anyhow::anyhow!("the profile was not running"))?))
}

/// The `phases` object of the report: the profiled step of median time,
/// its seconds per phase, their sum, and what the profiler left out.
pub fn phases_json(profiled: &[(f64, Profile)]) -> serde_json::Value {
    let mut order: Vec<&(f64, Profile)> = profiled.iter().collect();
    order.sort_by(|x, y| x.0.total_cmp(&y.0));
    let Some((secs, p)) = order.get(order.len().saturating_sub(1) / 2) else { return serde_json::Value::Null };
    let mut out = serde_json::json!({
        "step_seconds": secs,
        "sum_seconds": p.total(),
        "excluded_seconds": p.excluded_seconds,
        "profiled_steps": profiled.len(),
    });
    let seconds: serde_json::Map<String, serde_json::Value> = Phase::ALL.iter().map(|ph| (ph.name().to_string(), serde_json::json!(p.get(*ph)))).collect();
    merge(&mut out, serde_json::json!({ "seconds": seconds }));
    out
}

/// Adds `extra`'s fields to the object `report`.
pub fn merge(report: &mut serde_json::Value, extra: serde_json::Value) {
    if let (Some(r), serde_json::Value::Object(e)) = (report.as_object_mut(), extra) {
        r.extend(e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--phases`: a step of a small model (per-layer recompute, so the
    /// attention, projections, norms and head run forward twice and
    /// backward once) has every phase, each non-zero, and they sum to at
    /// most the profiled step's time (what the profiler leaves out, the
    /// marks' copies, is the difference, with 1% for the clock reads
    /// outside the profile).
    #[test]
    fn phases_are_all_present_and_sum_to_at_most_the_step() {
        let cfg = Shape { hidden: 64, intermediate: 128, layers: 2, heads: 4, kv_heads: 2, head_dim: 16, vocab: 512, untied: false }.config(64).unwrap();
        let dev = candle_core::Device::Cpu;
        let w = lm::init::random_weights(&cfg, 0, DType::F32, &dev).unwrap();
        let (model, params) = lm::CausalLm::trainable(&cfg, &w).unwrap();
        let ids: Vec<u32> = (0..128).map(|i| (i * 7919 + 13) % 512).collect();
        let tokens = Tensor::from_vec(ids, (2, 64), &dev).unwrap();
        let mask = Tensor::ones((2, 63), DType::F32, &dev).unwrap().pad_with_zeros(1, 1, 0).unwrap();
        let coefficients = (&mask * (-1.0 / 126.0)).unwrap();
        let pass = LogprobPass { temperature: 1.0, entropy: EntropyMetric::Skip, recompute: lm::model::recompute::Recompute::PerLayer };
        let positions = lm::model::cache::Positions::sequential(2, 64);
        let mut opt = trainer::optim::AdamW::new(&params, Default::default()).unwrap();
        let profiled: Vec<(f64, Profile)> = (0..3)
            .map(|_| {
                profiled_step(&dev, &mut opt, || {
                    let mut grads = Gradients::default();
                    backward_micro_batch(&model, &params, &tokens, &positions, pass, &mut grads, Some(LinearLoss { coefficients: &coefficients, mask: &mask }), |logp, _| {
                        Ok(((logp * &mask)?.sum_all()?.neg()? / 126.0)?)
                    })?;
                    Ok(grads)
                }, &params)
                .unwrap()
            })
            .collect();
        assert!(!profile::is_on());
        for (secs, p) in &profiled {
            for ph in Phase::ALL {
                assert!(p.get(ph) > 0.0, "{} is 0: {p:?}", ph.name());
            }
            assert!(p.total() <= secs * 1.01, "phases {} > step {secs}: {p:?}", p.total());
            assert!(p.total() + p.excluded_seconds >= secs * 0.5, "phases {} + excluded {} cover under half the step {secs}", p.total(), p.excluded_seconds);
        }
        let json = phases_json(&profiled);
        let names: Vec<&str> = json["seconds"].as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(names, ["attention", "matmul", "logprob_head", "norm_rope_elementwise", "optimizer", "other"]);
        assert_eq!(json["profiled_steps"], 3);
        let sum: f64 = json["seconds"].as_object().unwrap().values().map(|v| v.as_f64().unwrap()).sum();
        assert!((sum - json["sum_seconds"].as_f64().unwrap()).abs() < 1e-9);
        assert!(sum <= json["step_seconds"].as_f64().unwrap() * 1.01);
    }
}
