//! The GRPO loss on per-token log-probabilities: [`grpo_loss`], one function
//! from the log-probs to the (micro-)batch's share of the loss and its metric
//! sums ([`LossSums`]), aggregated as one of the [`LossAggregation`]
//! variants; [`linear_coefficients`], its gradient in closed form where it is
//! linear in the log-probs.
//!
//! Followed: TRL 1.16.0, `trl/trainer/grpo_trainer.py`,
//! `GRPOTrainer._compute_loss` (importance_sampling_level "token" or
//! "sequence", no delta clamp, no entropy mask; the vLLM importance-sampling
//! correction is `rollout_correction = "tis"`):
//!
//! ```text
//! r        = exp(logp - logp_old)                 (logp_old = logp.detach() when mu == 1)
//!            (GSPO, "sequence": exp(Σ_t m·(logp - logp_old) / max(1, Σ_t m)), one per sequence)
//! l        = -min(r * A, clamp(r, 1 - eps_low, 1 + eps_high) * A)
//! kl_k3    = exp(ref - logp) - (ref - logp) - 1
//! l        = l + beta * kl_k3                      (when beta != 0)
//! ```
//!
//! All tensors are `[b, t]` f32 aligned with the tokens: column `j` is about
//! token `j` (see [`sequence_logprobs`](crate::backward::sequence_logprobs)), and the mask is 1 on the
//! policy's own tokens and 0 elsewhere (prompt, tool responses, padding, and
//! always column 0, which nothing predicts).

use crate::backward::EntropyMetric;
use crate::error::{Error, Result};
use lm::model::recompute::Recompute;
use crate::packing::Padding;
use super::drift::{Drift, DriftMetrics, DriftSums, RolloutCorrection, DEFAULT_TIS_CAP};
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

/// The level of the importance ratio `r` (TRL's `importance_sampling_level`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ImportanceSampling {
    /// One ratio per token, `exp(logp - logp_old)` (GRPO, PPO).
    #[default]
    Token,
    /// GSPO: one ratio per sequence, the exponential of the mean over its
    /// policy tokens of `logp - logp_old`, clipped as a whole; every token of
    /// the sequence carries it (its gradient reaches all of them).
    Sequence,
}

impl ImportanceSampling {
    /// Whether this is the default, `Token` (left out of the config hash).
    pub fn is_token(&self) -> bool {
        *self == ImportanceSampling::Token
    }
}

/// PPO clipping range of the ratio: `[1 - low, 1 + high]` (TRL's `epsilon`
/// and `epsilon_high`; DAPO's clip-higher uses `high > low`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ClipRange {
    pub low: f64,
    pub high: f64,
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
    /// Token-level ratios (GRPO) or sequence-level ones (GSPO).
    #[serde(default)]
    pub importance_sampling: ImportanceSampling,
    /// Rows whose advantage is exactly 0 skip the forward/backward when
    /// beta = 0 (their loss and gradient are exactly 0; their tokens still
    /// count in the normalizers). Off only to check that claim.
    #[serde(default = "yes")]
    pub skip_zero_advantage: bool,
    /// When the loss is linear in the log-probs (on-policy, no KL, no TIS),
    /// fold it into the log-prob op (same gradients, one vocabulary-sized
    /// product fewer, and none for the positions outside the loss mask:
    /// [`hidden_weighted_logprobs`](crate::backward::hidden_weighted_logprobs)). Off only to check that claim.
    #[serde(default = "yes")]
    pub fold_linear_loss: bool,
}

fn default_tis_cap() -> f64 {
    DEFAULT_TIS_CAP
}

fn yes() -> bool {
    true
}

impl GrpoLossConfig {
    /// The loss of `aggregation` with clip range `clip`, KL coefficient
    /// `beta` and `max_completion_length`, the rest at TRL's defaults:
    /// temperature 1, no entropy metric, no recomputation, no rollout
    /// correction (its cap at [`DEFAULT_TIS_CAP`]), token-level ratios,
    /// zero-advantage rows skipped, the linear loss folded.
    pub fn new(aggregation: LossAggregation, clip: ClipRange, beta: f64, max_completion_length: usize) -> Self {
        GrpoLossConfig {
            clip,
            beta,
            temperature: 1.0,
            aggregation,
            max_completion_length,
            entropy: EntropyMetric::Skip,
            recompute: Recompute::Off,
            rollout_correction: RolloutCorrection::None,
            tis_cap: default_tis_cap(),
            importance_sampling: ImportanceSampling::Token,
            skip_zero_advantage: true,
            fold_linear_loss: true,
        }
    }

