//! The environment's integration tests, one binary (fewer links, less disk in CI).

mod repo_builder;
mod chat_template;
mod episodes;
mod gold;
mod import;
mod languages;
mod llama3_chat;
mod practice;
mod reward;
mod snapshot;
mod toolcall_fuzz;
mod tools;
mod vllm_shapes;
mod worktree;
