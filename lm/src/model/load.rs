//! A model with its LoRA adapter, as a run or a command loads it: for
//! inference ([`load_model`]: a base and an adapter folder), or for
//! training ([`trainable_model`]: every weight, or an adapter over the
//! frozen base).

use super::CausalLm;
use crate::config::ModelConfig;
use crate::error::{Error, Result};
use crate::lora::{Adapter, LoraConfig, ModelSpec};
use crate::weights::TensorMap;
use candle_core::{DType, Device};

/// Loads `spec`'s base in `dtype` on `device` and applies its adapter.
pub fn load_model(spec: &ModelSpec, dtype: DType, device: &Device) -> Result<CausalLm> {
    let cfg = ModelConfig::from_file(&spec.base.join("config.json"))?;
    let weights = crate::weights::load_weights(&spec.base, &cfg, dtype, device)?;
    let model = CausalLm::new(&cfg, &weights)?;
    match &spec.adapter {
        None => Ok(model),
        Some(dir) => model.with_adapter(&crate::lora::peft::load(dir, &cfg, Some(&spec.base), dtype, device)?),
    }
}

/// The model a training run updates and its trainable `Var`s: every weight
/// (no `[lora]`), or the adapter `start` (a new one, PEFT-initialized, when
/// none) over the frozen base `weights`.
pub fn trainable_model(
    lora: Option<&LoraConfig>,
    model_cfg: &ModelConfig,
    weights: &TensorMap,
    start: Option<&Adapter>,
) -> Result<(CausalLm, std::collections::BTreeMap<String, candle_core::Var>)> {
    match (lora, start) {
        (None, None) => CausalLm::trainable(model_cfg, weights),
        (None, Some(_)) => Err(Error::invalid("[model] adapter", "a starting adapter needs a [lora] section to train it (or merge it into the model first: fusegrpo merge-adapter)")),
        (Some(cfg), Some(a)) => {
            cfg.check_matches(&a.cfg)?;
            CausalLm::trainable_adapter(model_cfg, weights, a)
        }
        (Some(cfg), None) => {
            let device = weights.values().next().map(|t| t.device().clone()).unwrap_or(Device::Cpu);
            CausalLm::trainable_adapter(model_cfg, weights, &Adapter::init(cfg, model_cfg, &device)?)
        }
    }
}
