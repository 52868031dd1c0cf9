//! Supervised fine-tuning on filtered teacher trajectories: cross-entropy on
//! the policy's own tokens only (system, user and tool-response tokens are
//! masked), averaged over the batch's policy tokens, micro-batched with
//! gradient accumulation, then the same clipping and AdamW as GRPO. One step
//! reads top to bottom in [`SftTrainer::step`]. Data parallel
//! ([`crate::dist`]): each rank takes its share of every batch's rows, the
//! loss is normalized by the whole batch's policy tokens, and the gradients
//! are summed over ranks before the same AdamW step everywhere.

pub mod batches;

use crate::dist::{self, Dist};
use crate::error::{Error, Result};
use crate::backward::{backward_micro_batch, micro_batches, sequence_logprobs, used_columns, EntropyMetric, LinearLoss, LogprobPass};
use crate::model::cache::Positions;
use crate::model::recompute::Recompute;
use crate::packing::{plan, trained_lengths, MicroBatching};
use crate::model::CausalLm;
use crate::optim::{AdamW, AdamWConfig, Gradients, Update};
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
    /// Whole optimizer state on every rank, or ZeRO-1 (`[optim] zero_stage`).
    pub sharding: dist::zero::Sharding,
    pub step: u64,
    lr: f64,
    schedule: crate::optim::LrSchedule,
    max_grad_norm: f64,
    micro: MicroBatching,
    recompute: Recompute,
    /// The ranks this trainer shares its steps with ([`dist::current`]).
    pub dist: Dist,
}

impl SftTrainer {
    /// `run_steps` is the run's length in updates (all epochs), which a
    /// schedule with `total_steps = 0` runs over.
    pub fn new(cfg: &RunConfig, model_cfg: &crate::ModelConfig, weights: &TensorMap, adapter: Option<&crate::lora::Adapter>, run_steps: u64) -> Result<Self> {
        let (model, vars) = crate::model::load::trainable_model(cfg.lora().as_ref(), model_cfg, weights, adapter)?;
        let o = &cfg.optim;
        let dist = dist::current();
        let sharding = dist::zero::Sharding::new(o.zero_stage, &vars, &*dist);
        let optimizer = sharding.optimizer(
            &vars,
            AdamWConfig::from(o),
            dist.rank(),
        )?;
        Ok(SftTrainer {
            vars,
            model,
            optimizer,
            sharding,
            step: 0,
            lr: cfg.sft.lr,
            schedule: cfg.sft.schedule.for_run(run_steps),
            max_grad_norm: o.max_grad_norm,
            micro: cfg.sft.micro_batching()?,
            recompute: cfg.sft.recompute,
            dist,
        })
    }

    /// Shares the steps with `dist`'s ranks instead (tests, `dist-check`):
    /// the optimizer is rebuilt, sharded for them under ZeRO-1 (`zero_stage`).
    pub fn set_dist(&mut self, dist: Dist, zero_stage: u8) -> Result<()> {
        self.sharding = dist::zero::Sharding::new(zero_stage, &self.vars, &*dist);
        self.optimizer = self.sharding.optimizer(&self.vars, *self.optimizer.config(), dist.rank())?;
        self.dist = dist;
        Ok(())
    }

    /// Mean cross-entropy over `batch` (the whole step's rows) and its
    /// gradients: this rank's share of the rows normalized by the whole
    /// batch's policy tokens, summed over ranks.
    pub fn gradients(&self, batch: &SftBatch) -> Result<(Gradients, f64)> {
        let total = batch.policy_tokens()?;
        let (mut grads, loss) = if self.dist.world() == 1 {
            sft_gradients(&self.model, &self.vars, batch, self.micro, self.recompute)?
        } else {
            match batch.share(&*self.dist)? {
                Some(mine) => sft_share_gradients(&self.model, &self.vars, &mine, self.micro, self.recompute, total)?,
                None if total == 0.0 => return Err(Error::invalid("sft batch", "no policy tokens to learn from")),
                None => (Gradients::default(), 0.0),
            }
        };
        self.sharding.sum_gradients(&*self.dist, &self.vars, &mut grads)?;
        let mut loss = [loss];
        dist::reduce::sum_f64(&*self.dist, &mut loss)?;
        Ok((grads, loss[0]))
    }

    /// One SFT step on `batch` (the whole step's rows; with several ranks
    /// this rank trains on its share): cross-entropy gradients -> sum over
    /// ranks -> clip -> AdamW.
    pub fn step(&mut self, batch: &SftBatch, epoch: u64) -> Result<SftStepMetrics> {
        let t0 = Instant::now();
        let (grads, loss) = self.gradients(batch)?;
        let lr = self.lr();
        let Update { grad_norm, skipped } = self.apply(grads, loss)?;
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

    /// The learning rate of the next step (the schedule at this step).
    pub fn lr(&self) -> f64 {
        self.lr * self.schedule.factor(self.step)
    }

    /// Clip (or measure) the gradients, then AdamW at this step's learning
    /// rate ([`SftTrainer::lr`]), unless the loss or the norm is NaN/inf.
    pub fn apply(&mut self, grads: Gradients, loss: f64) -> Result<Update> {
        let lr = self.lr();
        self.sharding.update(&*self.dist, &mut self.optimizer, &self.vars, grads, self.max_grad_norm, loss, lr)
    }
}
