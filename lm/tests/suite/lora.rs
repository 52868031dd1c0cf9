//! LoRA against PEFT (fixtures of scripts/make_lora_fixtures.py: transformers
//! and peft, f32, CPU, r = 8 on all seven projections with random non-zero A
//! and B; the Qwen2 case with rsLoRA): log-probs, gradients of the mean NLL
//! with respect to every lora_A and lora_B, the merged weights; PEFT's files
//! read and written; bad adapters refused naming the file and key.

use crate::common;

use candle_core::{DType, Device, Tensor};
use common::{ids, load};
use std::path::PathBuf;
use lm::logprobs::score_sequence;
use lm::lora::{peft, Adapter};
use lm::CausalLm;

/// The three architectures (Qwen3, Llama, Qwen2 with rsLoRA).
const CASES: [&str; 3] = ["tied_sharded", "llama_tied_rope3", "qwen2_bias"];
/// Log-probs within 1e-4 (absolute), gradients within 1e-4 relative (max
/// |g - g_ref| / max |g_ref| per tensor), merged weights within 1e-5.
const LOGPROB_TOL: f32 = 1e-4;
const GRAD_REL_TOL: f32 = 1e-4;
const MERGE_TOL: f32 = 1e-5;

fn lora_dir(case: &str) -> PathBuf {
    common::fixture_dir("lora").join(case)
}

fn expected(case: &str) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(lora_dir(case).join("expected.json")).unwrap()).unwrap()
}

fn adapted(case: &str) -> (CausalLm, Adapter) {
    let (cfg, w) = load(case);
    let adapter = peft::load(&lora_dir(case), &cfg, Some(&common::fixture_dir(case)), DType::F32, &Device::Cpu).unwrap();
    let model = CausalLm::new(&cfg, &w).unwrap().with_adapter(&adapter).unwrap();
    (model, adapter)
}

fn max_abs(t: &Tensor) -> f32 {
    t.abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap()
}

fn worst_logprob_diff(m: &CausalLm, case: &str) -> f32 {
    let mut worst = 0f32;
    for row in expected(case)["score"].as_array().unwrap() {
        let got = score_sequence(m, &ids(&row["ids"])).unwrap();
        for (g, w) in got.iter().zip(row["logprobs"].as_array().unwrap()).skip(1) {
            worst = worst.max((g.unwrap() - w.as_f64().unwrap() as f32).abs());
        }
    }
    worst
}

#[test]
fn logprobs_with_a_peft_adapter_match_peft() {
    for case in CASES {
        let (m, adapter) = adapted(case);
        assert!((adapter.cfg.scale() - expected(case)["scale"].as_f64().unwrap()).abs() < 1e-12, "{case}: scale");
        let worst = worst_logprob_diff(&m, case);
        // The adapter matters: the base alone is far from PEFT's numbers.
        let base = worst_logprob_diff(&m.without_adapter(), case);
        println!("{case}: log-prob max |diff| vs PEFT {worst:.3e} (tolerance {LOGPROB_TOL:e}); base without the adapter {base:.3}");
        assert!(worst <= LOGPROB_TOL, "{case}: {worst}");
        assert!(base > 0.1, "{case}: the adapter changes the log-probs");
    }
}


