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

/// Loads `spec`'s base in `dtype` on `device` with its adapter merged into
/// the projections it adapts (`W + s B A` in f32, then `dtype`: PEFT's
/// `merge_and_unload`): the adapted model's function up to rounding, with
/// no adapter products left in the forward (210 small products per token
/// for a 30-layer model with 7 targets). Training applies the adapter
/// unmerged ([`trainable_model`]).
pub fn load_model(spec: &ModelSpec, dtype: DType, device: &Device) -> Result<CausalLm> {
    let cfg = ModelConfig::from_file(&spec.base.join("config.json"))?;
    let weights = crate::weights::load_weights(&spec.base, &cfg, dtype, device)?;
    let weights = match &spec.adapter {
        None => weights,
        Some(dir) => crate::lora::peft::load(dir, &cfg, Some(&spec.base), DType::F32, device)?.merge_into(&cfg, &weights)?,
    };
    CausalLm::new(&cfg, &weights)
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
