//! The trained localizer on any repository and issue: the episode(s) run
//! in the sandbox over the repository's working tree as it is
//! (uncommitted edits included, read from disk, nothing written) or over a
//! revision, and give the files and functions, ranked, with the evidence
//! that led there and the cost. `fusegrpo localize` and the MCP server
//! (`fusegrpo mcp`, [`crate::mcp`]) both call [`localize`]. By default
//! ([`Search::Combined`]) the index search ([`rollout::search`]) runs
//! once beside the model's attempts and the two rank together
//! ([`rollout::ranking::combine`], the search first): never worse than the
//! search alone at the head of the ranking and in the answer set.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use trainer::run_config::RunConfig;
use anyhow::{bail, Result};
use rollout::episode::driver::{prompt_tokens, run_episodes_until, run_episodes_watched, Env, RunEvent};
use rollout::episode::Episode;
use rollout::localization::Localization;
use rollout::policy::Policy;
use rollout::repo::{load_folder, load_snapshot, load_worktree, Snapshot, SnapshotConfig};
use rollout::scaling::judge::EvidenceJudge;
use rollout::scaling::{ScalingConfig, Selector};
use rollout::spans::Language;
use rollout::tasks::Task;
use rollout::teacher::scripted::ScriptedTeacher;
use trainer::run_config::PolicyChoice;

/// Who searches: `model` (the loaded policy's attempts), `scripted` (the
/// scripted search, one attempt, no model), `search` (the index of the
/// snapshot, [`rollout::search`], no model) or `combined` (the index search
/// and the model's attempts, ranked together; the default).
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Search {
    Model,
    Scripted,
    /// The index search alone (`search`).
    Index,
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
            "search" => Ok(Search::Index),
            other => Err(format!("`{other}`: expected model, scripted or combined, or search (the index alone)")),
        }
    }
}

impl Search {
    /// Its name in reports.
    pub fn name(&self) -> &'static str {
        match self {
            Search::Model => "model",
            Search::Scripted => "scripted",
            Search::Index => "search",
            Search::Combined => "combined",
        }
    }

    /// Whether it runs the model (`model`, `combined`).
    pub fn needs_model(&self) -> bool {
        matches!(self, Search::Model | Search::Combined)
    }

    /// The policy to load for it (none but the scripted search for `scripted`).
    pub fn loads(&self) -> PolicyChoice {
        match self {
            Search::Scripted | Search::Index => PolicyChoice::Scripted,
            Search::Model | Search::Combined => PolicyChoice::Model,
        }
    }
}

/// What the shipped localizer (`configs/smollm2-real.toml`) is measured to
/// do and cost: the one place the MCP server's instructions and its tool's
/// description take their figures from (docs/localizer.md and the model
/// card state the same; update them together).
pub struct Measured {
    /// Held-out tasks and the repositories they come from.
    pub tasks: usize,
    pub repos: usize,
    /// File F1 and the share of tasks with a gold file in the top 5: the
    /// default (`combined`), the scripted search alone and the model alone
    /// (greedy, one attempt).
    pub combined: (f64, f64),
    pub scripted: (f64, f64),
    /// The index search alone (`search`): file F1, file accuracy@5, and
    /// function accuracy@5 (issue 62; the same tasks).
    pub search: (f64, f64, f64),
    /// Its seconds per task (index built per commit, no model).
    pub search_seconds: f64,
    pub model: (f64, f64),
    /// Share of the model's episodes that end with an answer.
    pub answered: f64,
    /// Wall seconds of one attempt on `cpu` (a range over issues).
    pub seconds: (f64, f64),
    pub cpu: &'static str,
    /// Wall time of 4 attempts (one batch) over one attempt's, on `cpu`
    /// (measured with the previous adapter, issue 56).
    pub four_attempts: f64,
}

/// The shipped localizer's figures (docs/localizer.md, "Grounded, ranked,
/// combined"; the model card).
pub const MEASURED: Measured = Measured {
    tasks: 284,
    repos: 17,
    combined: (0.477, 0.859),
    scripted: (0.217, 0.377),
    search: (0.477, 0.859, 0.567),
    search_seconds: 0.8,
    model: (0.367, 0.482),
    answered: 0.90,
    seconds: (5.4, 8.0),
    cpu: "a 2-vCPU AMD EPYC",
    four_attempts: 2.3,
};

