//! Next-token sampling where the logits are: per row of `[rows, vocab]`
//! logits (f32 or bf16), the chosen token and its log-prob, given one
//! uniform in `[0, 1)` per row. Only `[rows, 2]` numbers leave the op.
//!
//! - [`SampleMode`]: greedy, the full softmax, or top-k / top-p truncation.
//! - [`sample`]: the op on a logits tensor, picks copied to the host.
//! - [`sample_reference`]: a plain scalar f64 implementation of one row, the
//!   meaning the op matches (tests compare the two).
//! - [`SampleOp`]: the Candle custom op (`cpu.rs`: rows and vocabulary
//!   blocks in parallel, reading the logits' storage in place).
//!
//! Meaning, for row logits `x`, temperature `T` (1 when greedy) and uniform `u`:
//! the log-prob is `log softmax(x / T)[token]` before any truncation. Greedy
//! takes the first largest logit. Otherwise the kept set is every token
//! (untruncated), or the `top_k` largest (ties: lower index first), then
//! the smallest prefix of that order whose probability (renormalized over
//! the top-k) reaches `top_p`; the token is the one where `u * kept mass`
//! falls, walking the kept tokens in index order (no sort of the
//! vocabulary for the draw). Rounding that outlives the mass picks the
//! last kept token with positive weight.
//!
//! On CUDA the op is `kernels/cuda/sampling.cu` (one block per row, the
//! kept set by bisection instead of a sort; `cuda.rs`), used where
//! [`crate::has_native_path`] admits CUDA (`FUSEGRPO_CUDA_KERNELS=1` until a
//! GPU has checked it). Elsewhere the logits are copied to the CPU and the
//! CPU op runs there: what sampling did before the op.

mod cpu;
#[cfg(feature = "cuda")]
pub(crate) mod cuda;

use crate::storage::contiguous_slice;
use candle_core::{CpuStorage, CustomOp2, DType, Device, Layout, Result, Shape, Tensor};

/// Largest vocabulary whose ids survive the op's f32 output exactly.
pub const MAX_VOCAB: usize = 1 << 24;

/// How each row's token is chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SampleMode {
    /// The first largest logit; its log-prob under `softmax(x)`. Uses no uniform.
    Greedy,
    /// A draw from `softmax(x / temperature)` over the whole vocabulary.
    Softmax { temperature: f64 },
    /// A draw from `softmax(x / temperature)` renormalized over the kept set:
    /// the `top_k` most likely (0 = all), then the smallest prefix of them
    /// whose renormalized mass reaches `top_p` (1 = all).
    Truncated { temperature: f64, top_k: usize, top_p: f64 },
}

impl SampleMode {
    /// The mode for a sampler's settings: greedy when `temperature <= 0`,
    /// untruncated when `top_k == 0` and `top_p >= 1`.
    pub fn new(temperature: f64, top_k: usize, top_p: f64) -> SampleMode {
        if temperature <= 0.0 {
            SampleMode::Greedy
        } else if top_k == 0 && top_p >= 1.0 {
            SampleMode::Softmax { temperature }
        } else {
            SampleMode::Truncated { temperature, top_k, top_p: top_p.min(1.0) }
        }
    }

    /// The temperature the logits are divided by (1 when greedy).
    pub fn temperature(&self) -> f64 {
        match *self {
            SampleMode::Greedy => 1.0,
            SampleMode::Softmax { temperature } | SampleMode::Truncated { temperature, .. } => temperature,
        }
    }

    /// Whether the mode draws (needs a uniform per row).
    pub fn draws(&self) -> bool {
        !matches!(self, SampleMode::Greedy)
    }

    fn validate(&self) -> Result<()> {
        let t = self.temperature();
        if !(t.is_finite() && t > 0.0) {
            candle_core::bail!("sample: temperature must be positive and finite, got {t}");
        }
        if let SampleMode::Truncated { top_p, .. } = *self {
            if !(top_p > 0.0 && top_p <= 1.0) {
                candle_core::bail!("sample: top_p must be in (0, 1], got {top_p}");
            }
        }
        Ok(())
    }
}

/// One row's chosen token and its log-prob under `softmax(x / T)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pick {
    pub token: u32,
    pub logprob: f32,
}

/// Sample every row of `logits` `[rows, vocab]` (f32 or bf16, any device)
/// with `uniforms[row]` in `[0, 1)` (ignored when greedy); only the picks
/// come to the host.
pub fn sample(logits: &Tensor, uniforms: &[f64], mode: SampleMode) -> Result<Vec<Pick>> {
    let out = sample_tensor(logits, uniforms, mode)?.to_vec2::<f32>()?;
    Ok(out.iter().map(|r| Pick { token: r[0] as u32, logprob: r[1] }).collect())
}

