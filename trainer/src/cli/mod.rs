//! One module per subcommand: its clap arguments and its `run`.

pub mod bench;
pub mod bench_logprob;
pub mod bench_memory;
pub mod bench_ops;
pub mod bench_model;
pub mod bench_grep;
pub mod chat;
pub mod common;
pub mod env;
pub mod generate;
pub mod init_tiny;
pub mod practice;
pub mod plot;
pub mod rollout;
pub mod run;
pub mod pipeline;
pub mod score;
pub mod sft;
pub mod synth;
pub mod selftest;
pub mod train;
pub mod serve;
