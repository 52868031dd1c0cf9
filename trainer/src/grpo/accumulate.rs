//! Micro-batching with gradient accumulation. An optimizer batch of `B` rows
//! is cut into row ranges, or packed into rows of a token budget
//! ([`crate::packing`]); each micro-batch's loss is its share of the
//! aggregation over the whole batch ([`BatchTotals`] of the full mask), so the
//! sum of the micro-batch gradients is the gradient of the one-big-batch loss,
//! whatever the split.

use super::drift::{Drift, RolloutCorrection};
use super::loss::{
    aggregate, per_token_loss_weighted, token_weight, BatchTotals, EntropyMetric, GrpoLossConfig, GrpoMetrics, LossSums,
};
use super::{hidden_logprobs, hidden_weighted_logprobs, sequence_logprobs};
use crate::error::{Error, Result};
use crate::model::cache::Positions;
use crate::model::recompute::Recompute;
use crate::model::CausalLm;
use crate::optim::Gradients;
use crate::packing::{lengths_of_rows, plan, trained_lengths, MicroBatching, Pack, Padding};
use candle_core::backprop::GradStore;
use candle_core::{DType, Tensor, Var};
use std::collections::BTreeMap;
use std::ops::Range;

/// The `logp_old` of the ratio.
#[derive(Debug, Clone)]
pub enum OldLogprobs {
    /// `num_iterations` (mu) == 1: the policy that sampled is the one being
    /// updated, so `logp_old` is the detached current log-prob (ratio 1 in
    /// value, gradient `A`), as TRL does.
    Current,
    /// mu > 1: log-probs `[B, T]` recorded before the first of the mu updates
    /// on this batch (see [`detached_logprobs`]).
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
    /// when beta > 0; see [`detached_logprobs`]).
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

/// Columns `0..=last` where `last` is the last column with a nonzero mask in
/// any row (at least 1 column).
pub fn used_columns(mask: &Tensor) -> Result<usize> {
    let (_, t) = mask.dims2()?;
    let any = mask.to_dtype(DType::F32)?.abs()?.max(0)?.to_vec1::<f32>()?;
    Ok(any
        .iter()
        .rposition(|&x| x != 0.0)
        .map_or(1.min(t), |j| j + 1))
}

/// Contiguous row ranges of at most `micro_rows` rows covering `0..rows`.
pub fn micro_batches(rows: usize, micro_rows: usize) -> Result<Vec<Range<usize>>> {
    if micro_rows == 0 {
        return Err(Error::invalid(
            "micro-batching",
            "micro-batch size is 0 rows",
        ));
    }
    Ok((0..rows)
        .step_by(micro_rows)
        .map(|s| s..(s + micro_rows).min(rows))
        .collect())
}

/// Detached log-probs `[B, T]` of `tokens` under `model` (old log-probs for
/// mu > 1, or the reference model's for the KL), micro-batched as `micro`.
/// Never part of a gradient graph. With [`MicroBatching::Rows`] every column
/// is computed; with [`MicroBatching::Tokens`] each row up to its last
/// `mask` column, and 0 past it (columns the loss never reads).
pub fn detached_logprobs(
    model: &CausalLm,
    tokens: &Tensor,
    mask: &Tensor,
    temperature: f64,
    micro: MicroBatching,
) -> Result<Tensor> {
    let (b, t) = tokens.dims2()?;
    let one = |tokens: &Tensor, positions: &Positions| -> Result<Tensor> {
        Ok(sequence_logprobs(model, tokens, positions, temperature, EntropyMetric::Skip)?.0.detach())
    };
    match micro {
        MicroBatching::Rows(n) => {
            let parts = micro_batches(b, n)?
                .into_iter()
                .map(|r| one(&tokens.narrow(0, r.start, r.len())?, &Positions::sequential(r.len(), t)))
                .collect::<Result<Vec<_>>>()?;
            Ok(Tensor::cat(&parts, 0)?)
        }
        MicroBatching::Tokens(budget) => {
            let mut rows: Vec<Option<Tensor>> = vec![None; b];
            for pack in plan(&trained_lengths(mask)?, budget)? {
                let lp = one(&pack.gather(tokens)?, &pack.positions())?;
                for (&(r, n), o) in pack.items.iter().zip(pack.offsets()) {
                    // Column 0 of each sequence is 0, as in the padded layout.
                    rows[r] = Some(lp.narrow(1, o + 1, n - 1)?.pad_with_zeros(1, 1, t - n)?);
                }
            }
            let zeros = Tensor::zeros((1, t), DType::F32, tokens.device())?;
            Ok(Tensor::cat(&rows.into_iter().map(|r| r.unwrap_or_else(|| zeros.clone())).collect::<Vec<_>>(), 0)?)
        }
    }
}

/// Loss and gradients of one optimizer batch, micro-batched as `micro`:
/// for each micro-batch, forward, [`per_token_loss`], its share of the
/// aggregation over the whole batch, backward, and the gradients of `params`
/// (the model's `Var`s by name) added into the result in f32. Parameters
/// that receive no gradient are absent from the result. Padded row ranges
/// ([`MicroBatching::Rows`]) and packed rows ([`MicroBatching::Tokens`]) give
/// the same loss and gradients up to float rounding. With
/// [`Recompute::PerLayer`] (`cfg.recompute`) the decoder layers keep only
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
    cfg.validate()?;
    let (b, _) = batch.check()?;
    if cfg.beta != 0.0 && batch.ref_logprobs.is_none() {
        return Err(Error::invalid(
            "grpo batch",
            format!("beta is {} but no reference log-probs were given", cfg.beta),
        ));
    }
    if cfg.rollout_correction == RolloutCorrection::Tis && batch.rollout_logprobs.is_none() {
        return Err(Error::invalid("grpo batch", "rollout_correction = \"tis\" needs the rollout's log-probs"));
    }
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
            acc.sums.skipped_rows += 1;
            acc.sums.tokens += mask_rows[r].iter().map(|&m| m as f64).sum::<f64>();
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

/// One micro-batch's loss terms, whatever its layout: all `[b, t]` (or `[b]`
/// advantages), `old` already resolved.
struct MicroLoss<'a> {
    old: Tensor,
    reference: Option<&'a Tensor>,
    rollout: Option<&'a Tensor>,
    advantages: &'a Tensor,
    mask: &'a Tensor,
}

