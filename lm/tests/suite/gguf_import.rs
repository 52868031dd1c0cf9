//! `import-gguf`: the tiny GGUF of scripts/make_gguf_fixtures.py imported and
//! scored against transformers' own reading of that file, every tensor type
//! we promise (K-quants included) through a GGUF written here, and bad files
//! refused with the file and key or tensor named, nothing left behind.

use crate::common;

use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{DType, Device, Tensor};
use std::path::{Path, PathBuf};
use lm::config::{Architecture, RopeScaling};
use lm::gguf::import;
use lm::weights::load_weights;
use lm::{CausalLm, ModelConfig};

const LOGPROB_TOL: f32 = 1e-4;

fn fixture() -> PathBuf {
    common::fixture_dir("gguf_llama").join("tiny-llama.gguf")
}

fn expected() -> serde_json::Value {
    let text = std::fs::read_to_string(common::fixture_dir("gguf_llama").join("expected.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn load(dir: &Path) -> (ModelConfig, CausalLm) {
    let cfg = ModelConfig::from_file(&dir.join("config.json")).unwrap();
    let w = load_weights(dir, &cfg, DType::F32, &Device::Cpu).unwrap();
    let m = CausalLm::new(&cfg, &w).unwrap();
    (cfg, m)
}

#[test]
fn the_imported_tiny_llama_scores_as_transformers_reads_the_gguf() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("tiny");
    let report = import(&fixture(), &out, DType::F32).unwrap();
    println!("{report:?}");
    let (cfg, m) = load(&out);
    assert_eq!(cfg.architecture, Architecture::Llama);
    assert!(cfg.tie_word_embeddings);
    let mut worst = 0f32;
    for row in expected()["score"].as_array().unwrap() {
        let ids = common::ids(&row["ids"]);
        let got = lm::logprobs::score_sequence(&m, &ids).unwrap();
        for (g, w) in got.iter().zip(row["logprobs"].as_array().unwrap()).skip(1) {
            worst = worst.max((g.unwrap() - w.as_f64().unwrap() as f32).abs());
        }
    }
    println!("imported tiny GGUF: log-prob max |diff| vs transformers' GGUF load = {worst:.3e}");
    assert!(worst <= LOGPROB_TOL, "log-prob diff {worst}");
}

#[test]
fn the_imported_tokenizer_encodes_as_the_original() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("tiny");
    import(&fixture(), &out, DType::F32).unwrap();
    let tok = tokenizers::Tokenizer::from_file(out.join("tokenizer.json")).unwrap();
    let texts = expected()["texts"].as_array().unwrap().clone();
    for t in &texts {
        let text = t["text"].as_str().unwrap();
        let ids = tok.encode(text, false).unwrap().get_ids().to_vec();
        assert_eq!(ids, common::ids(&t["ids"]), "{text:?}: the tokenizer the file was made from");
        assert_eq!(ids, common::ids(&t["ids_transformers_gguf"]), "{text:?}: transformers' GGUF tokenizer");
        assert_eq!(tok.decode(&ids, false).unwrap(), text, "{text:?} decodes back");
    }
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("tokenizer_config.json")).unwrap()).unwrap();
    assert_eq!(config["eos_token"], "<|im_end|>", "eos is id 2 in the fixture's vocabulary");
    assert!(config["chat_template"].as_str().unwrap().contains("<|im_start|>"));
    println!("{} texts encode to the original ids", texts.len());
}

/// A Llama of hidden 256 (a multiple of the K-quants' 256-wide blocks), its
/// weights quantized here with Candle into every promised type.
fn write_gguf(path: &Path, types: &[(&str, GgmlDType)], drop: Option<&str>, arch: &str) -> lm::weights::TensorMap {
    write_gguf_with(path, types, drop, arch, |_| {})
}