    /// The loss's ranges, each the one rule for its setting: the run
    /// config calls this at load (`RunConfig::validate`), with
    /// the config key each field comes from, so `tis_cap = 0.5` is refused
    /// there and not after the first step's rollouts. Clip epsilons in
    /// [0, 1) and >= 0, beta >= 0, temperature > 0, a completion budget,
    /// the TIS cap >= 1 (a cap below 1 would shrink on-policy tokens).
    pub fn validate(&self) -> std::result::Result<(), (&'static str, String)> {
        if !(self.clip.low >= 0.0 && self.clip.low < 1.0) {
            return Err(("grpo.clip_low", format!("must be in [0, 1), got {}", self.clip.low)));
        }
        if !(self.clip.high >= 0.0 && self.clip.high.is_finite()) {
            return Err(("grpo.clip_high", format!("must be a number >= 0, got {}", self.clip.high)));
        }
        if !(self.beta >= 0.0 && self.beta.is_finite()) {
            return Err(("grpo.beta", format!("must be a number >= 0 (0 = no KL term), got {}", self.beta)));
        }
        if !(self.temperature > 0.0 && self.temperature.is_finite()) {
            return Err(("sampling.temperature", format!("must be a number > 0 for the loss, got {}", self.temperature)));
        }
        if self.max_completion_length == 0 {
            return Err(("episode.max_total_tokens", "leaves no token for the policy".into()));
        }
        if !(self.tis_cap >= 1.0 && self.tis_cap.is_finite()) {
            return Err(("grpo.tis_cap", format!("must be a number >= 1, got {}", self.tis_cap)));
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

/// One (micro-)batch's inputs to [`grpo_loss`]: `[b, t]` f32 aligned with
/// the tokens, except the advantages. Values of `old`, `reference` and
/// `rollout` where `mask` is 0 are never read into the loss (padding can
/// never produce inf or NaN).
#[derive(Debug, Clone, Copy)]
pub struct LossInputs<'a> {
    /// The policy's log-probs (differentiable).
    pub logp: &'a Tensor,
    /// `logp_old`; `None` on-policy (mu = 1): the detached `logp`, as TRL.
    pub old: Option<&'a Tensor>,
    /// The reference model's log-probs (required when beta != 0).
    pub reference: Option<&'a Tensor>,
    /// The log-probs the rollout sampled with: the drift metrics, and the
    /// importance weights of `rollout_correction = "tis"` ([`super::drift`]).
    pub rollout: Option<&'a Tensor>,
    /// `[b]` (one per row) or `[b, t]` (one per token: packed rows hold
    /// several episodes).
    pub advantages: &'a Tensor,
    /// 1 on the policy's own tokens, 0 elsewhere.
    pub mask: &'a Tensor,
    /// The detached per-token entropy, summed for the metrics.
    pub entropy: Option<&'a Tensor>,
    /// The sequence of each column where a row holds several (packed rows);
    /// `None`: each row is one sequence. Read only by sequence-level ratios.
    pub sequences: Option<&'a Segments>,
}

/// Which sequence each column of packed rows belongs to: GSPO's ratio is a
/// mean over one sequence's policy tokens, never over a packed row.
#[derive(Debug, Clone)]
pub struct Segments {
    /// `[b, t]` u32, the sequence of each column, numbered from 0.
    pub ids: Tensor,
    /// How many sequences (each id is below it).
    pub count: usize,
}

impl Segments {
    /// One row of sequences of `lengths` columns each, end to end (a
    /// packed row, [`crate::packing::Pack`]).
    pub fn of_lengths(lengths: &[usize], device: &candle_core::Device) -> Result<Self> {
        let ids: Vec<u32> = lengths.iter().enumerate().flat_map(|(k, &n)| std::iter::repeat_n(k as u32, n)).collect();
        let width = ids.len();
        Ok(Segments { ids: Tensor::from_vec(ids, (1, width), device)?, count: lengths.len() })
    }
}

/// Per-sequence means of masked per-token values, and each policy token's
/// share of its sequence (`m / max(1, Σ m)`), both broadcastable to `[b, t]`.
struct SequenceMean {
    /// The mean of the sequence each column belongs to: `[b, 1]` (rows) or `[b, t]`.
    mean: Tensor,
    /// `m / max(1, Σ m)` per column, `[b, t]`: summed, one per sequence.
    share: Tensor,
    /// How many sequences.
    count: f64,
}

impl SequenceMean {
    /// TRL's `(x * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)`, per row or
    /// per segment of `sequences`.
    fn of(x: &Tensor, mask: &Tensor, sequences: Option<&Segments>) -> Result<Self> {
        let masked = (x * mask)?;
        let Some(seg) = sequences else {
            let lens = mask.sum_keepdim(D::Minus1)?.clamp(1.0, f64::INFINITY)?;
            let (b, _) = mask.dims2()?;
            return Ok(SequenceMean { mean: masked.sum_keepdim(D::Minus1)?.div(&lens)?, share: mask.broadcast_div(&lens)?, count: b as f64 });
        };
        let (b, t) = mask.dims2()?;
        if seg.ids.dims() != [b, t] {
            return Err(Error::invalid("grpo loss", format!("sequence ids are {:?}, log-probs are [{b}, {t}]", seg.ids.dims())));
        }
        let ids = seg.ids.flatten_all()?;
        let zeros = Tensor::zeros(seg.count, DType::F32, mask.device())?;
        let per_seq = |v: &Tensor| -> Result<Tensor> { Ok(zeros.index_add(&ids, &v.flatten_all()?, 0)?) };
        let lens = per_seq(mask)?.clamp(1.0, f64::INFINITY)?;
        let spread = |v: &Tensor| -> Result<Tensor> { Ok(v.index_select(&ids, 0)?.reshape((b, t))?) };
        Ok(SequenceMean { mean: spread(&per_seq(&masked)?.div(&lens)?)?, share: mask.div(&spread(&lens)?)?, count: seg.count as f64 })
    }
}

/// The normalizer of each [`LossAggregation`], its one definition (the
/// rows' formula, its gradient and the packed rows' token weights all read
/// it): a token's loss is divided by its sequence's policy tokens
/// (`max(1, Σ_t m)`) when `per_sequence`, and the sum by `divisor`.
struct Normalizer {
    per_sequence: bool,
    divisor: f64,
}

impl Normalizer {
    fn of(aggregation: LossAggregation, totals: BatchTotals, max_completion_length: usize) -> Self {
        match aggregation {
            LossAggregation::Grpo => Normalizer { per_sequence: true, divisor: totals.rows as f64 },
            LossAggregation::Bnpo | LossAggregation::Dapo => Normalizer { per_sequence: false, divisor: totals.tokens.max(1.0) },
            LossAggregation::DrGrpo => Normalizer { per_sequence: false, divisor: (totals.rows * max_completion_length) as f64 },
        }
    }
}

/// How a (micro-)batch's per-token losses `l` become its share of the
/// optimizer batch's loss.
#[derive(Debug, Clone, Copy)]
pub enum Aggregate<'a> {
    /// Right-padded rows, one sequence each: `aggregation`'s own formula over
    /// the optimizer batch of `totals` ([`LossAggregation`]).
    Rows { aggregation: LossAggregation, totals: BatchTotals, max_completion_length: usize },
    /// `Σ w·l` with each token's weight `w` `[b, t]` (0 off the mask; packed
    /// rows, where a row is no sequence: [`token_weight`]).
    Weights(&'a Tensor),
}

impl Aggregate<'_> {
    /// The rows' formula of `cfg.aggregation` over the batch of `totals`.
    pub fn rows(cfg: &GrpoLossConfig, totals: BatchTotals) -> Aggregate<'static> {
        Aggregate::Rows { aggregation: cfg.aggregation, totals, max_completion_length: cfg.max_completion_length }
    }

