//! The GRPO loss on per-token log-probabilities, in small pure stages:
//! [`per_token_loss`] (clipped surrogate + k3 KL), then [`aggregate`] (one of
//! the [`LossAggregation`] variants), then [`LossSums`] for the metrics.
//!
//! Followed: TRL 1.16.0, `trl/trainer/grpo_trainer.py`,
//! `GRPOTrainer._compute_loss` (importance_sampling_level = "token",
//! no delta clamp, no vLLM importance-sampling correction, no entropy mask):
//!
//! ```text
//! r        = exp(logp - logp_old)                 (logp_old = logp.detach() when mu == 1)
//! l        = -min(r * A, clamp(r, 1 - eps_low, 1 + eps_high) * A)
//! kl_k3    = exp(ref - logp) - (ref - logp) - 1
//! l        = l + beta * kl_k3                      (when beta != 0)
//! ```
//!
//! All tensors are `[b, t]` f32 aligned with the tokens: column `j` is about
//! token `j` (see [`super::sequence_logprobs`]), and the mask is 1 on the
//! policy's own tokens and 0 elsewhere (prompt, tool responses, padding, and
//! always column 0, which nothing predicts).

use crate::error::{Error, Result};
use crate::model::recompute::Recompute;
use crate::packing::Padding;
use super::drift::{DriftMetrics, DriftSums, RolloutCorrection};
use candle_core::{DType, Tensor, D};
use serde::{Deserialize, Serialize};

/// How per-token losses `l[i,t]` with mask `m[i,t]` become the scalar that is
/// differentiated (TRL's `loss_type`). `B` is the number of rows in the
/// optimizer batch and every sum runs over the whole optimizer batch: with
/// micro-batching, each micro-batch contributes its share of the same formula
/// (see [`BatchTotals`]), so the update does not depend on the split.
///
/// With one micro-batch (TRL's `gradient_accumulation_steps = 1`, one
/// process) each variant equals TRL's exactly. Under accumulation TRL's
/// `bnpo` normalizes each micro-batch by its own token count and averages over
/// the accumulation steps, which makes its update depend on the split; here
/// `Bnpo` always uses the optimizer batch's count, so on one process `Bnpo`
/// and `Dapo` give the same number (they differ in TRL only across processes
/// and accumulation steps).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LossAggregation {
    /// `grpo`: mean over sequences of each sequence's token mean,
    /// `(1/B) Σ_i [Σ_t m·l / max(1, Σ_t m)]`. Long sequences weigh less per token.
    Grpo,
    /// `bnpo`: token mean over the batch, `Σ_{i,t} m·l / max(1, Σ_{i,t} m)`.
    Bnpo,
    /// `dr_grpo` (Dr. GRPO): `Σ_{i,t} m·l / (B · max_completion_length)`, a
    /// constant normalizer free of length bias.
    DrGrpo,
    /// `dapo`: `Σ_{i,t} m·l / max(1, N)`, N the number of policy tokens in the
    /// whole accumulated (global) batch, TRL's `num_items_in_batch`.
    Dapo,
}

/// PPO clipping range of the ratio: `[1 - low, 1 + high]` (TRL's `epsilon`
/// and `epsilon_high`; DAPO's clip-higher uses `high > low`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ClipRange {
    pub low: f64,
    pub high: f64,
}

/// Whether the mean token entropy is computed for the metrics (one extra
/// softmax over the vocabulary, on detached logits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntropyMetric {
    /// Compute `entropy` (TRL always logs it).
    Compute,
    /// Skip it; [`GrpoMetrics::entropy`] is `None`.
    Skip,
}

