//! `recipe`: the FuseSearch recipe and its evaluations, over the `trainer`
//! library (which holds the learning: GRPO, SFT, runs, checkpoints). Only
//! the binary calls it; nothing in `trainer`, `rollout` or `lm` knows it.
//!
//! - [`pipeline`]: `fusegrpo pipeline`, the recipe as one command
//!   (`pipeline::stages::run`: split -> synth -> filter + SFT -> GRPO ->
//!   evaluation of base, SFT and GRPO on held-out tasks), and its report
//!   ([`pipeline::Report`]) with [`stats`]' bootstrap intervals.
//! - [`attempts`]: test-time scaling (`eval`/`rollout --attempts N`): N
//!   attempts per task, the judge's selections, their table and folder.
//! - [`ranked`]: ranked, grounded answers (`eval --ranked`, `compare`).
//! - [`synth_tasks`]: synthetic tasks of a repository (`tasks synth`, the
//!   recipe's `tasks_from = "synth"`).
//! - [`repos`]: the repositories a task file needs, cloned (`repos fetch`).
//! - [`tiny`]: random tiny models with a tokenizer (`init-tiny`), for
//!   tests, demos and benchmarks.

pub mod attempts;
pub mod pipeline;
pub mod ranked;
pub mod repos;
pub mod stats;
pub mod synth_tasks;
pub mod tiny;
