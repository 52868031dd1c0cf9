//! The model a policy (or `generate`, `score`, `serve`) runs: a folder or
//! hub id, with a LoRA adapter merged in, on a [`Placement`].

use crate::device::Placement;
use lm::CausalLm;
use crate::error::Result;
use candle_core::Device;
use std::path::Path;

/// Load a model from a folder or hub id, with an adapter: `adapter`, or
/// the model folder itself when it is one (a LoRA run's checkpoint, whose
/// base its adapter_config.json names).
pub fn load_model(spec: &str, adapter: Option<&Path>, on: &Placement) -> Result<(CausalLm, Device)> {
    let device = on.open()?;
    let spec = lm::lora::resolve(spec, adapter)?;
    let t0 = std::time::Instant::now();
    let model = lm::model::load::load_model(&spec, on.dtype.into(), &device)?.with_attention(on.attention);
    let adapter = spec.adapter.as_ref().map_or("none".to_string(), |a| a.display().to_string());
    tracing::info!(model = %spec.base.display(), %adapter, params = lm::params::parameter_count(model.config()), secs = t0.elapsed().as_secs_f64(), "loaded");
    Ok((model, device))
}
