//! `trainer`: the model and everything that learns.
//!
//! - [`config::ModelConfig`]: the architecture, read from a Hugging Face
//!   `config.json` and validated key by key.
//! - [`model::CausalLm`]: Qwen3 in differentiable Candle ops,
//!   `forward(tokens, positions, cache)` with a caller-owned
//!   [`model::cache::KvCache`] and per-row [`model::cache::Positions`].
//! - [`weights`]: load and save safetensors checkpoints (single file or
//!   sharded with an index) under Hugging Face names; [`hub`] resolves a
//!   folder or a hub id.
//! - [`logprobs`]: per-token log-probabilities; [`sampling`] (settings and
//!   per-sequence random streams; the draw runs in `kernels::sampling`) and
//!   [`generate`]: seeded sampling and batched generation with the KV cache.
//! - [`checkpoint`]: atomic training checkpoints (model, optimizer, state
//!   with RNG streams and data cursor, DONE last), retention and resume.
//! - [`init`]: random tiny Qwen3 checkpoints for tests and CPU runs.
//! - [`device`]: the device and dtype enums the CLI and configs choose from.
//! - [`serve`]: an OpenAI-compatible chat-completions server over the model.
//! - [`policy::ModelPolicy`]: the model as a rollout policy (batched turns,
//!   parked KV caches); [`run_config::RunConfig`]: the TOML run configuration.
//! - [`grpo`]: group-relative advantages, the clipped GRPO loss with k3 KL
//!   and its aggregations in one function (`grpo::grpo_loss`), micro-batched
//!   gradient accumulation.
//! - [`trainers`]: `trainers::grpo::Trainer` (one GRPO step top to bottom,
//!   `Trainer::step`) and `trainers::sft::Trainer`, side by side.
//! - [`backward`]: what GRPO and SFT share: the log-prob passes (plain and
//!   folded with a linear loss) and one micro-batch's forward and backward.
//! - [`packing`]: micro-batches as a token budget (several sequences per row, no padding).
//! - [`malloc`]: glibc allocator settings for training's large, short-lived tensors.
//! - [`dist`]: data parallelism over MPI ranks (gradients summed in rank
//!   order, per-rank shares of groups and rows).
//! - [`optim`]: AdamW (fp32 moments and masters), grad-norm clipping, LR schedules.
//! - [`lora`]: LoRA adapters (a value the model takes), saved and loaded in PEFT's layout.

pub mod backward;
pub mod bench;
pub mod checkpoint;
pub mod config;
pub mod device;
pub mod dist;
pub mod dist_check;
pub mod error;
pub mod files;
pub mod generate;
pub mod fnv;
pub mod gguf;
pub mod gpu_check;
pub mod grpo;
pub mod malloc;
pub mod mcp;
pub mod hub;
pub mod interrupt;
pub mod init;
pub mod localize;
pub mod logprobs;
pub mod lora;
pub mod model;
pub mod optim;
pub mod packing;
pub mod params;
pub mod pipeline;
pub mod plan;
pub mod plot;
pub mod policy;
pub mod rollouts;
pub mod run;
pub mod run_config;
pub mod safetensors_stream;
pub mod sampling;
#[cfg(feature = "cuda")]
pub mod selftest;
pub mod serve;
pub mod synth_tasks;
pub mod sft;
pub mod weights;
pub mod threads;
pub mod tiny;
pub mod trainers;

pub use config::ModelConfig;
pub use error::{Error, Result};
pub use model::CausalLm;
