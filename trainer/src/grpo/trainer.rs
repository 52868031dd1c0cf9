//! The GRPO trainer: one step reads top to bottom in [`Trainer::step`]:
//! sample tasks -> rollouts (refilled with further tasks' groups under
//! `zero_std_groups = "resample"`, [`resample`]) -> rewards -> advantages ->
//! batch -> gradients (micro-batched) -> clip -> AdamW -> metrics.
//!
//! Data parallel ([`crate::dist`]): each rank rolls out its share of the
//! step's groups, the episodes are gathered so every rank sees the whole
//! batch (advantages, totals and metrics as one process computes them), each
//! rank computes the gradients of its own rows, the gradients are summed,
//! and every rank applies the same AdamW step.

use crate::dist::{self, Dist};
use crate::error::{Error, Result};
use crate::grpo::advantages::TRL_ADVANTAGE_EPS;
use crate::backward::detached_logprobs;
use crate::grpo::{
    accumulate_share, group_advantages, Advantages, BatchTotals, GrpoBatch, GrpoMetrics, OldLogprobs,
};
use crate::optim::{Gradients, Update};
use lm::model::CausalLm;
use crate::optim::{AdamW, AdamWConfig};
use super::collect::{Collector, Draw, Rollouts, Source};
pub use super::config::TrainerConfig;
use super::{batch, engine_sync, resample};
use lm::weights::TensorMap;
use candle_core::Var;
use rand_chacha::ChaCha8Rng;
use rollout::episode::driver::Env;
use rollout::episode::summary::Summary;
use rollout::episode::StopReason;
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Instant;

/// The metrics line of one step (TRL's names where they exist).
#[derive(Debug, Clone, Serialize)]
pub struct StepMetrics {
    pub step: u64,
    /// Mean R over the step's episodes.
    pub reward: f64,
    /// Mean of the rewards the advantages used, R + `answer_bonus` for each
    /// answer (only with `[reward] answer_bonus` > 0).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub train_reward: Option<f64>,
    /// Share of the step's episodes that ended with a non-empty answer.
    pub answered: f64,
    /// Std of the rewards the advantages used.
    pub reward_std: f64,
    pub frac_reward_zero_std: f64,
    /// Groups drawn and kept, and rounds of rollouts, under `[grpo]
    /// zero_std_groups = "resample"` (`resample/groups_drawn`,
    /// `resample/groups_kept`, `num_gen_batches`); the step's other metrics
    /// are over every group drawn.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub resample: Option<resample::Refill>,
    pub f1_file: f64,
    pub f1_func: f64,
    pub e: f64,
    pub loss: f64,
    pub kl: Option<f64>,
    pub entropy: Option<f64>,
    #[serde(rename = "clip_ratio/low_mean")]
    pub clip_low: f64,
    #[serde(rename = "clip_ratio/high_mean")]
    pub clip_high: f64,
    #[serde(rename = "clip_ratio/region_mean")]
    pub clip_region: f64,
    pub grad_norm: f64,
    pub lr: f64,
    pub tokens: usize,
    pub policy_tokens: usize,
    /// Share of the token slots the update's micro-batches computed that
    /// were padding (0 with packed micro-batches, `micro_batch_tokens`).
    pub padding_share: f64,
    /// Rollout-vs-trainer log-prob drift on the computed policy tokens
    /// (`sampling/sampling_logp_difference/{mean,max}`,
    /// `sampling/importance_sampling_ratio/{min,mean,max}`).
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub drift: Option<crate::grpo::DriftMetrics>,
    /// Rows with advantage exactly 0 (and beta = 0) that skipped the forward/backward.
    pub skipped_zero_advantage_rows: usize,
    /// Shares of the step's episodes that stopped on a full context and on
    /// a turn's token limit.
    pub stop_context_full: f64,
    pub stop_max_tokens: f64,
    pub calls_per_turn: f64,
    pub seconds_rollout: f64,
    /// Time the weight sync to the rollout engine took (within
    /// `seconds_rollout`; only with `[rollout] engine = "vllm"`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seconds_sync: Option<f64>,
    /// After the sync: mean |difference| of a probe's log-probs, the
    /// engine's against the trainer's (`engine/probe_diff`), and before the
    /// sync (`engine/probe_moved`: how far the engine had to move).
    #[serde(rename = "engine/probe_diff", skip_serializing_if = "Option::is_none")]
    pub engine_probe_diff: Option<f64>,
    #[serde(rename = "engine/probe_moved", skip_serializing_if = "Option::is_none")]
    pub engine_probe_moved: Option<f64>,
    pub seconds_update: f64,
    /// Wall seconds of the whole step (under `off_policy`, less than
    /// rollout + update by their overlap).
    pub seconds_step: f64,
    /// Staleness and overlap under `[rollout] off_policy` (absent at 0).
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub off_policy: Option<OffPolicyMetrics>,
    /// Tokens of the step's episodes per wall second of the step.
    pub tokens_per_second: f64,
    /// The loss or gradient was NaN/inf: no update was applied.
    pub skipped: bool,
    /// Data-parallel ranks (absent with one process).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ranks: Option<usize>,
    /// The step's tasks, each with the mean R of its episodes: the step's
    /// `reward` is their mean, and a curve can be read against each task's
    /// own baseline (`scripts/curve_gain.py --baseline`) instead of through
    /// the draw of tasks.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub tasks: BTreeMap<String, f64>,
    /// Episodes this rank rolled out (its share of the groups).
    #[serde(skip)]
    pub rolled_out: usize,
    /// The tasks of this rank's share of the groups, in the order drawn.
    #[serde(skip)]
    pub rolled_tasks: Vec<String>,
}