/// [`sample`] as a tensor: `[rows, 2]` f32 rows `[token, log-prob]` on the
/// logits' device (the CPU where that device has no native path).
pub fn sample_tensor(logits: &Tensor, uniforms: &[f64], mode: SampleMode) -> Result<Tensor> {
    mode.validate()?;
    let (rows, vocab) = logits.dims2()?;
    if uniforms.len() != rows {
        candle_core::bail!("sample: {} uniforms for {rows} rows", uniforms.len());
    }
    if vocab == 0 || vocab > MAX_VOCAB {
        candle_core::bail!("sample: vocabulary of {vocab} outside 1..={MAX_VOCAB}");
    }
    if let Some((i, u)) = uniforms.iter().enumerate().find(|(_, u)| !(0.0..1.0).contains(*u)) {
        candle_core::bail!("sample: uniform {u} of row {i} is outside [0, 1)");
    }
    let logits = match logits.dtype() {
        DType::F32 | DType::BF16 => logits.clone(),
        _ => logits.to_dtype(DType::F32)?,
    };
    let logits = if crate::has_native_path(logits.device()) { logits } else { logits.to_device(&Device::Cpu)? };
    let logits = logits.contiguous()?;
    let us = Tensor::from_slice(uniforms, rows, logits.device())?;
    logits.apply_op2_no_bwd(&us, &SampleOp { mode })
}

/// The op: `(logits [rows, V] f32|bf16, uniforms [rows] f64)` -> `[rows, 2]`
/// f32 rows `[token, log-prob]` (see the module docs for the meaning).
#[derive(Clone, Copy, Debug)]
pub struct SampleOp {
    pub mode: SampleMode,
}

impl CustomOp2 for SampleOp {
    fn name(&self) -> &'static str {
        "sample"
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(&self, s1: &candle_core::CudaStorage, l1: &Layout, s2: &candle_core::CudaStorage, l2: &Layout) -> Result<(candle_core::CudaStorage, Shape)> {
        cuda::sample_cuda(self.mode, s1, l1, s2, l2)
    }

    fn cpu_fwd(&self, s1: &CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout) -> Result<(CpuStorage, Shape)> {
        let (rows, vocab) = l1.shape().dims2()?;
        let logits = match s1 {
            CpuStorage::F32(x) => cpu::Logits::F32(contiguous_slice(x, l1, "logits")?),
            CpuStorage::BF16(x) => cpu::Logits::Bf16(contiguous_slice(x, l1, "logits")?),
            _ => candle_core::bail!("sample: logits must be f32 or bf16"),
        };
        let uniforms = match s2 {
            CpuStorage::F64(u) => contiguous_slice(u, l2, "uniforms")?,
            _ => candle_core::bail!("sample: uniforms must be f64"),
        };
        let picks = cpu::sample(&logits, vocab, uniforms, self.mode);
        let out: Vec<f32> = picks.iter().flat_map(|p| [p.token as f32, p.logprob]).collect();
        Ok((CpuStorage::F32(out), Shape::from((rows, 2))))
    }
}

/// One row sampled the plain way, in f64: scale, log-sum-exp, a full sort
/// for the kept set, the walk in index order. `margin` is how far `u` lies
/// from the nearest boundary of the kept tokens' cumulative masses (as a
/// fraction of the kept mass; `f64::INFINITY` when greedy), so tests can
/// skip draws where f32 rounding may legitimately pick a neighbour.
pub fn sample_reference(row: &[f32], u: f64, mode: SampleMode) -> (Pick, f64) {
    let t = mode.temperature();
    let scaled: Vec<f64> = row.iter().map(|&x| x as f64 / t).collect();
    let max = scaled.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let weights: Vec<f64> = scaled.iter().map(|s| (s - max).exp()).collect();
    let lse = max + weights.iter().sum::<f64>().ln();
    let pick = |token: usize| Pick { token: token as u32, logprob: (scaled[token] - lse) as f32 };
    let kept: Vec<usize> = match mode {
        SampleMode::Greedy => {
            let token = (0..row.len()).find(|&i| scaled[i] == max).unwrap_or(0);
            return (pick(token), f64::INFINITY);
        }
        SampleMode::Softmax { .. } => (0..row.len()).collect(),
        SampleMode::Truncated { top_k, top_p, .. } => {
            let mut order: Vec<usize> = (0..row.len()).collect();
            order.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
            order.truncate(if top_k > 0 { top_k.min(row.len()) } else { row.len() });
            let mass: f64 = order.iter().map(|&i| weights[i]).sum();
            let (mut acc, mut keep) = (0.0, order.len());
            for (n, &i) in order.iter().enumerate() {
                acc += weights[i] / mass;
                if top_p < 1.0 && acc >= top_p {
                    keep = n + 1;
                    break;
                }
            }
            order.truncate(keep);
            order.sort_unstable();
            order
        }
    };
    let mass: f64 = kept.iter().map(|&i| weights[i]).sum();
    let target = u * mass;
    let mut below = 0.0;
    for &i in &kept {
        if target < below + weights[i] {
            let margin = (target - below).min(below + weights[i] - target) / mass;
            return (pick(i), margin);
        }
        below += weights[i];
    }
    let last = *kept.iter().rev().find(|&&i| weights[i] > 0.0).unwrap_or(&kept[kept.len() - 1]);
    (pick(last), 0.0)
}