/// The per-token loss of a micro-batch with its drift measured (and, with
/// `rollout_correction = "tis"`, corrected); the sums go to `sums` once
/// `aggregate` has turned the per-token loss into the micro-batch's share.
fn micro_loss(
    logp: &Tensor,
    entropy: Option<&Tensor>,
    m: MicroLoss<'_>,
    cfg: &GrpoLossConfig,
    sums: &mut LossSums,
    aggregate: impl FnOnce(&Tensor) -> Result<Tensor>,
) -> Result<Tensor> {
    let tis = cfg.rollout_correction == RolloutCorrection::Tis;
    let drift = m.rollout.map(|r| Drift::of(&m.old, r, m.mask, tis.then_some(cfg.tis_cap))).transpose()?;
    let is_weight = if tis { drift.as_ref().map(|d| d.ratio.clone()) } else { None };
    let pt = per_token_loss_weighted(logp, &m.old, m.reference, m.advantages, m.mask, cfg.clip, cfg.beta, is_weight.as_ref())?;
    let loss = aggregate(&pt.loss)?;
    let mut s = LossSums::of(&loss, &pt, entropy, m.advantages, m.mask, cfg.clip)?;
    if let Some(d) = drift {
        s.drift = d.sums;
    }
    sums.add(&s);
    Ok(loss)
}

