//! `lm`: the language model, with nothing of training in it.
//!
//! - [`config::ModelConfig`]: the architecture (Qwen3, Llama, Qwen2), read
//!   from a Hugging Face `config.json` and validated key by key.
//! - [`model::CausalLm`]: the decoder in differentiable Candle ops,
//!   `forward(tokens, positions, cache)` with a caller-owned
//!   [`model::cache::KvCache`] and per-row [`model::cache::Positions`].
//! - [`weights`]: load and save safetensors checkpoints (single file or
//!   sharded with an index) under Hugging Face names, read without copies
//!   ([`safetensors_stream`]); [`hub`] resolves a folder or a hub id;
//!   [`gguf`] imports a GGUF file (weights and tokenizer).
//! - [`lora`]: LoRA adapters (a value the model takes), saved and loaded in
//!   PEFT's layout.
//! - [`logprobs`]: per-token log-probabilities; [`sampling`] (settings and
//!   per-sequence random streams; the draw runs in `kernels::sampling`) and
//!   [`generate`]: seeded sampling and batched generation with the KV cache.
//! - [`init`]: random weights for tiny checkpoints (tests and CPU runs).
//! - [`profile`]: per-phase times of a training step (attention, projections,
//!   log-prob head, norms and rotary, optimizer), forward and backward, for
//!   `bench step --phases`; a thread's own switch, off unless a benchmark
//!   turns it on (the one piece of state the model does not take as an
//!   argument: threading a profiler through every op would change every
//!   signature for a measurement).
//!
//! The `trainer` crate re-exports every module under the same name.

pub mod config;
pub mod error;
pub mod fnv;
pub mod generate;
pub mod gguf;
pub mod hub;
pub mod init;
pub mod logprobs;
pub mod lookup;
pub mod lora;
pub mod model;
pub mod params;
pub mod profile;
pub mod safetensors_stream;
pub mod sampling;
pub mod weights;

pub use config::ModelConfig;
pub use error::{Error, Result};
pub use model::CausalLm;
