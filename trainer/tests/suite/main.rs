//! The trainer's integration tests, one binary (fewer links, less disk in CI).

// lm's fixtures and their helpers, one copy (lm/tests/fixtures).
#[path = "../../../lm/tests/suite/common/mod.rs"]
mod common;
// The random tiny models `fusegrpo init-tiny` writes, one copy: the
// `recipe` crate's (which depends on this one, so it cannot be a dependency).
#[path = "../../../recipe/src/tiny.rs"]
#[allow(dead_code)]
mod tiny;
mod chatml_episodes;
mod checkpoints;
mod configs;
mod device;
mod engine_sync;
mod files;
mod fused_logprobs;
mod grpo_learning;
mod grpo_maths;
mod grpo_update;
mod lora;
mod model_rollout;
mod optim;
mod recompute;
mod runs;
mod sft;
mod config_reference;
