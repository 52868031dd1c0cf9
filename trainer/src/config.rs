//! Qwen3 architecture from a Hugging Face `config.json`.
//!
//! The raw JSON is kept beside the parsed fields so a saved checkpoint writes
//! back every key it was given (transformers reads them). Values we cannot
//! honour (another activation, rope scaling, sliding windows) are rejected by
//! key rather than silently ignored.

use crate::error::{Error, Result};
use serde_json::{Map, Value};
use std::path::Path;

/// The architecture hyper-parameters the model needs.
#[derive(Debug, Clone, PartialEq)]
pub struct Qwen3Config {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    pub head_dim: usize,
    pub rope_theta: f64,
    pub rms_norm_eps: f64,
    pub tie_word_embeddings: bool,
    pub attention_bias: bool,
    pub max_position_embeddings: usize,
    /// Every key of config.json, as read (written back on save).
    pub raw: Map<String, Value>,
}

impl Qwen3Config {
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
        r.expect_str_if_present("model_type", &["qwen3"])?;
        r.expect_str_if_present("hidden_act", &["silu"])?;
        r.expect_false_if_present("use_sliding_window")?;
        r.expect_default_rope()?;
        let hidden_size = r.usize("hidden_size")?;
        let num_attention_heads = r.usize("num_attention_heads")?;
        let head_dim = match raw.get("head_dim") {
            Some(Value::Null) | None => hidden_size / num_attention_heads.max(1),
            Some(_) => r.usize("head_dim")?,
        };
        let cfg = Qwen3Config {
            vocab_size: r.usize("vocab_size")?,
            hidden_size,
            intermediate_size: r.usize("intermediate_size")?,
            num_hidden_layers: r.usize("num_hidden_layers")?,
            num_attention_heads,
            num_key_value_heads: r.usize_or("num_key_value_heads", num_attention_heads)?,
            head_dim,
            rope_theta: r.rope_theta()?,
            rms_norm_eps: r.f64_or("rms_norm_eps", 1e-6)?,
            tie_word_embeddings: r.bool_or("tie_word_embeddings", false)?,
            attention_bias: r.bool_or("attention_bias", false)?,
            max_position_embeddings: r.usize_or("max_position_embeddings", 40960)?,
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
        if self.num_attention_heads % self.num_key_value_heads != 0 {
            return Err(config_err(
                path,
                "num_key_value_heads",
                &format!(
                    "{} does not divide num_attention_heads = {}",
                    self.num_key_value_heads, self.num_attention_heads
                ),
            ));
        }
        if self.head_dim % 2 != 0 {
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
        let mut cfg = Qwen3Config {
            vocab_size,
            hidden_size,
            intermediate_size,
            num_hidden_layers,
            num_attention_heads,
            num_key_value_heads,
            head_dim,
            rope_theta: 1_000_000.0,
            rms_norm_eps: 1e-6,
            tie_word_embeddings,
            attention_bias: false,
            max_position_embeddings: 40960,
            raw: Map::new(),
        };
        cfg.raw = cfg.to_raw();
        cfg
    }

    /// The config.json object for this architecture (keeps unknown raw keys).
    pub fn to_raw(&self) -> Map<String, Value> {
        let mut m = self.raw.clone();
        let mut set = |k: &str, v: Value| {
            m.insert(k.to_string(), v);
        };
        set("architectures", serde_json::json!(["Qwen3ForCausalLM"]));
        set("model_type", "qwen3".into());
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
        set("attention_bias", self.attention_bias.into());
        set("max_position_embeddings", self.max_position_embeddings.into());
        if !m.contains_key("rope_parameters") {
            m.insert("rope_theta".into(), self.rope_theta.into());
        }
        m
    }

    /// Query heads per key/value head (GQA group size).
    pub fn kv_groups(&self) -> usize {
        self.num_attention_heads / self.num_key_value_heads
    }
}

fn config_err(path: &Path, key: &str, message: &str) -> Error {
    Error::Config { path: path.into(), key: key.into(), message: message.into() }
}

/// Typed field access on the raw config with errors that name the key.
struct Reader<'a> {
    raw: &'a Map<String, Value>,
    path: &'a Path,
}

impl Reader<'_> {
    fn err(&self, key: &str, message: &str) -> Error {
        config_err(self.path, key, message)
    }
    fn usize(&self, key: &str) -> Result<usize> {
        match self.raw.get(key) {
            None | Some(Value::Null) => Err(self.err(key, "missing")),
            Some(v) => v
                .as_u64()
                .map(|x| x as usize)
                .ok_or_else(|| self.err(key, &format!("expected a non-negative integer, found {v}"))),
        }
    }
    fn usize_or(&self, key: &str, default: usize) -> Result<usize> {
        match self.raw.get(key) {
            None | Some(Value::Null) => Ok(default),
            Some(_) => self.usize(key),
        }
    }
    fn f64_or(&self, key: &str, default: f64) -> Result<f64> {
        match self.raw.get(key) {
            None | Some(Value::Null) => Ok(default),
            Some(v) => v.as_f64().ok_or_else(|| self.err(key, &format!("expected a number, found {v}"))),
        }
    }
    fn bool_or(&self, key: &str, default: bool) -> Result<bool> {
        match self.raw.get(key) {
            None | Some(Value::Null) => Ok(default),
            Some(v) => v.as_bool().ok_or_else(|| self.err(key, &format!("expected true or false, found {v}"))),
        }
    }
    fn expect_str_if_present(&self, key: &str, allowed: &[&str]) -> Result<()> {
        match self.raw.get(key) {
            None | Some(Value::Null) => Ok(()),
            Some(Value::String(s)) if allowed.contains(&s.as_str()) => Ok(()),
            Some(v) => Err(self.err(key, &format!("unsupported value {v}; supported: {allowed:?}"))),
        }
    }
    fn expect_false_if_present(&self, key: &str) -> Result<()> {
        match self.raw.get(key) {
            None | Some(Value::Null) | Some(Value::Bool(false)) => Ok(()),
            Some(v) => Err(self.err(key, &format!("unsupported value {v}; only false is supported"))),
        }
    }
    /// rope_scaling (old configs) or rope_parameters (transformers >= 5) must
    /// describe plain rotary embeddings.
    fn expect_default_rope(&self) -> Result<()> {
        for key in ["rope_scaling", "rope_parameters"] {
            match self.raw.get(key) {
                None | Some(Value::Null) => {}
                Some(Value::Object(m)) => {
                    let kind = m.get("rope_type").or_else(|| m.get("type"));
                    match kind.and_then(Value::as_str) {
                        None | Some("default") => {}
                        Some(other) => {
                            return Err(self.err(
                                key,
                                &format!("rope_type `{other}` is not supported (only default)"),
                            ))
                        }
                    }
                }
                Some(v) => return Err(self.err(key, &format!("expected an object, found {v}"))),
            }
        }
        Ok(())
    }
    fn rope_theta(&self) -> Result<f64> {
        if let Some(Value::Object(m)) = self.raw.get("rope_parameters") {
            if let Some(v) = m.get("rope_theta") {
                return v
                    .as_f64()
                    .ok_or_else(|| self.err("rope_parameters.rope_theta", "expected a number"));
            }
        }
        self.f64_or("rope_theta", 10_000.0)
    }
}
