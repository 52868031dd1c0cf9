//! The per-token log-probs `[b, t]` every stage uses, from the tokens
//! ([`sequence_logprobs`]) or from the final hidden states
//! ([`hidden_logprobs`]), and folded with a linear loss
//! ([`hidden_weighted_logprobs`]).

use super::EntropyMetric;
use crate::error::{Error, Result};
use lm::logprobs::{token_logprobs, token_logprobs_and_entropy, weighted_logprob_sum};
use lm::model::{cache::Positions, CausalLm};
use candle_core::{DType, Device, Tensor};

/// Log-probs `[b, t]` (f32, differentiable) of `tokens` `[b, t]` under
/// `model` with logits divided by `temperature`: column `j >= 1` is
/// `log p(tokens[j] | tokens[..j])`, column 0 is 0 (nothing predicts the first
/// token). Rows are right-padded sequences at `positions` (`0..t` for each
/// row, or packed sequences each from 0: then a sequence's first column holds
/// the previous one's last prediction, which its mask must exclude). With
/// `entropy`, also the detached per-position entropy `[b, t]` of the
/// temperature-scaled distribution that predicts each token (0 in column 0).
pub fn sequence_logprobs(
    model: &CausalLm,
    tokens: &Tensor,
    positions: &Positions,
    temperature: f64,
    entropy: EntropyMetric,
) -> Result<(Tensor, Option<Tensor>)> {
    let (b, t) = tokens.dims2()?;
    if t < 2 {
        return Ok((Tensor::zeros((b, t), DType::F32, tokens.device())?, None));
    }
    let hidden = model.forward(tokens, positions, None)?;
    hidden_logprobs(model, &hidden, tokens, temperature, entropy)
}

/// [`sequence_logprobs`] from the final hidden states `[b, t, hidden]` of
/// `tokens` `[b, t]` (as [`CausalLm::forward`] returns them, or as rebuilt by
/// activation recomputation); differentiable with respect to `hidden`.
pub fn hidden_logprobs(
    model: &CausalLm,
    hidden: &Tensor,
    tokens: &Tensor,
    temperature: f64,
    entropy: EntropyMetric,
) -> Result<(Tensor, Option<Tensor>)> {
    let (b, t) = tokens.dims2()?;
    if t < 2 {
        return Ok((Tensor::zeros((b, t), DType::F32, tokens.device())?, None));
    }
    let hidden = hidden.narrow(1, 0, t - 1)?.reshape((b * (t - 1), ()))?;
    let targets = tokens.narrow(1, 1, t - 1)?.flatten_all()?;
    let (lp, ent) = match entropy {
        EntropyMetric::Skip => (token_logprobs(model, &hidden, &targets, temperature)?, None),
        EntropyMetric::Compute => {
            let (lp, ent) = token_logprobs_and_entropy(model, &hidden, &targets, temperature)?;
            (lp, Some(ent.reshape((b, t - 1))?.pad_with_zeros(1, 1, 0)?.detach()))
        }
    };
    let lp = lp.reshape((b, t - 1))?.pad_with_zeros(1, 1, 0)?;
    Ok((lp, ent))
}

/// The rows of `mask` `[n]` that are non-zero, or `None` when all are;
/// an error where `weights` `[n]` is non-zero outside the mask.
fn masked_rows(weights: &Tensor, mask: &Tensor) -> Result<Option<Vec<u32>>> {
    let w = weights.to_dtype(DType::F32)?.to_vec1::<f32>()?;
    let m = mask.to_dtype(DType::F32)?.to_vec1::<f32>()?;
    if let Some(i) = (0..w.len()).find(|&i| m[i] == 0.0 && w[i] != 0.0) {
        return Err(Error::invalid("log-prob weights", format!("weight {} at flattened position {i} lies outside the loss mask", w[i])));
    }
    let rows: Vec<u32> = (0..m.len()).filter(|&i| m[i] != 0.0).map(|i| i as u32).collect();
    Ok((rows.len() < m.len()).then_some(rows))
}