/// Share of `episodes` that stopped for `reason`.
fn stop_share(episodes: &[rollout::episode::Episode], reason: StopReason) -> f64 {
    episodes.iter().filter(|e| e.stop_reason() == Some(reason)).count() as f64 / episodes.len().max(1) as f64
}

/// Everything a run updates: the trainable weights, their optimizer, the
/// frozen reference (beta > 0) and the RNG streams it owns.
pub struct Trainer {
    pub cfg: TrainerConfig,
    pub vars: BTreeMap<String, Var>,
    /// Trainable model (its tensors are the `Var`s).
    pub model: CausalLm,
    /// The same weights, detached, for generation (no autograd graph).
    pub sampler_view: CausalLm,
    pub reference: Option<CausalLm>,
    /// A LoRA run's base weights and setting: rollouts decode with the
    /// adapter merged into a copy of the adapted projections
    /// ([`Trainer::rollout_model`]).
    lora_base: Option<(TensorMap, lm::lora::LoraConfig)>,
    pub optimizer: AdamW,
    /// Whole optimizer state on every rank, or ZeRO-1 (`[optim] zero_stage`).
    pub sharding: dist::zero::Sharding,
    pub sampling_rng: ChaCha8Rng,
    pub step: u64,
    /// The ranks this trainer shares its steps with ([`dist::current`]).
    pub dist: Dist,
    /// A vLLM server the rollouts come from instead of this process's
    /// decoding, synced to the weights before each step's rollouts.
    pub engine: Option<engine_sync::EngineSync>,
    /// `[rollout] off_policy = 1`: the next step's rollouts, made during
    /// the last update (a checkpoint keeps them: [`Rollouts`]).
    pub pending: Option<Rollouts>,
}