#[test]
fn adapter_gradients_match_peft_and_the_base_gets_none() {
    for case in CASES {
        let (cfg, w) = load(case);
        let adapter = peft::load(&lora_dir(case), &cfg, None, DType::F32, &Device::Cpu).unwrap();
        let (m, vars) = CausalLm::trainable_adapter(&cfg, &w, &adapter).unwrap();
        assert_eq!(vars.len(), 2 * 7 * cfg.num_hidden_layers, "{case}: only lora_A/lora_B train");
        let exp = expected(case);
        let loss = common::mean_nll(&m, &ids(&exp["grad"]["ids"]));
        let (got, want) = (loss.to_scalar::<f32>().unwrap(), exp["grad"]["loss"].as_f64().unwrap() as f32);
        assert!((got - want).abs() < 1e-4, "{case}: loss {got} vs {want}");
        let grads = loss.backward().unwrap();
        for name in w.keys() {
            assert!(grads.get(&w[name]).is_none(), "{case}: the frozen base weight {name} got a gradient");
        }
        let reference = candle_core::safetensors::load(lora_dir(case).join("grads.safetensors"), &Device::Cpu).unwrap();
        assert_eq!(reference.len(), vars.len());
        let missing: Vec<&String> = vars.iter().filter(|(_, v)| grads.get(v.as_tensor()).is_none()).map(|(n, _)| n).collect();
        assert!(missing.is_empty(), "{case}: no gradient for {missing:?}");
        let mut worst = (0f32, String::new());
        for (name, var) in &vars {
            let g = grads.get(var.as_tensor()).unwrap_or_else(|| panic!("{case}: no gradient for {name}"));
            let r = &reference[name];
            let rel = max_abs(&(g - r).unwrap()) / max_abs(r);
            if rel > worst.0 {
                worst = (rel, name.clone());
            }
            assert!(rel <= GRAD_REL_TOL, "{case}: {name}: relative gradient diff {rel:e}");
        }
        println!("{case}: {} adapter tensors, worst relative gradient diff vs PEFT {:.3e} ({})", vars.len(), worst.0, worst.1);
    }
}

#[test]
fn merged_weights_match_peft_merge_and_unload() {
    for case in CASES {
        let (cfg, w) = load(case);
        let (adapted_model, adapter) = adapted(case);
        let merged = adapter.merge_into(&cfg, &w).unwrap();
        let reference = candle_core::safetensors::load(lora_dir(case).join("merged.safetensors"), &Device::Cpu).unwrap();
        let mut worst = 0f32;
        for (name, r) in &reference {
            worst = worst.max(max_abs(&(&merged[name] - r).unwrap()));
        }
        assert_eq!(reference.len(), 7 * cfg.num_hidden_layers);
        // The merged model scores as the adapted one.
        let m = CausalLm::new(&cfg, &merged).unwrap();
        let row = &expected(case)["score"][3];
        let (a, b) = (score_sequence(&m, &ids(&row["ids"])).unwrap(), score_sequence(&adapted_model, &ids(&row["ids"])).unwrap());
        let lp = a.iter().zip(&b).skip(1).map(|(x, y)| (x.unwrap() - y.unwrap()).abs()).fold(0f32, f32::max);
        println!("{case}: merged weights max |diff| vs PEFT {worst:.3e} (tolerance {MERGE_TOL:e}); merged vs adapted log-probs {lp:.3e}");
        assert!(worst <= MERGE_TOL, "{case}: {worst}");
        assert!(lp <= LOGPROB_TOL, "{case}: {lp}");
    }
}

#[test]
fn saved_adapters_read_back_bit_for_bit_and_record_their_base() {
    let case = "qwen2_bias";
    let (cfg, _) = load(case);
    let (_, adapter) = adapted(case);
    let dir = tempfile::tempdir().unwrap();
    let base = peft::BaseIdentity::of(&common::fixture_dir(case), &cfg).unwrap();
    peft::save(dir.path(), &adapter, "qwen2_bias", Some(&base)).unwrap();
    let back = peft::load(dir.path(), &cfg, Some(&common::fixture_dir(case)), DType::F32, &Device::Cpu).unwrap();
    assert_eq!(back.cfg.r, 8);
    assert!(back.cfg.use_rslora);
    assert_eq!(back.cfg.targets.len(), 7);
    for (name, t) in &adapter.tensors {
        let d = max_abs(&(t - &back.tensors[name]).unwrap());
        assert_eq!(d, 0.0, "{name}");
    }
    let config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.path().join(peft::CONFIG_FILE)).unwrap()).unwrap();
    for (k, v) in [("peft_type", "LORA"), ("task_type", "CAUSAL_LM"), ("bias", "none")] {
        assert_eq!(config[k], v);
    }
    // On another base (same architecture, other weights) it is refused.
    let other = tempfile::tempdir().unwrap();
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(common::fixture_dir(case).join(f), other.path().join(f)).unwrap();
    }
    std::fs::OpenOptions::new().append(true).open(other.path().join("model.safetensors")).unwrap();
    let f = other.path().join("model.safetensors");
    let mut bytes = std::fs::read(&f).unwrap();
    bytes.extend_from_slice(&[0; 8]);
    std::fs::write(&f, bytes).unwrap();
    let e = peft::load(dir.path(), &cfg, Some(other.path()), DType::F32, &Device::Cpu).unwrap_err().to_string();
    assert!(e.contains("fusegrpo_base.json") && e.contains("`weights`") && e.contains("pass the base it was trained on"), "{e}");
    // On another architecture it is refused too.
    let (llama, _) = load("llama_tied_rope3");
    let e = peft::load(dir.path(), &llama, None, DType::F32, &Device::Cpu).unwrap_err().to_string();
    assert!(e.contains("arch_hash"), "{e}");
}

