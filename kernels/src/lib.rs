//! `kernels`: the only crate that will know CUDA.
//!
//! Fused ops (token log-probs without materialized logits, RMSNorm and rotary
//! embeddings with backward) land here as Candle `CustomOp`s, each beside a
//! plain-tensor reference and a parity test. Until they land, the model in
//! `trainer` uses differentiable compositions of stock Candle ops; see issue 6.

/// The Candle device type the ops run on, re-exported so callers need not
/// depend on `candle-core` directly for it.
pub use candle_core::Device;
