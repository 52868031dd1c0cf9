//! Micro-batching with gradient accumulation. An optimizer batch of `B` rows
//! is cut into row ranges, or packed into rows of a token budget
//! ([`crate::packing`]); each micro-batch's loss is its share of the
//! aggregation over the whole batch ([`BatchTotals`] of the full mask), so the
//! sum of the micro-batch gradients is the gradient of the one-big-batch loss,
//! whatever the split.

use super::drift::RolloutCorrection;
use super::loss::{grpo_loss, linear_coefficients, token_weight, Aggregate, BatchTotals, GrpoLossConfig, GrpoMetrics, ImportanceSampling, LossInputs, LossSums, Segments};
use crate::backward::{backward_micro_batch, micro_batches, used_columns, LinearLoss, LogprobPass};
use crate::error::{Error, Result};
use lm::model::cache::Positions;
use lm::model::CausalLm;
use crate::dist::Collective;
use crate::optim::Gradients;
use crate::packing::{lengths_of_rows, plan, MicroBatching, Pack, Padding};
use candle_core::{DType, Tensor, Var};
use std::collections::BTreeMap;

/// The `logp_old` of the ratio.
#[derive(Debug, Clone)]
pub enum OldLogprobs {
    /// `num_iterations` (mu) == 1: the policy that sampled is the one being
    /// updated, so `logp_old` is the detached current log-prob (ratio 1 in
    /// value, gradient `A`), as TRL does.
    Current,
    /// mu > 1: log-probs `[B, T]` recorded before the first of the mu updates
    /// on this batch (see [`detached_logprobs`](crate::backward::detached_logprobs)).
    Stored(Tensor),
}

/// One optimizer batch of right-padded episodes.
#[derive(Debug, Clone)]
pub struct GrpoBatch {
    /// `[B, T]` u32 token ids, each row an episode from position 0.
    pub tokens: Tensor,
    /// `[B, T]` f32, 1 on the policy's own tokens (never column 0).
    pub mask: Tensor,
    /// `[B]` f32, one advantage per row.
    pub advantages: Tensor,
    pub old_logprobs: OldLogprobs,
    /// `[B, T]` f32 log-probs under the frozen reference model (required
    /// when beta > 0; see [`detached_logprobs`](crate::backward::detached_logprobs)).
    pub ref_logprobs: Option<Tensor>,
    /// `[B, T]` f32 log-probs the rollout sampled with (0 off the policy
    /// tokens): the drift metrics and `rollout_correction` compare them with
    /// the trainer's ([`super::drift`]).
    pub rollout_logprobs: Option<Tensor>,
}

impl GrpoBatch {
    /// Rows `rows` (in that order), trimmed to the columns up to the last
    /// policy token of those rows (later columns cannot change earlier
    /// log-probs).
    pub fn select(&self, rows: &[usize]) -> Result<GrpoBatch> {
        let device = self.tokens.device();
        let ids = Tensor::from_vec(rows.iter().map(|&r| r as u32).collect::<Vec<_>>(), rows.len(), device)?;
        let mask = self.mask.index_select(&ids, 0)?;
        let cols = used_columns(&mask)?;
        let cut = |t: &Tensor| -> Result<Tensor> { Ok(t.index_select(&ids, 0)?.narrow(1, 0, cols)?) };
        Ok(GrpoBatch {
            tokens: cut(&self.tokens)?,
            mask: mask.narrow(1, 0, cols)?,
            advantages: self.advantages.index_select(&ids, 0)?,
            old_logprobs: match &self.old_logprobs {
                OldLogprobs::Current => OldLogprobs::Current,
                OldLogprobs::Stored(t) => OldLogprobs::Stored(cut(t)?),
            },
            ref_logprobs: self.ref_logprobs.as_ref().map(cut).transpose()?,
            rollout_logprobs: self.rollout_logprobs.as_ref().map(cut).transpose()?,
        })
    }

