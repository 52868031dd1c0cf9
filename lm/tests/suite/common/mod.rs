//! Shared helpers of lm's integration tests (and the trainer's, which
//! include this file): the golden fixtures in lm/tests/fixtures made by
//! scripts/make_model_fixtures.py (transformers, f32, CPU): Qwen3, Llama
//! and Qwen2 checkpoints.
#![allow(dead_code)]

use candle_core::{DType, Device};
use std::path::PathBuf;
use lm::weights::{load_weights, TensorMap};
use lm::{CausalLm, ModelConfig};

/// Qwen3 tied and sharded, Qwen3 untied, Llama tied with llama3 rope
/// scaling, Qwen2 with q/k/v biases.
pub const CASES: [&str; 4] = ["tied_sharded", "untied", "llama_tied_rope3", "qwen2_bias"];

pub fn fixture_dir(case: &str) -> PathBuf {
    // `lm/../lm` from lm's tests, `trainer/../lm` from the trainer's.
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../lm/tests/fixtures").join(case)
}

pub fn load(case: &str) -> (ModelConfig, TensorMap) {
    let dir = fixture_dir(case);
    let cfg = ModelConfig::from_file(&dir.join("config.json")).expect("fixture config");
    let w = load_weights(&dir, &cfg, DType::F32, &Device::Cpu).expect("fixture weights");
    (cfg, w)
}

pub fn model(case: &str) -> CausalLm {
    let (cfg, w) = load(case);
    CausalLm::new(&cfg, &w).expect("model")
}

pub fn expected(case: &str) -> serde_json::Value {
    let text =
        std::fs::read_to_string(fixture_dir(case).join("expected.json")).expect("expected.json");
    serde_json::from_str(&text).expect("expected.json parses")
}

pub fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .expect("id array")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

/// `-mean_t log p(ids[t] | ids[:t])` over one sequence (the loss the
/// fixtures' gradients are of).
pub fn mean_nll(m: &CausalLm, ids: &[u32]) -> candle_core::Tensor {
    use candle_core::Tensor;
    let n = ids.len();
    let tokens = Tensor::from_slice(ids, (1, n), &Device::Cpu).unwrap();
    let hidden = m.forward(&tokens, &lm::model::cache::Positions::sequential(1, n), None).unwrap();
    let hidden = hidden.squeeze(0).unwrap().narrow(0, 0, n - 1).unwrap();
    let targets = Tensor::from_slice(&ids[1..], n - 1, &Device::Cpu).unwrap();
    lm::logprobs::token_logprobs(m, &hidden, &targets, 1.0).unwrap().mean_all().unwrap().neg().unwrap()
}
