//! `apps`: the applications over the `trainer` library, each a module with
//! one entry point the binary calls; the only library crate with a command
//! line (clap's argument structs), a server (HTTP over std::net, rmcp over tokio) or
//! plots (plotters).
//!
//! - [`localize`] and [`mcp`]: the trained localizer on a repository, and as
//!   an MCP server (stdio) with the sandboxed tools.
//! - [`serve`]: an OpenAI-compatible chat-completions server over the model.
//! - [`bench`](mod@bench): `fusegrpo bench ...`, the benchmarks (ours beside a reference).
//! - [`plot`]: a training run's curves and the test-time scaling plot (PNG).
//! - [`dist_check`]: `fusegrpo dist-check`, data parallelism against one process.
//! - [`selftest`]: the CUDA path against the CPU (without `cuda`, every case fails with the reason).
//! - [`vllm_server`]: `fusegrpo engine vllm`, a vLLM server as a child process.
//! - [`args`]: argument groups several commands share (`--device`, `--dtype`,
//!   `--cuda-kernels`), and clap's parser of the trainer's enums.
//!
//! What a command outputs goes to the writer its caller passes (the
//! binary's stdout), its progress through `trainer::progress`: nothing
//! here writes to the terminal itself.

pub mod bench;
pub mod args;
pub mod dist_check;
pub mod localize;
pub mod mcp;
pub mod plot;
pub mod selftest;
pub mod serve;
pub mod vllm_server;