impl Trainer {
    /// Build from loaded weights. The frozen reference (only when beta > 0)
    /// is `reference` (the run's starting weights when resuming), else a
    /// copy of `weights`.
    pub fn new(
        cfg: impl Into<TrainerConfig>,
        model_cfg: &lm::ModelConfig,
        weights: &TensorMap,
        reference: Option<&TensorMap>,
        adapter: Option<&lm::lora::Adapter>,
        sampling_rng: ChaCha8Rng,
    ) -> Result<Self> {
        let cfg = cfg.into();
        let lora = cfg.lora.clone();
        let (model, vars) = lm::model::load::trainable_model(lora.as_ref(), model_cfg, weights, adapter)?;
        let detached: TensorMap = vars.iter().map(|(k, v)| (k.clone(), v.as_tensor().detach())).collect();
        let sampler_view = match &lora {
            None => CausalLm::new(model_cfg, &detached)?,
            Some(l) => CausalLm::new(model_cfg, weights)?.with_adapter(&lm::lora::Adapter { cfg: l.clone(), tensors: detached })?,
        };
        // The KL reference: the run's starting weights (a copy), or for a
        // LoRA run the base with the adapter off (the same tensors).
        let reference = match cfg.reference {
            super::config::Reference::None => None,
            super::config::Reference::Base => Some(model.without_adapter()),
            super::config::Reference::Copy => {
                let source = reference.unwrap_or(weights);
                let frozen: TensorMap = source.iter().map(|(k, t)| Ok((k.clone(), t.copy()?))).collect::<Result<_>>()?;
                Some(CausalLm::new(model_cfg, &frozen)?)
            }
        };
        let dist = dist::current();
        let (sharding, optimizer) = dist::zero::Sharding::with_optimizer(cfg.optim.zero_stage, &vars, &*dist, AdamWConfig::from(&cfg.optim))?;
        let lora_base = lora.filter(|l| l.merge_for_rollouts).map(|l| (weights.clone(), l));
        Ok(Trainer { cfg, vars, model, sampler_view, reference, lora_base, optimizer, sharding, sampling_rng, step: 0, dist, engine: None, pending: None })
    }

    /// Shares the steps with `dist`'s ranks instead (tests, `dist-check`):
    /// the optimizer is rebuilt, sharded for them under ZeRO-1.
    pub fn set_dist(&mut self, dist: Dist) -> Result<()> {
        (self.sharding, self.optimizer) = dist::zero::Sharding::with_optimizer(self.cfg.optim.zero_stage, &self.vars, &*dist, *self.optimizer.config())?;
        self.dist = dist;
        Ok(())
    }

    /// One GRPO step: its rollouts (B tasks drawn by `draw`, G episodes
    /// each; with several ranks, this rank rolls out its share of the
    /// tasks; under `zero_std_groups = "resample"`, further tasks until B
    /// groups have a reward spread, [`resample`]), then the update. Under
    /// `[rollout] off_policy = 1` the rollouts are the ones made during the
    /// previous step's update, and the next step's are made during this
    /// one's ([`Trainer::learn_while_collecting`]).
    pub fn step(&mut self, env: &Env<'_>, draw: &mut Draw<'_>) -> Result<StepMetrics> {
        let t0 = Instant::now();
        let (rollouts, made_now) = match self.pending.take() {
            Some(made_ahead) => (made_ahead, None),
            None => {
                let made = self.collect(env, draw)?;
                let now = (made.seconds, made.synced);
                (made, Some(now))
            }
        };
        let update_start = t0.elapsed().as_secs_f64();
        let lr = self.cfg.optim.lr * self.cfg.optim.schedule.for_run(self.cfg.train.steps).factor(self.step);
        let (learned, ahead) = if self.cfg.off_policy > 0 && self.step + 1 < self.cfg.train.steps {
            let (learned, ahead) = self.learn_while_collecting(env, draw, &rollouts, lr)?;
            (learned, Some(ahead))
        } else {
            (self.learn(&rollouts.episodes, lr)?, None)
        };
        let staleness = self.step - rollouts.policy_step;
        self.step += 1;
        let step_secs = self.slowest(t0.elapsed().as_secs_f64())?;
        let update_secs = self.slowest(learned.seconds)?;
        // Made now (before the update) and ahead (during it, off-policy).
        let rollout_secs = made_now.map_or(0.0, |n| n.0) + ahead.as_ref().map_or(0.0, |a| a.rollouts.seconds);
        let off_policy = (self.cfg.off_policy > 0).then(|| OffPolicyMetrics::of(staleness, update_start, update_start + learned.seconds, ahead.as_ref()));
        // This step's weight sync: before the rollouts made ahead, or before
        // the ones made now (step 1 syncs then only).
        let synced = ahead.as_ref().and_then(|a| a.rollouts.synced).or(made_now.and_then(|n| n.1));
        self.pending = ahead.map(|a| a.rollouts);
        let Learned { adv, metrics: m, update: Update { grad_norm, skipped }, .. } = learned;
        let episodes = &rollouts.episodes;
        let summary = Summary::of(episodes);
        let tokens: usize = episodes.iter().map(|e| e.tokens.len()).sum();
        let policy_tokens: usize = episodes.iter().map(|e| e.policy_tokens()).sum();
        Ok(StepMetrics {
            step: self.step,
            reward: summary.reward,
            train_reward: (self.cfg.reward.answer_bonus != 0.0).then_some(adv.reward_mean),
            answered: summary.answered,
            reward_std: adv.reward_std,
            frac_reward_zero_std: adv.frac_reward_zero_std,
            resample: rollouts.refill,
            f1_file: summary.f1_file,
            f1_func: summary.f1_func,
            e: summary.e,
            loss: m.loss,
            kl: m.kl,
            entropy: m.entropy,
            clip_low: m.clip_ratio_low_mean,
            clip_high: m.clip_ratio_high_mean,
            clip_region: m.clip_ratio_region_mean,
            grad_norm,
            lr,
            tokens,
            policy_tokens,
            padding_share: m.padding.share(),
            drift: m.drift,
            skipped_zero_advantage_rows: m.skipped_rows,
            stop_context_full: stop_share(episodes, StopReason::ContextFull),
            stop_max_tokens: stop_share(episodes, StopReason::MaxTokens),
            calls_per_turn: summary.calls_per_turn,
            seconds_rollout: rollout_secs,
            seconds_sync: synced.map(|s| s.seconds),
            engine_probe_diff: synced.map(|s| s.probe_mean),
            engine_probe_moved: synced.map(|s| s.probe_moved),
            seconds_update: update_secs,
            seconds_step: step_secs,
            off_policy,
            tokens_per_second: tokens as f64 / step_secs.max(1e-9),
            skipped,
            ranks: (self.dist.world() > 1).then_some(self.dist.world()),
            tasks: rollout::episode::summary::task_rewards(episodes),
            rolled_out: rollouts.rolled_out,
            rolled_tasks: rollouts.rolled_tasks,
        })
    }