    /// The scalar share of the loss of per-token losses `l` `[b, t]`.
    pub fn apply(&self, l: &Tensor, mask: &Tensor) -> Result<Tensor> {
        let (aggregation, totals, max_len) = match *self {
            Aggregate::Weights(w) => return Ok((l * w)?.sum_all()?),
            Aggregate::Rows { aggregation, totals, max_completion_length } => (aggregation, totals, max_completion_length),
        };
        let masked = (l * mask)?;
        let n = Normalizer::of(aggregation, totals, max_len);
        let summed = if n.per_sequence {
            let lens = mask.sum(D::Minus1)?.clamp(1.0, f64::INFINITY)?;
            masked.sum(D::Minus1)?.div(&lens)?.sum_all()?
        } else {
            masked.sum_all()?
        };
        Ok((summed / n.divisor)?)
    }

    /// `d(share) / d(l)` `[b, t]`: each token's weight, computed as the
    /// backward pass of [`Aggregate::apply`] computes it (same bits).
    pub fn weights(&self, mask: &Tensor) -> Result<Tensor> {
        let (aggregation, totals, max_len) = match *self {
            Aggregate::Weights(w) => return Ok(w.clone()),
            Aggregate::Rows { aggregation, totals, max_completion_length } => (aggregation, totals, max_completion_length),
        };
        let (b, _) = mask.dims2()?;
        // The scalar's own gradient, as Candle's `x / s` (an affine map) passes it back.
        let scale = |s: f64| Tensor::full(s as f32, b, mask.device());
        let n = Normalizer::of(aggregation, totals, max_len);
        let mut per_row = scale(1.0 / n.divisor)?;
        if n.per_sequence {
            per_row = per_row.div(&mask.sum(D::Minus1)?.clamp(1.0, f64::INFINITY)?)?;
        }
        Ok(mask.broadcast_mul(&per_row.unsqueeze(1)?)?)
    }
}

