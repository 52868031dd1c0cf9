//! `fusegrpo mcp`: the localizer as an MCP server on stdio ([`apps::mcp`]).

use anyhow::Result;
use std::path::PathBuf;

/// `fusegrpo mcp`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub localizer: super::localize::LocalizerArgs,
    /// The repository a call without `repo` searches.
    #[arg(long)]
    pub repo: Option<PathBuf>,
}

/// Runs `fusegrpo mcp` until the client closes stdin.
pub fn run(args: Args) -> Result<()> {
    apps::mcp::serve(args.localizer.config()?, args.localizer.policy.clone(), args.repo)
}
