//! Supervised fine-tuning on filtered teacher trajectories: cross-entropy on
//! the policy's own tokens only (system, user and tool-response tokens are
//! masked), averaged over the batch's policy tokens, micro-batched with
//! gradient accumulation ([`sft_gradients`]); a rank's share of a batch
//! ([`SftBatch::share`], [`sft_share_gradients`]); the held-out loss. The
//! step (clip, AdamW, ranks) is [`trainer::Trainer::step`].

pub mod batches;
pub mod config;
pub mod trainer;

pub use config::{OpeningPhase, SftSection};
pub use trainer::{SftStepMetrics, Trainer, TrainerConfig};

use crate::dist;
use crate::error::{Error, Result};
use crate::backward::{backward_micro_batch, micro_batches, sequence_logprobs, used_columns, EntropyMetric, LinearLoss, LogprobPass};
use lm::model::cache::Positions;
use lm::model::recompute::Recompute;
use crate::packing::{plan, trained_lengths, MicroBatching};
use lm::model::CausalLm;
use crate::optim::Gradients;
use candle_core::{DType, Device, Tensor, Var};
use rollout::episode::filter::SftExample;
use std::collections::BTreeMap;

/// Right-padded sequences of one step and their loss mask.
#[derive(Debug, Clone)]
pub struct SftBatch {
    /// `[B, T]` u32 token ids.
    pub tokens: Tensor,
    /// `[B, T]` f32, 1 on the policy's own tokens (never column 0).
    pub mask: Tensor,
}

impl SftBatch {
    /// The batch of `rows` of `examples`.
    pub fn of(examples: &[SftExample], rows: &[usize], device: &Device) -> Result<SftBatch> {
        let width = rows.iter().map(|&i| examples[i].tokens.len()).max().unwrap_or(1).max(1);
        let mut tokens = Vec::with_capacity(rows.len() * width);
        let mut mask = Vec::with_capacity(rows.len() * width);
        for &i in rows {
            let e = &examples[i];
            tokens.extend(e.tokens.iter().copied().chain(std::iter::repeat(0)).take(width));
            let own = e.loss_mask.iter().enumerate().map(|(j, &m)| if j > 0 && m == 1 { 1f32 } else { 0.0 });
            mask.extend(own.chain(std::iter::repeat(0.0)).take(width));
        }
        Ok(SftBatch {
            tokens: Tensor::from_vec(tokens, (rows.len(), width), device)?,
            mask: Tensor::from_vec(mask, (rows.len(), width), device)?,
        })
    }

    /// This rank's share of the rows ([`dist::share`]), cut after the last
    /// column any of them trains on; `None` when it has no rows.
    pub fn share(&self, dist: &dyn dist::Collective) -> Result<Option<SftBatch>> {
        let (b, _) = self.tokens.dims2()?;
        let mine = dist::share(dist, b);
        Ok(if mine.is_empty() { None } else { Some(self.rows(mine.start, mine.len())?) })
    }

    /// Rows `start..start+n`, cut after the last column any of them trains on.
    fn rows(&self, start: usize, n: usize) -> Result<SftBatch> {
        let mask = self.mask.narrow(0, start, n)?;
        let cols = used_columns(&mask)?;
        Ok(SftBatch { tokens: self.tokens.narrow(0, start, n)?.narrow(1, 0, cols)?, mask: mask.narrow(1, 0, cols)? })
    }

    /// `(tokens, positions, mask)` of each forward/backward: row ranges cut
    /// after their last trained column, or packed rows ([`crate::packing`]).
    pub fn micro_batches(&self, micro: MicroBatching) -> Result<Vec<(Tensor, Positions, Tensor)>> {
        let (b, _) = self.tokens.dims2()?;
        match micro {
            MicroBatching::Rows(n) => micro_batches(b, n)?
                .into_iter()
                .map(|r| {
                    let mb = self.rows(r.start, r.len())?;
                    let (rows, cols) = mb.tokens.dims2()?;
                    Ok((mb.tokens, Positions::sequential(rows, cols), mb.mask))
                })
                .collect(),
            MicroBatching::Tokens(budget) => plan(&trained_lengths(&self.mask)?, budget)?
                .into_iter()
                .map(|p| Ok((p.gather(&self.tokens)?, p.positions(), p.gather(&self.mask)?)))
                .collect(),
        }
    }

