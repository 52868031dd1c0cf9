//! `fusegrpo localize`: the trained localizer on any repository and issue.
//! The episode(s) run in the sandbox over the repository's working tree as
//! it is (uncommitted edits included, read from disk, nothing written) or
//! over a revision, and print the files and functions, ranked, with the
//! evidence that led there and the cost. [`Localizer`] is also what the MCP
//! server (`fusegrpo mcp`) calls.

use std::io::Read;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use rollout::episode::driver::{run_episodes, Env};
use rollout::episode::Episode;
use rollout::localize::Localization;
use rollout::scaling::judge::EvidenceJudge;
use rollout::scaling::{ScalingConfig, Selector};
use rollout::policy::Policy;
use rollout::repo::{load_snapshot, load_worktree, Snapshot, SnapshotConfig, WORKTREE};
use rollout::spans::Language;
use rollout::tasks::Task;
use trainer::run_config::RunConfig;

use trainer::rollouts::{with_policy, TeacherOpts};
use trainer::run_config::PolicyChoice;

/// The localizer both `localize` and `mcp` load: a config and its model overrides.
#[derive(clap::Args)]
pub struct LocalizerArgs {
    /// Run configuration: the model, its chat template and the episode setting (configs/smollm2-real.toml for the shipped localizer).
    #[arg(long)]
    pub config: PathBuf,
    /// The model (a folder, a checkpoint or a hub id) instead of the config's [model] path.
    #[arg(long)]
    pub model: Option<String>,
    /// A LoRA adapter instead of the config's [model] adapter.
    #[arg(long, conflicts_with = "no_adapter")]
    pub adapter: Option<PathBuf>,
    /// The base model alone, whatever the config's [model] adapter says.
    #[arg(long)]
    pub no_adapter: bool,
    /// model | scripted (the scripted teacher, no model).
    #[arg(long, default_value = "model")]
    pub policy: PolicyChoice,
}

impl LocalizerArgs {
    /// The config with the model overrides.
    pub fn config(&self) -> Result<RunConfig> {
        let mut cfg = RunConfig::from_file(&self.config)?;
        if let Some(m) = &self.model {
            cfg.model.path = m.clone();
            cfg.model.adapter = None;
        }
        if let Some(a) = &self.adapter {
            cfg.model.adapter = Some(a.clone());
        }
        if self.no_adapter {
            cfg.model.adapter = None;
        }
        Ok(cfg)
    }
}

/// `fusegrpo localize`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub localizer: LocalizerArgs,
    /// The repository (a git work tree; bare repositories need --rev).
    #[arg(long, default_value = ".")]
    pub repo: PathBuf,
    /// A revision to search instead of the working tree as it is.
    #[arg(long)]
    pub rev: Option<String>,
    /// The issue: a file, or `-` for standard input.
    #[arg(long)]
    pub issue: String,
    /// Episodes to run; their answers are ranked by votes.
    #[arg(long, default_value_t = 1)]
    pub attempts: usize,
    /// With several attempts: `vote` (rank by the attempts naming each) or `tournament` (pairwise, the evidence judge; the winner's answer first).
    #[arg(long, default_value = "vote", value_parser = ["vote", "tournament"])]
    pub select: String,
    /// Print one JSON object instead of the text report.
    #[arg(long)]
    pub json: bool,
}

/// One localization asked for.
#[derive(Clone, Debug)]
pub struct Request {
    pub issue: String,
    pub repo: PathBuf,
    pub rev: Option<String>,
    pub attempts: usize,
    /// Rank by a tournament among the attempts instead of votes alone.
    pub tournament: bool,
}

/// Runs `fusegrpo localize`.
pub fn run(args: Args) -> Result<()> {
    let cfg = args.localizer.config()?;
    let issue = read_issue(&args.issue)?;
    let request = Request { issue, repo: args.repo.clone(), rev: args.rev.clone(), attempts: args.attempts, tournament: args.select == "tournament" };
    check_request(&request)?;
    let result = with_policy(&cfg, &args.localizer.policy, &TeacherOpts::default(), |policy, env| {
        localize(&cfg, policy, env, &request, &mut |done, total| eprintln!("localize: attempt {done} of {total} done"))
    })?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&result)?);
    } else {
        print!("{}", result.render());
    }
    Ok(())
}