/// One localization asked for.
#[derive(Clone, Debug)]
pub struct Request {
    pub issue: String,
    pub repo: PathBuf,
    pub rev: Option<String>,
    pub attempts: usize,
    /// Rank by a tournament among the attempts instead of votes alone.
    pub tournament: bool,
    /// The attempts' sampling temperature instead of the config's ([`temperature`]).
    pub temperature: Option<f64>,
    /// The most tokens of the issue kept (a longer one is cut), instead of `[localize] max_issue_tokens`.
    pub max_issue_tokens: Option<usize>,
    /// Who searches; `attempts` are the model's (`scripted` runs once).
    pub search: Search,
}

impl Request {
    /// One attempt on `issue` in `repo`, the default search, the config's settings otherwise.
    pub fn new(issue: String, repo: PathBuf) -> Request {
        Request { issue, repo, rev: None, attempts: 1, tournament: false, temperature: None, max_issue_tokens: None, search: Search::default() }
    }
}

/// What can be refused before a model loads.
pub fn check_request(r: &Request) -> Result<()> {
    if r.issue.trim().is_empty() {
        bail!("the issue is empty: give the text of the problem to localize");
    }
    if r.attempts == 0 || r.attempts > 64 {
        bail!("attempts must be between 1 and 64, got {}", r.attempts);
    }
    if r.max_issue_tokens == Some(0) {
        bail!("max_issue_tokens must be at least 1, got 0");
    }
    Ok(())
}

/// The temperature `r`'s attempts sample at ([`trainer::run_config::LocalizeSection::temperature`]).
pub fn temperature(cfg: &RunConfig, r: &Request) -> Result<f64> {
    cfg.localize.temperature(cfg.sampling.temperature, r.attempts, r.temperature).map_err(anyhow::Error::msg)
}

/// The snapshot `r` asks for, checked to hold source this localizer
/// parses: a revision, the working tree of a git repository, or a plain
/// folder (not a repository) as it is, its `.gitignore` files honoured.
pub fn snapshot(r: &Request) -> Result<(String, Arc<Snapshot>)> {
    let dir = std::fs::canonicalize(&r.repo).unwrap_or_else(|_| r.repo.clone());
    let base = dir.file_name().and_then(|n| n.to_str()).unwrap_or("repo").trim_end_matches(".git");
    let clean: String = base.chars().map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '_' }).collect();
    let name = format!("local/{}", if clean.trim_matches('.').is_empty() { "repo".into() } else { clean });
    let config = SnapshotConfig::default();
    let snapshot = match git2::Repository::open(&r.repo) {
        Ok(git) => match &r.rev {
            Some(rev) => load_snapshot(&git, &name, rev, &config).map_err(|e| anyhow::anyhow!("revision `{rev}` of {}: {e}", r.repo.display()))?,
            None => load_worktree(&git, &name, &config).map_err(|e| anyhow::anyhow!("the working tree of {}: {e}", r.repo.display()))?,
        },
        Err(e) if e.code() == git2::ErrorCode::NotFound && r.repo.is_dir() => {
            if let Some(rev) = &r.rev {
                bail!("{} is not a git repository but a plain folder: a revision (`{rev}`) needs a repository; without one the folder is searched as it is", r.repo.display());
            }
            load_folder(&r.repo, &name, &config).map_err(|e| anyhow::anyhow!("{e}"))?
        }
        Err(e) if !r.repo.exists() => bail!("{} does not exist: give a git repository or a folder ({})", r.repo.display(), e.message()),
        Err(e) => bail!("{} is not a git repository or a folder: {}", r.repo.display(), e.message()),
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

pub use trainer::episodes::issue_cut::fit_issue;

/// How far a localization is: `step` of at most `total` steps (the search,
/// each batch of the model's turns, each model attempt's end; a run whose
/// attempts answer early ends below `total`), and what the step was.
#[derive(Clone, Debug, PartialEq)]
pub struct Progress {
    pub step: usize,
    pub total: usize,
    pub message: String,
}

/// Counts the steps of one localization and tells `progress` of each.
struct Steps<'p> {
    step: usize,
    total: usize,
    progress: &'p mut dyn FnMut(&Progress),
}

