//! `trainer`: everything that learns, over the model of the `lm` crate
//! (named as `lm::model`, `lm::lora`, ... at every use: nothing of it is
//! re-exported here). Its errors are [`error::Error`], lm's wrapped as
//! they are.
//!
//! - [`run`]: a run's lifecycle (folder, resume, metrics, SIGINT) and ONE
//!   loop, `run::drive`, for GRPO (`run::grpo::grpo`) and SFT (`run::sft::sft`).
//! - [`episodes`]: episodes as the commands make them (their rollouts):
//!   policies and environments set up from a run config, checked task
//!   files, episode files written and resumed ([`episodes::jsonl`]), vLLM
//!   as the engine.
//! - The recipe over this library (the pipeline, its evaluations, synthetic
//!   tasks, repositories, tiny models) is the `recipe` crate's; the
//!   applications (bench, serve, plot, mcp, localize, selftest, dist-check)
//!   are the `apps` crate's: this one knows no command line, server or plotting.
//! - [`checkpoint`]: atomic training checkpoints (model, optimizer, state
//!   with RNG streams and data cursor, DONE last), retention and resume.
//! - [`device`]: the device and dtype enums the CLI and configs choose from.
//! - [`model_policy::ModelPolicy`]: the model as a rollout policy (batched turns,
//!   parked KV caches); [`run_config::RunConfig`]: the TOML run configuration.
//! - [`grpo`]: GRPO in one folder: `[train]`/`[grpo]` ([`grpo::config`]),
//!   group-relative advantages, the clipped loss with k3 KL and its
//!   aggregations in one function (`grpo::grpo_loss`), micro-batched
//!   gradient accumulation, and the trainer (`grpo::Trainer`, one step top
//!   to bottom in `Trainer::step`); [`sft`] likewise (`[sft]`, the
//!   cross-entropy, `sft::Trainer`). Each trainer takes its own settings,
//!   not the run config; `run::grpo` and `run::sft` run them.
//! - [`backward`]: what GRPO and SFT share: the log-prob passes (plain and
//!   folded with a linear loss) and one micro-batch's forward and backward.
//! - [`packing`]: micro-batches as a token budget (several sequences per row, no padding).
//! - [`malloc`]: glibc allocator settings for training's large, short-lived tensors.
//! - [`dist`]: data parallelism over MPI ranks (gradients summed in rank
//!   order, per-rank shares of groups and rows).
//! - [`optim`]: AdamW (fp32 moments and masters), grad-norm clipping, LR schedules.
//! - [`progress`]: what the library tells the user, through a sink the
//!   binary installs (it prints nothing itself); errors are returned.

pub mod backward;
pub mod checkpoint;
pub mod device;
pub mod dist;
pub mod error;
pub mod files;
pub mod gpu_check;
pub mod grpo;
pub mod malloc;
pub mod interrupt;
pub mod optim;
pub mod packing;
pub mod plan;
pub mod progress;
pub mod model_policy;
pub mod episodes;
pub mod run;
pub mod run_config;
pub mod sft;
pub mod threads;

// Its own error type (lm's errors wrapped as they are).
pub use error::{Error, Result};
