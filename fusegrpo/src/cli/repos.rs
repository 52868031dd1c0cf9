//! `fusegrpo repos fetch`: the `owner__name` repositories a task file needs,
//! cloned with git into a repos dir ([`recipe::repos`]).

use std::path::PathBuf;

use anyhow::{bail, Result};
use recipe::repos::{fetch, FetchOptions, Wanted};

/// `fusegrpo repos ...`.
#[derive(clap::Subcommand)]
pub enum Command {
    /// Clone each repository a task file names into REPOS_DIR/owner__name (skipped when it already holds every base commit).
    Fetch(FetchArgs),
}

/// `fusegrpo repos fetch`.
#[derive(clap::Args)]
pub struct FetchArgs {
    /// Task JSONL (SWE-bench rows, tasks from-history): its `repo` and `base_commit` fields.
    #[arg(long, required_unless_present = "list")]
    pub tasks: Option<PathBuf>,
    /// Or a file of `owner/name` lines (`#` starts a comment): each cloned whole, no commit checked.
    #[arg(long, conflicts_with = "tasks")]
    pub list: Option<PathBuf>,
    /// With --tasks: name the tasks whose base commit is missing and go on (their rows are skipped later) instead of failing.
    #[arg(long)]
    pub allow_missing_commits: bool,
    /// Folder to hold the repositories as `owner__name` (created if missing).
    #[arg(long)]
    pub repos_dir: PathBuf,
    /// Where to clone from: a URL or path template, `{owner}` and `{name}` replaced.
    #[arg(long, default_value = "https://github.com/{owner}/{name}.git")]
    pub source: String,
}

/// Runs a `repos` subcommand.
pub fn run(command: Command) -> Result<()> {
    match command {
        Command::Fetch(args) => {
            let wanted = match (args.tasks, args.list) {
                (Some(tasks), _) => Wanted::Tasks(tasks),
                (None, Some(list)) => Wanted::List(list),
                (None, None) => bail!("give --tasks or --list"),
            };
            let opts = FetchOptions { repos_dir: args.repos_dir, source: args.source, allow_missing_commits: args.allow_missing_commits };
            fetch(&wanted, &opts)
        }
    }
}