    /// Rewards -> advantages -> the update(s) on `episodes`.
    fn learn(&mut self, episodes: &[rollout::episode::Episode], lr: f64) -> Result<Learned> {
        let t0 = Instant::now();
        let rewards: Vec<f64> = episodes.iter().map(|e| e.training_reward(&self.cfg.reward)).collect();
        let g = &self.cfg.update;
        let adv = group_advantages(&rewards, self.cfg.group, g.scaling, TRL_ADVANTAGE_EPS, g.zero_std_groups)?;
        let (metrics, update) = if adv.kept_rows.is_empty() {
            // Every group had equal rewards and `zero_std_groups = "drop"`
            // (or "resample", up to its bound) removed them all: nothing to
            // learn from, the weights stay.
            tracing::info!(step = self.step + 1, "no group with a reward spread: no update this step");
            (GrpoMetrics::empty(), Update { grad_norm: 0.0, skipped: false })
        } else {
            self.update(episodes, &adv, lr)?
        };
        Ok(Learned { adv, metrics, update, seconds: t0.elapsed().as_secs_f64() })
    }

    /// This step's rollouts, made now with the current weights.
    fn collect(&mut self, env: &Env<'_>, draw: &mut Draw<'_>) -> Result<Rollouts> {
        let (synced, merged) = self.prepare(false)?;
        let model = merged.as_ref().unwrap_or(&self.sampler_view);
        let source = lend(self.engine.take(), Some(model), &mut self.sampling_rng);
        let mut collector = Collector { cfg: &self.cfg, dist: &self.dist, source, policy_step: self.step, seed_step: self.step, synced };
        let result = collector.collect(env, draw);
        take_back(collector.source, &mut self.engine, &mut self.sampling_rng);
        result
    }

    /// What the next rollouts decode with: on a vLLM server, this step's
    /// weights synced to it (what the sync took and found); else the model
    /// to decode from, a `frozen` copy the update does not change, or a LoRA
    /// run's merged model (none: the sampler view).
    fn prepare(&mut self, frozen: bool) -> Result<(Option<engine_sync::Synced>, Option<CausalLm>)> {
        let Some(mut sync) = self.engine.take() else {
            let model = if frozen { Some(self.frozen_rollout_model()?) } else { self.rollout_model()? };
            return Ok((None, model));
        };
        let synced = self.sync_engine(&mut sync);
        self.engine = Some(sync);
        Ok((synced?, None))
    }

