//! `fusegrpo tasks synth`: synthetic tasks of a repository at a commit
//! ([`recipe::synth_tasks`]).

use anyhow::Result;
use rollout::synth::SynthConfig;
use std::path::PathBuf;
use trainer::run_config::PolicyChoice;
use recipe::synth_tasks::{make_tasks_to, summary_json, SynthRun};

#[derive(clap::Args)]
pub struct Args {
    /// Folder holding repositories named `owner__name` (or `owner__name.git`).
    #[arg(long)]
    pub repos_dir: PathBuf,
    /// Repository, `owner/name`.
    #[arg(long)]
    pub repo: String,
    /// Commit (id, branch or tag) whose tree the functions come from.
    #[arg(long, default_value = "HEAD")]
    pub commit: String,
    /// Tasks to make (all functions there are, when fewer).
    #[arg(long, default_value_t = 50)]
    pub count: usize,
    /// Who writes the issues: scripted | http://host:port (OpenAI-compatible).
    #[arg(long, default_value = "scripted")]
    pub teacher: PolicyChoice,
    /// Output JSONL of tasks (written atomically).
    #[arg(long)]
    pub out: PathBuf,
    /// Seed of the draw, the instructions and the phrasing.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Localize each issue once more (seeing only its text) and store the recall.
    #[arg(long)]
    pub verify: bool,
    /// Who localizes under --verify: scripted | http://host:port.
    #[arg(long, default_value = "scripted")]
    pub localizer: PolicyChoice,
    /// Drop verified tasks whose recall is below this (0: keep all).
    #[arg(long, default_value_t = 0.0)]
    pub min_recall: f64,
    #[command(flatten)]
    pub http: HttpOpts,
}

/// How to reach an HTTP teacher or localizer.
#[derive(clap::Args, Clone, Debug)]
pub struct HttpOpts {
    #[command(flatten)]
    pub endpoint: super::common::HttpTeacherArgs,
    /// Retries of a failed request (408, 429, 5xx, transport).
    #[arg(long, default_value_t = 5)]
    pub max_retries: u32,
    /// Requests in flight at most.
    #[arg(long, default_value_t = 8)]
    pub concurrency: usize,
    /// New tokens per issue (and per turn of an HTTP localizer) at most.
    #[arg(long, default_value_t = 512)]
    pub max_tokens: usize,
}

impl HttpOpts {
    fn opts(&self) -> recipe::synth_tasks::HttpOpts {
        recipe::synth_tasks::HttpOpts { endpoint: self.endpoint.endpoint(), max_retries: self.max_retries, concurrency: self.concurrency, max_tokens: self.max_tokens }
    }
}

pub fn run(args: Args) -> Result<()> {
    anyhow::ensure!((0.0..=1.0).contains(&args.min_recall), "--min-recall must be in [0, 1], got {}", args.min_recall);
    anyhow::ensure!(args.min_recall == 0.0 || args.verify, "--min-recall needs --verify");
    let config = SynthConfig { count: args.count, seed: args.seed, min_recall: args.min_recall, ..Default::default() };
    let http = args.http.opts();
    let job = SynthRun {
        repos_dir: &args.repos_dir,
        repo: &args.repo,
        commit: &args.commit,
        teacher: &args.teacher,
        localizer: args.verify.then_some(&args.localizer),
        http: &http,
        config,
    };
    let report = make_tasks_to(&job, &args.out)?;
    outln!("{}", summary_json(&report, args.count));
    Ok(())
}