impl Steps<'_> {
    fn tell(&mut self, message: String) {
        self.step += 1;
        (self.progress)(&Progress { step: self.step, total: self.total.max(self.step), message });
    }
}

/// Localizes `r` with `policy` in `env`; `progress` after the search, each
/// batch of the model's turns and each model attempt.
pub fn localize(
    cfg: &RunConfig,
    policy: &mut dyn Policy,
    env: &Env<'_>,
    r: &Request,
    progress: &mut dyn FnMut(&Progress),
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
    progress: &mut dyn FnMut(&Progress),
    cancel: &Arc<AtomicBool>,
) -> Result<Localization> {
    Ok(localize_episodes(cfg, policy, env, r, progress, cancel)?.0)
}

/// [`localize_until`] with the attempts' episodes.
pub fn localize_episodes(
    cfg: &RunConfig,
    policy: &mut dyn Policy,
    env: &Env<'_>,
    r: &Request,
    progress: &mut dyn FnMut(&Progress),
    cancel: &Arc<AtomicBool>,
) -> Result<(Localization, Vec<Episode>)> {
    check_request(r)?;
    let temperature = temperature(cfg, r)?;
    let (name, snap) = snapshot(r)?;
    let label = snap.commit().to_string();
    env.store.insert(&name, &label, snap.clone());
    let mut task = Task {
        instance_id: "localize".into(),
        repo: name,
        base_commit: label,
        problem_statement: r.issue.trim().to_string(),
        patch: None,
        gold: Some(Default::default()),
    };
    let (issue, cut) = fit_issue(env.tokenizer, &task, cfg, r.max_issue_tokens)?;
    task.problem_statement = issue;
    // A prompt that fills the episode's token budget leaves the model no
    // turn: said here, instead of an attempt that ends with no answer.
    let (_, prompt) = prompt_tokens(env.tokenizer, &task, &cfg.episode, &env.tools.config)?;
    let limit = cfg.episode.max_total_tokens;
    if prompt.len() >= limit {
        bail!(
            "the issue makes a prompt of {} tokens, and [episode] max_total_tokens = {limit} leaves no room for a turn: lower --max-issue-tokens or raise the limit in the config",
            prompt.len()
        );
    }
    let started = Instant::now();
    let tasks = [task];
    // The search runs once, whatever the number of attempts; the model's
    // attempts take at most max_turns batches of turns.
    let model_attempts = if r.search.needs_model() { r.attempts } else { 0 };
    let model_steps = if model_attempts > 0 { cfg.episode.max_turns + model_attempts } else { 0 };
    let mut steps = Steps { step: 0, total: usize::from(r.search != Search::Model) + model_steps, progress };
    // The index search (`search`, `combined`): its ranking, no episode, from
    // the process's one index per snapshot (the MCP server answers every
    // call on one commit from one index). Under `combined` a search that
    // cannot run (nothing to search for) leaves the model's attempts alone,
    // said in the result.
    let mut search_error = None;
    let searched = if matches!(r.search, Search::Index | Search::Combined) {
        match rollout::ranking::search_snapshot(&rollout::search::IndexCache::shared(), &snap, &tasks[0].problem_statement, &cfg.search) {
            Ok((_, ranking)) => {
                steps.tell(format!("the index search done: {} file(s) ranked", ranking.files.len()));
                Some(ranking)
            }
            Err(e) if r.search == Search::Combined => {
                steps.tell(format!("the index search did not run: {e}"));
                search_error = Some(e.to_string());
                None
            }
            Err(e) => return Err(anyhow::anyhow!("the search: {e}")),
        }
    } else {
        None
    };
    if let (Search::Index, Some(ranking)) = (&r.search, &searched) {
        let mut ranked = Localization::searched(ranking.clone(), &snap);
        ranked.issue_cut = cut;
        return Ok((ranked.with_wall_seconds(started.elapsed().as_secs_f64()), Vec::new()));
    }
    // The scripted search: one episode, ~0.1 s, no model.
    if r.search == Search::Scripted {
        let scripted = run_episodes_until(&mut ScriptedTeacher::default(), env, &tasks, 1, &cfg.episode, cancel, |_| {
            steps.tell("the scripted search done".into())
        })?;
        let mut ranked = Localization::of(&scripted, &snap, "scripted");
        ranked.issue_cut = cut;
        return Ok((ranked.with_wall_seconds(started.elapsed().as_secs_f64()), scripted));
    }
    // The MCP server keeps one policy for every call: the config's
    // temperature comes back however this call ends.
    let sampled = policy.set_temperature(temperature);
    let (mut ended, max_turns) = (0, cfg.episode.max_turns);
    let run = run_episodes_watched(policy, env, &tasks, r.attempts, &cfg.episode, cancel, |event| match event {
        RunEvent::Turn { step, episodes } => {
            steps.tell(format!("model turn {step} (of at most {max_turns}) done in {episodes} of {model_attempts} model attempt(s)"))
        }
        RunEvent::Done(_) => {
            ended += 1;
            steps.tell(format!("model attempt {ended} of {model_attempts} done"));
        }
    });
    if sampled {
        policy.set_temperature(cfg.sampling.temperature);
    }
    let episodes: Vec<Episode> = run?;
    let winner = if r.tournament && r.attempts >= 2 {
        let sc = ScalingConfig::from_episodes(r.attempts, Selector::Tournament, cfg.sampling.seed);
        let summaries = rollout::scaling::summarize(&episodes, r.attempts);
        let picks = rollout::scaling::select(&episodes, &summaries, &tasks, env, &sc, &mut EvidenceJudge)?;
        Some(picks.iter().find(|p| p.attempts == r.attempts).map_or(0, |p| p.chosen))
    } else {
        None
    };
    let mut ranked = match (&r.search, winner) {
        (Search::Combined, w) => Localization::combined_with(searched.unwrap_or_default(), &episodes, &snap, w),
        (_, Some(w)) => Localization::of(&episodes, &snap, "model").with_winner(&episodes, w),
        (_, None) => Localization::of(&episodes, &snap, "model"),
    };
    ranked.temperature = sampled.then_some(temperature);
    ranked.issue_cut = cut;
    ranked.search_error = search_error;
    let wall = started.elapsed().as_secs_f64();
    Ok((ranked.with_wall_seconds(wall), episodes))
}

