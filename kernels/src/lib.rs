//! `kernels`: the only crate that will know CUDA.
//!
//! Fused ops for the training hot path, as Candle custom ops, each beside a
//! plain-tensor reference and a parity test:
//!
//! - [`attention`]: causal grouped-query attention in linear memory (positions,
//!   padding, packed segments, a KV cache in front), FlashAttention-2
//!   backward; on the CPU at inference, a call of few queries computes
//!   each as it would alone ([`attention::queries_alone`])
//!   ([`attention::attention`], reference [`attention::attention_reference`]).
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
//! - [`cuda_pool`]: the CUDA memory pool's release threshold, set once when
//!   a device is opened.
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
pub mod cuda_pool;
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

/// Whether the fused ops run natively on `device`: always on the CPU; on
/// CUDA (feature `cuda`) when [`set_cuda_kernels`] switched them on (the
/// trainer does, from `[model] cuda_kernels`), or, in a process that never
/// set them, when `FUSEGRPO_CUDA_KERNELS=1` is in the environment (how
/// `scripts/gpu-check` and the `bench` commands opt in). Elsewhere the public
/// functions fall back to their plain-tensor references, so callers never
/// fail on a device the ops do not know.
pub fn has_native_path(device: &Device) -> bool {
    device.is_cpu() || (device.is_cuda() && cuda_kernels_on())
}

/// 0: not set (the environment decides), 1: off, 2: on.
static CUDA_KERNELS: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Switches the CUDA kernels on or off for this process (a build without
/// feature `cuda` keeps them off: there are none).
pub fn set_cuda_kernels(on: bool) {
    CUDA_KERNELS.store(if on { 2 } else { 1 }, std::sync::atomic::Ordering::Relaxed);
}

/// Whether the CUDA kernels are on: [`set_cuda_kernels`]'s choice, else
/// `FUSEGRPO_CUDA_KERNELS=1` (read once).
pub fn cuda_kernels_on() -> bool {
    if !cfg!(feature = "cuda") {
        return false;
    }
    match CUDA_KERNELS.load(std::sync::atomic::Ordering::Relaxed) {
        1 => false,
        2 => true,
        _ => cuda_kernels_in_env() == Some(true),
    }
}

/// `FUSEGRPO_CUDA_KERNELS` in the environment: `1` on, any other value
/// off, unset none (read once).
pub fn cuda_kernels_in_env() -> Option<bool> {
    static ON: std::sync::OnceLock<Option<bool>> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("FUSEGRPO_CUDA_KERNELS").ok().map(|v| v == "1"))
}

/// The Candle device type the ops run on, re-exported so callers need not
/// depend on `candle-core` directly for it.
pub use candle_core::Device;

#[cfg(feature = "cuda")]
mod cuda_util;

#[cfg(feature = "cuda")]
pub mod cuda_ops;
/// Without `cuda`: the same entry points, each an error (the self-test's dry run).
#[cfg(not(feature = "cuda"))]
#[path = "cuda_ops_none.rs"]
pub mod cuda_ops;

// Each op's CUDA launchers are its child module `cuda` (`<op>/cuda.rs`,
// beside its CPU code); the op's `cuda_fwd` is one call into them. With the
// kernels off (`[model] cuda_kernels`, off until scripts/gpu-check has
// passed for the build) the public functions use their references on
// CUDA, and only `fusegrpo selftest --device cuda` (through `cuda_ops` and
// the ops' `cuda_fwd`) runs the kernels.
