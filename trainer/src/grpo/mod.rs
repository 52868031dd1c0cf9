//! GRPO's numerical core: advantages, the clipped loss with optional k3 KL,
//! and micro-batched gradient accumulation.
//!
//! - [`advantages`]: group-relative advantages from rewards (pure, on slices).
//! - [`loss`]: [`grpo_loss`], the loss of one (micro-)batch in one function
//!   (TRL's `_compute_loss`), the [`LossAggregation`] variants, metrics.
//! - [`drift`]: rollout-vs-trainer log-prob drift and its truncated importance sampling.
//! - [`accumulate`]: split an optimizer batch ([`GrpoBatch`]) into
//!   micro-batches and accumulate gradients that equal the one-big-batch ones
//!   (the forward and backward come from [`crate::backward`], shared with SFT).
//!
//! The trainer that runs a GRPO step is `trainers::grpo::Trainer`: it
//! depends on the run config, which holds this module's value enums.

pub mod accumulate;
pub mod advantages;
pub mod drift;
pub mod loss;

pub use accumulate::{accumulate_gradients, accumulate_share, GrpoBatch, OldLogprobs};
pub use advantages::{group_advantages, AdvantageScaling, Advantages, ZeroStdGroups};
pub use drift::{DriftMetrics, RolloutCorrection};
pub use loss::{
    grpo_loss, linear_coefficients, Aggregate, BatchTotals, ClipRange, GrpoLossConfig, GrpoMetrics, ImportanceSampling, Loss,
    LossAggregation, LossInputs, LossSums, Segments,
};
