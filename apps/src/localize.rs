//! The trained localizer on any repository and issue: the episode(s) run
//! in the sandbox over the repository's working tree as it is
//! (uncommitted edits included, read from disk, nothing written) or over a
//! revision, and give the files and functions, ranked, with the evidence
//! that led there and the cost. `fusegrpo localize` and the MCP server
//! (`fusegrpo mcp`, [`crate::mcp`]) both call [`localize`]. By default
//! ([`Search::Combined`]) the scripted search runs once beside the model's
//! attempts and the two rank together ([`rollout::ranking::combine`]):
//! never worse than the search the model learned from.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use trainer::run_config::RunConfig;
use anyhow::{bail, Result};
use rollout::episode::driver::{run_episodes_until, Env};
use rollout::episode::Episode;
use rollout::localize::Localization;
use rollout::policy::Policy;
use rollout::repo::{load_snapshot, load_worktree, Snapshot, SnapshotConfig, WORKTREE};
use rollout::scaling::judge::EvidenceJudge;
use rollout::scaling::{ScalingConfig, Selector};
use rollout::spans::Language;
use rollout::tasks::Task;
use rollout::teacher::scripted::ScriptedTeacher;
use trainer::run_config::PolicyChoice;

/// Who searches: `model` (the loaded policy's attempts), `scripted` (the
/// scripted search, one attempt, no model) or `combined` (both, ranked
/// together; the default).
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Search {
    Model,
    Scripted,
    #[default]
    Combined,
}

impl std::str::FromStr for Search {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "model" => Ok(Search::Model),
            "scripted" => Ok(Search::Scripted),
            "combined" => Ok(Search::Combined),
            other => Err(format!("`{other}`: expected model, scripted or combined")),
        }
    }
}

impl Search {
    /// Its name in reports.
    pub fn name(&self) -> &'static str {
        match self {
            Search::Model => "model",
            Search::Scripted => "scripted",
            Search::Combined => "combined",
        }
    }

    /// The policy to load for it (none but the scripted search for `scripted`).
    pub fn loads(&self) -> PolicyChoice {
        match self {
            Search::Scripted => PolicyChoice::Scripted,
            Search::Model | Search::Combined => PolicyChoice::Model,
        }
    }
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
    /// Who searches; `attempts` are the model's (`scripted` runs once).
    pub search: Search,
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
    localize_until(cfg, policy, env, r, progress, &Arc::new(AtomicBool::new(false)))
}

/// [`localize`] that stops once `cancel` is set (the MCP client cancelled
/// the call): before the model's next token, or at the next turn boundary
/// ([`run_episodes_until`]), with an error.
pub fn localize_until(
    cfg: &RunConfig,
    policy: &mut dyn Policy,
    env: &Env<'_>,
    r: &Request,
    progress: &mut dyn FnMut(usize, usize),
    cancel: &Arc<AtomicBool>,
) -> Result<Localization> {
    check_request(r)?;
    let (name, snap) = snapshot(r)?;
    let label = if r.rev.is_some() { snap.commit().to_string() } else { WORKTREE.to_string() };
    env.store.insert(&name, &label, snap.clone());
    let task = Task {
        instance_id: "localize".into(),
        repo: name,
        base_commit: label,
        problem_statement: r.issue.trim().to_string(),
        patch: None,
        gold: Some(Default::default()),
    };
    // A prompt that fills the episode's token budget leaves the model no
    // turn: said here, instead of an attempt that ends with no answer.
    let (_, prompt) = rollout::episode::driver::prompt_tokens(env.tokenizer, &task, &cfg.episode)?;
    let limit = cfg.episode.max_total_tokens;
    if prompt.len() >= limit {
        bail!(
            "the issue makes a prompt of {} tokens, and [episode] max_total_tokens = {limit} leaves no room for a turn: shorten the issue (it is {} characters) or raise the limit in the config",
            prompt.len(),
            task.problem_statement.chars().count()
        );
    }
    let tasks = [task];
    let model_attempts = if r.search == Search::Scripted { 0 } else { r.attempts };
    let total = model_attempts + usize::from(r.search != Search::Model);
    let mut done = 0;
    let mut tick = |_: &Episode| {
        done += 1;
        progress(done, total);
    };
    // The scripted search: one attempt, ~0.1 s, no model.
    let scripted: Vec<Episode> = if r.search == Search::Model {
        Vec::new()
    } else {
        run_episodes_until(&mut ScriptedTeacher::default(), env, &tasks, 1, &cfg.episode, cancel, &mut tick)?
    };
    if r.search == Search::Scripted {
        return Ok(Localization::of(&scripted, &snap, "scripted"));
    }
    let episodes: Vec<Episode> = run_episodes_until(policy, env, &tasks, r.attempts, &cfg.episode, cancel, &mut tick)?;
    let winner = if r.tournament && r.attempts >= 2 {
        let sc = ScalingConfig::from_episodes(r.attempts, Selector::Tournament, cfg.sampling.seed);
        let summaries = rollout::scaling::summarize(&episodes, r.attempts);
        let picks = rollout::scaling::select(&episodes, &summaries, &tasks, env, &sc, &mut EvidenceJudge)?;
        Some(picks.iter().find(|p| p.attempts == r.attempts).map_or(0, |p| p.chosen))
    } else {
        None
    };
    Ok(match (&r.search, winner) {
        (Search::Combined, w) => Localization::combined(&scripted, &episodes, &snap, w),
        (_, Some(w)) => Localization::of(&episodes, &snap, "model").with_winner(&episodes, w),
        (_, None) => Localization::of(&episodes, &snap, "model"),
    })
}