    fn check(&self) -> Result<(usize, usize)> {
        let (b, t) = self.tokens.dims2()?;
        let bad = |name: &str, dims: &[usize], want: String| {
            Err(Error::invalid(
                "grpo batch",
                format!("{name} is {dims:?}, expected {want}"),
            ))
        };
        if self.mask.dims() != [b, t] {
            return bad("mask", self.mask.dims(), format!("[{b}, {t}]"));
        }
        if self.advantages.dims() != [b] {
            return bad("advantages", self.advantages.dims(), format!("[{b}]"));
        }
        if let OldLogprobs::Stored(o) = &self.old_logprobs {
            if o.dims() != [b, t] {
                return bad("old log-probs", o.dims(), format!("[{b}, {t}]"));
            }
        }
        for (name, x) in [("reference log-probs", &self.ref_logprobs), ("rollout log-probs", &self.rollout_logprobs)] {
            if let Some(x) = x {
                if x.dims() != [b, t] {
                    return bad(name, x.dims(), format!("[{b}, {t}]"));
                }
            }
        }
        if t > 0
            && self
                .mask
                .narrow(1, 0, 1)?
                .to_dtype(DType::F64)?
                .sum_all()?
                .to_scalar::<f64>()?
                != 0.0
        {
            return Err(Error::invalid(
                "grpo batch",
                "mask is 1 in column 0, which no token predicts",
            ));
        }
        Ok((b, t))
    }
}

/// Loss and gradients of one optimizer batch, micro-batched as `micro`:
/// for each micro-batch, forward, [`grpo_loss`] (its share of the
/// aggregation over the whole batch), backward, and the gradients of `params`
/// (the model's `Var`s by name) added into the result in f32. Parameters
/// that receive no gradient are absent from the result. Padded row ranges
/// ([`MicroBatching::Rows`]) and packed rows ([`MicroBatching::Tokens`]) give
/// the same loss and gradients up to float rounding. With
/// `Recompute::PerLayer` (`cfg.recompute`) the decoder layers keep only
/// their inputs in the forward pass and are recomputed one at a time in the
/// backward pass ([`CausalLm::backward_layers`]): same gradients, less memory.
pub fn accumulate_gradients(
    model: &CausalLm,
    params: &BTreeMap<String, Var>,
    batch: &GrpoBatch,
    cfg: &GrpoLossConfig,
    micro: MicroBatching,
) -> Result<(Gradients, GrpoMetrics)> {
    let totals = BatchTotals::of_mask(&batch.mask)?;
    let (grads, sums, padding) = accumulate_share(model, params, batch, cfg, micro, totals)?;
    let mut metrics = sums.metrics();
    metrics.padding = padding;
    Ok((grads, metrics))
}

/// [`accumulate_gradients`] of a share of a larger optimizer batch whose
/// totals are `totals` (data parallelism: each rank's rows, the whole
/// batch's row and token counts), returning the loss sums (to be added over
/// the shares before [`LossSums::metrics`]) and the padding.
pub fn accumulate_share(
    model: &CausalLm,
    params: &BTreeMap<String, Var>,
    batch: &GrpoBatch,
    cfg: &GrpoLossConfig,
    micro: MicroBatching,
    totals: BatchTotals,
) -> Result<(Gradients, LossSums, Padding)> {
    // The settings were checked once, at config load (GrpoLossConfig::validate).
    debug_assert!(cfg.validate().is_ok(), "{:?}", cfg.validate());
    // The log-probs the settings need (reference for beta, rollout's for
    // TIS) are checked where the loss reads them, in `grpo_loss`.
    let (b, _) = batch.check()?;
    // The mask on the host once: lengths, token counts and packed weights.
    let mask_rows = batch.mask.to_dtype(DType::F32)?.to_vec2::<f32>()?;
    let mut lengths = lengths_of_rows(&mask_rows);
    let advantages = batch.advantages.to_dtype(DType::F32)?.to_vec1::<f32>()?;
    let mut acc = Accumulated::default();
    // Zero advantage and no KL: the row's loss and gradient are exactly 0.
    if cfg.beta == 0.0 && cfg.skip_zero_advantage {
        let zero: Vec<usize> = (0..b).filter(|&r| advantages[r] == 0.0 && lengths[r] > 0).collect();
        for r in zero {
            lengths[r] = 0;
            let tokens = mask_rows[r].iter().map(|&m| m as f64).sum::<f64>();
            acc.sums.skipped_rows += 1;
            acc.sums.tokens += tokens;
            // The clip fractions' units: its tokens, or the sequence.
            acc.sums.clip_count += match cfg.importance_sampling {
                ImportanceSampling::Token => tokens,
                ImportanceSampling::Sequence => 1.0,
            };
        }
    }
    match micro {
        MicroBatching::Rows(n) => {
            let rows: Vec<usize> = (0..b).filter(|&r| lengths[r] > 0).collect();
            for range in micro_batches(rows.len(), n)? {
                let mb = batch.select(&rows[range.clone()])?;
                acc.padding.add(mb.tokens.elem_count(), rows[range].iter().map(|&r| lengths[r]).sum());
                padded_micro_batch(model, params, &mb, cfg, totals, &mut acc)?;
            }
        }
        MicroBatching::Tokens(budget) => {
            for pack in plan(&lengths, budget)? {
                acc.padding.add(pack.width(), pack.width());
                packed_micro_batch(model, params, batch, &pack, &mask_rows, &advantages, cfg, totals, &mut acc)?;
            }
        }
    }
    Ok((acc.grads, acc.sums, acc.padding))
}