fn write_gguf_with(
    path: &Path,
    types: &[(&str, GgmlDType)],
    drop: Option<&str>,
    arch: &str,
    edit: impl Fn(&mut Vec<(String, Value)>),
) -> lm::weights::TensorMap {
    let cfg = ModelConfig::new_tiny(420, 256, 512, 2, 4, 2, 64, true).with_architecture(Architecture::Llama, RopeScaling::Default);
    let w = lm::init::random_weights(&cfg, 3, DType::F32, &Device::Cpu).unwrap();
    let w: lm::weights::TensorMap = w.into_iter().map(|(k, t)| (k, (t * 5.0).unwrap())).collect();
    let tiny = std::fs::File::open(fixture()).unwrap();
    let content = gguf_file::Content::read(&mut std::io::BufReader::new(tiny)).unwrap();
    let mut meta: Vec<(String, Value)> = content
        .metadata
        .iter()
        .filter(|(k, _)| k.starts_with("tokenizer."))
        .map(|(k, v)| (k.clone(), clone_value(v)))
        .collect();
    let u32v = |x: u32| Value::U32(x);
    meta.push(("general.architecture".into(), Value::String(arch.into())));
    for (k, v) in [
        ("block_count", 2),
        ("context_length", 4096),
        ("embedding_length", 256),
        ("feed_forward_length", 512),
        ("attention.head_count", 4),
        ("attention.head_count_kv", 2),
        ("rope.dimension_count", 64),
    ] {
        meta.push((format!("llama.{k}"), u32v(v)));
    }
    meta.push(("llama.rope.freq_base".into(), Value::F32(10000.0)));
    meta.push(("llama.attention.layer_norm_rms_epsilon".into(), Value::F32(1e-5)));
    edit(&mut meta);
    let permute = |t: &Tensor, heads: usize| {
        let (rows, cols) = t.dims2().unwrap();
        t.reshape((heads, 2, rows / heads / 2, cols)).unwrap().transpose(1, 2).unwrap().contiguous().unwrap().reshape((rows, cols)).unwrap()
    };
    let mut tensors: Vec<(String, QTensor)> = Vec::new();
    for (hf, t) in &w {
        let g = gguf_name(hf);
        if Some(g.as_str()) == drop {
            continue;
        }
        let t = if hf.contains("q_proj") { permute(t, 4) } else if hf.contains("k_proj") { permute(t, 2) } else { t.clone() };
        let ty = types.iter().find(|(s, _)| g.contains(s)).map(|(_, ty)| *ty).unwrap_or(GgmlDType::F32);
        tensors.push((g, QTensor::quantize(&t, ty).unwrap()));
    }
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    let mut f = std::fs::File::create(path).unwrap();
    let meta_refs: Vec<(&str, &Value)> = meta.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let tensor_refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
    gguf_file::write(&mut f, &meta_refs, &tensor_refs).unwrap();
    w
}

fn clone_value(v: &Value) -> Value {
    match v {
        Value::Array(a) => Value::Array(a.iter().map(clone_value).collect()),
        Value::String(s) => Value::String(s.clone()),
        Value::U32(x) => Value::U32(*x),
        Value::I32(x) => Value::I32(*x),
        Value::Bool(x) => Value::Bool(*x),
        Value::U64(x) => Value::U64(*x),
        other => panic!("unexpected tokenizer metadata {other:?}"),
    }
}

fn gguf_name(hf: &str) -> String {
    let map = [
        ("model.embed_tokens.weight", "token_embd.weight"),
        ("model.norm.weight", "output_norm.weight"),
        ("lm_head.weight", "output.weight"),
    ];
    if let Some((_, g)) = map.iter().find(|(h, _)| *h == hf) {
        return g.to_string();
    }
    let rest = hf.strip_prefix("model.layers.").unwrap();
    let (l, part) = rest.split_once('.').unwrap();
    let parts = [
        ("input_layernorm.weight", "attn_norm.weight"),
        ("post_attention_layernorm.weight", "ffn_norm.weight"),
        ("self_attn.q_proj.weight", "attn_q.weight"),
        ("self_attn.k_proj.weight", "attn_k.weight"),
        ("self_attn.v_proj.weight", "attn_v.weight"),
        ("self_attn.o_proj.weight", "attn_output.weight"),
        ("mlp.gate_proj.weight", "ffn_gate.weight"),
        ("mlp.up_proj.weight", "ffn_up.weight"),
        ("mlp.down_proj.weight", "ffn_down.weight"),
    ];
    let g = parts.iter().find(|(h, _)| *h == part).unwrap().1;
    format!("blk.{l}.{g}")
}

/// Largest |error| relative to the tensor's largest |value|.
fn rel_err(a: &Tensor, b: &Tensor) -> f32 {
    let d = (a - b).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
    d / b.abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap()
}