/// Everything the loss needs besides the data.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GrpoLossConfig {
    pub clip: ClipRange,
    /// KL coefficient; 0 disables the KL term (and the reference model).
    pub beta: f64,
    /// Sampling temperature: logits are divided by it before the softmax.
    pub temperature: f64,
    pub aggregation: LossAggregation,
    /// Token budget of one episode, the constant of [`LossAggregation::DrGrpo`].
    pub max_completion_length: usize,
    pub entropy: EntropyMetric,
    /// Activation recomputation in [`super::accumulate_gradients`] (same
    /// gradients, less memory, one extra forward through the layers).
    #[serde(default)]
    pub recompute: Recompute,
    /// Truncated importance sampling against the rollout's log-probs.
    #[serde(default)]
    pub rollout_correction: RolloutCorrection,
    /// The cap of [`RolloutCorrection::Tis`].
    #[serde(default = "default_tis_cap")]
    pub tis_cap: f64,
    /// Rows whose advantage is exactly 0 skip the forward/backward when
    /// beta = 0 (their loss and gradient are exactly 0; their tokens still
    /// count in the normalizers). Off only to check that claim.
    #[serde(default = "yes")]
    pub skip_zero_advantage: bool,
    /// When the loss is linear in the log-probs (on-policy, no KL, no TIS),
    /// fold it into the log-prob op (same gradients, one vocabulary-sized
    /// product fewer, and none for the positions outside the loss mask:
    /// [`super::hidden_weighted_logprobs`]). Off only to check that claim.
    #[serde(default = "yes")]
    pub fold_linear_loss: bool,
}

fn default_tis_cap() -> f64 {
    crate::train::config::DEFAULT_TIS_CAP
}

fn yes() -> bool {
    true
}

impl GrpoLossConfig {
    /// Checks the ranges: clip epsilons in [0, 1) and >= 0, beta >= 0,
    /// temperature > 0, max_completion_length > 0.
    pub fn validate(&self) -> Result<()> {
        let bad = |what: &str, msg: String| Err(Error::invalid(format!("grpo loss: {what}"), msg));
        if !(self.clip.low >= 0.0 && self.clip.low < 1.0) {
            return bad("clip.low", format!("{} is outside [0, 1)", self.clip.low));
        }
        if !(self.clip.high >= 0.0 && self.clip.high.is_finite()) {
            return bad(
                "clip.high",
                format!("{} must be finite and >= 0", self.clip.high),
            );
        }
        if !(self.beta >= 0.0 && self.beta.is_finite()) {
            return bad("beta", format!("{} must be finite and >= 0", self.beta));
        }
        if !(self.temperature > 0.0 && self.temperature.is_finite()) {
            return bad(
                "temperature",
                format!("{} must be finite and > 0", self.temperature),
            );
        }
        if self.max_completion_length == 0 {
            return bad("max_completion_length", "must be > 0".into());
        }
        if !(self.tis_cap >= 1.0 && self.tis_cap.is_finite()) {
            return bad("tis_cap", format!("{} must be finite and >= 1", self.tis_cap));
        }
        Ok(())
    }
}

/// Sizes of the whole optimizer batch that the normalizers of
/// [`LossAggregation`] refer to; computed once from the full mask and handed
/// to every micro-batch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BatchTotals {
    /// Rows (sequences) in the optimizer batch, `B`.
    pub rows: usize,
    /// Policy tokens in the optimizer batch, `N = Σ m`.
    pub tokens: f64,
}

impl BatchTotals {
    /// Totals of a full-batch mask `[B, T]`.
    pub fn of_mask(mask: &Tensor) -> Result<Self> {
        let (rows, _) = mask.dims2()?;
        let tokens = mask.to_dtype(DType::F64)?.sum_all()?.to_scalar::<f64>()?;
        Ok(BatchTotals { rows, tokens })
    }
}

/// Output of [`per_token_loss`]: all `[b, t]` f32.
#[derive(Debug, Clone)]
pub struct PerTokenLoss {
    /// `-min(r·A, clip(r)·A) + beta·kl` (differentiable).
    pub loss: Tensor,
    /// The ratio `r` (detached).
    pub ratio: Tensor,
    /// `kl_k3` (detached), when beta != 0.
    pub kl: Option<Tensor>,
}

