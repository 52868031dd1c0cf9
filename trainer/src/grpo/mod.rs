//! GRPO, in one folder: its config sections, its numerical core and its
//! trainer. What runs it over a run's lifecycle is `run::grpo` (it knows the
//! whole run config; nothing here does).
//!
//! - [`config`]: `[train]` and `[grpo]` of a run config.
//! - [`trainer`]: [`Trainer`], one GRPO step top to bottom
//!   ([`Trainer::step`]), set up from its [`TrainerConfig`]; with the
//!   step's batch ([`batch`]), refills ([`resample`]), task order
//!   ([`sampler`]) and the vLLM engine's weight sync ([`engine_sync`]).
//! - [`collect`]: a step's rollouts ([`collect::Rollouts`]), drawn and
//!   rolled out (made ahead, during the update, under `[rollout] off_policy`).
//! - [`advantages`]: group-relative advantages from rewards (pure, on slices).
//! - [`loss`]: [`grpo_loss`], the loss of one (micro-)batch in one function
//!   (TRL's `_compute_loss`), the [`LossAggregation`] variants, metrics.
//! - [`drift`]: rollout-vs-trainer log-prob drift and its truncated importance sampling.
//! - [`accumulate`]: split an optimizer batch ([`GrpoBatch`]) into
//!   micro-batches and accumulate gradients that equal the one-big-batch ones
//!   (the forward and backward come from [`crate::backward`], shared with SFT).

pub mod accumulate;
pub mod advantages;
pub mod batch;
pub mod collect;
pub mod config;
pub mod drift;
pub mod engine_sync;
pub mod loss;
pub mod resample;
pub mod sampler;
pub mod trainer;

pub use accumulate::{accumulate_gradients, accumulate_share, GrpoBatch, OldLogprobs};
pub use advantages::{group_advantages, AdvantageScaling, Advantages, ZeroStdGroups};
pub use config::{GrpoSection, GrpoUpdate, Reference, TrainSection};
pub use drift::{DriftMetrics, RolloutCorrection};
pub use loss::{
    grpo_loss, linear_coefficients, Aggregate, BatchTotals, ClipRange, GrpoLossConfig, GrpoMetrics, ImportanceSampling, Loss,
    LossAggregation, LossInputs, LossSums, Segments,
};
pub use trainer::{StepMetrics, Trainer, TrainerConfig};