#[test]
fn bad_adapters_are_refused_naming_the_file_and_key() {
    let case = "tied_sharded";
    let (cfg, _) = load(case);
    let src = lora_dir(case);
    let try_with = |edit: &dyn Fn(&mut serde_json::Value)| -> String {
        let dir = tempfile::tempdir().unwrap();
        std::fs::copy(src.join(peft::WEIGHTS_FILE), dir.path().join(peft::WEIGHTS_FILE)).unwrap();
        let mut config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(src.join(peft::CONFIG_FILE)).unwrap()).unwrap();
        edit(&mut config);
        std::fs::write(dir.path().join(peft::CONFIG_FILE), config.to_string()).unwrap();
        peft::load(dir.path(), &cfg, None, DType::F32, &Device::Cpu).unwrap_err().to_string()
    };
    for (edit, key) in [
        (Box::new(|c: &mut serde_json::Value| c["use_dora"] = true.into()) as Box<dyn Fn(&mut serde_json::Value)>, "`use_dora`"),
        (Box::new(|c: &mut serde_json::Value| c["bias"] = "all".into()), "`bias`"),
        (Box::new(|c: &mut serde_json::Value| c["modules_to_save"] = serde_json::json!(["lm_head"])), "`modules_to_save`"),
        (Box::new(|c: &mut serde_json::Value| c["target_modules"] = serde_json::json!(["q_proj", "c_attn"])), "`target_modules`"),
        (Box::new(|c: &mut serde_json::Value| c["r"] = 0.into()), "`r`"),
        (Box::new(|c: &mut serde_json::Value| c["peft_type"] = "IA3".into()), "`peft_type`"),
    ] {
        let e = try_with(&*edit);
        assert!(e.contains("adapter_config.json") && e.contains(key), "{key}: {e}");
    }
    // A rank that does not match the tensors: `r` and the tensor's rank are named.
    let e = try_with(&|c| c["r"] = 4.into());
    assert!(e.contains("adapter_model.safetensors") && e.contains("`r` in adapter_config.json is 4") && e.contains("has rank"), "{e}");
    // An adapter of another model's shape.
    let (llama, _) = load("llama_tied_rope3");
    let e = peft::load(&src, &llama, None, DType::F32, &Device::Cpu).unwrap_err().to_string();
    assert!(e.contains("has shape") || e.contains("is missing") || e.contains("not a LoRA tensor"), "{e}");
}

/// `dir/adapter_model.safetensors` rewritten: `edit` gets the header and
/// the data (the tensors' bytes) of the fixture's file.
fn rewrite_safetensors(dir: &std::path::Path, edit: &dyn Fn(&mut serde_json::Value, &mut Vec<u8>)) {
    let path = dir.join(peft::WEIGHTS_FILE);
    let bytes = std::fs::read(&path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let mut header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let mut data = bytes[8 + n..].to_vec();
    edit(&mut header, &mut data);
    let mut h = header.to_string().into_bytes();
    h.resize(h.len().div_ceil(8) * 8, b' ');
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&h);
    out.extend_from_slice(&data);
    std::fs::write(&path, out).unwrap();
}