/// One micro-batch of right-padded rows: the aggregation's own formula with
/// the whole batch's totals.
fn padded_micro_batch(model: &CausalLm, params: &BTreeMap<String, Var>, mb: &GrpoBatch, cfg: &GrpoLossConfig, totals: BatchTotals, acc: &mut Accumulated) -> Result<()> {
    let (rows, cols) = mb.tokens.dims2()?;
    let pass = LogprobPass { temperature: cfg.temperature, entropy: cfg.entropy, recompute: cfg.recompute };
    let mask = mb.mask.to_dtype(DType::F32)?;
    let adv = mb.advantages.to_dtype(DType::F32)?;
    let linear = fold_loss(&mb.old_logprobs, cfg)
        .then(|| linear_coefficients(&mask, |x| surrogate(x, &adv, &mask, cfg, |pt| aggregate(pt, &mask, cfg.aggregation, totals, cfg.max_completion_length))))
        .transpose()?;
    let sums = &mut acc.sums;
    backward_micro_batch(model, params, &mb.tokens, &Positions::sequential(rows, cols), pass, &mut acc.grads, linear.as_ref().map(|c| LinearLoss { coefficients: c, mask: &mask }), |logp, entropy| {
        let old = match &mb.old_logprobs {
            OldLogprobs::Current => logp.detach(),
            OldLogprobs::Stored(t) => t.clone(),
        };
        let m = MicroLoss { old, reference: mb.ref_logprobs.as_ref(), rollout: mb.rollout_logprobs.as_ref(), advantages: &adv, mask: &mask };
        micro_loss(logp, entropy, m, cfg, sums, |pt| aggregate(pt, &mask, cfg.aggregation, totals, cfg.max_completion_length))
    })
}

/// One packed row of several episodes: per-token advantages, and each policy
/// token weighted by its episode's share of the aggregation ([`token_weight`]).
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
    let stored_old = match &batch.old_logprobs {
        OldLogprobs::Current => None,
        OldLogprobs::Stored(t) => Some(pack.gather(t)?),
    };
    let reference = batch.ref_logprobs.as_ref().map(|t| pack.gather(t)).transpose()?;
    let rollout = batch.rollout_logprobs.as_ref().map(|t| pack.gather(t)).transpose()?;
    let pass = LogprobPass { temperature: cfg.temperature, entropy: cfg.entropy, recompute: cfg.recompute };
    let linear = fold_loss(&batch.old_logprobs, cfg)
        .then(|| linear_coefficients(&mask, |x| surrogate(x, &adv, &mask, cfg, |pt| Ok((pt * &weights)?.sum_all()?))))
        .transpose()?;
    let sums = &mut acc.sums;
    backward_micro_batch(model, params, &tokens, &pack.positions(), pass, &mut acc.grads, linear.as_ref().map(|c| LinearLoss { coefficients: c, mask: &mask }), |logp, entropy| {
        let old = stored_old.clone().unwrap_or_else(|| logp.detach());
        let m = MicroLoss { old, reference: reference.as_ref(), rollout: rollout.as_ref(), advantages: &adv, mask: &mask };
        micro_loss(logp, entropy, m, cfg, sums, |pt| Ok((pt * &weights)?.sum_all()?))
    })
}

/// Whether the loss of a micro-batch is linear in its log-probs, so that it
/// can be folded into the log-prob op: on-policy (mu = 1: the ratio is
/// `exp(logp - logp.detach())`, 1 in value, never clipped, gradient `A`), no
/// KL term, and no importance weights (those of `"tis"` are computed from
/// the current log-probs).
fn fold_loss(old: &OldLogprobs, cfg: &GrpoLossConfig) -> bool {
    cfg.fold_linear_loss
        && matches!(old, OldLogprobs::Current) && cfg.beta == 0.0 && cfg.rollout_correction != RolloutCorrection::Tis
}

/// The on-policy clipped surrogate without KL of log-probs `logp` `[b, t]`,
/// aggregated by `aggregate`: the loss [`micro_loss`] computes when
/// [`fold_loss`] holds.
fn surrogate(logp: &Tensor, adv: &Tensor, mask: &Tensor, cfg: &GrpoLossConfig, aggregate: impl FnOnce(&Tensor) -> Result<Tensor>) -> Result<Tensor> {
    let pt = per_token_loss_weighted(logp, &logp.detach(), None, adv, mask, cfg.clip, 0.0, None)?;
    aggregate(&pt.loss)
}

/// The coefficients `c` `[b, t]` (shaped as `like`) of a loss that is
/// linear in the log-probs, `Σ c · logp` plus a constant: its gradient
/// (through the same tensor code) at log-probs 0.
pub fn linear_coefficients(like: &Tensor, loss: impl FnOnce(&Tensor) -> Result<Tensor>) -> Result<Tensor> {
    let x = Var::zeros(like.shape(), DType::F32, like.device())?;
    let store = loss(x.as_tensor())?.backward()?;
    Ok(match store.get(x.as_tensor()) {
        Some(g) => g.clone(),
        None => x.as_tensor().zeros_like()?,
    })
}

