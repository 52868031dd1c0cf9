//! `[train]` and `[grpo]`: what GRPO trains on, how often it saves, and its objective.

use crate::grpo::advantages::{AdvantageScaling, ZeroStdGroups};
use crate::grpo::drift::{RolloutCorrection, DEFAULT_TIS_CAP};
use crate::grpo::loss::{ImportanceSampling, LossAggregation};
use lm::model::recompute::Recompute;
use crate::packing::MicroBatching;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// What to train on and how often to save.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TrainSection {
    /// Training tasks (JSONL), relative to the config file.
    pub tasks: Option<PathBuf>,
    /// Optimizer steps.
    pub steps: u64,
    /// Tasks per step (B); each gets `rollout.group` episodes.
    pub tasks_per_step: usize,
    /// Rows per forward/backward (gradient accumulation over micro-batches).
    pub micro_batch_rows: usize,
    /// Packed micro-batches instead: tokens per forward/backward, several
    /// episodes end to end in one row, no padding. Replaces `micro_batch_rows`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub micro_batch_tokens: Option<usize>,
    /// Save a checkpoint every N steps (and at the end).
    pub save_every: u64,
    /// Keep the newest K checkpoints (0 = all).
    pub keep_last: usize,
    /// Drop truncated episodes (max tokens, context full) from the loss.
    pub mask_truncated: bool,
    /// Activation recomputation per decoder layer (`off` | `per_layer`); left out of the config hash when off.
    #[serde(skip_serializing_if = "Recompute::is_off")]
    pub recompute: Recompute,
    /// Stop a GRPO or SFT run (saving first) after this many skipped (NaN/inf) steps in a row.
    pub max_nonfinite_steps: u32,
}

impl TrainSection {
    /// How each optimizer batch is cut (`micro_batch_tokens` wins).
    pub fn micro_batching(&self) -> crate::error::Result<MicroBatching> {
        MicroBatching::from_settings("train", self.micro_batch_rows, self.micro_batch_tokens)
    }
}

impl Default for TrainSection {
    fn default() -> Self {
        TrainSection { tasks: None, steps: 100, tasks_per_step: 2, micro_batch_rows: 4, micro_batch_tokens: None, save_every: 50, keep_last: 3, mask_truncated: true, recompute: Recompute::Off, max_nonfinite_steps: 3 }
    }
}

/// The GRPO objective.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GrpoSection {
    /// Ratio clipping: `[1 - clip_low, 1 + clip_high]`.
    pub clip_low: f64,
    pub clip_high: f64,
    /// KL coefficient against the frozen starting model (0 = no reference model).
    pub beta: f64,
    pub aggregation: LossAggregation,
    pub scaling: AdvantageScaling,
    pub zero_std_groups: ZeroStdGroups,
    /// With `zero_std_groups = "resample"`: the most further tasks one step
    /// draws (each rolled out as a group) beyond its `tasks_per_step`;
    /// reached, the step trains on the groups with a spread it has. Unset:
    /// 2 x `tasks_per_step`. Left out of the config hash when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_resample_draws: Option<usize>,
    /// Updates per batch of rollouts (mu, >= 1: checked at config load).
    pub num_iterations: usize,
    /// Truncated importance sampling of the drift between the rollout's
    /// log-probs and the trainer's (`none` | `tis`); the drift is measured
    /// either way (`sampling/...` in metrics.jsonl). Left out of the config
    /// hash when none.
    #[serde(skip_serializing_if = "RolloutCorrection::is_none")]
    pub rollout_correction: RolloutCorrection,
    /// The cap C of `tis`: each policy token's surrogate weighted by min(ratio, C).
    #[serde(skip_serializing_if = "is_default_tis_cap")]
    pub tis_cap: f64,
    /// The importance ratio per `token` (GRPO) or per `sequence` (GSPO: the
    /// exponential of the mean of a sequence's token log-ratios, clipped as
    /// one). Left out of the config hash when token.
    #[serde(skip_serializing_if = "ImportanceSampling::is_token")]
    pub importance_sampling: ImportanceSampling,
}

impl GrpoSection {
    /// The bound on a step's further draws under `zero_std_groups =
    /// "resample"` (`max_resample_draws`, else 2 x `tasks_per_step`).
    pub fn resample_draws(&self, tasks_per_step: usize) -> usize {
        self.update().resample_draws(tasks_per_step)
    }

