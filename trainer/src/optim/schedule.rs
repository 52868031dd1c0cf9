//! Learning-rate schedules as transformers' `LambdaLR` factories: the lr of
//! the update made after `step` earlier updates is `base_lr * factor(step)`
//! (so with warmup the first update, step 0, has lr 0, as in the HF Trainer).

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};

/// A learning-rate multiplier as a function of the number of updates done.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum LrSchedule {
    /// `get_constant_schedule`: factor 1.
    Constant,
    /// `get_constant_schedule_with_warmup`: `step / max(1, warmup_steps)`
    /// during warmup, then 1.
    WarmupConstant { warmup_steps: u64 },
    /// `get_cosine_with_min_lr_schedule_with_warmup` (num_cycles 0.5,
    /// `min_lr_rate = min_lr_ratio`; with 0 it is
    /// `get_cosine_schedule_with_warmup`): linear warmup, then
    /// `max(0, c·(1 - min) + min)` with `c = 0.5·(1 + cos(π·p))`,
    /// `p = (step - warmup) / max(1, total - warmup)`. `total_steps = 0`
    /// means the run's own number of updates (see [`LrSchedule::for_run`]).
    WarmupCosine {
        warmup_steps: u64,
        total_steps: u64,
        min_lr_ratio: f64,
    },
}

impl LrSchedule {
    /// Checks `min_lr_ratio` in [0, 1] and `warmup_steps <= total_steps`.
    pub fn validate(&self) -> Result<()> {
        if let LrSchedule::WarmupCosine {
            warmup_steps,
            total_steps,
            min_lr_ratio,
        } = *self
        {
            if !(0.0..=1.0).contains(&min_lr_ratio) {
                return Err(Error::invalid(
                    "lr schedule: min_lr_ratio",
                    format!("{min_lr_ratio} is outside [0, 1]"),
                ));
            }
            if total_steps > 0 && warmup_steps > total_steps {
                return Err(Error::invalid(
                    "lr schedule: warmup_steps",
                    format!("{warmup_steps} warmup steps exceed the {total_steps} total steps"),
                ));
            }
        }
        Ok(())
    }

    /// This schedule for a run of `run_steps` updates: a `total_steps` of 0
    /// becomes `run_steps` (so the cosine ends with the run instead of rising
    /// again after a hand-set total).
    pub fn for_run(self, run_steps: u64) -> Self {
        match self {
            LrSchedule::WarmupCosine { warmup_steps, total_steps: 0, min_lr_ratio } => {
                LrSchedule::WarmupCosine { warmup_steps, total_steps: run_steps, min_lr_ratio }
            }
            other => other,
        }
    }

    /// The multiplier of the base lr for the update after `step` updates.
    pub fn factor(&self, step: u64) -> f64 {
        let warmup = |w: u64| step as f64 / (w.max(1)) as f64;
        match *self {
            LrSchedule::Constant => 1.0,
            LrSchedule::WarmupConstant { warmup_steps } => {
                if step < warmup_steps {
                    warmup(warmup_steps)
                } else {
                    1.0
                }
            }
            LrSchedule::WarmupCosine {
                warmup_steps,
                total_steps,
                min_lr_ratio,
            } => {
                if step < warmup_steps {
                    return warmup(warmup_steps);
                }
                let progress = (step - warmup_steps) as f64
                    / (total_steps.saturating_sub(warmup_steps).max(1)) as f64;
                let c = 0.5 * (1.0 + (std::f64::consts::PI * 0.5 * 2.0 * progress).cos());
                (c * (1.0 - min_lr_ratio) + min_lr_ratio).max(0.0)
            }
        }
    }
}