/// Per-token GRPO loss. `logp` is differentiable; `old_logp` and `ref_logp`
/// are treated as constants (detached here). `advantages` is `[b]` (one per
/// row) or `[b, t]` (one per token: packed rows hold several episodes). Values of
/// `old_logp` / `ref_logp` where `mask` is 0 are ignored (replaced by the
/// current log-prob, so padding can never produce inf or NaN).
pub fn per_token_loss(
    logp: &Tensor,
    old_logp: &Tensor,
    ref_logp: Option<&Tensor>,
    advantages: &Tensor,
    mask: &Tensor,
    clip: ClipRange,
    beta: f64,
) -> Result<PerTokenLoss> {
    per_token_loss_weighted(logp, old_logp, ref_logp, advantages, mask, clip, beta, None)
}

/// [`per_token_loss`] with the surrogate of each token weighted by
/// `is_weight` `[b, t]` (detached; truncated importance sampling against the
/// rollout, [`super::drift`]), before the KL is added, as TRL does.
#[allow(clippy::too_many_arguments)]
pub fn per_token_loss_weighted(
    logp: &Tensor,
    old_logp: &Tensor,
    ref_logp: Option<&Tensor>,
    advantages: &Tensor,
    mask: &Tensor,
    clip: ClipRange,
    beta: f64,
    is_weight: Option<&Tensor>,
) -> Result<PerTokenLoss> {
    let (b, t) = logp.dims2()?;
    for (name, x) in [("old log-probs", old_logp), ("mask", mask)] {
        if x.dims() != [b, t] {
            return Err(Error::invalid(
                "grpo loss",
                format!("{name} are {:?}, log-probs are [{b}, {t}]", x.dims()),
            ));
        }
    }
    let adv = per_token_advantages(advantages, b, t)?;
    let on = mask.gt(0.0)?;
    let current = logp.detach();
    let old = on.where_cond(&old_logp.detach(), &current)?;
    let ratio = (logp - &old)?.exp()?;
    let clipped = ratio.clamp(1.0 - clip.low, 1.0 + clip.high)?;
    let surrogate = ratio
        .broadcast_mul(&adv)?
        .minimum(&clipped.broadcast_mul(&adv)?)?
        .neg()?;
    let surrogate = match is_weight {
        Some(w) => (surrogate * w.detach())?,
        None => surrogate,
    };
    let (loss, kl) = match ref_logp {
        Some(r) if beta != 0.0 => {
            if r.dims() != [b, t] {
                return Err(Error::invalid(
                    "grpo loss",
                    format!(
                        "reference log-probs are {:?}, expected [{b}, {t}]",
                        r.dims()
                    ),
                ));
            }
            let diff = (on.where_cond(&r.detach(), &current)? - logp)?;
            let kl = ((diff.exp()? - &diff)? - 1.0)?;
            ((surrogate + (&kl * beta)?)?, Some(kl.detach()))
        }
        None if beta != 0.0 => {
            return Err(Error::invalid(
                "grpo loss",
                format!("beta is {beta} but no reference log-probs were given"),
            ))
        }
        _ => (surrogate, None),
    };
    Ok(PerTokenLoss {
        loss,
        ratio: ratio.detach(),
        kl,
    })
}

/// Advantages `[b]` (per row) or `[b, t]` (per token) as a tensor that
/// broadcasts against `[b, t]`.
fn per_token_advantages(advantages: &Tensor, b: usize, t: usize) -> Result<Tensor> {
    match advantages.dims() {
        [n] if *n == b => Ok(advantages.unsqueeze(1)?),
        [n, m] if *n == b && *m == t => Ok(advantages.clone()),
        dims => Err(Error::invalid("grpo loss", format!("advantages are {dims:?}, expected [{b}] or [{b}, {t}]"))),
    }
}