    /// What the trainer takes of this section besides the loss's settings
    /// (clip range, beta, aggregation, rollout correction, TIS cap,
    /// importance sampling: `RunConfig::loss_config`'s alone).
    pub fn update(&self) -> GrpoUpdate {
        GrpoUpdate { scaling: self.scaling, zero_std_groups: self.zero_std_groups, max_resample_draws: self.max_resample_draws, num_iterations: self.num_iterations }
    }
}

/// `[grpo]`'s settings of a step besides its loss: how rewards become
/// advantages, what a group without a reward spread does, and how many
/// updates each batch of rollouts gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrpoUpdate {
    pub scaling: AdvantageScaling,
    pub zero_std_groups: ZeroStdGroups,
    /// The bound of `zero_std_groups = "resample"` ([`GrpoUpdate::resample_draws`]).
    pub max_resample_draws: Option<usize>,
    /// Updates per batch of rollouts (mu, >= 1: checked at config load).
    pub num_iterations: usize,
}

impl GrpoUpdate {
    /// The bound on a step's further draws under `zero_std_groups =
    /// "resample"` (`max_resample_draws`, else 2 x `tasks_per_step`).
    pub fn resample_draws(&self, tasks_per_step: usize) -> usize {
        self.max_resample_draws.unwrap_or(2 * tasks_per_step)
    }
}

/// The frozen model the KL term measures against, decided once
/// ([`Reference::of`]) and used by the trainer, the run that loads its
/// weights and the memory plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reference {
    /// `[grpo] beta = 0`: no KL term, no reference model.
    None,
    /// A LoRA run: the base with the adapter off (the same tensors, no copy).
    Base,
    /// A full-weight run: a frozen copy of the run's starting weights (on a
    /// resume, read again from the run's starting model).
    Copy,
}

impl Reference {
    /// The reference of a loss with KL coefficient `beta` (> 0: a KL term)
    /// in a run that trains an `adapter` (LoRA) or every weight.
    pub fn of(beta: f64, adapter: bool) -> Reference {
        match (beta > 0.0, adapter) {
            (false, _) => Reference::None,
            (true, true) => Reference::Base,
            (true, false) => Reference::Copy,
        }
    }
}

fn is_default_tis_cap(c: &f64) -> bool {
    *c == DEFAULT_TIS_CAP
}

impl Default for GrpoSection {
    fn default() -> Self {
        GrpoSection {
            clip_low: 0.2,
            clip_high: 0.2,
            beta: 0.0,
            aggregation: LossAggregation::Dapo,
            scaling: AdvantageScaling::Group,
            zero_std_groups: ZeroStdGroups::Keep,
            max_resample_draws: None,
            num_iterations: 1,
            rollout_correction: RolloutCorrection::None,
            tis_cap: DEFAULT_TIS_CAP,
            importance_sampling: ImportanceSampling::Token,
        }
    }
}

/// What a GRPO trainer is set up with: its own sections (`[train]`,
/// `[optim]`), `[grpo]` as its loss and the rest of a step, and what it
/// takes of the other sections. A run config converts into it
/// (`RunConfig::grpo_trainer`), so the trainer knows no `RunConfig`; each
/// setting is here once.
#[derive(Debug, Clone)]
pub struct TrainerConfig {
    /// `[grpo]` besides the loss.
    pub update: GrpoUpdate,
    pub train: TrainSection,
    pub optim: crate::optim::OptimSection,
    /// The loss of every update (`RunConfig::loss_config`): the one copy of
    /// `[grpo]`'s clip range, beta, aggregation, rollout correction and
    /// importance sampling.
    pub loss: crate::grpo::GrpoLossConfig,
    /// The KL reference (`RunConfig::reference`).
    pub reference: Reference,
    /// Episodes per task (`[rollout] group`, >= 1: checked at config load).
    pub group: usize,
    /// `[rollout]`'s batching and KV-cache bounds.
    pub limits: crate::model_policy::RolloutLimits,
    /// `[sampling]`'s sampler.
    pub sampler: lm::sampling::SamplerConfig,
    pub episode: rollout::episode::EpisodeConfig,
    pub reward: rollout::reward::RewardConfig,
    /// `[lora]`, validated, when the run trains an adapter.
    pub lora: Option<lm::lora::LoraConfig>,
    /// `[rollout] off_policy`: 1 makes each next step's rollouts during
    /// the update ([`super::Trainer::step`]).
    pub off_policy: u32,
}
