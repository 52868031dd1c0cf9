//! `fusegrpo practice-repo`: writes the generated practice repository
//! (`rollout::practice`) under a repos dir and prints its HEAD commit id.

use std::path::PathBuf;

use anyhow::{Context, Result};
use rollout::practice::{generate, PracticeConfig};
use rollout::repo::repo_dir_name;

/// `fusegrpo practice-repo`.
#[derive(clap::Args)]
pub struct Args {
    /// Folder to hold the repository (created if missing): it is written to `<out>/<owner>__<name>`.
    #[arg(long)]
    pub out: PathBuf,
    /// Repository name, `owner/name` (`name` becomes the Python package).
    #[arg(long, default_value = "practice/shop")]
    pub name: String,
    /// Seed of every random draw: the same seed gives the same HEAD commit id.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Commits after the initial import.
    #[arg(long, default_value_t = 60)]
    pub commits: usize,
    /// Replace an existing repository of that name.
    #[arg(long)]
    pub force: bool,
}

/// Generates the repository; prints the HEAD commit id on stdout and a summary on stderr.
pub fn run(args: Args) -> Result<()> {
    let dir = args.out.join(repo_dir_name(&args.name)?);
    if args.force && dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    let config = PracticeConfig { name: args.name.clone(), seed: args.seed, commits: args.commits };
    let repo = generate(&args.out, &config).with_context(|| format!("generating {} (--force replaces an existing one)", args.name))?;
    say!("{}: {} commits (seed {}) in {}", args.name, repo.commits, args.seed, repo.path.display());
    outln!("{}", repo.head);
    Ok(())
}
