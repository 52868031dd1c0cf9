//! Loading and saving Hugging Face checkpoints: round trips (single file and
//! shards), dtype conversion, and errors that name the file and tensor.

use crate::common;

use candle_core::{DType, Device};
use std::path::Path;
use lm::weights::{load_weights, save_checkpoint, ShardPolicy, TensorMap, INDEX_FILE};
use lm::ModelConfig;
use lm::error::Error;

fn max_abs_diff(a: &TensorMap, b: &TensorMap) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .map(|(k, t)| {
            let u = b[k].to_dtype(DType::F32).unwrap();
            (t.to_dtype(DType::F32).unwrap() - u).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap()
        })
        .fold(0.0, f32::max)
}

fn reload(dir: &Path, dtype: DType) -> (ModelConfig, TensorMap) {
    let cfg = ModelConfig::from_file(&dir.join("config.json")).unwrap();
    let w = load_weights(dir, &cfg, dtype, &Device::Cpu).unwrap();
    (cfg, w)
}

#[test]
fn round_trip_single_and_sharded_is_exact() {
    for case in common::CASES {
        let (cfg, w) = common::load(case);
        for policy in [ShardPolicy::Single, ShardPolicy::Count(3), ShardPolicy::MaxBytes(20_000)] {
            let tmp = tempfile::tempdir().unwrap();
            save_checkpoint(tmp.path(), &cfg, &w, policy).unwrap();
            let (cfg2, w2) = reload(tmp.path(), DType::F32);
            assert_eq!(cfg2.hidden_size, cfg.hidden_size);
            assert_eq!(cfg2.rope_theta, cfg.rope_theta, "{case}: rope_theta survives the round trip");
            assert_eq!(cfg2.architecture, cfg.architecture, "{case}: the architecture survives the round trip");
            assert_eq!(cfg2.rope_scaling, cfg.rope_scaling, "{case}: rope scaling survives the round trip");
            assert_eq!(cfg2.inv_freq(), cfg.inv_freq(), "{case}");
            assert_eq!(max_abs_diff(&w, &w2), 0.0, "{case} {policy:?}");
            let index = tmp.path().join(INDEX_FILE);
            match policy {
                ShardPolicy::Single => assert!(!index.exists()),
                ShardPolicy::Count(n) => {
                    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&index).unwrap()).unwrap();
                    let mut shards: Vec<&str> = json["weight_map"].as_object().unwrap().values().map(|v| v.as_str().unwrap()).collect();
                    shards.sort();
                    shards.dedup();
                    assert_eq!(shards.len(), n, "{case}: shard count");
                    assert_eq!(shards[0], format!("model-00001-of-{n:05}.safetensors"));
                    assert!(json["metadata"]["total_size"].as_u64().unwrap() > 0);
                }
                ShardPolicy::MaxBytes(_) => assert!(index.exists()),
            }
        }
    }
}

#[test]
fn bf16_checkpoints_convert_to_the_run_dtype() {
    let (cfg, w) = common::load("untied");
    let w16: TensorMap = w.iter().map(|(k, t)| (k.clone(), t.to_dtype(DType::BF16).unwrap())).collect();
    let tmp = tempfile::tempdir().unwrap();
    save_checkpoint(tmp.path(), &cfg, &w16, ShardPolicy::Single).unwrap();
    let raw: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(tmp.path().join("config.json")).unwrap()).unwrap();
    assert_eq!(raw["torch_dtype"], "bfloat16");
    let (_, back) = reload(tmp.path(), DType::F32);
    assert!(back.values().all(|t| t.dtype() == DType::F32));
    let d = max_abs_diff(&w, &back);
    assert!(d > 0.0 && d < 0.02, "bf16 rounding error {d}");
}

fn expect_err(dir: &Path) -> Error {
    let cfg = ModelConfig::from_file(&dir.join("config.json"));
    match cfg {
        Err(e) => e,
        Ok(cfg) => load_weights(dir, &cfg, DType::F32, &Device::Cpu).expect_err("loading should fail"),
    }
}

fn copy_fixture(case: &str) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(common::fixture_dir(case)).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), tmp.path().join(e.file_name())).unwrap();
    }
    tmp
}

#[test]
fn missing_shard_is_named() {
    let tmp = copy_fixture("tied_sharded");
    std::fs::remove_file(tmp.path().join("model-00002-of-00003.safetensors")).unwrap();
    let e = expect_err(tmp.path());
    assert!(matches!(e, Error::MissingShard { ref shard, .. } if shard == "model-00002-of-00003.safetensors"), "{e}");
    assert!(e.to_string().contains("model-00002-of-00003.safetensors"));
}

#[test]
fn corrupt_header_names_the_file() {
    let tmp = copy_fixture("untied");
    let path = tmp.path().join("model.safetensors");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[8..40].copy_from_slice(&[b'#'; 32]);
    std::fs::write(&path, bytes).unwrap();
    let e = expect_err(tmp.path());
    assert!(matches!(e, Error::Safetensors { .. }), "{e}");
    assert!(e.to_string().contains("model.safetensors"), "{e}");
}

#[test]
fn missing_and_misshapen_tensors_are_named() {
    let (cfg, mut w) = common::load("untied");
    let tmp = tempfile::tempdir().unwrap();
    // Misshapen: the config says 3 layers of hidden 48; write a wrong k_proj.
    let name = "model.layers.1.self_attn.k_proj.weight";
    let good = w[name].clone();
    w.insert(name.into(), candle_core::Tensor::zeros((5, 48), DType::F32, &Device::Cpu).unwrap());
    save_checkpoint(tmp.path(), &cfg, &w, ShardPolicy::Single).unwrap();
    let e = expect_err(tmp.path());
    assert!(matches!(e, Error::TensorShape { ref name, .. } if name == "model.layers.1.self_attn.k_proj.weight"), "{e}");
    // Missing: claim one more layer than the file holds.
    w.insert(name.into(), good);
    save_checkpoint(tmp.path(), &cfg, &w, ShardPolicy::Single).unwrap();
    let mut raw: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(tmp.path().join("config.json")).unwrap()).unwrap();
    raw["num_hidden_layers"] = 4.into();
    std::fs::write(tmp.path().join("config.json"), raw.to_string()).unwrap();
    let e = expect_err(tmp.path());
    assert!(matches!(e, Error::MissingTensor { ref name, .. } if name.starts_with("model.layers.3.")), "{e}");
}

#[test]
fn unsupported_config_values_name_the_key() {
    for (key, value) in [
        ("hidden_act", serde_json::json!("gelu")),
        ("use_sliding_window", serde_json::json!(true)),
        ("rope_parameters", serde_json::json!({"rope_type": "yarn", "factor": 4.0})),
        ("num_key_value_heads", serde_json::json!(3)),
        ("hidden_size", serde_json::json!("big")),
    ] {
        let tmp = copy_fixture("untied");
        let path = tmp.path().join("config.json");
        let mut raw: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        raw[key] = value;
        std::fs::write(&path, raw.to_string()).unwrap();
        let e = expect_err(tmp.path());
        assert!(matches!(e, Error::Config { key: ref k, .. } if k == key), "{key}: {e}");
        assert!(e.to_string().contains("config.json"), "{e}");
    }
}

#[test]
fn a_folder_without_weights_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::copy(common::fixture_dir("untied").join("config.json"), tmp.path().join("config.json")).unwrap();
    assert!(matches!(expect_err(tmp.path()), Error::NoWeights { .. }));
}