fn read_issue(arg: &str) -> Result<String> {
    if arg == "-" {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text).context("--issue -: reading the issue from standard input")?;
        return Ok(text);
    }
    std::fs::read_to_string(arg).with_context(|| format!("--issue {arg}: reading the issue file"))
}

/// What can be refused before a model loads.
pub fn check_request(r: &Request) -> Result<()> {
    if r.issue.trim().is_empty() {
        bail!("the issue is empty: give the text of the problem to localize");
    }
    if r.attempts == 0 || r.attempts > 64 {
        bail!("attempts must be between 1 and 64, got {}", r.attempts);
    }
    Ok(())
}

/// The snapshot `r` asks for, checked to hold source this localizer parses.
pub fn snapshot(r: &Request) -> Result<(String, Arc<Snapshot>)> {
    let git = git2::Repository::open(&r.repo).map_err(|e| anyhow::anyhow!("{} is not a git repository: {}", r.repo.display(), e.message()))?;
    let dir = std::fs::canonicalize(&r.repo).unwrap_or_else(|_| r.repo.clone());
    let base = dir.file_name().and_then(|n| n.to_str()).unwrap_or("repo").trim_end_matches(".git");
    let clean: String = base.chars().map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '_' }).collect();
    let name = format!("local/{}", if clean.trim_matches('.').is_empty() { "repo".into() } else { clean });
    let config = SnapshotConfig::default();
    let snapshot = match &r.rev {
        Some(rev) => load_snapshot(&git, &name, rev, &config).map_err(|e| anyhow::anyhow!("revision `{rev}` of {}: {e}", r.repo.display()))?,
        None => load_worktree(&git, &name, &config).map_err(|e| anyhow::anyhow!("the working tree of {}: {e}", r.repo.display()))?,
    };
    let parseable = snapshot.files().iter().filter(|f| f.text().is_some() && Language::from_path(&f.path).is_some()).count();
    if parseable == 0 {
        bail!(
            "{} has no source file this localizer parses ({} files; it reads Python, Rust, Go, Java, JavaScript/TypeScript, C/C++ and more by extension)",
            r.repo.display(),
            snapshot.files().len()
        );
    }
    Ok((name, Arc::new(snapshot)))
}

/// Localizes `r` with `policy` in `env`; `progress(done, total)` after each attempt.
pub fn localize(
    cfg: &RunConfig,
    policy: &mut dyn Policy,
    env: &Env<'_>,
    r: &Request,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Localization> {
    check_request(r)?;
    let (name, snap) = snapshot(r)?;
    let label = if r.rev.is_some() { snap.commit().to_string() } else { WORKTREE.to_string() };
    env.store.insert(&name, &label, snap);
    let task = Task {
        instance_id: "localize".into(),
        repo: name,
        base_commit: label,
        problem_statement: r.issue.trim().to_string(),
        patch: None,
        gold: Some(Default::default()),
    };
    let mut done = 0;
    let tasks = [task];
    let episodes: Vec<Episode> = run_episodes(policy, env, &tasks, r.attempts, &cfg.episode, |_| {
        done += 1;
        progress(done, r.attempts);
    })?;
    let ranked = Localization::of(&episodes);
    if !r.tournament || r.attempts < 2 {
        return Ok(ranked);
    }
    let sc = ScalingConfig::from_episodes(r.attempts, Selector::Tournament, cfg.sampling.seed);
    let summaries = rollout::scaling::summarize(&episodes, r.attempts);
    let picks = rollout::scaling::select(&episodes, &summaries, &tasks, env, &sc, &mut EvidenceJudge)?;
    let chosen = picks.iter().find(|p| p.attempts == r.attempts).map_or(0, |p| p.chosen);
    Ok(ranked.with_winner(&episodes, chosen))
}