/// What [`grpo_loss`] returns.
#[derive(Debug, Clone)]
pub struct Loss {
    /// The (micro-)batch's share of the loss (differentiable).
    pub loss: Tensor,
    /// Its metric sums, to be added over the micro-batches and ranks.
    pub sums: LossSums,
}

/// The GRPO loss of one (micro-)batch, TRL's `GRPOTrainer._compute_loss`
/// step by step: the ratio (per token, or GSPO's per sequence:
/// [`ImportanceSampling`]), the clipped surrogate, the truncated importance
/// weights, the k3 KL, the aggregation, and the metric sums. Both
/// micro-batch layouts call it; when the loss is linear in the log-probs its
/// gradient is taken in closed form instead ([`linear_coefficients`]).
pub fn grpo_loss(x: LossInputs<'_>, aggregate: Aggregate<'_>, cfg: &GrpoLossConfig) -> Result<Loss> {
    let (b, t) = x.logp.dims2()?;
    x.check(b, t, cfg)?;
    let adv = per_token_advantages(x.advantages, b, t)?;
    let on = x.mask.gt(0.0)?;
    let current = x.logp.detach();
    // logp_old: stored before the first of mu updates, or the current one.
    let old = x.old.map_or_else(|| current.clone(), Tensor::detach);
    // Rollout drift; with "tis", the truncated importance weights.
    let tis = cfg.rollout_correction == RolloutCorrection::Tis;
    let drift = x.rollout.map(|r| Drift::of(&old, r, x.mask, tis.then_some(cfg.tis_cap))).transpose()?;
    // coef_1 = exp(logp - logp_old), coef_2 = clamp(coef_1, 1 - eps_low, 1 + eps_high)
    let log_ratio = (x.logp - on.where_cond(&old, &current)?)?;
    // GSPO: log_ratio's mean over each sequence's policy tokens.
    let sequence = match cfg.importance_sampling {
        ImportanceSampling::Token => None,
        ImportanceSampling::Sequence => Some(SequenceMean::of(&log_ratio, x.mask, x.sequences)?),
    };
    let ratio = sequence.as_ref().map_or(&log_ratio, |s| &s.mean).exp()?;
    let clipped = clamp_ratio(&ratio, cfg.clip)?;
    // per_token_loss = -min(coef_1 * A, coef_2 * A), times the TIS weight
    let mut per_token = ratio.broadcast_mul(&adv)?.minimum(&clipped.broadcast_mul(&adv)?)?.neg()?;
    if sequence.is_some() {
        // [b, 1] per row: every token of the sequence carries it.
        per_token = per_token.broadcast_as((b, t))?;
    }
    if let (true, Some(d)) = (tis, &drift) {
        per_token = (per_token * d.ratio.detach())?;
    }
    // + beta * (exp(ref - logp) - (ref - logp) - 1)
    let mut kl = None;
    if let (Some(r), true) = (x.reference, cfg.beta != 0.0) {
        let diff = (on.where_cond(&r.detach(), &current)? - x.logp)?;
        let k3 = ((diff.exp()? - &diff)? - 1.0)?;
        per_token = (per_token + (&k3 * cfg.beta)?)?;
        kl = Some(k3.detach());
    }
    let loss = aggregate.apply(&per_token, x.mask)?;
    // Clip fractions: of the policy tokens, or (sequence level) of the sequences.
    let ratio = ratio.detach().broadcast_as((b, t))?;
    let clip_units = sequence.as_ref().map(|s| ClipUnits { share: &s.share, count: s.count });
    let mut sums = LossSums::of(&loss, &ratio, kl.as_ref(), x.entropy, &adv, x.mask, cfg.clip, clip_units)?;
    if let Some(d) = drift {
        sums.drift = d.sums;
    }
    Ok(Loss { loss, sums })
}