/// What [`hidden_weighted_logprobs`] returns: the log-probs `[b, t]` and, when
/// asked, the entropy `[b, t]` (both detached, laid out as
/// [`sequence_logprobs`]'s), and the differentiable scalar `Σ weights · logp`.
pub struct WeightedPass {
    pub logprobs: Tensor,
    pub entropy: Option<Tensor>,
    pub sum: Tensor,
}

impl WeightedPass {
    /// The pass over no position (a batch of one token per row, or nothing
    /// in the mask): log-probs, the asked-for entropy and the sum all 0.
    fn zeros(b: usize, t: usize, device: &Device, entropy: EntropyMetric) -> Result<Self> {
        let zeros = Tensor::zeros((b, t), DType::F32, device)?;
        let entropy = matches!(entropy, EntropyMetric::Compute).then(|| zeros.clone());
        Ok(WeightedPass { logprobs: zeros, entropy, sum: Tensor::zeros((), DType::F32, device)? })
    }
}

/// [`hidden_logprobs`] for a loss that is linear in the log-probs, with
/// coefficients `weights` `[b, t]` (column 0 unused): the fused op computes
/// the gradient of `Σ weights · logp` in its forward sweep (one
/// vocabulary-sized product fewer than a forward and backward through
/// [`hidden_logprobs`]); backpropagating `sum` gives the loss's gradients.
///
/// Only the positions where `mask` `[b, t]` is non-zero are computed (the
/// policy tokens: a prompt's and the tool outputs' rows never reach the
/// vocabulary-sized products); elsewhere the log-probs and entropies are 0.
/// A non-zero weight outside the mask is an error.
pub fn hidden_weighted_logprobs(
    model: &CausalLm,
    hidden: &Tensor,
    tokens: &Tensor,
    weights: &Tensor,
    mask: &Tensor,
    temperature: f64,
    entropy: EntropyMetric,
) -> Result<WeightedPass> {
    let (b, t) = tokens.dims2()?;
    if t < 2 {
        return WeightedPass::zeros(b, t, tokens.device(), entropy);
    }
    let n = b * (t - 1);
    let hidden = hidden.narrow(1, 0, t - 1)?.reshape((n, ()))?;
    let targets = tokens.narrow(1, 1, t - 1)?.flatten_all()?;
    let w = weights.narrow(1, 1, t - 1)?.flatten_all()?;
    let kept = masked_rows(&w, &mask.narrow(1, 1, t - 1)?.flatten_all()?)?;
    let (out, spread) = match kept {
        // Every row: nothing to select.
        None => (weighted_logprob_sum(model, &hidden, &targets, &w, temperature)?, None),
        Some(rows) if rows.is_empty() => return WeightedPass::zeros(b, t, tokens.device(), entropy),
        Some(rows) => {
            let k = rows.len();
            let idx = Tensor::from_vec(rows, k, tokens.device())?;
            let pick = |x: &Tensor| x.index_select(&idx, 0);
            (weighted_logprob_sum(model, &pick(&hidden)?, &pick(&targets)?, &pick(&w)?, temperature)?, Some(idx))
        }
    };
    let layout = |x: &Tensor| -> Result<Tensor> {
        let x = match &spread {
            Some(idx) => Tensor::zeros(n, x.dtype(), x.device())?.index_add(idx, &x.contiguous()?, 0)?,
            None => x.clone(),
        };
        Ok(x.reshape((b, t - 1))?.pad_with_zeros(1, 1, 0)?)
    };
    Ok(WeightedPass {
        logprobs: layout(&out.logprobs)?,
        entropy: match entropy {
            EntropyMetric::Compute => Some(layout(&out.entropy)?),
            EntropyMetric::Skip => None,
        },
        sum: out.sum,
    })
}
