//! `kernels`: the only crate that will know CUDA.
//!
//! Fused ops for the training hot path, as Candle custom ops, each beside a
//! plain-tensor reference and a parity test:
//!
//! - [`attention`]: causal grouped-query attention in linear memory (positions,
//!   padding, packed segments, a KV cache in front), FlashAttention-2
//!   backward ([`attention::attention`], reference
//!   [`attention::attention_reference`]).
//! - [`logprobs`]: per-token log-probs (and entropy) of `hidden @ lm_head^T / T`
//!   without materializing the `[N, V]` logits, with backward
//!   ([`logprobs::token_logprobs`], reference [`logprobs::token_logprobs_reference`]).
//! - [`sampling`]: next-token sampling on the logits' device (greedy,
//!   temperature, top-k / top-p), one uniform per row in, `[rows]` tokens
//!   and log-probs out ([`sampling::sample`], reference
//!   [`sampling::sample_reference`]).
//! - [`linear`]: `x @ w^T` for few rows of `x` (decoding) without packing
//!   `w` ([`linear::linear_few_rows`], reference [`linear::linear_reference`]).
//! - [`projection`]: `x @ w^T` as one autograd node for training
//!   ([`projection::linear`]; the forward is Candle's own product call).
//! - [`gated`]: a SwiGLU layer's gate and up projections and gate as one
//!   node ([`gated::gated_projection`], reference: the composition).
//! - [`norm`]: RMSNorm with backward ([`norm::rms_norm`]).
//! - [`swiglu`]: the SwiGLU gate `silu(g) * u` with a one-pass backward
//!   ([`swiglu::swiglu_gate`], reference [`swiglu::swiglu_gate_reference`]).
//! - [`rope`]: rotary embeddings ("rotate half", per-row positions) with
//!   backward ([`rope::rope`]).
//!
//! CPU paths run their own rayon tasks (Candle's CPU element-wise ops are
//! single-threaded) and call single-threaded matrix products per block
//! (`matmul`).
//!
//! With feature `cuda`: the CUDA kernels (`kernels/cuda/*.cu`, compiled to PTX
//! by build.rs) and their launchers, as storage-level functions for the ops'
//! `cuda_fwd` (`attention/cuda.rs`, `logprobs/cuda.rs`, `norm/cuda.rs`,
//! `rope/cuda.rs`) and as tensor-level calls in [`cuda_ops`] for the GPU
//! self-test.

pub mod attention;
pub mod fastmath;
pub mod gated;
pub mod linear;
pub mod logprobs;
mod matmul;
pub mod norm;
pub mod projection;
pub mod rope;
pub mod sampling;
mod storage;
pub mod swiglu;

/// Whether the fused ops run natively on `device` (the CPU today; CUDA once
/// its kernels land). Elsewhere the public functions fall back to their
/// plain-tensor references, so callers never fail on a device the ops do
/// not know yet.
///
/// `FUSEGRPO_CUDA_KERNELS=1` in the environment admits CUDA too (with
/// feature `cuda`): how `scripts/gpu-check` runs the model on the kernels
/// it is checking, before they are on by default.
pub fn has_native_path(device: &Device) -> bool {
    device.is_cpu() || (device.is_cuda() && cuda_kernels_opted_in())
}

/// Whether `FUSEGRPO_CUDA_KERNELS=1` (read once).
fn cuda_kernels_opted_in() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| cfg!(feature = "cuda") && std::env::var("FUSEGRPO_CUDA_KERNELS").is_ok_and(|v| v == "1"))
}

/// The Candle device type the ops run on, re-exported so callers need not
/// depend on `candle-core` directly for it.
pub use candle_core::Device;

#[cfg(feature = "cuda")]
mod cuda_util;

#[cfg(feature = "cuda")]
pub mod cuda_ops;

// The CUDA launchers, mounted by path beside their ops' CPU code; each op's
// `cuda_fwd` is one call into them. `has_native_path` stays CPU-only until
// scripts/gpu-check has passed on a GPU: until then the public functions use
// their references on CUDA, and only `fusegrpo selftest --device cuda`
// (through `cuda_ops` and the ops' `cuda_fwd`) runs the kernels.
#[cfg(feature = "cuda")]
#[path = "logprobs/cuda.rs"]
mod logprobs_cuda;
#[cfg(feature = "cuda")]
#[path = "norm/cuda.rs"]
mod norm_cuda;
#[cfg(feature = "cuda")]
#[path = "rope/cuda.rs"]
mod rope_cuda;
#[cfg(feature = "cuda")]
#[path = "sampling/cuda.rs"]
mod sampling_cuda;
