//! `fusegrpo mcp`: the localizer as an MCP server on stdio ([`apps::mcp`]).

use anyhow::Result;
use std::path::PathBuf;

/// `fusegrpo mcp`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub localizer: super::localize::LocalizerArgs,
    /// The repository a call without `repo` searches (default: the folder the server starts in, as a project's .mcp.json starts it).
    #[arg(long)]
    pub repo: Option<PathBuf>,
}

/// Runs `fusegrpo mcp` until the client closes stdin.
pub fn run(args: Args) -> Result<()> {
    let repo = args.repo.or_else(|| std::env::current_dir().ok());
    apps::mcp::serve(args.localizer.config()?, args.localizer.policy.clone(), repo)
}
