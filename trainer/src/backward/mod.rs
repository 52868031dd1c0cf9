//! What GRPO and SFT share to turn a loss on per-token log-probabilities
//! into gradients: the log-prob passes ([`logprobs`]: plain, from hidden
//! states, and folded with a linear loss), the cut of a batch into
//! micro-batches, and one micro-batch's forward and backward
//! ([`backward_micro_batch`]) with its gradients accumulated by name.
//!
//! The losses themselves stay with their algorithms: `grpo::loss::grpo_loss`
//! and SFT's cross-entropy (`sft::sft_share_gradients`).

pub mod logprobs;

pub use logprobs::{hidden_logprobs, hidden_weighted_logprobs, sequence_logprobs, WeightedPass};

use crate::error::{Error, Result};
use lm::model::cache::Positions;
use lm::model::recompute::Recompute;
use lm::model::CausalLm;
use crate::optim::Gradients;
use crate::packing::{plan, trained_lengths, MicroBatching};
use candle_core::backprop::GradStore;
use candle_core::{DType, Tensor, Var};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::ops::Range;

/// Whether the mean token entropy is computed for the metrics (one extra
/// softmax over the vocabulary, on detached logits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntropyMetric {
    /// Compute `entropy` (TRL always logs it).
    Compute,
    /// Skip it; [`GrpoMetrics::entropy`](crate::grpo::GrpoMetrics::entropy) is `None`.
    Skip,
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
            // lm's loop takes lm's errors: this crate's comes back out as it was.
            let mut failed = None;
            let layers = model.backward_layers(saved, &grad_top, |s| {
                add_gradients(params, s, grads).map_err(|e| {
                    let message = e.to_string();
                    failed = Some(e);
                    lm::error::Error::invalid("gradients", message)
                })
            });
            if let Some(e) = failed {
                return Err(e);
            }
            layers?;
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