#[cfg(test)]
mod tests {
    use super::MEASURED;

    /// The cells of the row of docs/localizer.md's measured table that starts with `label`.
    fn doc_row(doc: &str, label: &str) -> Vec<String> {
        let line = doc.lines().find(|l| l.starts_with(label)).unwrap_or_else(|| panic!("docs/localizer.md has no row `{label}`"));
        line.split('|').map(|c| c.trim().to_string()).filter(|c| !c.is_empty()).collect()
    }

    /// MEASURED is what docs/localizer.md's "Measured" table says: the task
    /// count, and each policy's file F1 and file accuracy@5.
    #[test]
    fn measured_figures_are_the_docs_table() {
        let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/localizer.md")).expect("docs/localizer.md");
        let header = doc_row(&doc, "| held out, ");
        assert_eq!(header[0], format!("held out, {} tasks", MEASURED.tasks));
        for (label, (f1, at5)) in [("| model |", MEASURED.model), ("| scripted |", MEASURED.scripted), ("| **combined** (default) |", MEASURED.combined)] {
            let row = doc_row(&doc, label);
            assert_eq!((row[1].as_str(), row[5].as_str()), (format!("{f1:.3}").as_str(), format!("{at5:.3}").as_str()), "{label}: file F1 and acc@5");
        }
        // The index search's own table (issue 62): file F1, file acc@5, function acc@5.
        let row = doc_row(&doc, "| search (issue 62) |");
        let (f1, at5, fat5) = MEASURED.search;
        assert_eq!([row[1].as_str(), row[5].as_str(), row[9].as_str()], [format!("{f1:.3}"), format!("{at5:.3}"), format!("{fat5:.3}")], "search row");
    }
}
