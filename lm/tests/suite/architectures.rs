//! Architectures chosen from config.json: the fixtures parse as the families
//! they are, their parameter sets differ where the families do, llama3 rope
//! frequencies follow transformers, and unsupported values are errors that
//! name the file and key.

use crate::common;

use serde_json::{json, Value};
use std::path::Path;
use lm::config::{Architecture, RopeScaling};
use lm::params::parameter_shapes;
use lm::ModelConfig;

fn names(cfg: &ModelConfig) -> Vec<String> {
    parameter_shapes(cfg).into_iter().map(|(n, _)| n).collect()
}

fn fixture_raw(case: &str) -> serde_json::Map<String, Value> {
    let text = std::fs::read_to_string(common::fixture_dir(case).join("config.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn parse(raw: serde_json::Map<String, Value>) -> lm::error::Result<ModelConfig> {
    ModelConfig::from_raw(raw, Path::new("/models/m/config.json"))
}

#[test]
fn fixtures_parse_as_their_families() {
    let (qwen3, _) = common::load("untied");
    let (llama, _) = common::load("llama_tied_rope3");
    let (qwen2, _) = common::load("qwen2_bias");
    assert_eq!(qwen3.architecture, Architecture::Qwen3);
    assert_eq!(llama.architecture, Architecture::Llama);
    assert_eq!(qwen2.architecture, Architecture::Qwen2);
    assert!(matches!(llama.rope_scaling, RopeScaling::Llama3 { factor, .. } if factor == 8.0));
    assert_eq!(qwen2.head_dim, 10, "Qwen2's head_dim is hidden / heads");

    let has = |cfg: &ModelConfig, suffix: &str| names(cfg).iter().any(|n| n.ends_with(suffix));
    assert!(has(&qwen3, "q_norm.weight") && !has(&qwen3, "q_proj.bias"));
    assert!(!has(&llama, "q_norm.weight") && !has(&llama, "q_proj.bias"));
    assert!(!has(&qwen2, "q_norm.weight") && has(&qwen2, "q_proj.bias") && has(&qwen2, "v_proj.bias"));
    assert!(!has(&qwen2, "o_proj.bias"), "Qwen2's output projection has no bias");
}

#[test]
fn llama_with_attention_bias_biases_every_projection() {
    let mut raw = fixture_raw("llama_tied_rope3");
    raw.insert("attention_bias".into(), json!(true));
    let cfg = parse(raw).unwrap();
    for p in ["q", "k", "v", "o"] {
        assert!(names(&cfg).contains(&format!("model.layers.0.self_attn.{p}_proj.bias")), "{p}_proj.bias");
    }
}

/// transformers' `_compute_llama3_parameters` for head_dim 8, theta 1e5,
/// factor 8, low 1, high 4, original context 256 (the fixture's values):
/// the highest frequency kept, the second interpolated, the rest divided.
#[test]
fn llama3_frequencies_fall_in_the_three_bands() {
    let (llama, _) = common::load("llama_tied_rope3");
    let base = lm::config::default_inv_freq(8, 1e5);
    let got = llama.inv_freq();
    assert_eq!(got[0], base[0], "wavelength 6.3 < 64: kept");
    let wavelen = 2.0 * std::f32::consts::PI / base[1];
    let smooth = (256.0 / wavelen - 1.0) / (4.0 - 1.0);
    let want = (1.0 - smooth) * base[1] / 8.0 + smooth * base[1];
    assert!((got[1] - want).abs() <= 1e-7 * want, "wavelength {wavelen}: interpolated {} vs {want}", got[1]);
    assert!(got[1] < base[1] && got[1] > base[1] / 8.0);
    for i in 2..4 {
        assert_eq!(got[i], base[i] / 8.0, "long wavelength {i}: divided by the factor");
    }
}

fn expect_config_error(raw: serde_json::Map<String, Value>, key: &str, words: &str) {
    let e = parse(raw).expect_err("config should be rejected").to_string();
    assert!(e.contains("/models/m/config.json") && e.contains(key) && e.contains(words), "{e}");
}

#[test]
fn unsupported_architectures_and_fields_name_the_key() {
    let mut raw = fixture_raw("llama_tied_rope3");
    raw.insert("model_type".into(), json!("mistral"));
    expect_config_error(raw, "model_type", "mistral");

    let mut raw = fixture_raw("llama_tied_rope3");
    raw.remove("model_type");
    raw.insert("architectures".into(), json!(["GemmaForCausalLM"]));
    expect_config_error(raw, "architectures", "GemmaForCausalLM");

    let mut raw = fixture_raw("llama_tied_rope3");
    raw.insert("rope_parameters".into(), json!({"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e5}));
    expect_config_error(raw, "rope_parameters", "yarn");

    let mut raw = fixture_raw("llama_tied_rope3");
    raw["rope_parameters"].as_object_mut().unwrap().remove("low_freq_factor");
    expect_config_error(raw, "rope_parameters.low_freq_factor", "missing");

    let mut raw = fixture_raw("qwen2_bias");
    raw.insert("rope_scaling".into(), json!({"rope_type": "llama3", "factor": 8.0}));
    expect_config_error(raw, "rope_scaling", "qwen2");

    let mut raw = fixture_raw("llama_tied_rope3");
    raw.insert("mlp_bias".into(), json!(true));
    expect_config_error(raw, "mlp_bias", "only false");

    let mut raw = fixture_raw("qwen2_bias");
    raw.insert("use_sliding_window".into(), json!(true));
    expect_config_error(raw, "use_sliding_window", "only false");
}

#[test]
fn saved_configs_name_their_class_for_transformers() {
    for (case, class) in [("untied", "Qwen3ForCausalLM"), ("llama_tied_rope3", "LlamaForCausalLM"), ("qwen2_bias", "Qwen2ForCausalLM")] {
        let (cfg, _) = common::load(case);
        let raw = cfg.to_raw();
        assert_eq!(raw["architectures"], json!([class]), "{case}");
        assert_eq!(raw["model_type"], json!(cfg.architecture.model_type()), "{case}");
        assert_eq!(parse(raw).unwrap().inv_freq(), cfg.inv_freq(), "{case}: written config reads back the same");
    }
}