/// `clamp(ratio, 1 - low, 1 + high)` with torch.clamp's gradient: 1 strictly
/// inside the range, 0 outside it and at its ends (Candle's clamp would
/// pass half at an end). The on-policy ratio is exactly 1, which is an end
/// when an epsilon is 0.
fn clamp_ratio(ratio: &Tensor, clip: ClipRange) -> Result<Tensor> {
    let (lo, hi) = (1.0 - clip.low, 1.0 + clip.high);
    let inside = ratio.gt(lo)?.mul(&ratio.lt(hi)?)?;
    Ok(inside.where_cond(ratio, &ratio.clamp(lo, hi)?.detach())?)
}

/// The coefficients `c` `[b, t]` of the loss as `Σ c·logp` plus a constant,
/// where it is linear in the log-probs: on-policy (mu = 1, the ratio is 1 in
/// value and never clipped), no KL and no TIS. Each policy token's gradient
/// is `-A·w` (`w` its aggregation weight), halved when 1 is an end of the
/// clip range (an epsilon of 0: torch.clamp passes nothing there and
/// torch.min halves a tie, as TRL computes it). Equal, bit for bit, to the
/// gradient [`grpo_loss`]'s autograd gives (a test checks it).
pub fn linear_coefficients(advantages: &Tensor, mask: &Tensor, aggregate: Aggregate<'_>, clip: ClipRange) -> Result<Tensor> {
    let (b, t) = mask.dims2()?;
    let adv = per_token_advantages(advantages, b, t)?;
    let c = aggregate.weights(mask)?.broadcast_mul(&adv)?.neg()?;
    let one_inside = ((1.0 - clip.low) as f32) < 1.0 && ((1.0 + clip.high) as f32) > 1.0;
    Ok(if one_inside { c } else { (c * 0.5)? })
}