/// What the micro-batches of one optimizer batch add up.
#[derive(Default)]
struct Accumulated {
    grads: Gradients,
    sums: LossSums,
    padding: Padding,
}

/// One micro-batch of right-padded rows: the aggregation's own formula with
/// the whole batch's totals.
fn padded_micro_batch(model: &CausalLm, params: &BTreeMap<String, Var>, mb: &GrpoBatch, cfg: &GrpoLossConfig, totals: BatchTotals, acc: &mut Accumulated) -> Result<()> {
    let (rows, cols) = mb.tokens.dims2()?;
    let mask = mb.mask.to_dtype(DType::F32)?;
    let adv = mb.advantages.to_dtype(DType::F32)?;
    let old = match &mb.old_logprobs {
        OldLogprobs::Current => None,
        OldLogprobs::Stored(t) => Some(t),
    };
    let terms = Terms { old, reference: mb.ref_logprobs.as_ref(), rollout: mb.rollout_logprobs.as_ref(), advantages: &adv, mask: &mask, sequences: None };
    micro_batch(model, params, &mb.tokens, &Positions::sequential(rows, cols), terms, Aggregate::rows(cfg, totals), cfg, acc)
}

/// One packed row of several episodes: per-token advantages, each policy
/// token weighted by its episode's share of the aggregation ([`token_weight`]),
/// and (sequence-level ratios) each column's episode ([`Segments`]).
#[allow(clippy::too_many_arguments)]
fn packed_micro_batch(
    model: &CausalLm,
    params: &BTreeMap<String, Var>,
    batch: &GrpoBatch,
    pack: &Pack,
    mask_rows: &[Vec<f32>],
    advantages: &[f32],
    cfg: &GrpoLossConfig,
    totals: BatchTotals,
    acc: &mut Accumulated,
) -> Result<()> {
    let device = batch.tokens.device();
    let tokens = pack.gather(&batch.tokens)?;
    let mask = pack.gather(&batch.mask)?.to_dtype(DType::F32)?;
    let adv = pack.gather_host(|r, n| vec![advantages[r]; n], device)?;
    let weights = pack.gather_host(
        |r, n| {
            let w = token_weight(cfg.aggregation, totals, cfg.max_completion_length, mask_rows[r].iter().map(|&m| m as f64).sum());
            mask_rows[r][..n].iter().map(|&m| (m as f64 * w) as f32).collect()
        },
        device,
    )?;
    let old = match &batch.old_logprobs {
        OldLogprobs::Current => None,
        OldLogprobs::Stored(t) => Some(pack.gather(t)?),
    };
    let reference = batch.ref_logprobs.as_ref().map(|t| pack.gather(t)).transpose()?;
    let rollout = batch.rollout_logprobs.as_ref().map(|t| pack.gather(t)).transpose()?;
    let sequences = match cfg.importance_sampling {
        ImportanceSampling::Token => None,
        ImportanceSampling::Sequence => Some(Segments::of_lengths(&pack.items.iter().map(|&(_, n)| n).collect::<Vec<_>>(), device)?),
    };
    let terms = Terms { old: old.as_ref(), reference: reference.as_ref(), rollout: rollout.as_ref(), advantages: &adv, mask: &mask, sequences: sequences.as_ref() };
    micro_batch(model, params, &tokens, &pack.positions(), terms, Aggregate::Weights(&weights), cfg, acc)
}

/// A micro-batch's loss inputs besides its log-probs (see [`LossInputs`]).
struct Terms<'a> {
    old: Option<&'a Tensor>,
    reference: Option<&'a Tensor>,
    rollout: Option<&'a Tensor>,
    advantages: &'a Tensor,
    mask: &'a Tensor,
    sequences: Option<&'a Segments>,
}

impl<'a> Terms<'a> {
    fn with(&self, logp: &'a Tensor, entropy: Option<&'a Tensor>) -> LossInputs<'a> {
        LossInputs { logp, old: self.old, reference: self.reference, rollout: self.rollout, advantages: self.advantages, mask: self.mask, entropy, sequences: self.sequences }
    }
}

