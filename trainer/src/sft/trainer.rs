//! The SFT trainer: one step reads top to bottom in [`Trainer::step`]:
//! cross-entropy gradients of the batch ([`crate::sft`]) -> sum over ranks
//! -> clip -> AdamW. Data parallel ([`crate::dist`]): each rank takes its
//! share of every batch's rows, the loss is normalized by the whole batch's
//! policy tokens, and the gradients are summed over ranks before the same
//! AdamW step everywhere.

use crate::dist::{self, Dist};
use crate::error::{Error, Result};
use lm::model::recompute::Recompute;
use lm::model::CausalLm;
use crate::optim::{AdamW, AdamWConfig, Gradients, Update};
use crate::packing::MicroBatching;
use super::config::SftSection;
use crate::optim::OptimSection;
use super::{sft_gradients, sft_share_gradients, SftBatch};
use lm::weights::TensorMap;
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Instant;
use candle_core::Var;

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

/// What an SFT trainer is set up with: `[sft]`, `[optim]` and the adapter
/// setting of `[lora]`. A run config converts into it
/// (`RunConfig::sft_trainer`), so the trainer knows no `RunConfig`.
#[derive(Debug, Clone)]
pub struct TrainerConfig {
    pub sft: SftSection,
    pub optim: OptimSection,
    /// `[lora]`, validated, when the run trains an adapter.
    pub lora: Option<lm::lora::LoraConfig>,
}

/// The weights being fine-tuned and their optimizer.
pub struct Trainer {
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

impl Trainer {
    /// `run_steps` is the run's length in updates (all epochs), which a
    /// schedule with `total_steps = 0` runs over.
    pub fn new(cfg: impl Into<TrainerConfig>, model_cfg: &lm::ModelConfig, weights: &TensorMap, adapter: Option<&lm::lora::Adapter>, run_steps: u64) -> Result<Self> {
        let cfg = cfg.into();
        let (model, vars) = lm::model::load::trainable_model(cfg.lora.as_ref(), model_cfg, weights, adapter)?;
        let o = &cfg.optim;
        let dist = dist::current();
        let (sharding, optimizer) = dist::zero::Sharding::with_optimizer(o.zero_stage, &vars, &*dist, AdamWConfig::from(o))?;
        Ok(Trainer {
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
        (self.sharding, self.optimizer) = dist::zero::Sharding::with_optimizer(zero_stage, &self.vars, &*dist, *self.optimizer.config())?;
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
    /// rate ([`Trainer::lr`]), unless the loss or the norm is NaN/inf.
    pub fn apply(&mut self, grads: Gradients, loss: f64) -> Result<Update> {
        let lr = self.lr();
        self.sharding.update(&*self.dist, &mut self.optimizer, &self.vars, grads, self.max_grad_norm, loss, lr)
    }
}
