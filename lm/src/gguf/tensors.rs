//! GGUF tensors to Hugging Face ones: llama.cpp's names mapped back, every
//! tensor dequantized to f32, and the row permutation llama.cpp's converter
//! applies to Llama's Q and K projections undone.

use crate::config::Architecture;
use crate::error::{Error, Result};
use candle_core::quantized::gguf_file::Content;
use candle_core::{Device, Tensor};
use std::path::Path;

/// The Hugging Face name of a llama.cpp tensor name, or an error naming it.
pub fn hf_name(path: &Path, gguf: &str) -> Result<String> {
    let unknown = || Error::Gguf { path: path.into(), message: format!("tensor `{gguf}` has no Hugging Face counterpart we know") };
    match gguf {
        "token_embd.weight" => return Ok("model.embed_tokens.weight".into()),
        "output_norm.weight" => return Ok("model.norm.weight".into()),
        "output.weight" => return Ok("lm_head.weight".into()),
        "rope_freqs.weight" => {
            return Err(Error::Gguf {
                path: path.into(),
                message: "tensor `rope_freqs.weight` (llama3 rope factors stored as a tensor) is not supported".into(),
            })
        }
        _ => {}
    }
    let rest = gguf.strip_prefix("blk.").ok_or_else(unknown)?;
    let (layer, part) = rest.split_once('.').ok_or_else(unknown)?;
    let layer: usize = layer.parse().map_err(|_| unknown())?;
    let (stem, kind) = part.rsplit_once('.').ok_or_else(unknown)?;
    let hf = match stem {
        "attn_norm" => "input_layernorm",
        "ffn_norm" => "post_attention_layernorm",
        "attn_q" => "self_attn.q_proj",
        "attn_k" => "self_attn.k_proj",
        "attn_v" => "self_attn.v_proj",
        "attn_output" => "self_attn.o_proj",
        "attn_q_norm" => "self_attn.q_norm",
        "attn_k_norm" => "self_attn.k_norm",
        "ffn_gate" => "mlp.gate_proj",
        "ffn_up" => "mlp.up_proj",
        "ffn_down" => "mlp.down_proj",
        _ => return Err(unknown()),
    };
    if kind != "weight" && kind != "bias" {
        return Err(unknown());
    }
    Ok(format!("model.layers.{layer}.{hf}.{kind}"))
}

/// One tensor, dequantized to f32 on the CPU, with the file and name in errors.
pub fn read_f32(path: &Path, content: &Content, file: &mut std::fs::File, name: &str) -> Result<Tensor> {
    let info = &content.tensor_infos[name];
    let fail = |e: candle_core::Error| Error::Gguf {
        path: path.into(),
        message: format!("tensor `{name}` ({:?}, shape {:?}): {e}", info.ggml_dtype, info.shape.dims()),
    };
    let q = content.tensor(file, name, &Device::Cpu).map_err(fail)?;
    q.dequantize(&Device::Cpu).map_err(fail)
}

/// llama.cpp stores Llama's Q and K rows of each head interleaved (pairs
/// (j, j + d/2) adjacent, for its rope); transformers' rotate-half layout
/// wants them in two halves. `heads` is the head count of that projection.
pub fn unpermute_rows(t: &Tensor, heads: usize) -> candle_core::Result<Tensor> {
    let dims = t.dims().to_vec();
    let rows = dims[0];
    let half = rows / heads / 2;
    let rest: usize = dims[1..].iter().product();
    t.reshape((heads, half, 2, rest))?.transpose(1, 2)?.contiguous()?.reshape(dims)
}

/// Whether `hf` is a Q or K projection that llama.cpp permuted, and with how
/// many heads.
pub fn permuted_heads(arch: Architecture, hf: &str, heads: usize, kv_heads: usize) -> Option<usize> {
    if arch != Architecture::Llama {
        return None;
    }
    if hf.contains("self_attn.q_proj.") {
        Some(heads)
    } else if hf.contains("self_attn.k_proj.") {
        Some(kv_heads)
    } else {
        None
    }
}
