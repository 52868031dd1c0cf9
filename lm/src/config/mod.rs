//! The model's architecture from a Hugging Face `config.json`: Qwen3, Qwen2
//! or Llama ([`Architecture`]) and its hyper-parameters.
//!
//! The raw JSON is kept beside the parsed fields so a saved checkpoint writes
//! back every key it was given (transformers reads them). Values we cannot
//! honour (another activation, another rope scaling, sliding windows, MLP
//! biases) are rejected by key rather than silently ignored.

mod architecture;
mod reader;

pub use architecture::{default_inv_freq, Architecture, RopeScaling};
use crate::error::{Error, Result};
use reader::Reader;
use serde_json::{Map, Value};
use std::path::Path;

/// The architecture hyper-parameters the model needs.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    pub architecture: Architecture,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    pub head_dim: usize,
    pub rope_theta: f64,
    pub rope_scaling: RopeScaling,
    pub rms_norm_eps: f64,
    pub tie_word_embeddings: bool,
    /// The `attention_bias` key (Qwen3, Llama: biases on q, k, v and o);
    /// false for Qwen2, whose q/k/v biases are fixed ([`ModelConfig::qkv_bias`]).
    pub attention_bias: bool,
    pub max_position_embeddings: usize,
    /// How attention runs on CUDA (cuDNN or the fused kernel, cuDNN's
    /// deterministic backward): a run setting (`[model] attention`), not a
    /// key of config.json; carried with the model to every attention call.
    pub attention: kernels::attention::Settings,
    /// Every key of config.json, as read (written back on save).
    pub raw: Map<String, Value>,
}

