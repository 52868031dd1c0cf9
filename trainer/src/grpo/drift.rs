//! The drift between the rollout's log-probs (inference: the KV cache, its
//! batch and padding, possibly bf16) and the trainer's log-probs of the same
//! tokens, measured on the policy tokens and optionally corrected by
//! truncated importance sampling (TIS), as TRL does with
//! `vllm_importance_sampling_correction` (mode `token_truncate`):
//!
//! ```text
//! delta = |logp_old - logp_rollout|            sampling/sampling_logp_difference/{mean,max}
//! w     = exp(logp_old - logp_rollout)         sampling/importance_sampling_ratio/{min,mean,max}
//! l     = min(w, cap) * surrogate + beta * kl  (rollout_correction = "tis")
//! ```
//!
//! `logp_old` is the trainer's log-prob before the update (the detached
//! current one when mu == 1).

use crate::error::Result;
use candle_core::{DType, Tensor};
use serde::{Deserialize, Serialize};

/// TRL's default `vllm_importance_sampling_cap`.
pub const DEFAULT_TIS_CAP: f64 = 3.0;

/// What is done about the drift (`[grpo] rollout_correction`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum RolloutCorrection {
    /// Measured, not corrected.
    #[default]
    None,
    /// Each policy token's surrogate is weighted by `min(w, cap)`, `w` the
    /// importance ratio trainer / rollout (detached).
    Tis,
}

impl RolloutCorrection {
    pub fn is_none(&self) -> bool {
        *self == RolloutCorrection::None
    }
}

/// Sums over the policy tokens of one micro-batch, added up over the batch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DriftSums {
    pub tokens: f64,
    pub diff_sum: f64,
    pub diff_max: f64,
    pub ratio_sum: f64,
    pub ratio_min: f64,
    pub ratio_max: f64,
}

impl Default for DriftSums {
    fn default() -> Self {
        DriftSums { tokens: 0.0, diff_sum: 0.0, diff_max: 0.0, ratio_sum: 0.0, ratio_min: f64::INFINITY, ratio_max: 0.0 }
    }
}

/// The drift of one micro-batch: its sums and the per-token importance
/// ratio `[b, t]` (1 off the policy tokens; truncated at the cap if one was
/// given, as TRL reports it).
pub struct Drift {
    pub sums: DriftSums,
    pub ratio: Tensor,
}

impl Drift {
    /// From the trainer's `old` log-probs, the rollout's `rollout` ones and
    /// the policy-token `mask`, all `[b, t]`; the ratio truncated at `cap`.
    pub fn of(old: &Tensor, rollout: &Tensor, mask: &Tensor, cap: Option<f64>) -> Result<Drift> {
        let on = mask.gt(0.0)?;
        let diff = on.where_cond(&(old.detach() - rollout)?, &old.zeros_like()?)?;
        let ratio = match cap {
            Some(c) => diff.exp()?.clamp(0.0, c)?,
            None => diff.exp()?,
        };
        let f64s = |t: &Tensor| -> Result<Vec<f64>> { Ok(t.flatten_all()?.to_dtype(DType::F64)?.to_vec1::<f64>()?) };
        let (d, r, m) = (f64s(&diff)?, f64s(&ratio)?, f64s(mask)?);
        let mut sums = DriftSums::default();
        for ((&d, &r), &m) in d.iter().zip(&r).zip(&m) {
            if m > 0.0 {
                sums.tokens += 1.0;
                sums.diff_sum += d.abs();
                sums.diff_max = sums.diff_max.max(d.abs());
                sums.ratio_sum += r;
                sums.ratio_min = sums.ratio_min.min(r);
                sums.ratio_max = sums.ratio_max.max(r);
            }
        }
        Ok(Drift { sums, ratio })
    }

}

impl DriftSums {
    pub fn add(&mut self, o: &DriftSums) {
        self.tokens += o.tokens;
        self.diff_sum += o.diff_sum;
        self.diff_max = self.diff_max.max(o.diff_max);
        self.ratio_sum += o.ratio_sum;
        self.ratio_min = self.ratio_min.min(o.ratio_min);
        self.ratio_max = self.ratio_max.max(o.ratio_max);
    }

    /// The metrics, `None` when no policy token was measured.
    pub fn metrics(&self) -> Option<DriftMetrics> {
        (self.tokens > 0.0).then(|| DriftMetrics {
            logp_difference_mean: self.diff_sum / self.tokens,
            logp_difference_max: self.diff_max,
            ratio_min: self.ratio_min,
            ratio_mean: self.ratio_sum / self.tokens,
            ratio_max: self.ratio_max,
        })
    }
}

/// Rollout-vs-trainer drift of one optimizer batch (TRL's names in
/// [`GrpoMetrics::named`](crate::grpo::GrpoMetrics::named)).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct DriftMetrics {
    #[serde(rename = "sampling/sampling_logp_difference/mean")]
    pub logp_difference_mean: f64,
    #[serde(rename = "sampling/sampling_logp_difference/max")]
    pub logp_difference_max: f64,
    #[serde(rename = "sampling/importance_sampling_ratio/min")]
    pub ratio_min: f64,
    #[serde(rename = "sampling/importance_sampling_ratio/mean")]
    pub ratio_mean: f64,
    #[serde(rename = "sampling/importance_sampling_ratio/max")]
    pub ratio_max: f64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn drift_is_measured_on_policy_tokens_only() {
        let dev = Device::Cpu;
        let old = Tensor::new(&[[-1.0f32, -2.0, -0.5], [-3.0, -1.0, -9.0]], &dev).unwrap();
        let rollout = Tensor::new(&[[-1.5f32, -2.0, 0.0], [-2.0, -5.0, -1.0]], &dev).unwrap();
        let mask = Tensor::new(&[[1f32, 1., 0.], [1., 0., 0.]], &dev).unwrap();
        let d = Drift::of(&old, &rollout, &mask, None).unwrap();
        let m = d.sums.metrics().unwrap();
        // diffs on the mask: +0.5, 0, -1.0
        assert!((m.logp_difference_mean - 0.5).abs() < 1e-7);
        assert!((m.logp_difference_max - 1.0).abs() < 1e-7);
        assert!((m.ratio_min - (-1f64).exp()).abs() < 1e-6);
        assert!((m.ratio_max - 0.5f64.exp()).abs() < 1e-6);
        assert!((m.ratio_mean - (0.5f64.exp() + 1.0 + (-1f64).exp()) / 3.0).abs() < 1e-6);
        let capped = Drift::of(&old, &rollout, &mask, Some(1.2)).unwrap();
        let w = capped.ratio.to_vec2::<f32>().unwrap();
        assert_eq!(w[0][2], 1.0, "off the mask the weight is 1");
        assert!((w[0][0] - 1.2).abs() < 1e-6, "capped");
        assert!((capped.sums.metrics().unwrap().ratio_max - 1.2).abs() < 1e-6, "metrics of the truncated ratio");
        let mut total = d.sums;
        total.add(&DriftSums::default());
        assert_eq!(total, d.sums);
        assert!(DriftSums::default().metrics().is_none());
    }
}
