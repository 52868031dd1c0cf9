//! `[optim]`: AdamW, clipping, the learning-rate schedule and ZeRO, shared
//! by GRPO and SFT.

use super::adamw::WeightDecayScope;
use super::schedule::LrSchedule;
use serde::{Deserialize, Serialize};

/// AdamW, clipping and the learning-rate schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OptimSection {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
    pub decay_scope: WeightDecayScope,
    /// Global gradient-norm clip (0 = off).
    pub max_grad_norm: f64,
    pub schedule: LrSchedule,
    /// ZeRO stage over data-parallel ranks: 0 keeps the whole optimizer
    /// state on every rank; 1 keeps on each rank the f32 masters and AdamW
    /// moments of its shard of the parameters only ([`crate::dist::zero`]).
    /// Left out of the config's JSON (and so its hash) at 0.
    #[serde(skip_serializing_if = "is_zero_u8")]
    pub zero_stage: u8,
}

impl From<&OptimSection> for crate::optim::AdamWConfig {
    fn from(o: &OptimSection) -> Self {
        crate::optim::AdamWConfig { beta1: o.beta1, beta2: o.beta2, eps: o.eps, weight_decay: o.weight_decay, decay_scope: o.decay_scope }
    }
}

fn is_zero_u8(x: &u8) -> bool {
    *x == 0
}

impl Default for OptimSection {
    fn default() -> Self {
        OptimSection {
            lr: 1e-6,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
            decay_scope: WeightDecayScope::SkipBiasesAndNorms,
            max_grad_norm: 1.0,
            schedule: LrSchedule::Constant,
            zero_stage: 0,
        }
    }
}