impl ModelConfig {
    /// Read and validate `config.json`.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        let raw: Value = serde_json::from_str(&text)
            .map_err(|source| Error::Json { path: path.into(), source })?;
        let Value::Object(raw) = raw else {
            return Err(config_err(path, "<root>", "expected a JSON object"));
        };
        Self::from_raw(raw, path)
    }

    /// Validate an already-parsed config object; `path` is used in errors.
    pub fn from_raw(raw: Map<String, Value>, path: &Path) -> Result<Self> {
        let r = Reader { raw: &raw, path };
        let architecture = Architecture::read(&r)?;
        r.expect_str_if_present("hidden_act", &["silu"])?;
        r.expect_false_if_present("use_sliding_window")?;
        r.expect_false_if_present("mlp_bias")?;
        let rope_scaling = RopeScaling::read(&r, architecture)?;
        let hidden_size = r.usize("hidden_size")?;
        let num_attention_heads = r.usize("num_attention_heads")?;
        let head_dim = match raw.get("head_dim") {
            Some(Value::Null) | None => hidden_size / num_attention_heads.max(1),
            Some(_) => r.usize("head_dim")?,
        };
        let cfg = ModelConfig {
            architecture,
            vocab_size: r.usize("vocab_size")?,
            hidden_size,
            intermediate_size: r.usize("intermediate_size")?,
            num_hidden_layers: r.usize("num_hidden_layers")?,
            num_attention_heads,
            num_key_value_heads: r.usize_or("num_key_value_heads", num_attention_heads)?,
            head_dim,
            rope_theta: r.rope_theta()?,
            rope_scaling,
            rms_norm_eps: r.f64_or("rms_norm_eps", 1e-6)?,
            tie_word_embeddings: r.bool_or("tie_word_embeddings", false)?,
            attention_bias: match architecture {
                Architecture::Qwen2 => false,
                _ => r.bool_or("attention_bias", false)?,
            },
            max_position_embeddings: r.usize_or("max_position_embeddings", architecture.default_max_positions())?,
            attention: Default::default(),
            raw: raw.clone(),
        };
        cfg.check(path)?;
        Ok(cfg)
    }

    fn check(&self, path: &Path) -> Result<()> {
        let positive = [
            ("vocab_size", self.vocab_size),
            ("hidden_size", self.hidden_size),
            ("intermediate_size", self.intermediate_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("num_attention_heads", self.num_attention_heads),
            ("num_key_value_heads", self.num_key_value_heads),
            ("head_dim", self.head_dim),
        ];
        for (key, v) in positive {
            if v == 0 {
                return Err(config_err(path, key, "must be positive"));
            }
        }
        if !self.num_attention_heads.is_multiple_of(self.num_key_value_heads) {
            return Err(config_err(
                path,
                "num_key_value_heads",
                &format!(
                    "{} does not divide num_attention_heads = {}",
                    self.num_key_value_heads, self.num_attention_heads
                ),
            ));
        }
        if !self.head_dim.is_multiple_of(2) {
            return Err(config_err(path, "head_dim", "must be even for rotary embeddings"));
        }
        Ok(())
    }

    /// A config built in code (init-tiny, tests): fills `raw` with the keys
    /// transformers needs to load it as a `Qwen3ForCausalLM`.
    #[allow(clippy::too_many_arguments)]
    pub fn new_tiny(
        vocab_size: usize,
        hidden_size: usize,
        intermediate_size: usize,
        num_hidden_layers: usize,
        num_attention_heads: usize,
        num_key_value_heads: usize,
        head_dim: usize,
        tie_word_embeddings: bool,
    ) -> Self {
        let mut cfg = ModelConfig {
            architecture: Architecture::Qwen3,
            vocab_size,
            hidden_size,
            intermediate_size,
            num_hidden_layers,
            num_attention_heads,
            num_key_value_heads,
            head_dim,
            rope_theta: 1_000_000.0,
            rope_scaling: RopeScaling::Default,
            rms_norm_eps: 1e-6,
            tie_word_embeddings,
            attention_bias: false,
            max_position_embeddings: 40960,
            attention: Default::default(),
            raw: Map::new(),
        };
        cfg.raw = cfg.to_raw();
        cfg
    }

    /// The same shape as another architecture (init-tiny, tests): its
    /// config.json is rebuilt from scratch, so no key of the old family stays.
    pub fn with_architecture(mut self, architecture: Architecture, rope_scaling: RopeScaling) -> Self {
        self.architecture = architecture;
        self.rope_scaling = rope_scaling;
        if architecture == Architecture::Qwen2 {
            self.attention_bias = false;
        }
        self.raw = Map::new();
        self.raw = self.to_raw();
        self
    }

    /// The config.json object for this architecture (keeps unknown raw keys).
    pub fn to_raw(&self) -> Map<String, Value> {
        let mut m = self.raw.clone();
        let mut set = |k: &str, v: Value| {
            m.insert(k.to_string(), v);
        };
        set("architectures", serde_json::json!([self.architecture.class_name()]));
        set("model_type", self.architecture.model_type().into());
        set("hidden_act", "silu".into());
        set("vocab_size", self.vocab_size.into());
        set("hidden_size", self.hidden_size.into());
        set("intermediate_size", self.intermediate_size.into());
        set("num_hidden_layers", self.num_hidden_layers.into());
        set("num_attention_heads", self.num_attention_heads.into());
        set("num_key_value_heads", self.num_key_value_heads.into());
        set("head_dim", self.head_dim.into());
        set("rms_norm_eps", self.rms_norm_eps.into());
        set("tie_word_embeddings", self.tie_word_embeddings.into());
        match self.architecture {
            Architecture::Qwen2 => {}
            Architecture::Qwen3 => set("attention_bias", self.attention_bias.into()),
            Architecture::Llama => {
                set("attention_bias", self.attention_bias.into());
                set("mlp_bias", false.into());
            }
        }
        set("max_position_embeddings", self.max_position_embeddings.into());
        if !m.contains_key("rope_parameters") {
            m.insert("rope_theta".into(), self.rope_theta.into());
            if let RopeScaling::Llama3 { factor, low_freq_factor, high_freq_factor, original_max_position_embeddings } =
                self.rope_scaling
            {
                let scaling = serde_json::json!({
                    "rope_type": "llama3", "factor": factor, "low_freq_factor": low_freq_factor,
                    "high_freq_factor": high_freq_factor,
                    "original_max_position_embeddings": original_max_position_embeddings as u64,
                });
                m.entry("rope_scaling").or_insert(scaling);
            }
        }
        m
    }

    /// Biases on the q, k and v projections.
    pub fn qkv_bias(&self) -> bool {
        self.architecture == Architecture::Qwen2 || self.attention_bias
    }

    /// A bias on the output projection.
    pub fn o_bias(&self) -> bool {
        self.architecture != Architecture::Qwen2 && self.attention_bias
    }

    /// Rotary inverse frequencies (rope_theta, scaled as the config says).
    pub fn inv_freq(&self) -> Vec<f32> {
        self.rope_scaling.inv_freq(self.head_dim, self.rope_theta)
    }
}

fn config_err(path: &Path, key: &str, message: &str) -> Error {
    Error::Config { path: path.into(), key: key.into(), message: message.into() }
}

impl ModelConfig {
    /// Hash of the fields that determine the weights' names and shapes (the
    /// architecture enters only when it is not Qwen3, so Qwen3 checkpoints
    /// of earlier versions keep their hash): checkpoints and adapters record
    /// it and check it against the model they are loaded onto.
    pub fn arch_hash(&self) -> String {
        let mut fields = serde_json::json!({
            "vocab_size": self.vocab_size, "hidden_size": self.hidden_size, "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_hidden_layers, "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads, "head_dim": self.head_dim,
            "tie_word_embeddings": self.tie_word_embeddings, "attention_bias": self.attention_bias,
        });
        if self.architecture != Architecture::Qwen3 {
            fields["model_type"] = self.architecture.model_type().into();
        }
        crate::fnv::json_hash(&fields)
    }
}
