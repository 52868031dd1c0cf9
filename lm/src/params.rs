//! The parameter set of a checkpoint (Qwen3, Qwen2 or Llama): every tensor name (Hugging Face
//! naming) with its shape. The single source of truth for loading, saving,
//! random init and gradient checks.

use crate::config::ModelConfig;

/// Name and shape of every parameter, in checkpoint order. `lm_head.weight`
/// is listed only when embeddings are untied.
pub fn parameter_shapes(cfg: &ModelConfig) -> Vec<(String, Vec<usize>)> {
    let (h, i, hd) = (cfg.hidden_size, cfg.intermediate_size, cfg.head_dim);
    let q_out = cfg.num_attention_heads * hd;
    let kv_out = cfg.num_key_value_heads * hd;
    let mut out = vec![("model.embed_tokens.weight".to_string(), vec![cfg.vocab_size, h])];
    for l in 0..cfg.num_hidden_layers {
        let p = |s: &str| format!("model.layers.{l}.{s}");
        out.push((p("input_layernorm.weight"), vec![h]));
        out.push((p("self_attn.q_proj.weight"), vec![q_out, h]));
        out.push((p("self_attn.k_proj.weight"), vec![kv_out, h]));
        out.push((p("self_attn.v_proj.weight"), vec![kv_out, h]));
        if cfg.qkv_bias() {
            out.push((p("self_attn.q_proj.bias"), vec![q_out]));
            out.push((p("self_attn.k_proj.bias"), vec![kv_out]));
            out.push((p("self_attn.v_proj.bias"), vec![kv_out]));
        }
        out.push((p("self_attn.o_proj.weight"), vec![h, q_out]));
        if cfg.o_bias() {
            out.push((p("self_attn.o_proj.bias"), vec![h]));
        }
        if cfg.architecture.has_qk_norm() {
            out.push((p("self_attn.q_norm.weight"), vec![hd]));
            out.push((p("self_attn.k_norm.weight"), vec![hd]));
        }
        out.push((p("post_attention_layernorm.weight"), vec![h]));
        out.push((p("mlp.gate_proj.weight"), vec![i, h]));
        out.push((p("mlp.up_proj.weight"), vec![i, h]));
        out.push((p("mlp.down_proj.weight"), vec![h, i]));
    }
    out.push(("model.norm.weight".to_string(), vec![h]));
    if !cfg.tie_word_embeddings {
        out.push(("lm_head.weight".to_string(), vec![cfg.vocab_size, h]));
    }
    out
}

/// True for RMSNorm scales (initialized to one, not random).
pub fn is_norm(name: &str) -> bool {
    name.ends_with("norm.weight")
}

/// Number of scalar parameters.
pub fn parameter_count(cfg: &ModelConfig) -> usize {
    parameter_shapes(cfg).iter().map(|(_, s)| s.iter().product::<usize>()).sum()
}
