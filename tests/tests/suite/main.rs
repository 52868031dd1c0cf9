//! End-to-end tests of the fusegrpo binary, one test binary.

mod cli_chat_render;
mod cli_engine;
mod cli_env;
mod cli_gpu_plans;
mod cli_localize;
mod cli_lora;
mod cli_model;
mod cli_no_data_loss;
mod cli_outputs;
mod cli_pipeline;
mod cli_plot;
mod cli_practice;
mod cli_reliability;
mod cli_repos;
mod cli_rollout;
mod cli_scaling;
mod cli_set;
mod cli_synth;
mod cli_tasks_corpus;
mod cli_tensorboard;
mod cli_train;
mod docs_commands;
mod mcp_frames;
mod module_cycles;
mod mpi;
mod serve_http;
