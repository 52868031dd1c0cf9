//! A Hugging Face tokenizer (tokenizer.json, tokenizer_config.json) from a
//! GGUF file's `tokenizer.*` metadata: byte-level BPE from
//! `tokenizer.ggml.tokens` / `merges` / `token_type`, the pre-tokenizer that
//! `tokenizer.ggml.pre` names (as llama.cpp splits text), control tokens as
//! special added tokens, and the chat template.

use super::metadata::Metadata;
use crate::error::Result;
use serde_json::{json, Map, Value};
use std::collections::HashMap;

/// llama.cpp's token types (`tokenizer.ggml.token_type`).
const CONTROL: i64 = 3;
const USER_DEFINED: i64 = 4;

const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// tokenizer.json and tokenizer_config.json.
pub struct HfTokenizer {
    pub tokenizer_json: Value,
    pub tokenizer_config: Value,
}

/// The pre-tokenizer of `tokenizer.ggml.pre` (llama.cpp's names).
fn pre_tokenizer(meta: &Metadata<'_>) -> Result<Value> {
    let byte_level = |use_regex: bool| json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": use_regex});
    let split = |regex: &str| {
        json!({"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": false},
            byte_level(false),
        ]})
    };
    Ok(match meta.str_opt("tokenizer.ggml.pre")?.unwrap_or("default") {
        "default" | "gpt2" | "gpt-2" => byte_level(true),
        // SmolLM / SmolLM2: every digit alone, then GPT-2's split.
        "smollm" => json!({"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": true},
            byte_level(true),
        ]}),
        "llama3" | "llama-v3" | "llama-bpe" | "smaug-bpe" => split(LLAMA3_SPLIT),
        "qwen2" | "deepseek-r1-qwen" => split(QWEN2_SPLIT),
        other => {
            return Err(meta.err(format!(
                "metadata key `tokenizer.ggml.pre`: pre-tokenizer `{other}` is not supported \
                 (supported: default, gpt2, smollm, llama3, llama-bpe, qwen2)"
            )))
        }
    })
}

/// Build both files from the metadata.
pub fn build(meta: &Metadata<'_>) -> Result<HfTokenizer> {
    match meta.str("tokenizer.ggml.model")? {
        "gpt2" => {}
        other => {
            return Err(meta.err(format!(
                "metadata key `tokenizer.ggml.model`: tokenizer `{other}` is not supported (only byte-level BPE, `gpt2`)"
            )))
        }
    }
    let tokens = meta.strings("tokenizer.ggml.tokens")?;
    let types = if meta.map.contains_key("tokenizer.ggml.token_type") {
        meta.ints("tokenizer.ggml.token_type")?
    } else {
        vec![1; tokens.len()]
    };
    if types.len() != tokens.len() {
        return Err(meta.err(format!(
            "metadata key `tokenizer.ggml.token_type`: {} types for {} tokens",
            types.len(),
            tokens.len()
        )));
    }
    let merges = meta.strings("tokenizer.ggml.merges")?;
    let mut vocab = Map::new();
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (id, t) in tokens.iter().enumerate() {
        if let Some(first) = seen.insert(t, id) {
            return Err(meta.err(format!("metadata key `tokenizer.ggml.tokens`: token {t:?} appears at ids {first} and {id}")));
        }
        vocab.insert((*t).to_string(), json!(id));
    }
    let added: Vec<Value> = tokens
        .iter()
        .zip(&types)
        .enumerate()
        .filter(|(_, (_, ty))| **ty == CONTROL || **ty == USER_DEFINED)
        .map(|(id, (t, ty))| {
            json!({"id": id, "content": t, "single_word": false, "lstrip": false, "rstrip": false,
                   "normalized": *ty != CONTROL, "special": *ty == CONTROL})
        })
        .collect();
    let token = |key: &str| -> Result<Option<String>> {
        Ok(match meta.usize_opt(&format!("tokenizer.ggml.{key}"))? {
            Some(id) if id < tokens.len() => Some(tokens[id].to_string()),
            Some(id) => {
                return Err(meta.err(format!("metadata key `tokenizer.ggml.{key}`: id {id} is outside the {} tokens", tokens.len())))
            }
            None => None,
        })
    };
    let (bos, eos, pad, unk) = (token("bos_token_id")?, token("eos_token_id")?, token("padding_token_id")?, token("unknown_token_id")?);
    let add_bos = meta.bool_or("tokenizer.ggml.add_bos_token", false)?;
    let post_processor = match (&bos, add_bos) {
        (Some(b), true) => {
            let id = vocab[b.as_str()].clone();
            json!({"type": "TemplateProcessing",
                   "single": [{"SpecialToken": {"id": b, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                   "pair": [{"SpecialToken": {"id": b, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                            {"SpecialToken": {"id": b, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
                   "special_tokens": {b.as_str(): {"id": b, "ids": [id], "tokens": [b]}}})
        }
        _ => json!({"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true}),
    };
    let tokenizer_json = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": pre_tokenizer(meta)?,
        "post_processor": post_processor,
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                  "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
                  "vocab": vocab, "merges": merges},
    });
    let mut config = Map::new();
    config.insert("tokenizer_class".into(), json!("PreTrainedTokenizerFast"));
    config.insert("add_bos_token".into(), json!(add_bos));
    config.insert("add_eos_token".into(), json!(false));
    config.insert("clean_up_tokenization_spaces".into(), json!(false));
    for (key, v) in [("bos_token", bos), ("eos_token", eos), ("pad_token", pad), ("unk_token", unk)] {
        if let Some(v) = v {
            config.insert(key.into(), json!(v));
        }
    }
    let a = meta.str("general.architecture")?;
    if let Some(n) = meta.usize_opt(&format!("{a}.context_length"))? {
        config.insert("model_max_length".into(), json!(n));
    }
    if let Some(t) = meta.str_opt("tokenizer.chat_template")? {
        config.insert("chat_template".into(), json!(t));
    }
    Ok(HfTokenizer { tokenizer_json, tokenizer_config: Value::Object(config) })
}