    /// `[rollout] off_policy = 1`: the update on `rollouts` while, on a
    /// thread of its own, the next step's rollouts are made with the
    /// weights before the update (a frozen copy; on a vLLM server, the
    /// weights synced to it first). The next step corrects their staleness
    /// with TIS (`[grpo] rollout_correction = "tis"`: the truncated ratio of
    /// the trainer's policy to the one that sampled).
    fn learn_while_collecting(&mut self, env: &Env<'_>, draw: &mut Draw<'_>, rollouts: &Rollouts, lr: f64) -> Result<(Learned, Ahead)> {
        let t0 = Instant::now();
        let (synced, frozen) = self.prepare(true)?;
        let (cfg, dist) = (self.cfg.clone(), self.dist.clone());
        let source = lend(self.engine.take(), frozen.as_ref(), &mut self.sampling_rng);
        let mut collector = Collector { cfg: &cfg, dist: &dist, source, policy_step: self.step, seed_step: self.step + 1, synced };
        let (learned, ahead) = std::thread::scope(|scope| {
            let making = std::thread::Builder::new().name("rollouts-ahead".into()).spawn_scoped(scope, || {
                let start = t0.elapsed().as_secs_f64();
                (start, collector.collect(env, draw), t0.elapsed().as_secs_f64())
            });
            let update_start = t0.elapsed().as_secs_f64();
            let learned = self.learn(&rollouts.episodes, lr);
            let update_end = t0.elapsed().as_secs_f64();
            let ahead = match making {
                Ok(handle) => handle.join().map_err(|_| Error::invalid("rollout", "the thread making the next step's rollouts panicked".to_string())),
                Err(e) => Err(Error::invalid("rollout", format!("could not start the thread for the next step's rollouts: {e}"))),
            };
            (learned.map(|l| (l, update_start, update_end)), ahead)
        });
        take_back(collector.source, &mut self.engine, &mut self.sampling_rng);
        let (learned, update_start, update_end) = learned?;
        let (rollout_start, made, rollout_end) = ahead?;
        Ok((learned, Ahead { rollouts: made?, rollout_start, rollout_end, update_start, update_end }))
    }

    /// The slowest rank's `seconds` (this rank's alone with one process).
    fn slowest(&self, seconds: f64) -> Result<f64> {
        let mut s = [seconds];
        dist::reduce::max_f64(&*self.dist, &mut s)?;
        Ok(s[0])
    }

    /// The optimizer update(s) on the kept rows of `episodes` (the whole
    /// step's, every rank's): clipped loss (+KL) over this rank's share of
    /// the rows with the whole batch's totals, gradients accumulated over
    /// micro-batches and summed over ranks, clip, AdamW, `num_iterations`
    /// times. Returns the last iteration's metrics and update (its gradient
    /// norm, and whether it was skipped as non-finite).
    pub fn update(&mut self, episodes: &[rollout::episode::Episode], adv: &Advantages, lr: f64) -> Result<(GrpoMetrics, Update)> {
        let (batch, totals) = self.own_batch(episodes, adv)?;
        let mut last = None;
        for _ in 0..self.cfg.update.num_iterations {
            let (grads, metrics) = self.gradients(&batch, totals)?;
            let update = self.apply(grads, metrics.loss, lr)?;
            last = Some((metrics, update));
            if update.skipped {
                break;
            }
        }
        Ok(last.expect("at least one iteration"))
    }

    /// Clip (or measure) the gradients, then AdamW, unless the loss or the
    /// norm is NaN/inf.
    pub fn apply(&mut self, grads: Gradients, loss: f64, lr: f64) -> Result<Update> {
        self.sharding.update(&*self.dist, &mut self.optimizer, &self.vars, grads, self.cfg.optim.max_grad_norm, loss, lr)
    }

