//! `fusegrpo import-gguf`: a GGUF file (llama.cpp's format) to a Hugging Face
//! model folder (config.json, model.safetensors, tokenizer.json,
//! tokenizer_config.json) that this crate and transformers load.
//!
//! Candle's reader parses the file; every tensor is dequantized to f32 (F32,
//! F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and the K-quants), renamed from
//! llama.cpp's names ([`tensors::hf_name`]), Llama's Q/K rows put back in
//! transformers' order ([`tensors::unpermute_rows`]), and written in the
//! chosen dtype. The folder appears whole or not at all: it is written beside
//! the destination and renamed into place.

pub mod metadata;
pub mod tensors;
pub mod tokenizer;

use crate::error::{Error, Result};
use crate::params::parameter_shapes;
use crate::weights::{save_checkpoint, ShardPolicy, TensorMap};
use candle_core::quantized::gguf_file::Content;
use candle_core::DType;
use metadata::{Metadata, TensorFacts};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// Appended when Candle meets a tensor type id it has no reader for.
const UNSUPPORTED_TYPE_HINT: &str = " (a tensor type that cannot be dequantized; supported: F32, F16, BF16, \
Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K)";

/// What an import wrote.
#[derive(Debug)]
pub struct ImportReport {
    pub out: PathBuf,
    pub architecture: &'static str,
    pub parameters: usize,
    /// GGUF tensor type -> how many tensors had it.
    pub tensor_types: BTreeMap<String, usize>,
    pub vocab_size: usize,
}

/// Import `gguf` into the new folder `out` with weights in `dtype`.
pub fn import(gguf: &Path, out: &Path, dtype: DType) -> Result<ImportReport> {
    if out.exists() && std::fs::read_dir(out).map_err(|e| Error::io(out, e))?.next().is_some() {
        return Err(Error::invalid("--out", format!("{} exists and is not empty; choose a new folder", out.display())));
    }
    let mut file = std::fs::File::open(gguf).map_err(|e| Error::io(gguf, e))?;
    let content = Content::read(&mut file).map_err(|e| {
        let hint = if e.to_string().contains("unknown dtype") { UNSUPPORTED_TYPE_HINT } else { "" };
        Error::Gguf { path: gguf.into(), message: format!("cannot read the header: {e}{hint}") }
    })?;
    let meta = Metadata { path: gguf, map: &content.metadata };
    let arch = meta.architecture()?;

    let mut by_hf: HashMap<String, String> = HashMap::new();
    for name in content.tensor_infos.keys() {
        by_hf.insert(tensors::hf_name(gguf, name)?, name.clone());
    }
    let embed = by_hf.get("model.embed_tokens.weight").ok_or_else(|| meta.err("tensor `token_embd.weight` is missing"))?;
    let facts = TensorFacts {
        vocab_size: content.tensor_infos[embed].shape.dims()[0],
        tied: !by_hf.contains_key("lm_head.weight"),
        attention_bias: by_hf.keys().any(|k| k.ends_with("self_attn.o_proj.bias")),
    };
    let cfg = meta.model_config(facts)?;
    let hf_tokenizer = tokenizer::build(&meta)?;

    let expected = parameter_shapes(&cfg);
    let wanted: std::collections::HashSet<&str> = expected.iter().map(|(n, _)| n.as_str()).collect();
    if let Some((hf, g)) = by_hf.iter().find(|(hf, _)| !wanted.contains(hf.as_str())) {
        return Err(meta.err(format!("tensor `{g}` ({hf}) does not belong to a {} of this shape", arch.model_type())));
    }
    let mut weights = TensorMap::new();
    let mut tensor_types: BTreeMap<String, usize> = BTreeMap::new();
    for (i, (hf, shape)) in expected.iter().enumerate() {
        let g = by_hf.get(hf).ok_or_else(|| meta.err(format!("tensor for `{hf}` is missing")))?;
        *tensor_types.entry(format!("{:?}", content.tensor_infos[g].ggml_dtype)).or_default() += 1;
        let mut t = tensors::read_f32(gguf, &content, &mut file, g)?;
        if t.dims() != shape.as_slice() {
            return Err(meta.err(format!("tensor `{g}` has shape {:?}, expected {shape:?} for `{hf}`", t.dims())));
        }
        if let Some(heads) = tensors::permuted_heads(arch, hf, cfg.num_attention_heads, cfg.num_key_value_heads) {
            t = tensors::unpermute_rows(&t, heads)?;
        }
        weights.insert(hf.clone(), t.to_dtype(dtype)?);
        if (i + 1) % 64 == 0 {
            tracing::info!(done = i + 1, of = expected.len(), "dequantized");
        }
    }

    let partial = partial_dir(out);
    let _ = std::fs::remove_dir_all(&partial);
    let written = write_folder(&partial, &cfg, &weights, &hf_tokenizer);
    if let Err(e) = written {
        let _ = std::fs::remove_dir_all(&partial);
        return Err(e);
    }
    if out.exists() {
        std::fs::remove_dir(out).map_err(|e| Error::io(out, e))?;
    }
    std::fs::rename(&partial, out).map_err(|e| Error::io(out, e))?;
    Ok(ImportReport {
        out: out.into(),
        architecture: arch.model_type(),
        parameters: crate::params::parameter_count(&cfg),
        tensor_types,
        vocab_size: cfg.vocab_size,
    })
}

/// `<out>.partial`, beside the destination (same file system, so the final
/// rename is atomic).
fn partial_dir(out: &Path) -> PathBuf {
    let mut name = out.file_name().map(|n| n.to_os_string()).unwrap_or_else(|| "model".into());
    name.push(".partial");
    out.with_file_name(name)
}

fn write_folder(dir: &Path, cfg: &crate::ModelConfig, weights: &TensorMap, tok: &tokenizer::HfTokenizer) -> Result<()> {
    save_checkpoint(dir, cfg, weights, ShardPolicy::Single)?;
    for (file, value) in [("tokenizer.json", &tok.tokenizer_json), ("tokenizer_config.json", &tok.tokenizer_config)] {
        let path = dir.join(file);
        let text = serde_json::to_string_pretty(value).expect("JSON serializes");
        std::fs::write(&path, text + "\n").map_err(|e| Error::io(&path, e))?;
    }
    Ok(())
}
