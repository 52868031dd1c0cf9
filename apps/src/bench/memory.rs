//! `fusegrpo bench memory`: peak resident memory (VmHWM) of one GRPO
//! forward + backward of a mid-size random model with activation
//! recomputation off and per layer. Each mode runs in a fresh child process
//! of this binary, so the peaks do not mix; the parent prints both, their
//! ratio, and the activation bytes per token per layer implied by them.

use std::io::Write;
use anyhow::{bail, Context, Result};
use candle_core::{DType, Device, Tensor};
use std::process::Command;
use trainer::backward::EntropyMetric;
use trainer::grpo::{accumulate_gradients, ClipRange, GrpoBatch, GrpoLossConfig, LossAggregation, OldLogprobs};
use lm::model::recompute::Recompute;
use lm::{CausalLm, ModelConfig};

/// The recomputation mode of a child run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// Every layer's activations kept for the backward pass.
    Off,
    /// Only each layer's input kept; layers recomputed in the backward pass.
    PerLayer,
}

impl From<Mode> for Recompute {
    fn from(m: Mode) -> Self {
        match m {
            Mode::Off => Recompute::Off,
            Mode::PerLayer => Recompute::PerLayer,
        }
    }
}

#[derive(clap::Args, Clone, Debug)]
pub struct Args {
    #[arg(long, default_value_t = 512)]
    pub hidden: usize,
    #[arg(long, default_value_t = 1536)]
    pub intermediate: usize,
    #[arg(long, default_value_t = 8)]
    pub layers: usize,
    #[arg(long, default_value_t = 8)]
    pub heads: usize,
    #[arg(long, default_value_t = 4)]
    pub kv_heads: usize,
    #[arg(long, default_value_t = 64)]
    pub head_dim: usize,
    #[arg(long, default_value_t = 4096)]
    pub vocab: usize,
    /// Rows (episodes) in the one micro-batch.
    #[arg(long, default_value_t = 4)]
    pub rows: usize,
    /// Tokens per row.
    #[arg(long, default_value_t = 1024)]
    pub tokens: usize,
    /// Run one mode in this process and print its `RESULT` line (what the
    /// parent runs in each child); without it, run both modes as children.
    #[arg(long, value_enum)]
    pub child: Option<Mode>,
}

/// One child's measurement.
struct Measured {
    /// VmHWM after building the model and the batch, KiB.
    base_kib: u64,
    /// VmHWM after the forward + backward, KiB.
    peak_kib: u64,
    secs: f64,
}

/// A field of /proc/self/status in KiB (VmHWM = peak resident set).
fn status_kib(field: &str) -> Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status").context("reading /proc/self/status")?;
    let line = status
        .lines()
        .find(|l| l.starts_with(&format!("{field}:")))
        .with_context(|| format!("/proc/self/status has no {field}"))?;
    line.split_whitespace().nth(1).context("empty status field")?.parse().with_context(|| format!("parsing `{line}`"))
}

fn config(a: &Args) -> ModelConfig {
    let mut cfg = ModelConfig::new_tiny(a.vocab, a.hidden, a.intermediate, a.layers, a.heads, a.kv_heads, a.head_dim, false);
    cfg.max_position_embeddings = a.tokens.max(1);
    cfg.raw = cfg.to_raw();
    cfg
}

fn measure(a: &Args, mode: Mode) -> Result<Measured> {
    let cfg = config(a);
    let dev = Device::Cpu;
    let w = lm::init::random_weights(&cfg, 0, DType::F32, &dev)?;
    let (model, params) = CausalLm::trainable(&cfg, &w)?;
    drop(w);
    let (b, t) = (a.rows, a.tokens);
    let ids: Vec<u32> = (0..b * t).map(|i| ((i as u64 * 7919 + 13) % a.vocab as u64) as u32).collect();
    let mask: Vec<f32> = (0..b * t).map(|i| if i % t == 0 { 0.0 } else { 1.0 }).collect();
    let batch = GrpoBatch {
        tokens: Tensor::from_vec(ids, (b, t), &dev)?,
        mask: Tensor::from_vec(mask, (b, t), &dev)?,
        advantages: Tensor::from_vec((0..b).map(|r| if r % 2 == 0 { 1.0f32 } else { -1.0 }).collect(), b, &dev)?,
        old_logprobs: OldLogprobs::Current,
        ref_logprobs: None,
        rollout_logprobs: None,
    };
    let loss = GrpoLossConfig {
        clip: ClipRange { low: 0.2, high: 0.2 },
        beta: 0.0,
        temperature: 1.0,
        aggregation: LossAggregation::Dapo,
        max_completion_length: t,
        entropy: EntropyMetric::Skip,
        recompute: mode.into(),
        rollout_correction: trainer::grpo::RolloutCorrection::None,
        tis_cap: 3.0,
        importance_sampling: trainer::grpo::ImportanceSampling::Token,
        skip_zero_advantage: true,
        fold_linear_loss: true,
    };
    let base_kib = status_kib("VmHWM")?;
    let clock = super::Clock::start(&dev)?;
    let (grads, metrics) = accumulate_gradients(&model, &params, &batch, &loss, trainer::packing::MicroBatching::Rows(b))?;
    let secs = clock.seconds()?;
    if grads.len() != params.len() || !metrics.loss.is_finite() {
        bail!("{mode:?}: {} of {} gradients, loss {}", grads.len(), params.len(), metrics.loss);
    }
    Ok(Measured { base_kib, peak_kib: status_kib("VmHWM")?, secs })
}

