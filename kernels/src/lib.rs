//! `kernels`: the only crate that will know CUDA.
//!
//! Fused ops (token log-probs without materialized logits, RMSNorm and rotary
//! embeddings with backward) land here as Candle `CustomOp`s, each beside a
//! plain-tensor reference and a parity test. Until they land, the model in
//! `trainer` uses differentiable compositions of stock Candle ops; see issue 6.
//!
//! With feature `cuda`: the CUDA kernels (`kernels/cuda/*.cu`, compiled to PTX
//! by build.rs) and their launchers, as storage-level functions for the ops'
//! `cuda_fwd` (`logprobs/cuda.rs`, `norm/cuda.rs`, `rope/cuda.rs`) and as
//! tensor-level calls in [`cuda_ops`] for the GPU self-test.

/// The Candle device type the ops run on, re-exported so callers need not
/// depend on `candle-core` directly for it.
pub use candle_core::Device;

#[cfg(feature = "cuda")]
mod cuda_util;

#[cfg(feature = "cuda")]
pub mod cuda_ops;

// The launchers live beside their ops' CPU code; until the op modules exist
// on this branch they are mounted here by path. Once `logprobs`, `norm` and
// `rope` modules exist, each declares `#[cfg(feature = "cuda")] mod cuda;`
// instead and these three lines go.
#[cfg(feature = "cuda")]
#[path = "logprobs/cuda.rs"]
mod logprobs_cuda;
#[cfg(feature = "cuda")]
#[path = "norm/cuda.rs"]
mod norm_cuda;
#[cfg(feature = "cuda")]
#[path = "rope/cuda.rs"]
mod rope_cuda;
