//! One module per subcommand: its clap arguments and its `run`.

pub mod bench;
pub mod chat;
pub mod common;
pub mod dist_check;
pub mod env;
pub mod generate;
pub mod import_gguf;
pub mod init_tiny;
pub mod merge_adapter;
pub mod practice;
pub mod repos;
pub mod plot;
pub mod plot_scaling;
pub mod rollout;
pub mod run;
pub mod scaling;
pub mod seeds;
pub mod pipeline;
pub mod plan;
pub mod score;
pub mod sft;
pub mod synth;
pub mod tasks_synth;
pub mod selftest;
pub mod train;
pub mod serve;
