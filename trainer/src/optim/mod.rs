//! Optimization: [`AdamW`] (as `torch.optim.AdamW`, fp32 moments, fp32 master
//! weights for low-precision parameters), global-norm gradient clipping (as
//! `torch.nn.utils.clip_grad_norm_`), and learning-rate schedules
//! ([`LrSchedule`], as transformers' schedulers).

pub mod adamw;
pub mod config;
pub mod schedule;

pub use adamw::{AdamW, AdamWConfig, WeightDecayScope};
pub use config::OptimSection;
pub use schedule::LrSchedule;

use crate::error::{Error, Result};

/// The optimizer state's file in a checkpoint folder (defined with the
/// weights, whose readers skip it).
pub use lm::weights::OPTIMIZER_FILE;

/// What one optimizer update did (`dist::zero::Sharding::update`: clip,
/// finite check, AdamW; GRPO and SFT both make their updates through it).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Update {
    /// The global gradient norm before clipping.
    pub grad_norm: f64,
    /// The norm or the loss was NaN/inf: the weights did not move.
    pub skipped: bool,
}
use candle_core::{DType, Tensor};
use std::collections::BTreeMap;

/// Gradients by parameter name (Hugging Face names), f32. A parameter that
/// received no gradient is absent (like a `None` `.grad` in torch).
#[derive(Debug, Clone, Default)]
pub struct Gradients {
    by_name: BTreeMap<String, Tensor>,
}

impl Gradients {
    /// Adds `grad` into the gradient of `name` (inserting it if absent).
    pub fn add(&mut self, name: &str, grad: &Tensor) -> Result<()> {
        let grad = grad.to_dtype(DType::F32)?;
        match self.by_name.get_mut(name) {
            Some(acc) => {
                if acc.dims() != grad.dims() {
                    return Err(Error::invalid(
                        "gradients",
                        format!("`{name}`: adding {:?} to {:?}", grad.dims(), acc.dims()),
                    ));
                }
                *acc = (&*acc + grad)?;
            }
            None => {
                self.by_name.insert(name.to_string(), grad);
            }
        }
        Ok(())
    }

    pub fn get(&self, name: &str) -> Option<&Tensor> {
        self.by_name.get(name)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &Tensor)> {
        self.by_name.iter()
    }

    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// Global L2 norm over all gradients (the norm of the per-tensor norms,
    /// added in name order).
    pub fn global_norm(&self) -> Result<f64> {
        let mut sq = 0f64;
        for g in self.by_name.values() {
            let n = tensor_norm(g)?;
            sq += n * n;
        }
        Ok(sq.sqrt())
    }

    /// Multiplies every gradient by `coef`.
    pub fn scale(&mut self, coef: f64) -> Result<()> {
        for g in self.by_name.values_mut() {
            *g = (&*g * coef)?;
        }
        Ok(())
    }

    /// Keeps the gradients whose name `keep` accepts.
    pub fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        self.by_name.retain(|n, _| keep(n));
    }

    /// `torch.nn.utils.clip_grad_norm_(max_norm, norm_type=2)`: returns the
    /// total norm before clipping and, when it is finite, multiplies every
    /// gradient by `min(1, max_norm / (total + 1e-6))`. A non-finite norm
    /// leaves the gradients as they are, for the caller to skip the update.
    pub fn clip_global_norm(&mut self, max_norm: f64) -> Result<f64> {
        let total = self.global_norm()?;
        if total.is_finite() {
            self.scale(clip_coefficient(max_norm, total))?;
        }
        Ok(total)
    }
}

/// One gradient's L2 norm (f32 sum of squares, as torch), as f64.
pub fn tensor_norm(g: &Tensor) -> Result<f64> {
    Ok(g.sqr()?.sum_all()?.sqrt()?.to_dtype(DType::F64)?.to_scalar::<f64>()?)
}

/// `clip_grad_norm_`'s factor: `min(1, max_norm / (total + 1e-6))`.
pub fn clip_coefficient(max_norm: f64, total: f64) -> f64 {
    (max_norm / (total + 1e-6)).min(1.0)
}