    /// Policy tokens in the batch.
    pub fn policy_tokens(&self) -> Result<f64> {
        Ok(self.mask.to_dtype(DType::F64)?.sum_all()?.to_scalar::<f64>()?)
    }
}

/// Mean cross-entropy over the batch's policy tokens and its gradients,
/// micro-batched as `micro` (each micro-batch's share is its token sum over
/// the whole batch's token count, so the split does not change them).
pub fn sft_gradients(
    model: &CausalLm,
    params: &BTreeMap<String, Var>,
    batch: &SftBatch,
    micro: MicroBatching,
    recompute: Recompute,
) -> Result<(Gradients, f64)> {
    sft_share_gradients(model, params, batch, micro, recompute, batch.policy_tokens()?)
}

/// [`sft_gradients`] of a share of a larger batch that holds `total` policy
/// tokens (data parallelism: each rank's rows, the whole batch's count).
pub fn sft_share_gradients(
    model: &CausalLm,
    params: &BTreeMap<String, Var>,
    batch: &SftBatch,
    micro: MicroBatching,
    recompute: Recompute,
    total: f64,
) -> Result<(Gradients, f64)> {
    if total == 0.0 {
        return Err(Error::invalid("sft batch", "no policy tokens to learn from"));
    }
    let mut grads = Gradients::default();
    let mut loss_sum = 0.0;
    let pass = LogprobPass { temperature: 1.0, entropy: EntropyMetric::Skip, recompute };
    for (tokens, positions, mask) in batch.micro_batches(micro)? {
        // The loss is linear in the log-probs: folded into the log-prob op.
        let coefficients = (mask.to_dtype(DType::F32)? * (-1.0 / total))?;
        let linear = LinearLoss { coefficients: &coefficients, mask: &mask };
        backward_micro_batch(model, params, &tokens, &positions, pass, &mut grads, Some(linear), |logp, _| {
            let loss = ((logp * &mask)?.sum_all()?.neg()? / total)?;
            loss_sum += loss.to_scalar::<f32>()? as f64;
            Ok(loss)
        })?;
    }
    Ok((grads, loss_sum))
}

/// Mean cross-entropy over the policy tokens of `rows` (no gradients),
/// micro-batched as `micro`; with several ranks each computes its share of
/// the rows and the sums are added.
pub fn heldout_loss(model: &CausalLm, examples: &[SftExample], rows: &[usize], micro: MicroBatching, dist: &dyn dist::Collective) -> Result<f64> {
    let mut sums = heldout_sums(model, examples, &rows[dist::share(dist, rows.len())], micro)?;
    dist::reduce::sum_f64(dist, &mut sums)?;
    let [nll, count] = sums;
    Ok(if count == 0.0 { f64::NAN } else { nll / count })
}

/// Negative log-likelihood and policy-token count of `rows`.
fn heldout_sums(model: &CausalLm, examples: &[SftExample], rows: &[usize], micro: MicroBatching) -> Result<[f64; 2]> {
    let (mut nll, mut count) = (0.0, 0.0);
    let chunk = match micro {
        MicroBatching::Rows(n) => n.max(1),
        MicroBatching::Tokens(_) => rows.len().max(1),
    };
    for chunk in rows.chunks(chunk) {
        let batch = SftBatch::of(examples, chunk, model.device())?;
        for (tokens, positions, mask) in batch.micro_batches(micro)? {
            let (lp, _) = sequence_logprobs(model, &tokens, &positions, 1.0, EntropyMetric::Skip)?;
            nll -= (lp.detach() * &mask)?.sum_all()?.to_dtype(DType::F64)?.to_scalar::<f64>()?;
        }
        count += batch.policy_tokens()?;
    }
    Ok([nll, count])
}