/// The weight of each policy token of one sequence in the loss of
/// `aggregation` over the batch of `totals`, for a sequence with
/// `sequence_tokens` policy tokens: `Σ_{i,t} w_i·m·l` equals [`aggregate`]'s
/// formula. Packed rows use it, where a row is no sequence.
pub fn token_weight(aggregation: LossAggregation, totals: BatchTotals, max_completion_length: usize, sequence_tokens: f64) -> f64 {
    match aggregation {
        LossAggregation::Grpo => 1.0 / (sequence_tokens.max(1.0) * totals.rows as f64),
        LossAggregation::Bnpo | LossAggregation::Dapo => 1.0 / totals.tokens.max(1.0),
        LossAggregation::DrGrpo => 1.0 / (totals.rows * max_completion_length) as f64,
    }
}

/// The scalar loss of one (micro-)batch: its share of `aggregation` over the
/// optimizer batch described by `totals`. With `totals` of the batch itself
/// this is the plain TRL loss; summed over the micro-batches of a split it is
/// the same number, and so is the gradient.
pub fn aggregate(
    per_token: &Tensor,
    mask: &Tensor,
    aggregation: LossAggregation,
    totals: BatchTotals,
    max_completion_length: usize,
) -> Result<Tensor> {
    let masked = (per_token * mask)?;
    Ok(match aggregation {
        LossAggregation::Grpo => {
            let lens = mask.sum(D::Minus1)?.clamp(1.0, f64::INFINITY)?;
            (masked.sum(D::Minus1)?.div(&lens)?.sum_all()? / totals.rows as f64)?
        }
        LossAggregation::Bnpo | LossAggregation::Dapo => {
            (masked.sum_all()? / totals.tokens.max(1.0))?
        }
        LossAggregation::DrGrpo => {
            (masked.sum_all()? / (totals.rows * max_completion_length) as f64)?
        }
    })
}

/// Masked sums of one micro-batch, added up over the micro-batches and turned
/// into [`GrpoMetrics`] at the end (global masked means, as TRL's
/// `global_masked_mean`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LossSums {
    /// The aggregated loss (already the micro-batch's share).
    pub loss: f64,
    pub tokens: f64,
    pub kl: Option<f64>,
    pub entropy: Option<f64>,
    pub clip_low: f64,
    pub clip_high: f64,
    pub clip_region: f64,
    /// Rollout-vs-trainer drift on the computed policy tokens.
    pub drift: DriftSums,
    /// Rows left out of the forward/backward (zero advantage, beta = 0).
    pub skipped_rows: usize,
}

impl LossSums {
    /// Sums for one micro-batch: `is_low_clipped = r < 1 - low and A < 0`,
    /// `is_high_clipped = r > 1 + high and A > 0`, region = either (TRL).
    pub fn of(
        loss: &Tensor,
        per_token: &PerTokenLoss,
        entropy: Option<&Tensor>,
        advantages: &Tensor,
        mask: &Tensor,
        clip: ClipRange,
    ) -> Result<Self> {
        let msum = |x: &Tensor| -> Result<f64> {
            Ok((x.to_dtype(DType::F32)? * mask)?
                .to_dtype(DType::F64)?
                .sum_all()?
                .to_scalar::<f64>()?)
        };
        let (b, t) = per_token.ratio.dims2()?;
        let adv = per_token_advantages(advantages, b, t)?.broadcast_as((b, t))?;
        let low = per_token.ratio.lt(1.0 - clip.low)?.mul(&adv.lt(0.0)?)?;
        let high = per_token.ratio.gt(1.0 + clip.high)?.mul(&adv.gt(0.0)?)?;
        let region = low.maximum(&high)?;
        Ok(LossSums {
            loss: loss.to_dtype(DType::F64)?.to_scalar::<f64>()?,
            tokens: mask.to_dtype(DType::F64)?.sum_all()?.to_scalar::<f64>()?,
            kl: per_token.kl.as_ref().map(msum).transpose()?,
            entropy: entropy.map(msum).transpose()?,
            clip_low: msum(&low)?,
            clip_high: msum(&high)?,
            clip_region: msum(&region)?,
            drift: DriftSums::default(),
            skipped_rows: 0,
        })
    }