    /// This rank's rows of the step's batch (with reference and old
    /// log-probs when the loss needs them) and the whole batch's totals.
    pub fn own_batch(&self, episodes: &[rollout::episode::Episode], adv: &Advantages) -> Result<(GrpoBatch, BatchTotals)> {
        let g = &self.cfg.update;
        let device = self.model.device().clone();
        let totals = batch::totals(episodes, &adv.kept_rows, self.cfg.train.mask_truncated);
        let (rows, values) = self.own_rows(episodes.len(), adv);
        let mut batch = batch::build_batch(episodes, &rows, &values, self.cfg.train.mask_truncated, &device)?;
        let (temperature, micro) = (self.cfg.loss.temperature, self.cfg.train.micro_batching()?);
        if !rows.is_empty() {
            if let Some(r) = &self.reference {
                batch.ref_logprobs = Some(detached_logprobs(r, &batch.tokens, &batch.mask, temperature, micro)?);
            }
            if g.num_iterations > 1 {
                batch.old_logprobs = OldLogprobs::Stored(detached_logprobs(&self.sampler_view, &batch.tokens, &batch.mask, temperature, micro)?);
            }
        }
        Ok((batch, totals))
    }

    /// The gradients of the whole batch: this rank's rows with the batch's
    /// totals, summed over ranks, with the loss metrics added over ranks.
    pub fn gradients(&self, batch: &GrpoBatch, totals: BatchTotals) -> Result<(Gradients, GrpoMetrics)> {
        let (mut grads, sums, padding) = accumulate_share(&self.model, &self.vars, batch, &self.cfg.loss, self.cfg.train.micro_batching()?, totals)?;
        self.sharding.sum_gradients(&*self.dist, &self.vars, &mut grads)?;
        let (sums, padding) = super::accumulate::sum_loss_sums(&*self.dist, &sums, padding)?;
        let mut metrics = sums.metrics();
        metrics.padding = padding;
        Ok((grads, metrics))
    }

    /// This rank's kept rows (episodes of its share of the groups) and their
    /// advantages.
    fn own_rows(&self, episodes: usize, adv: &Advantages) -> (Vec<usize>, Vec<f32>) {
        let group = self.cfg.group; // >= 1: checked at config load
        let groups = dist::share(&*self.dist, episodes / group);
        let mine = groups.start * group..groups.end * group;
        adv.kept_rows.iter().zip(&adv.values).filter(|(r, _)| mine.contains(r)).map(|(&r, &v)| (r, v)).unzip()
    }

    /// A LoRA run's rollout model: the base with the current adapter merged
    /// into a copy of its adapted projections (`W + s B A`), made once per
    /// step. Decoding through it is about 1.27x faster than applying the
    /// adapter at every token (BENCHMARKS.md, "LoRA adapters"); the copy is
    /// the price (the planner counts it). None without LoRA, or with
    /// `[lora] merge_for_rollouts = false`.
    pub fn rollout_model(&self) -> Result<Option<CausalLm>> {
        let Some((base, lora)) = &self.lora_base else { return Ok(None) };
        let tensors: TensorMap = self.vars.iter().map(|(k, v)| (k.clone(), v.as_tensor().detach())).collect();
        let adapter = lm::lora::Adapter { cfg: lora.clone(), tensors };
        let merged = adapter.merge_into(self.model.config(), base)?;
        Ok(Some(CausalLm::new(self.model.config(), &merged)?))
    }

    /// A copy of the rollout weights that the update does not change
    /// (`off_policy`: the next step's rollouts decode from it during the
    /// update): the merged model of a LoRA run (already a copy), else the
    /// trained tensors copied.
    fn frozen_rollout_model(&self) -> Result<CausalLm> {
        if let Some(merged) = self.rollout_model()? {
            return Ok(merged);
        }
        let copies: TensorMap = self.vars.iter().map(|(k, v)| Ok((k.clone(), v.as_tensor().copy()?))).collect::<Result<_>>()?;
        Ok(match &self.cfg.lora {
            None => CausalLm::new(self.model.config(), &copies)?,
            Some(l) => self.model.without_adapter().with_adapter(&lm::lora::Adapter { cfg: l.clone(), tensors: copies })?,
        })
    }

