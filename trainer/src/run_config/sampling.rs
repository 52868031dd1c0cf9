//! `[sampling]`: how rollouts sample tokens.

use lm::sampling::SamplerConfig;
use serde::{Deserialize, Serialize};

/// Sampling of rollouts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SamplingSection {
    /// 0 = greedy.
    pub temperature: f64,
    pub top_p: f64,
    /// 0 = off.
    pub top_k: usize,
    pub seed: u64,
}

impl Default for SamplingSection {
    fn default() -> Self {
        SamplingSection { temperature: 1.0, top_p: 1.0, top_k: 0, seed: 0 }
    }
}

impl SamplingSection {
    pub fn sampler(&self) -> SamplerConfig {
        SamplerConfig { temperature: self.temperature, top_p: self.top_p, top_k: self.top_k }
    }
}