#[test]
fn every_promised_tensor_type_dequantizes_and_q_k_rows_are_restored() {
    // Q and K stay F32 so the restored row order is checked exactly.
    let types = [
        ("token_embd", GgmlDType::Q8_0),
        ("blk.0.attn_v", GgmlDType::Q4_0),
        ("blk.1.attn_v", GgmlDType::Q4_1),
        ("blk.0.attn_output", GgmlDType::F16),
        ("blk.1.attn_output", GgmlDType::BF16),
        ("blk.0.ffn_gate", GgmlDType::Q4K),
        ("blk.0.ffn_up", GgmlDType::Q5K),
        ("blk.0.ffn_down", GgmlDType::Q6K),
        ("blk.1.ffn_gate", GgmlDType::Q8_0),
        ("blk.1.ffn_up", GgmlDType::Q5_0),
        ("blk.1.ffn_down", GgmlDType::Q4K),
    ];
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("k.gguf");
    let original = write_gguf(&file, &types, None, "llama");
    let report = import(&file, &tmp.path().join("out"), DType::F32).unwrap();
    println!("{:?}", report.tensor_types);
    assert_eq!(report.tensor_types.len(), 10, "F32 plus nine quantized types");
    let cfg = ModelConfig::from_file(&tmp.path().join("out/config.json")).unwrap();
    let got = load_weights(&tmp.path().join("out"), &cfg, DType::F32, &Device::Cpu).unwrap();
    for (hf, want) in &original {
        let g = gguf_name(hf);
        let ty = types.iter().find(|(s, _)| g.contains(s)).map(|(_, ty)| *ty).unwrap_or(GgmlDType::F32);
        let err = rel_err(&got[hf], want);
        // Blocks of 4 bits carry about 1/15 of a block's range per step.
        let bound = match ty {
            GgmlDType::F32 => 0.0,
            GgmlDType::F16 | GgmlDType::BF16 => 4e-3,
            GgmlDType::Q8_0 | GgmlDType::Q6K => 0.02,
            _ => 0.12,
        };
        println!("{hf} ({ty:?}): max relative error {err:.2e} (bound {bound:e})");
        assert!(err <= bound, "{hf} ({ty:?}): error {err} over {bound}");
    }
}

#[test]
fn bf16_imports_round_the_dequantized_weights() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("bf16");
    import(&fixture(), &out, DType::BF16).unwrap();
    let raw: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(raw["torch_dtype"], "bfloat16");
}

fn expect_err(file: &Path, out: &Path, words: &[&str]) {
    let e = import(file, out, DType::F32).expect_err("import should fail").to_string();
    for w in words {
        assert!(e.contains(w), "error `{e}` should mention `{w}`");
    }
    let partial = out.with_file_name(format!("{}.partial", out.file_name().unwrap().to_string_lossy()));
    assert!(!partial.exists(), "no half-written folder is left");
    println!("refused: {e}");
}

#[test]
fn bad_files_are_refused_by_name_and_leave_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");

    let bytes = std::fs::read(fixture()).unwrap();
    let truncated = tmp.path().join("truncated.gguf");
    std::fs::write(&truncated, &bytes[..bytes.len() * 2 / 3]).unwrap();
    expect_err(&truncated, &out, &["truncated.gguf", "tensor `", "remaining"]);
    assert!(!out.exists());

    let header_only = tmp.path().join("header.gguf");
    std::fs::write(&header_only, &bytes[..100]).unwrap();
    expect_err(&header_only, &out, &["header.gguf", "cannot read the header"]);

    let other = tmp.path().join("mamba.gguf");
    write_gguf(&other, &[], None, "mamba");
    expect_err(&other, &out, &["mamba.gguf", "general.architecture", "mamba"]);

    let missing = tmp.path().join("missing.gguf");
    write_gguf(&missing, &[], Some("blk.1.ffn_up.weight"), "llama");
    expect_err(&missing, &out, &["missing.gguf", "model.layers.1.mlp.up_proj.weight", "missing"]);

    let no_width = tmp.path().join("no-width.gguf");
    write_gguf_with(&no_width, &[], None, "llama", |m| m.retain(|(k, _)| k != "llama.embedding_length"));
    expect_err(&no_width, &out, &["no-width.gguf", "llama.embedding_length", "missing"]);

    let spm = tmp.path().join("sentencepiece.gguf");
    write_gguf_with(&spm, &[], None, "llama", |m| {
        m.iter_mut().filter(|(k, _)| k == "tokenizer.ggml.model").for_each(|(_, v)| *v = Value::String("llama".into()))
    });
    expect_err(&spm, &out, &["sentencepiece.gguf", "tokenizer.ggml.model", "`llama` is not supported"]);

    // The type field of `output_norm.weight` (1-d: name, n_dims, one dim,
    // then the type) set to 20, IQ4_NL, which we do not dequantize.
    let mut odd = bytes.clone();
    let name = b"output_norm.weight";
    let at = odd.windows(name.len()).position(|w| w == name).unwrap() + name.len() + 4 + 8;
    odd[at..at + 4].copy_from_slice(&20u32.to_le_bytes());
    let odd_path = tmp.path().join("iq4.gguf");
    std::fs::write(&odd_path, &odd).unwrap();
    expect_err(&odd_path, &out, &["iq4.gguf", "cannot read the header", "cannot be dequantized"]);

    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("keep.txt"), "mine").unwrap();
    expect_err(&fixture(), &out, &["exists and is not empty"]);
    assert_eq!(std::fs::read_to_string(out.join("keep.txt")).unwrap(), "mine", "the user's folder is untouched");
}
