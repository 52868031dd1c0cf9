//! Per-token log-probabilities of sequences under the model (the quantity
//! GRPO's ratio and `fusegrpo score` are built on).

use crate::error::Result;
use crate::model::{cache::Positions, ops, CausalLm};
use crate::profile::{self, Phase};
use candle_core::{DType, Tensor, D};

/// Log-probs `[n]` (f32) of `targets` `[n]` given hidden states `[n, hidden]`,
/// with the logits divided by `temperature` (1.0 for plain scoring).
/// Differentiable; the fused kernel ([`kernels::logprobs::token_logprobs`]):
/// the `[n, vocab]` logits are never materialized.
pub fn token_logprobs(model: &CausalLm, hidden: &Tensor, targets: &Tensor, temperature: f64) -> Result<Tensor> {
    Ok(profile::op(Phase::LogprobHead, [hidden], |[h]| kernels::logprobs::token_logprobs(&h, model.lm_head(), targets, temperature))?)
}

/// [`token_logprobs`] and the detached entropy `[n]` of each position's
/// temperature-scaled distribution, from the same fused pass.
pub fn token_logprobs_and_entropy(model: &CausalLm, hidden: &Tensor, targets: &Tensor, temperature: f64) -> Result<(Tensor, Tensor)> {
    let head = |[h]: [Tensor; 1]| kernels::logprobs::token_logprobs_and_entropy(&h, model.lm_head(), targets, temperature);
    Ok(profile::op_then(Phase::LogprobHead, [hidden], head, |(lp, ent), mark| Ok((mark(&lp)?, ent)))?)
}

/// `Σ weights · logp` (differentiable) with the detached log-probs and
/// entropies `[n]`, the gradient computed in the forward sweep
/// ([`kernels::logprobs::weighted_logprob_sum`]): for losses linear in the log-probs.
pub fn weighted_logprob_sum(model: &CausalLm, hidden: &Tensor, targets: &Tensor, weights: &Tensor, temperature: f64) -> Result<kernels::logprobs::WeightedLogprobs> {
    let head = |[h]: [Tensor; 1]| kernels::logprobs::weighted_logprob_sum(&h, model.lm_head(), targets, weights, temperature);
    // The gradient flows back through `sum` alone (the log-probs are detached).
    Ok(profile::op_then(Phase::LogprobHead, [hidden], head, |mut out, mark| {
        out.sum = mark(&out.sum)?;
        Ok(out)
    })?)
}

/// [`token_logprobs`] through the full logits (matmul, `/ T`, log-softmax,
/// gather): the differentiable composition the fused kernel replaces, kept
/// for tests and benchmarks.
pub fn token_logprobs_unfused(model: &CausalLm, hidden: &Tensor, targets: &Tensor, temperature: f64) -> Result<Tensor> {
    let logits = model.logits(hidden)?.to_dtype(DType::F32)?;
    let logits = if temperature == 1.0 { logits } else { (logits / temperature)? };
    let logp = ops::log_softmax_last(&logits)?;
    Ok(logp.gather(&targets.unsqueeze(D::Minus1)?, D::Minus1)?.squeeze(D::Minus1)?)
}

/// Log-probability of every token of `ids` given its prefix; the first entry
/// is `None` (nothing predicts it).
pub fn score_sequence(model: &CausalLm, ids: &[u32]) -> Result<Vec<Option<f32>>> {
    if ids.len() < 2 {
        return Ok(vec![None; ids.len()]);
    }
    let device = model.device();
    let n = ids.len();
    let tokens = Tensor::from_slice(ids, (1, n), device)?;
    let hidden = model.forward(&tokens, &Positions::sequential(1, n), None)?;
    let hidden = hidden.squeeze(0)?.narrow(0, 0, n - 1)?;
    let targets = Tensor::from_slice(&ids[1..], n - 1, device)?;
    let lp = token_logprobs(model, &hidden, &targets, 1.0)?.to_vec1::<f32>()?;
    Ok(std::iter::once(None).chain(lp.into_iter().map(Some)).collect())
}