    /// Adds another micro-batch's sums.
    pub fn add(&mut self, o: &LossSums) {
        let add_opt = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) => Some(a + b),
            (a, None) => a,
            (None, b) => b,
        };
        self.loss += o.loss;
        self.tokens += o.tokens;
        self.kl = add_opt(self.kl, o.kl);
        self.entropy = add_opt(self.entropy, o.entropy);
        self.clip_low += o.clip_low;
        self.clip_high += o.clip_high;
        self.clip_region += o.clip_region;
        self.drift.add(&o.drift);
        self.skipped_rows += o.skipped_rows;
    }

    /// Global masked means over the policy tokens.
    pub fn metrics(&self) -> GrpoMetrics {
        let n = self.tokens.max(1.0);
        GrpoMetrics {
            loss: self.loss,
            kl: self.kl.map(|k| k / n),
            entropy: self.entropy.map(|e| e / n),
            clip_ratio_low_mean: self.clip_low / n,
            clip_ratio_high_mean: self.clip_high / n,
            clip_ratio_region_mean: self.clip_region / n,
            tokens: self.tokens as usize,
            padding: Padding::default(),
            drift: self.drift.metrics(),
            skipped_rows: self.skipped_rows,
        }
    }
}

/// Metrics of one optimizer batch; field names map to TRL's metric names.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GrpoMetrics {
    /// `loss`: the aggregated loss of the whole batch.
    pub loss: f64,
    /// `kl`: mean k3 KL per policy token (only when beta != 0, as in TRL).
    pub kl: Option<f64>,
    /// `entropy`: mean token entropy (temperature-scaled) per policy token.
    pub entropy: Option<f64>,
    /// `clip_ratio/low_mean`.
    pub clip_ratio_low_mean: f64,
    /// `clip_ratio/high_mean`.
    pub clip_ratio_high_mean: f64,
    /// `clip_ratio/region_mean`.
    pub clip_ratio_region_mean: f64,
    /// Policy tokens in the batch.
    pub tokens: usize,
    /// Slots the micro-batches computed against the tokens they needed.
    pub padding: Padding,
    /// Rollout-vs-trainer log-prob drift (when the batch carries the rollout's log-probs).
    pub drift: Option<DriftMetrics>,
    /// Rows whose advantage was exactly 0 (beta = 0): no forward/backward.
    pub skipped_rows: usize,
}

impl GrpoMetrics {
    /// The metrics of an empty batch (no rows to learn from): all zero, no
    /// KL or entropy measured.
    pub fn empty() -> Self {
        GrpoMetrics { loss: 0.0, kl: None, entropy: None, clip_ratio_low_mean: 0.0, clip_ratio_high_mean: 0.0, clip_ratio_region_mean: 0.0, tokens: 0, padding: Padding::default(), drift: None, skipped_rows: 0 }
    }
}

impl GrpoMetrics {
    /// `(TRL metric name, value)` pairs, for the metrics log.
    pub fn named(&self) -> Vec<(&'static str, f64)> {
        let mut v = vec![("loss", self.loss)];
        if let Some(k) = self.kl {
            v.push(("kl", k));
        }
        if let Some(e) = self.entropy {
            v.push(("entropy", e));
        }
        if let Some(d) = self.drift {
            v.extend([
                ("sampling/sampling_logp_difference/mean", d.logp_difference_mean),
                ("sampling/sampling_logp_difference/max", d.logp_difference_max),
                ("sampling/importance_sampling_ratio/min", d.ratio_min),
                ("sampling/importance_sampling_ratio/mean", d.ratio_mean),
                ("sampling/importance_sampling_ratio/max", d.ratio_max),
            ]);
        }
        v.extend([
            ("clip_ratio/low_mean", self.clip_ratio_low_mean),
            ("clip_ratio/high_mean", self.clip_ratio_high_mean),
            ("clip_ratio/region_mean", self.clip_ratio_region_mean),
            ("num_tokens", self.tokens as f64),
        ]);
        v
    }
}
