//! Supervised fine-tuning on filtered teacher trajectories: cross-entropy on
//! the policy's own tokens only (system, user and tool-response tokens are
//! masked), averaged over the batch's policy tokens, micro-batched with
//! gradient accumulation, then the same clipping and AdamW as GRPO. One step
//! reads top to bottom in [`SftTrainer::step`].

pub mod batches;
pub mod config;

use crate::error::{Error, Result};
use crate::grpo::{backward_micro_batch, micro_batches, used_columns, EntropyMetric, LogprobPass};
use crate::model::cache::Positions;
use crate::model::recompute::Recompute;
use crate::packing::{plan, trained_lengths, MicroBatching};
use crate::model::CausalLm;
use crate::optim::{AdamW, AdamWConfig, Gradients};
use crate::run_config::RunConfig;
use crate::weights::TensorMap;
use candle_core::{DType, Device, Tensor, Var};
use rollout::episode::filter::SftExample;
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Instant;

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
    let total = batch.policy_tokens()?;
    if total == 0.0 {
        return Err(Error::invalid("sft batch", "no policy tokens to learn from"));
    }
    let mut grads = Gradients::default();
    let mut loss_sum = 0.0;
    let pass = LogprobPass { temperature: 1.0, entropy: EntropyMetric::Skip, recompute };
    for (tokens, positions, mask) in batch.micro_batches(micro)? {
        backward_micro_batch(model, params, &tokens, &positions, pass, &mut grads, |logp, _| {
            let loss = ((logp * &mask)?.sum_all()?.neg()? / total)?;
            loss_sum += loss.to_scalar::<f32>()? as f64;
            Ok(loss)
        })?;
    }
    Ok((grads, loss_sum))
}

/// Mean cross-entropy over the policy tokens of `rows` (no gradients),
/// micro-batched as `micro`.
pub fn heldout_loss(model: &CausalLm, examples: &[SftExample], rows: &[usize], micro: MicroBatching) -> Result<f64> {
    let (mut nll, mut count) = (0.0, 0.0);
    let chunk = match micro {
        MicroBatching::Rows(n) => n.max(1),
        MicroBatching::Tokens(_) => rows.len().max(1),
    };
    for chunk in rows.chunks(chunk) {
        let batch = SftBatch::of(examples, chunk, model.device())?;
        for (tokens, positions, mask) in batch.micro_batches(micro)? {
            let (lp, _) = crate::grpo::sequence_logprobs(model, &tokens, &positions, 1.0, EntropyMetric::Skip)?;
            nll -= (lp.detach() * &mask)?.sum_all()?.to_dtype(DType::F64)?.to_scalar::<f64>()?;
        }
        count += batch.policy_tokens()?;
    }
    Ok(if count == 0.0 { f64::NAN } else { nll / count })
}

/// The metrics line of one SFT step.
#[derive(Debug, Clone, Serialize)]
pub struct SftStepMetrics {
    pub step: u64,
    pub epoch: u64,
    pub loss: f64,
    /// Mean held-out cross-entropy, on evaluation steps.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub heldout_loss: Option<f64>,
    pub grad_norm: f64,
    pub lr: f64,
    pub tokens: usize,
    pub policy_tokens: usize,
    pub seconds: f64,
    /// The loss or gradient was NaN/inf: no update was applied.
    pub skipped: bool,
}

/// The weights being fine-tuned and their optimizer.
pub struct SftTrainer {
    pub vars: BTreeMap<String, Var>,
    pub model: CausalLm,
    pub optimizer: AdamW,
    pub step: u64,
    lr: f64,
    schedule: crate::optim::LrSchedule,
    max_grad_norm: f64,
    micro: MicroBatching,
    recompute: Recompute,
}

impl SftTrainer {
    /// `run_steps` is the run's length in updates (all epochs), which a
    /// schedule with `total_steps = 0` runs over.
    pub fn new(cfg: &RunConfig, model_cfg: &crate::ModelConfig, weights: &TensorMap, run_steps: u64) -> Result<Self> {
        let (model, vars) = CausalLm::trainable(model_cfg, weights)?;
        let o = &cfg.optim;
        let optimizer = AdamW::new(
            &vars,
            AdamWConfig { beta1: o.beta1, beta2: o.beta2, eps: o.eps, weight_decay: o.weight_decay, decay_scope: o.decay_scope },
        )?;
        Ok(SftTrainer {
            vars,
            model,
            optimizer,
            step: 0,
            lr: cfg.sft.lr,
            schedule: cfg.sft.schedule.for_run(run_steps),
            max_grad_norm: o.max_grad_norm,
            micro: cfg.sft.micro_batching()?,
            recompute: cfg.sft.recompute,
        })
    }

    /// One SFT step: cross-entropy gradients -> clip -> AdamW.
    pub fn step(&mut self, batch: &SftBatch, epoch: u64) -> Result<SftStepMetrics> {
        let t0 = Instant::now();
        let (mut grads, loss) = sft_gradients(&self.model, &self.vars, batch, self.micro, self.recompute)?;
        let grad_norm = if self.max_grad_norm > 0.0 { grads.clip_global_norm(self.max_grad_norm)? } else { grads.global_norm()? };
        let lr = self.lr * self.schedule.factor(self.step);
        let skipped = !grad_norm.is_finite() || !loss.is_finite();
        if skipped {
            tracing::warn!(step = self.step + 1, grad_norm, "non-finite loss or gradient: update skipped");
        } else {
            self.optimizer.step(&self.vars, &grads, lr)?;
        }
        self.step += 1;
        let (b, t) = batch.tokens.dims2()?;
        Ok(SftStepMetrics {
            step: self.step,
            epoch,
            loss,
            heldout_loss: None,
            grad_norm,
            lr,
            tokens: b * t,
            policy_tokens: batch.policy_tokens()? as usize,
            seconds: t0.elapsed().as_secs_f64(),
            skipped,
        })
    }
}