/// A loss that is linear in the log-probs: `Σ coefficients · logp` plus a
/// constant, reading the log-probs only where `mask` is non-zero.
#[derive(Debug, Clone, Copy)]
pub struct LinearLoss<'a> {
    /// `[b, t]`, zero outside the mask.
    pub coefficients: &'a Tensor,
    /// `[b, t]`: the positions whose log-probs and entropies the loss and
    /// its metrics read (the policy tokens). The others are not computed and
    /// read as 0.
    pub mask: &'a Tensor,
}

/// How a micro-batch's log-probs are computed.
#[derive(Debug, Clone, Copy)]
pub struct LogprobPass {
    /// Logits are divided by it.
    pub temperature: f64,
    pub entropy: EntropyMetric,
    pub recompute: Recompute,
}

/// One micro-batch's forward and backward: log-probs `[b, t]` of `tokens`
/// at `positions` (see [`sequence_logprobs`]) go to `loss_of`, whose scalar loss is
/// backpropagated; the gradients of `params` are added into `grads`. With
/// [`Recompute::PerLayer`] the decoder layers are recomputed one at a time
/// in the backward pass ([`CausalLm::backward_layers`]). GRPO and SFT share it.
///
/// `linear`: the caller's promise that `loss_of` is `Σ c · logp` plus a
/// constant, with the coefficients `c` `[b, t]` given, and reads the
/// log-probs only inside the given mask. The loss is then folded into the
/// log-prob op ([`hidden_weighted_logprobs`]: one vocabulary-sized product
/// fewer, and none for the positions outside the mask), `loss_of` receives
/// detached log-probs (for its value and metrics) and `Σ c · logp` is what
/// is backpropagated.
#[allow(clippy::too_many_arguments)]
pub fn backward_micro_batch(
    model: &CausalLm,
    params: &BTreeMap<String, Var>,
    tokens: &Tensor,
    positions: &Positions,
    pass: LogprobPass,
    grads: &mut Gradients,
    linear: Option<LinearLoss<'_>>,
    loss_of: impl FnOnce(&Tensor, Option<&Tensor>) -> Result<Tensor>,
) -> Result<()> {
    let (_, cols) = tokens.dims2()?;
    let saved = match pass.recompute {
        Recompute::PerLayer if cols >= 2 => Some(model.forward_layer_inputs(tokens, positions)?),
        _ => None,
    };
    let (logp, entropy, folded) = match (&saved, linear) {
        (_, Some(c)) if cols >= 2 => {
            let hidden = match &saved {
                Some(s) => model.final_norm(s.top().as_tensor())?,
                None => model.forward(tokens, positions, None)?,
            };
            let out = hidden_weighted_logprobs(model, &hidden, tokens, c.coefficients, c.mask, pass.temperature, pass.entropy)?;
            (out.logprobs, out.entropy, Some(out.sum))
        }
        (Some(s), _) => {
            let hidden = model.final_norm(s.top().as_tensor())?;
            let (logp, entropy) = hidden_logprobs(model, &hidden, tokens, pass.temperature, pass.entropy)?;
            (logp, entropy, None)
        }
        (None, _) => {
            let (logp, entropy) = sequence_logprobs(model, tokens, positions, pass.temperature, pass.entropy)?;
            (logp, entropy, None)
        }
    };
    let loss = loss_of(&logp, entropy.as_ref())?;
    let store = folded.unwrap_or(loss).backward()?;
    add_gradients(params, &store, grads)?;
    if let Some(saved) = saved {
        let grad_top = store.get(saved.top().as_tensor()).cloned();
        drop(store);
        if let Some(grad_top) = grad_top {
            model.backward_layers(saved, &grad_top, |s| add_gradients(params, s, grads))?;
        }
    }
    Ok(())
}

/// Adds the gradients in `store` of every parameter in `params` to `grads`.
fn add_gradients(
    params: &BTreeMap<String, Var>,
    store: &GradStore,
    grads: &mut Gradients,
) -> Result<()> {
    for (name, var) in params {
        if let Some(g) = store.get(var.as_tensor()) {
            grads.add(name, &g.to_dtype(DType::F32)?)?;
        }
    }
    Ok(())
}
