//! The decoder families we run, told apart by config.json's `model_type`
//! (or its `architectures` list), and what each one changes in the layer:
//! q/k RMSNorm (Qwen3), q/k/v biases (Qwen2), llama3 rope scaling (Llama).

use super::reader::Reader;
use crate::error::Result;
use serde_json::Value;

/// A supported decoder architecture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Architecture {
    /// Qwen3: RMSNorm on each query and key head, biases only with
    /// `attention_bias` (then on q, k, v and o).
    Qwen3,
    /// Qwen2 / Qwen2.5: q, k and v projections always carry a bias, o none;
    /// no q/k norm.
    Qwen2,
    /// Llama (SmolLM2, Llama 2/3.x): no q/k norm, biases only with
    /// `attention_bias` (q, k, v and o), optional llama3 rope scaling.
    Llama,
}

/// Every architecture, with its `model_type` and transformers class.
const KNOWN: [(Architecture, &str, &str); 3] = [
    (Architecture::Qwen3, "qwen3", "Qwen3ForCausalLM"),
    (Architecture::Qwen2, "qwen2", "Qwen2ForCausalLM"),
    (Architecture::Llama, "llama", "LlamaForCausalLM"),
];

impl Architecture {
    /// From `model_type`, else from the first entry of `architectures`;
    /// a config naming neither is taken as Qwen3 (our own tiny checkpoints
    /// of earlier versions wrote both, so this only concerns hand-made ones).
    pub(super) fn read(r: &Reader<'_>) -> Result<Self> {
        if let Some(v) = r.get("model_type") {
            let s = v.as_str().ok_or_else(|| r.err("model_type", &format!("expected a string, found {v}")))?;
            return KNOWN.iter().find(|k| k.1 == s).map(|k| k.0).ok_or_else(|| {
                r.err("model_type", &format!("unsupported architecture `{s}`; supported: {:?}", Self::model_types()))
            });
        }
        match r.get("architectures") {
            None => Ok(Architecture::Qwen3),
            Some(Value::Array(list)) => {
                let first = list.first().and_then(Value::as_str).unwrap_or("");
                KNOWN.iter().find(|k| k.2 == first).map(|k| k.0).ok_or_else(|| {
                    r.err("architectures", &format!("unsupported architecture `{first}`; supported: {:?}", Self::classes()))
                })
            }
            Some(v) => Err(r.err("architectures", &format!("expected a list of class names, found {v}"))),
        }
    }

    fn entry(self) -> &'static (Architecture, &'static str, &'static str) {
        KNOWN.iter().find(|k| k.0 == self).expect("every architecture is listed")
    }

    /// config.json's `model_type`.
    pub fn model_type(self) -> &'static str {
        self.entry().1
    }

    /// The transformers class that loads it (config.json's `architectures`).
    pub fn class_name(self) -> &'static str {
        self.entry().2
    }

    fn model_types() -> Vec<&'static str> {
        KNOWN.iter().map(|k| k.1).collect()
    }

    fn classes() -> Vec<&'static str> {
        KNOWN.iter().map(|k| k.2).collect()
    }

    /// RMSNorm over each query and key head before rope.
    pub fn has_qk_norm(self) -> bool {
        self == Architecture::Qwen3
    }

    /// transformers' default `max_position_embeddings` for this family.
    pub(super) fn default_max_positions(self) -> usize {
        match self {
            Architecture::Qwen3 => 40_960,
            Architecture::Qwen2 => 32_768,
            Architecture::Llama => 2_048,
        }
    }
}

/// How rotary frequencies are derived from `rope_theta`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RopeScaling {
    /// `inv_freq[i] = 1 / theta^(2i/d)`.
    Default,
    /// Llama 3.x: long wavelengths divided by `factor`, short ones kept,
    /// the band between interpolated (transformers' `_compute_llama3_parameters`).
    Llama3 { factor: f64, low_freq_factor: f64, high_freq_factor: f64, original_max_position_embeddings: f64 },
}

impl RopeScaling {
    /// From `rope_scaling` (transformers < 5) or `rope_parameters` (>= 5):
    /// `default`, or `llama3` where the architecture allows it.
    pub(super) fn read(r: &Reader<'_>, arch: Architecture) -> Result<Self> {
        let mut found = RopeScaling::Default;
        for key in ["rope_scaling", "rope_parameters"] {
            let m = match r.get(key) {
                None => continue,
                Some(Value::Object(m)) => m,
                Some(v) => return Err(r.err(key, &format!("expected an object, found {v}"))),
            };
            let kind = m.get("rope_type").or_else(|| m.get("type")).and_then(Value::as_str);
            match kind {
                None | Some("default") => {}
                Some("llama3") if arch == Architecture::Llama => {
                    let num = |field: &str| -> Result<f64> {
                        m.get(field).and_then(Value::as_f64).ok_or_else(|| {
                            r.err(&format!("{key}.{field}"), "missing or not a number (llama3 rope scaling needs it)")
                        })
                    };
                    found = RopeScaling::Llama3 {
                        factor: num("factor")?,
                        low_freq_factor: num("low_freq_factor")?,
                        high_freq_factor: num("high_freq_factor")?,
                        original_max_position_embeddings: num("original_max_position_embeddings")?,
                    };
                    if let RopeScaling::Llama3 { low_freq_factor, high_freq_factor, .. } = found {
                        if high_freq_factor <= low_freq_factor {
                            return Err(r.err(&format!("{key}.high_freq_factor"), "must exceed low_freq_factor"));
                        }
                    }
                }
                Some(other) => {
                    let allowed = if arch == Architecture::Llama { "default, llama3" } else { "default" };
                    return Err(r.err(
                        key,
                        &format!("rope_type `{other}` is not supported for {} (supported: {allowed})", arch.model_type()),
                    ));
                }
            }
        }
        Ok(found)
    }

    /// The rotary inverse frequencies of a head of `head_dim`, in f32 as
    /// transformers computes them.
    pub fn inv_freq(self, head_dim: usize, theta: f64) -> Vec<f32> {
        let base = default_inv_freq(head_dim, theta);
        match self {
            RopeScaling::Default => base,
            RopeScaling::Llama3 { factor, low_freq_factor, high_freq_factor, original_max_position_embeddings } => {
                let (factor, low, high, old) =
                    (factor as f32, low_freq_factor as f32, high_freq_factor as f32, original_max_position_embeddings as f32);
                let low_freq_wavelen = old / low;
                let high_freq_wavelen = old / high;
                base.into_iter()
                    .map(|f| {
                        let wavelen = 2.0 * std::f32::consts::PI / f;
                        let scaled = if wavelen > low_freq_wavelen { f / factor } else { f };
                        let medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
                        if medium {
                            let smooth = (old / wavelen - low) / (high - low);
                            (1.0 - smooth) * scaled / factor + smooth * scaled
                        } else {
                            scaled
                        }
                    })
                    .collect()
            }
        }
    }
}

/// `1 / theta^(2i/d)` for i < d/2, in f32.
pub fn default_inv_freq(head_dim: usize, theta: f64) -> Vec<f32> {
    (0..head_dim / 2).map(|i| 1.0f32 / (theta as f32).powf((2 * i) as f32 / head_dim as f32)).collect()
}
