//! Typed access to a GGUF file's metadata, every error naming the file and
//! key, and the model config those keys describe.

use crate::config::{Architecture, ModelConfig};
use crate::error::{Error, Result};
use candle_core::quantized::gguf_file::Value;
use serde_json::json;
use std::collections::HashMap;
use std::path::Path;

/// What the config takes from the tensors rather than the metadata.
#[derive(Debug, Clone, Copy)]
pub struct TensorFacts {
    /// Rows of `token_embd.weight`.
    pub vocab_size: usize,
    /// No `output.weight`: the head is the embedding.
    pub tied: bool,
    /// `attn_output.bias` present (Llama / Qwen3 `attention_bias`).
    pub attention_bias: bool,
}

/// The metadata of one GGUF file.
pub struct Metadata<'a> {
    pub path: &'a Path,
    pub map: &'a HashMap<String, Value>,
}

impl Metadata<'_> {
    pub fn err(&self, message: impl Into<String>) -> Error {
        Error::Gguf { path: self.path.into(), message: message.into() }
    }

    fn get(&self, key: &str) -> Result<&Value> {
        self.map.get(key).ok_or_else(|| self.err(format!("metadata key `{key}` is missing")))
    }

    fn array(&self, key: &str) -> Result<&Vec<Value>> {
        match self.get(key)? {
            Value::Array(list) => Ok(list),
            v => Err(self.err(format!("metadata key `{key}`: expected an array, found a {:?}", v.value_type()))),
        }
    }

    /// An unsigned integer of any width.
    pub fn usize(&self, key: &str) -> Result<usize> {
        let v = self.get(key)?;
        let n = match v {
            Value::U8(x) => *x as u64,
            Value::U16(x) => *x as u64,
            Value::U32(x) => *x as u64,
            Value::U64(x) => *x,
            Value::I32(x) if *x >= 0 => *x as u64,
            Value::I64(x) if *x >= 0 => *x as u64,
            _ => return Err(self.err(format!("metadata key `{key}`: expected a non-negative integer, found {v:?}"))),
        };
        Ok(n as usize)
    }

    pub fn usize_opt(&self, key: &str) -> Result<Option<usize>> {
        if self.map.contains_key(key) { self.usize(key).map(Some) } else { Ok(None) }
    }

    pub fn f64_opt(&self, key: &str) -> Result<Option<f64>> {
        match self.map.get(key) {
            None => Ok(None),
            // The shortest decimal that reads back as this f32 (1e-5, not
            // 9.999999747378752e-6): what the original config.json said.
            Some(Value::F32(x)) => Ok(Some(x.to_string().parse().expect("an f32 prints as a number"))),
            Some(Value::F64(x)) => Ok(Some(*x)),
            Some(v) => Err(self.err(format!("metadata key `{key}`: expected a number, found {v:?}"))),
        }
    }

    pub fn bool_or(&self, key: &str, default: bool) -> Result<bool> {
        match self.map.get(key) {
            None => Ok(default),
            Some(Value::Bool(b)) => Ok(*b),
            Some(v) => Err(self.err(format!("metadata key `{key}`: expected true or false, found {v:?}"))),
        }
    }

    pub fn str(&self, key: &str) -> Result<&str> {
        match self.get(key)? {
            Value::String(s) => Ok(s),
            v => Err(self.err(format!("metadata key `{key}`: expected a string, found {v:?}"))),
        }
    }

    pub fn str_opt(&self, key: &str) -> Result<Option<&str>> {
        if self.map.contains_key(key) { self.str(key).map(Some) } else { Ok(None) }
    }

    pub fn strings(&self, key: &str) -> Result<Vec<&str>> {
        self.array(key)?
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::String(s) => Ok(s.as_str()),
                _ => Err(self.err(format!("metadata key `{key}`[{i}]: expected a string"))),
            })
            .collect()
    }

    pub fn ints(&self, key: &str) -> Result<Vec<i64>> {
        self.array(key)?
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::I32(x) => Ok(*x as i64),
                Value::U32(x) => Ok(*x as i64),
                Value::I8(x) => Ok(*x as i64),
                Value::U8(x) => Ok(*x as i64),
                _ => Err(self.err(format!("metadata key `{key}`[{i}]: expected an integer, found {v:?}"))),
            })
            .collect()
    }

    /// `general.architecture`, as one of ours.
    pub fn architecture(&self) -> Result<Architecture> {
        match self.str("general.architecture")? {
            "llama" => Ok(Architecture::Llama),
            "qwen2" => Ok(Architecture::Qwen2),
            "qwen3" => Ok(Architecture::Qwen3),
            other => Err(self.err(format!(
                "metadata key `general.architecture`: unsupported architecture `{other}` (supported: llama, qwen2, qwen3)"
            ))),
        }
    }

    /// The Hugging Face config.json these keys describe, with what only the
    /// tensors tell ([`TensorFacts`]).
    pub fn model_config(&self, facts: TensorFacts) -> Result<ModelConfig> {
        let TensorFacts { vocab_size, tied, attention_bias } = facts;
        let arch = self.architecture()?;
        let a = self.str("general.architecture")?;
        let key = |k: &str| format!("{a}.{k}");
        if let Some(kind) = self.str_opt(&key("rope.scaling.type"))? {
            if kind != "none" {
                return Err(self.err(format!("metadata key `{}`: rope scaling `{kind}` is not supported", key("rope.scaling.type"))));
            }
        }
        let hidden = self.usize(&key("embedding_length"))?;
        let heads = self.usize(&key("attention.head_count"))?;
        let head_dim = match self.usize_opt(&key("attention.key_length"))? {
            Some(d) => d,
            None => self.usize_opt(&key("rope.dimension_count"))?.unwrap_or(hidden / heads.max(1)),
        };
        let mut raw = serde_json::Map::new();
        let mut set = |k: &str, v: serde_json::Value| {
            raw.insert(k.into(), v);
        };
        set("architectures", json!([arch.class_name()]));
        set("model_type", json!(arch.model_type()));
        set("hidden_act", json!("silu"));
        set("vocab_size", json!(vocab_size));
        set("hidden_size", json!(hidden));
        set("intermediate_size", json!(self.usize(&key("feed_forward_length"))?));
        set("num_hidden_layers", json!(self.usize(&key("block_count"))?));
        set("num_attention_heads", json!(heads));
        set("num_key_value_heads", json!(self.usize_opt(&key("attention.head_count_kv"))?.unwrap_or(heads)));
        set("head_dim", json!(head_dim));
        set("rope_theta", json!(self.f64_opt(&key("rope.freq_base"))?.unwrap_or(10_000.0)));
        set("rms_norm_eps", json!(self.f64_opt(&key("attention.layer_norm_rms_epsilon"))?.unwrap_or(1e-6)));
        set("tie_word_embeddings", json!(tied));
        if let Some(n) = self.usize_opt(&key("context_length"))? {
            set("max_position_embeddings", json!(n));
        }
        for (ours, theirs) in [("bos_token_id", "bos_token_id"), ("eos_token_id", "eos_token_id"), ("pad_token_id", "padding_token_id")] {
            if let Some(id) = self.usize_opt(&format!("tokenizer.ggml.{theirs}"))? {
                set(ours, json!(id));
            }
        }
        if arch == Architecture::Qwen2 {
            set("use_sliding_window", json!(false));
        } else {
            set("attention_bias", json!(attention_bias));
        }
        ModelConfig::from_raw(raw, self.path)
    }
}