    /// A vLLM server takes this step's weights unless it has them (once
    /// per step; on a resume, the first step of the process) and is probed:
    /// what the sync took and found, none when it had them.
    fn sync_engine(&self, sync: &mut engine_sync::EngineSync) -> Result<Option<engine_sync::Synced>> {
        if sync.synced_step() == Some(self.step) {
            return Ok(None);
        }
        let trained: TensorMap = self.vars.iter().map(|(k, v)| (k.clone(), v.as_tensor().detach())).collect();
        let merged = self.rollout_model()?;
        let ours = merged.as_ref().unwrap_or(&self.sampler_view);
        let synced = match &self.lora_base {
            None => sync.sync(self.step, engine_sync::Upload::Model(self.model.config(), &trained), ours)?,
            Some((base, lora)) => {
                if sync.synced_step().is_none() {
                    sync.check_base(&CausalLm::new(self.model.config(), base)?)?;
                }
                sync.sync(self.step, engine_sync::Upload::Adapter(&lm::lora::Adapter { cfg: lora.clone(), tensors: trained }), ours)?
            }
        };
        tracing::info!(step = self.step, seconds = synced.seconds, probe_mean = synced.probe_mean, probe_max = synced.probe_max, "weights synced to the rollout engine");
        Ok(Some(synced))
    }
}

/// The source a collection decodes with: the engine, taken out of the
/// trainer, or `model` with the sampling stream, lent (one of the two is
/// there: [`Trainer::prepare`]).
fn lend<'m>(engine: Option<engine_sync::EngineSync>, model: Option<&'m CausalLm>, rng: &mut ChaCha8Rng) -> Source<'m> {
    match (engine, model) {
        (Some(sync), _) => Source::Engine(sync),
        (None, model) => Source::Model {
            model: model.expect("a model to decode from without an engine"),
            rng: std::mem::replace(rng, rand::SeedableRng::seed_from_u64(0)),
        },
    }
}

/// Puts back what [`lend`] lent.
fn take_back(source: Source<'_>, engine: &mut Option<engine_sync::EngineSync>, rng: &mut ChaCha8Rng) {
    match source {
        Source::Model { rng: lent, .. } => *rng = lent,
        Source::Engine(sync) => *engine = Some(sync),
    }
}

/// What [`Trainer::learn`] did.
struct Learned {
    adv: Advantages,
    metrics: GrpoMetrics,
    update: Update,
    seconds: f64,
}

/// The next step's rollouts, made during this step's update, and when
/// each ran (seconds from the step's start).
struct Ahead {
    rollouts: Rollouts,
    rollout_start: f64,
    rollout_end: f64,
    update_start: f64,
    update_end: f64,
}

/// `[rollout] off_policy`'s metrics: how stale the step's rollouts were and
/// how the making of the next ones overlapped the update (seconds from the
/// step's start; the rollout fields are absent when none were made ahead,
/// as in the last step).
#[derive(Debug, Clone, Serialize)]
pub struct OffPolicyMetrics {
    /// Updates between the policy that sampled the step's rollouts and the
    /// one updated (0: on-policy, as the first step).
    #[serde(rename = "off_policy/staleness")]
    pub staleness: u64,
    #[serde(rename = "off_policy/update_start")]
    pub update_start: f64,
    #[serde(rename = "off_policy/update_end")]
    pub update_end: f64,
    #[serde(rename = "off_policy/rollout_start", skip_serializing_if = "Option::is_none")]
    pub rollout_start: Option<f64>,
    #[serde(rename = "off_policy/rollout_end", skip_serializing_if = "Option::is_none")]
    pub rollout_end: Option<f64>,
    /// Seconds the update and the next rollouts ran at once.
    #[serde(rename = "off_policy/overlap_seconds")]
    pub overlap_seconds: f64,
}

impl OffPolicyMetrics {
    fn of(staleness: u64, update_start: f64, update_end: f64, ahead: Option<&Ahead>) -> Self {
        let (update_start, update_end) = ahead.map_or((update_start, update_end), |a| (a.update_start, a.update_end));
        let rollout = ahead.map(|a| (a.rollout_start, a.rollout_end));
        let overlap_seconds = rollout.map_or(0.0, |(s, e)| (e.min(update_end) - s.max(update_start)).max(0.0));
        OffPolicyMetrics { staleness, update_start, update_end, rollout_start: rollout.map(|r| r.0), rollout_end: rollout.map(|r| r.1), overlap_seconds }
    }
}