/// One micro-batch, whatever its layout: forward, [`grpo_loss`], backward.
/// When the loss is linear in the log-probs ([`fold_loss`]) it is folded
/// into the log-prob op with its closed-form coefficients
/// ([`linear_coefficients`]), and `grpo_loss` gives its value and metrics.
#[allow(clippy::too_many_arguments)]
fn micro_batch(
    model: &CausalLm,
    params: &BTreeMap<String, Var>,
    tokens: &Tensor,
    positions: &Positions,
    terms: Terms<'_>,
    aggregate: Aggregate<'_>,
    cfg: &GrpoLossConfig,
    acc: &mut Accumulated,
) -> Result<()> {
    let pass = LogprobPass { temperature: cfg.temperature, entropy: cfg.entropy, recompute: cfg.recompute };
    let linear = fold_loss(terms.old.is_none(), cfg).then(|| linear_coefficients(terms.advantages, terms.mask, aggregate, cfg.clip)).transpose()?;
    let sums = &mut acc.sums;
    backward_micro_batch(model, params, tokens, positions, pass, &mut acc.grads, linear.as_ref().map(|c| LinearLoss { coefficients: c, mask: terms.mask }), |logp, entropy| {
        let out = grpo_loss(terms.with(logp, entropy), aggregate, cfg)?;
        sums.add(&out.sums);
        Ok(out.loss)
    })
}

/// Whether the loss of a micro-batch is linear in its log-probs, so that it
/// can be folded into the log-prob op: on-policy (mu = 1: the ratio is
/// `exp(logp - logp.detach())`, 1 in value, never clipped, gradient `A`), no
/// KL term, and no importance weights (those of `"tis"` are computed from
/// the current log-probs). Sequence-level ratios (GSPO) fold too: on-policy
/// the sequence's ratio is exactly 1 and its gradient reaches each of its
/// `n` policy tokens as `1/n`, so token `t` gets `-A · Σ_s w_s / n`, which is
/// `-A·w` because every aggregation weighs a sequence's tokens alike
/// ([`token_weight`]); equal up to float rounding, not bit for bit.
fn fold_loss(on_policy: bool, cfg: &GrpoLossConfig) -> bool {
    cfg.fold_linear_loss && on_policy && cfg.beta == 0.0 && cfg.rollout_correction != RolloutCorrection::Tis
}

/// GRPO's loss sums added over ranks (rank order): sums add, the drift's
/// maxima and minima stay maxima and minima.
pub fn sum_loss_sums(dist: &dyn Collective, sums: &LossSums, padding: Padding) -> Result<(LossSums, Padding)> {
    if dist.world() == 1 {
        return Ok((*sums, padding));
    }
    let opt = |x: Option<f64>| [f64::from(u8::from(x.is_some())), x.unwrap_or(0.0)];
    let d = &sums.drift;
    let [kl_on, kl] = opt(sums.kl);
    let [ent_on, ent] = opt(sums.entropy);
    let local = [
        sums.loss,
        sums.tokens,
        kl_on,
        kl,
        ent_on,
        ent,
        sums.clip_low,
        sums.clip_high,
        sums.clip_region,
        sums.skipped_rows as f64,
        d.tokens,
        d.diff_sum,
        d.diff_max,
        d.ratio_sum,
        d.ratio_min,
        d.ratio_max,
        padding.slots as f64,
        padding.tokens as f64,
        sums.clip_count,
    ];
    let n = local.len();
    let all = dist.all_gather_f64(&local)?;
    let mut total = LossSums::default();
    let mut pad = Padding::default();
    for v in all.chunks_exact(n) {
        let mut s = LossSums {
            loss: v[0],
            tokens: v[1],
            kl: (v[2] != 0.0).then_some(v[3]),
            entropy: (v[4] != 0.0).then_some(v[5]),
            clip_low: v[6],
            clip_high: v[7],
            clip_region: v[8],
            skipped_rows: v[9] as usize,
            clip_count: v[18],
            ..LossSums::default()
        };
        s.drift.tokens = v[10];
        s.drift.diff_sum = v[11];
        s.drift.diff_max = v[12];
        s.drift.ratio_sum = v[13];
        s.drift.ratio_min = v[14];
        s.drift.ratio_max = v[15];
        total.add(&s);
        pad.add(v[16] as usize, v[17] as usize);
    }
    Ok((total, pad))
}