impl LossInputs<'_> {
    fn check(&self, b: usize, t: usize, cfg: &GrpoLossConfig) -> Result<()> {
        let bad = |msg: String| Err(Error::invalid("grpo loss", msg));
        let named = [("old log-probs", self.old), ("mask", Some(self.mask)), ("reference log-probs", self.reference), ("rollout log-probs", self.rollout)];
        for (name, x) in named {
            if let Some(x) = x.filter(|x| x.dims() != [b, t]) {
                return bad(format!("{name} are {:?}, log-probs are [{b}, {t}]", x.dims()));
            }
        }
        if cfg.beta != 0.0 && self.reference.is_none() {
            return bad(format!("beta is {} but no reference log-probs were given", cfg.beta));
        }
        if cfg.rollout_correction == RolloutCorrection::Tis && self.rollout.is_none() {
            return bad("rollout_correction = \"tis\" needs the rollout's log-probs".into());
        }
        Ok(())
    }
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
/// `sequence_tokens` policy tokens: `Σ_{i,t} w_i·m·l` equals the rows'
/// formula ([`Aggregate::Rows`]). Packed rows use it, where a row is no sequence.
pub fn token_weight(aggregation: LossAggregation, totals: BatchTotals, max_completion_length: usize, sequence_tokens: f64) -> f64 {
    let n = Normalizer::of(aggregation, totals, max_completion_length);
    if n.per_sequence {
        1.0 / (sequence_tokens.max(1.0) * n.divisor)
    } else {
        1.0 / n.divisor
    }
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
    /// What the clip sums are fractions of: the policy tokens (token-level
    /// ratios) or the sequences (sequence level, as TRL counts them).
    pub clip_count: f64,
    /// Rollout-vs-trainer drift on the computed policy tokens.
    pub drift: DriftSums,
    /// Rows left out of the forward/backward (zero advantage, beta = 0).
    pub skipped_rows: usize,
}

/// The units of the clip fractions when they are not the policy tokens:
/// each token's share of its sequence (`[b, t]`, summing to 1 per
/// sequence) and the number of sequences.
#[derive(Debug, Clone, Copy)]
pub struct ClipUnits<'a> {
    pub share: &'a Tensor,
    pub count: f64,
}

impl LossSums {
    /// Sums for one micro-batch: `is_low_clipped = r < 1 - low and A < 0`,
    /// `is_high_clipped = r > 1 + high and A > 0`, region = either (TRL),
    /// counted per policy token, or per sequence with `units`.
    /// `ratio`, `kl`, `entropy` and `mask` are `[b, t]`, `adv` broadcasts to it.
    #[allow(clippy::too_many_arguments)]
    pub fn of(loss: &Tensor, ratio: &Tensor, kl: Option<&Tensor>, entropy: Option<&Tensor>, adv: &Tensor, mask: &Tensor, clip: ClipRange, units: Option<ClipUnits<'_>>) -> Result<Self> {
        let msum = |x: &Tensor| -> Result<f64> {
            Ok((x.to_dtype(DType::F32)? * mask)?
                .to_dtype(DType::F64)?
                .sum_all()?
                .to_scalar::<f64>()?)
        };
        let adv = adv.broadcast_as(ratio.shape())?;
        let low = ratio.lt(1.0 - clip.low)?.mul(&adv.lt(0.0)?)?;
        let high = ratio.gt(1.0 + clip.high)?.mul(&adv.gt(0.0)?)?;
        let region = low.maximum(&high)?;
        let tokens = mask.to_dtype(DType::F64)?.sum_all()?.to_scalar::<f64>()?;
        let (clip_low, clip_high, clip_region, clip_count) = match units {
            None => (msum(&low)?, msum(&high)?, msum(&region)?, tokens),
            Some(u) => {
                let usum = |x: &Tensor| -> Result<f64> { Ok((x.to_dtype(DType::F32)? * u.share)?.to_dtype(DType::F64)?.sum_all()?.to_scalar::<f64>()?) };
                (usum(&low)?, usum(&high)?, usum(&region)?, u.count)
            }
        };
        Ok(LossSums {
            loss: loss.to_dtype(DType::F64)?.to_scalar::<f64>()?,
            tokens,
            kl: kl.map(msum).transpose()?,
            entropy: entropy.map(msum).transpose()?,
            clip_low,
            clip_high,
            clip_region,
            clip_count,
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
        self.clip_count += o.clip_count;
        self.drift.add(&o.drift);
        self.skipped_rows += o.skipped_rows;
    }

    /// Global masked means over the policy tokens (the clip fractions over
    /// [`LossSums::clip_count`]).
    pub fn metrics(&self) -> GrpoMetrics {
        let n = self.tokens.max(1.0);
        let c = self.clip_count.max(1.0);
        GrpoMetrics {
            loss: self.loss,
            kl: self.kl.map(|k| k / n),
            entropy: self.entropy.map(|e| e / n),
            clip_ratio_low_mean: self.clip_low / c,
            clip_ratio_high_mean: self.clip_high / c,
            clip_ratio_region_mean: self.clip_region / c,
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
