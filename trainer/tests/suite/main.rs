//! The trainer's integration tests, one binary (fewer links, less disk in CI).

mod common;
mod architectures;
mod chatml_episodes;
mod checkpoint_io;
mod checkpoints;
mod configs;
mod device;
mod engine_sync;
mod files;
mod fused_logprobs;
mod gguf_import;
mod grpo_learning;
mod grpo_maths;
mod grpo_update;
mod kv_cache;
mod lora;
mod model_rollout;
mod optim;
mod parity;
mod recompute;
mod runs;
mod sft;
mod config_reference;
mod shipped_localizer;