fn run_child(a: &Args, mode: Mode) -> Result<Measured> {
    let exe = std::env::current_exe().context("locating this binary")?;
    let name = match mode {
        Mode::Off => "off",
        Mode::PerLayer => "per-layer",
    };
    let out = Command::new(&exe)
        .args(["bench", "memory", "--child", name])
        .args(["--hidden", &a.hidden.to_string(), "--intermediate", &a.intermediate.to_string()])
        .args(["--layers", &a.layers.to_string(), "--heads", &a.heads.to_string()])
        .args(["--kv-heads", &a.kv_heads.to_string(), "--head-dim", &a.head_dim.to_string()])
        .args(["--vocab", &a.vocab.to_string(), "--rows", &a.rows.to_string(), "--tokens", &a.tokens.to_string()])
        .output()
        .with_context(|| format!("running {}", exe.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!("{name} child failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr));
    }
    let line = stdout.lines().find(|l| l.starts_with("RESULT ")).with_context(|| format!("{name} child printed no RESULT line: {stdout}"))?;
    let field = |k: &str| -> Result<&str> {
        line.split_whitespace().find_map(|f| f.strip_prefix(&format!("{k}="))).with_context(|| format!("no {k} in `{line}`"))
    };
    Ok(Measured { base_kib: field("base_kib")?.parse()?, peak_kib: field("peak_kib")?.parse()?, secs: field("secs")?.parse()? })
}

pub fn run(a: Args, out: &mut dyn Write) -> Result<()> {
    if let Some(mode) = a.child {
        let m = measure(&a, mode)?;
        writeln!(out, "RESULT base_kib={} peak_kib={} secs={:.3}", m.base_kib, m.peak_kib, m.secs)?;
        return Ok(());
    }
    let cfg = config(&a);
    writeln!(
        out,
        "model: hidden {}, intermediate {}, {} layers, {}x{} q heads, {} kv heads, vocab {} (f32, CPU); batch {} rows x {} tokens",
        cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers, cfg.num_attention_heads, cfg.head_dim, cfg.num_key_value_heads, cfg.vocab_size, a.rows, a.tokens
    )?;
    let off = run_child(&a, Mode::Off)?;
    let on = run_child(&a, Mode::PerLayer)?;
    let mib = |k: u64| k as f64 / 1024.0;
    for (name, m) in [("off", &off), ("per_layer", &on)] {
        writeln!(
            out,
            "recompute={name:<9} peak RSS {:>8.1} MiB (model + batch {:>7.1} MiB, forward+backward +{:>8.1} MiB), {:.2} s",
            mib(m.peak_kib),
            mib(m.base_kib),
            mib(m.peak_kib.saturating_sub(m.base_kib)),
            m.secs
        )?;
    }
    writeln!(
        out,
        "peak ratio off / per_layer = {:.2}; time ratio per_layer / off = {:.2}",
        off.peak_kib as f64 / on.peak_kib as f64,
        on.secs / off.secs
    )?;
    let saved = off.peak_kib as f64 - on.peak_kib as f64;
    let per_token_layer = saved * 1024.0 / (a.rows * a.tokens) as f64 / (cfg.num_hidden_layers.saturating_sub(1)).max(1) as f64;
    writeln!(
        out,
        "activation bytes per token per layer (off - per_layer) / (tokens x (layers - 1)) = {per_token_layer:.0} B ({:.1} x hidden x 4 B)",
        per_token_layer / (cfg.hidden_size as f64 * 4.0)
    )?;
    Ok(())
}
