//! Bytes of each kind of tensor a run holds, from the model's shape alone.
//!
//! Counted from what the code keeps, not from a fit: the activation count
//! below lists the tensors one decoder layer's forward leaves in Candle's
//! graph (every op keeps its inputs until the loss is dropped). The figures
//! are checked against measured peaks in BENCHMARKS.md ("The memory
//! planner").

use lm::config::ModelConfig;
use lm::params::parameter_shapes;
use candle_core::DType;

/// Bytes of one element of `dtype`.
pub fn elem(dtype: DType) -> u64 {
    dtype.size_in_bytes() as u64
}

/// The parameter set's size: scalars in all, and in the largest tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParamSizes {
    pub count: u64,
    pub largest: u64,
    /// Scalars of one decoder layer.
    pub per_layer: u64,
}

impl ParamSizes {
    pub fn of(cfg: &ModelConfig) -> Self {
        let shapes = parameter_shapes(cfg);
        let sizes = || shapes.iter().map(|(_, s)| s.iter().product::<usize>() as u64);
        let per_layer = shapes
            .iter()
            .filter(|(n, _)| n.starts_with("model.layers.0."))
            .map(|(_, s)| s.iter().product::<usize>() as u64)
            .sum();
        ParamSizes { count: sizes().sum(), largest: sizes().max().unwrap_or(0), per_layer }
    }
}

/// Key and value bytes one cached token (slot) takes in every layer.
pub fn kv_bytes_per_slot(cfg: &ModelConfig, dtype: DType) -> u64 {
    (cfg.num_hidden_layers * 2 * cfg.num_key_value_heads * cfg.head_dim) as u64 * elem(dtype)
}

/// Elements one token leaves in one decoder layer's forward for the
/// backward (recompute off): with hidden h, query width q = heads x
/// head_dim, key/value width k and intermediate i,
/// - h-wide: the input, its RMSNorm, the output projection, the residual
///   sum, the post-attention RMSNorm, the MLP's down projection (6 h);
/// - queries: projection, q-norm, the head-major copy, rope, the
///   attention's output (5 q);
/// - keys: projection, k-norm, copy, rope; values: projection, copy (6 k);
/// - the MLP: gate, up and silu(gate) x up (3 i).
pub fn layer_activation_elems(cfg: &ModelConfig) -> u64 {
    let h = cfg.hidden_size as u64;
    let q = (cfg.num_attention_heads * cfg.head_dim) as u64;
    let k = (cfg.num_key_value_heads * cfg.head_dim) as u64;
    let i = cfg.intermediate_size as u64;
    6 * h + 5 * q + 6 * k + 3 * i
}

/// Bytes per token of one layer's activations: the elements above in the
/// model's dtype plus the attention's f32 log-sum-exp per query head.
pub fn layer_activation_bytes(cfg: &ModelConfig, dtype: DType) -> u64 {
    layer_activation_elems(cfg) * elem(dtype) + cfg.num_attention_heads as u64 * 4
}

/// Bytes per token outside the decoder layers in a training pass: the
/// embedded tokens, the final norm, its output and the fused log-probs'
/// gradient of it (f32), each `hidden` wide.
pub fn head_activation_bytes(cfg: &ModelConfig, dtype: DType) -> u64 {
    let h = cfg.hidden_size as u64;
    3 * h * elem(dtype) + h * 4
}

/// Working memory of the fused token log-probs (kernels::logprobs), the
/// larger of its two forms: the backward of the op with its own backward
/// (4 tasks per thread, each with a block of 1,024 tokens x 1,024
/// vocabulary entries of f32 logits and a partial `[1,024, hidden]` f32
/// gradient of the hidden states, whatever the vocabulary), and the loss
/// folded into the op (a chunk's logits over the whole vocabulary, up to
/// 320 MiB, and its partial gradients).
/// The same on CUDA, where the log-prob head runs on cuBLAS
/// (kernels::logprobs, `cuda.rs`): one chunk of f32 logits
/// ([`kernels::logprobs::CHUNK_LOGITS_BYTES`]) and, when lm_head trains,
/// its gradient held from the folded forward to the backward and (bf16)
/// its f32 accumulator.
pub fn cuda_logprob_workspace_bytes(cfg: &ModelConfig, tokens: u64, dtype: DType, head_trained: bool) -> u64 {
    kernels::logprobs::cuda_head_workspace_bytes(tokens as usize, cfg.vocab_size, cfg.hidden_size, elem(dtype) as usize, head_trained)
}

/// Layers' worth of activations per token that one micro-batch holds on
/// CUDA beyond what [`layer_activation_bytes`] counts (the CPU's figure is
/// within 5% of its peak): the recomputed layer's backward on the GPU (the
/// attention kernel's f32 gradient buffers, Candle's temporaries) and the
/// stream-ordered pool's fragmentation. Fitted, with a margin, to the peaks
/// measured on one H200 (BENCHMARKS.md "On one H200": 4 layers x 8K and 16K,
/// 36 x 16K), which need about 1.2 layers more than counted; the tests in
/// `plan/phases.rs` hold the plan to them.
pub const CUDA_EXTRA_LAYERS_PER_TOKEN: f64 = 1.5;

pub fn logprob_workspace_bytes(cfg: &ModelConfig, threads: usize) -> u64 {
    let recompute = (threads * 4 * 1024 * (1024 + cfg.hidden_size) * 4) as u64;
    recompute.max(kernels::logprobs::folded_workspace_bytes(cfg.vocab_size, cfg.hidden_size, threads))
}
