//! `fusegrpo engine vllm`: a vLLM server for `[rollout] engine = "vllm"`
//! ([`apps::vllm_server`]).

use anyhow::Result;
use apps::vllm_server::VllmArgs;

#[derive(clap::Subcommand)]
pub enum Command {
    /// Start vLLM serving a model (for [rollout] engine = "vllm"); Ctrl-C stops it.
    Vllm(VllmArgs),
}

pub fn run(cmd: Command) -> Result<()> {
    match cmd {
        Command::Vllm(args) => apps::vllm_server::serve(args, &mut crate::console::Stdout),
    }
}