/// Issue 66 (D10): an adapter whose tensor is an integer dtype (its float
/// bits were read as integers), holds a NaN or an infinity, or whose
/// `lora_alpha` makes the scale overflow f32, is refused on load and on
/// export, naming the file and the tensor (or key); nothing is exported. A
/// merge whose finite inputs overflow is caught by `check_finite`.
#[test]
fn adapters_with_integer_or_non_finite_weights_are_refused_on_load_and_export() {
    let case = "tied_sharded";
    let (cfg, _) = load(case);
    let src = lora_dir(case);
    const TENSOR: &str = "base_model.model.model.layers.0.mlp.up_proj.lora_B.weight";
    let tensor = TENSOR;
    let copy = || {
        let dir = tempfile::tempdir().unwrap();
        for f in [peft::WEIGHTS_FILE, peft::CONFIG_FILE] {
            std::fs::copy(src.join(f), dir.path().join(f)).unwrap();
        }
        dir
    };
    let set_value = |value: f32| {
        move |h: &mut serde_json::Value, data: &mut Vec<u8>| {
            let start = h[tensor]["data_offsets"][0].as_u64().unwrap() as usize;
            data[start + 4..start + 8].copy_from_slice(&value.to_le_bytes());
        }
    };
    type Edit<'a> = Box<dyn Fn(&mut serde_json::Value, &mut Vec<u8>) + 'a>;
    let cases: Vec<(Edit, &str)> = vec![
        (Box::new(|h: &mut serde_json::Value, _: &mut Vec<u8>| h[tensor]["dtype"] = "I32".into()), "is I32"),
        (Box::new(set_value(f32::NAN)), "1 non-finite values"),
        (Box::new(set_value(f32::INFINITY)), "1 non-finite values"),
    ];
    for (edit, says) in cases {
        let dir = copy();
        rewrite_safetensors(dir.path(), &*edit);
        let e = peft::load(dir.path(), &cfg, None, DType::F32, &Device::Cpu).unwrap_err().to_string();
        assert!(e.contains("adapter_model.safetensors") && e.contains(tensor) && e.contains(says), "{says}: {e}");
        let out = dir.path().join("exported");
        let e = peft::export(dir.path(), &out, DType::BF16).unwrap_err().to_string();
        assert!(e.contains(tensor) && e.contains(says), "export, {says}: {e}");
        assert!(!out.exists(), "export wrote {}", out.display());
    }
    // lora_alpha = 1e308: a finite number whose scale is not, in f32.
    let dir = copy();
    let path = dir.path().join(peft::CONFIG_FILE);
    let mut config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    config["lora_alpha"] = 1e308.into();
    std::fs::write(&path, config.to_string()).unwrap();
    for e in [
        peft::load(dir.path(), &cfg, None, DType::F32, &Device::Cpu).unwrap_err().to_string(),
        peft::export(dir.path(), &dir.path().join("exported"), DType::BF16).unwrap_err().to_string(),
    ] {
        assert!(e.contains("adapter_config.json") && e.contains("`lora_alpha`") && e.contains("f32"), "{e}");
    }
    // Finite weights and scale whose product overflows: the merge is checked.
    let dir = copy();
    rewrite_safetensors(dir.path(), &|h, data| {
        for (name, meta) in h.as_object().unwrap() {
            if name.contains("lora_") {
                let (a, b) = (meta["data_offsets"][0].as_u64().unwrap() as usize, meta["data_offsets"][1].as_u64().unwrap() as usize);
                for v in data[a..b].chunks_mut(4) {
                    v.copy_from_slice(&1e30f32.to_le_bytes());
                }
            }
        }
    });
    let adapter = peft::load(dir.path(), &cfg, None, DType::F32, &Device::Cpu).unwrap();
    let (_, weights) = load(case);
    let merged = adapter.merge_into(&cfg, &weights).unwrap();
    let e = lm::lora::check_finite("the merge", merged.iter()).unwrap_err().to_string();
    assert!(e.contains("the merge") && e.contains("non-finite"), "{e}");
    let clean = peft::load(&src, &cfg, None, DType::F32, &Device::Cpu).unwrap().merge_into(&cfg, &weights).unwrap();
    lm::lora::check_finite("the merge", clean.iter()).unwrap();
}
