//! Test-time scaling of a localizer, policy-agnostic: N independent
//! attempts per task, each compressed into an [`summary::AttemptSummary`],
//! then a selector picks the answer:
//!
//! - [`Selector::First`]: the first attempt (the N = 1 baseline);
//! - [`Selector::Vote`]: the entities at least K attempts answered
//!   ([`vote::vote`]);
//! - [`Selector::Tournament`]: Recursive Tournament Voting over the
//!   summaries with a [`judge::Judge`] ([`tournament::run_tournaments`]).
//!
//! With `refine` (Parallel-Distill-Refine), one more attempt per task runs
//! with the selected attempt's summary in its prompt, and its answer is
//! final. [`evaluate`] runs the attempts once and selects on the first n of
//! them for every n of [`sweep`] (1, 2, 4, ... up to N), so one run gives
//! the whole scaling table; every row carries what it cost (tokens and
//! seconds of attempts, judging and refine).

pub mod judge;
pub mod summary;
pub mod tournament;
pub mod vote;

use crate::episode::driver::{run_episodes, snapshot_and_gold, Env, RolloutError};
use crate::episode::{Episode, EpisodeConfig, StopReason};
use crate::answer::Answer;
use crate::policy::Policy;
use crate::reward::{score, Gold, Score};
use crate::tasks::Task;
use judge::{EvidenceJudge, Judge, PolicyJudge};
use serde::{Deserialize, Serialize};
use summary::AttemptSummary;
use tournament::{run_tournaments, Tournament};

/// How the answer is picked from a task's attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Selector {
    /// The first attempt's answer.
    First,
    /// The entities named by at least K attempts.
    Vote,
    /// Recursive Tournament Voting with a judge.
    Tournament,
}

impl Selector {
    pub fn name(self) -> &'static str {
        match self {
            Selector::First => "first",
            Selector::Vote => "vote",
            Selector::Tournament => "tournament",
        }
    }
}

impl std::str::FromStr for SummarySource {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "episode" => Ok(SummarySource::Episode),
            "judge" => Ok(SummarySource::Judge),
            other => Err(format!("`{other}`: expected episode or judge")),
        }
    }
}

impl std::str::FromStr for Selector {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "first" => Ok(Selector::First),
            "vote" => Ok(Selector::Vote),
            "tournament" => Ok(Selector::Tournament),
            other => Err(format!("`{other}`: expected first, vote or tournament")),
        }
    }
}

/// Who judges a tournament's comparisons.
pub enum JudgeChoice<'a> {
    /// [`EvidenceJudge`]: no model.
    Evidence,
    /// The policy whose attempts are judged, prompted as a judge.
    SamePolicy,
    /// Another policy (an OpenAI-compatible endpoint, say).
    Other(&'a mut dyn Policy),
}

/// What to run and select.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScalingConfig {
    /// Attempts per task (N >= 1).
    pub attempts: usize,
    /// Selectors, each applied to the same attempts.
    pub selectors: Vec<Selector>,
    /// Run one more attempt per task and selection with the selected summary.
    pub refine: bool,
    /// The vote threshold K (default: a majority of the attempts that answered).
    pub vote_min: Option<usize>,
    /// Seed of the tournaments' first-round order.
    pub seed: u64,
    /// Times a policy judge's malformed answer is asked again.
    pub judge_retries: usize,
    /// New tokens of a policy judge's answer at most.
    pub judge_max_tokens: usize,
    /// Who writes the summaries that judges and refine read.
    pub summaries: SummarySource,
    /// New tokens of a judge-written summary at most.
    pub summary_max_tokens: usize,
}

impl ScalingConfig {
    /// Selection by `selector` among `attempts` attempts per task, judged
    /// from the episodes alone (summaries made from them, the evidence judge
    /// for tournaments, no refine): what `pipeline` and `localize` use.
    pub fn from_episodes(attempts: usize, selector: Selector, seed: u64) -> ScalingConfig {
        ScalingConfig {
            attempts,
            selectors: vec![selector],
            refine: false,
            vote_min: None,
            seed,
            judge_retries: 0,
            judge_max_tokens: 1,
            summaries: SummarySource::Episode,
            summary_max_tokens: 1,
        }
    }
}

/// Who writes an attempt's summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SummarySource {
    /// Made from the episode itself ([`AttemptSummary::of`]).
    #[default]
    Episode,
    /// Written by the judge policy from the episode's transcript (the
    /// answer and the counts stay the episode's); needs a policy judge.
    Judge,
}

impl ScalingConfig {
    /// `(option, message)` of the first bad setting.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        if self.attempts == 0 {
            return Err(("attempts", "must be at least 1".into()));
        }
        if self.selectors.is_empty() {
            return Err(("select", "name at least one selector".into()));
        }
        if self.vote_min == Some(0) {
            return Err(("vote-min", "must be at least 1".into()));
        }
        if self.judge_max_tokens == 0 {
            return Err(("judge-max-tokens", "must be at least 1".into()));
        }
        if self.summaries == SummarySource::Judge && self.summary_max_tokens == 0 {
            return Err(("summary-max-tokens", "must be at least 1".into()));
        }
        Ok(())
    }
}

/// The attempt counts a run reports: powers of two below `n`, then `n`.
pub fn sweep(n: usize) -> Vec<usize> {
    let mut out: Vec<usize> = std::iter::successors(Some(1usize), |k| Some(k * 2)).take_while(|&k| k < n).collect();
    out.push(n);
    out
}

/// What one task's selection cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Cost {
    /// Tokens of the attempts' sequences (prompt, turns, tool responses).
    pub attempt_tokens: usize,
    /// The attempts' own wall times summed (batched attempts overlap).
    pub attempt_seconds: f64,
    pub judge_tokens: usize,
    pub judge_seconds: f64,
    /// Tokens of judge-written summaries this selection read.
    pub summary_tokens: usize,
    pub comparisons: usize,
    pub retries: usize,
    /// Comparisons the fallback decided.
    pub fallbacks: usize,
    pub refine_tokens: usize,
    pub refine_seconds: f64,
}

impl Cost {
    pub fn tokens(&self) -> usize {
        self.attempt_tokens + self.judge_tokens + self.summary_tokens + self.refine_tokens
    }
    pub fn seconds(&self) -> f64 {
        self.attempt_seconds + self.judge_seconds + self.refine_seconds
    }
}

/// The refine attempt of a selection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Refined {
    pub answer: Vec<String>,
    pub score: Score,
}

/// One task's selection at one attempt count with one selector.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskSelection {
    pub task_id: String,
    pub selector: Selector,
    /// Attempts selected from (the first n).
    pub attempts: usize,
    /// The selected attempt (for a vote: the attempt whose answer is
    /// closest to the voted one, whose summary refine uses).
    pub chosen: usize,
    pub answer: Vec<String>,
    pub score: Score,
    pub refined: Option<Refined>,
    pub cost: Cost,
    pub tournament: Option<Tournament>,
}

impl TaskSelection {
    /// The final score: refine's when it ran.
    pub fn final_score(&self) -> Score {
        self.refined.as_ref().map_or(self.score, |r| r.score)
    }
}

/// One row of the scaling table: means over tasks.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ScalingRow {
    pub selector: Selector,
    pub refine: bool,
    pub attempts: usize,
    pub tasks: usize,
    pub f1_file: f64,
    pub f1_func: f64,
    pub e: f64,
    pub reward: f64,
    /// Share of tasks with a non-empty final answer.
    pub answered: f64,
    /// Tokens per task (attempts + judge + refine).
    pub tokens: f64,
    pub judge_tokens: f64,
    /// Seconds per task (attempts + judge + refine, summed per episode).
    pub seconds: f64,
    pub comparisons: usize,
    pub fallbacks: usize,
}

impl ScalingRow {
    pub const HEADER: &'static str =
        "selector            attempts  tasks f1_file f1_func      e  reward answered  tokens/task judge/task  s/task fallbacks";

    pub fn label(&self) -> String {
        format!("{}{}", self.selector.name(), if self.refine { "+refine" } else { "" })
    }

    pub fn line(&self) -> String {
        format!(
            "{:<19} {:>8} {:>6} {:>7.3} {:>7.3} {:>6.3} {:>7.3} {:>8.2} {:>12.0} {:>10.0} {:>7.2} {:>5}/{}",
            self.label(),
            self.attempts,
            self.tasks,
            self.f1_file,
            self.f1_func,
            self.e,
            self.reward,
            self.answered,
            self.tokens,
            self.judge_tokens,
            self.seconds,
            self.fallbacks,
            self.comparisons
        )
    }
}

/// Everything a scaling run produced.
#[derive(Debug, Clone)]
pub struct ScalingRun {
    /// Task order, then attempt order.
    pub attempts: Vec<Episode>,
    /// For each n of the sweep, each selector, each task.
    pub selections: Vec<TaskSelection>,
    /// The refine episodes, in the order of `selections`.
    pub refines: Vec<Episode>,
    /// Each task's attempt summaries, as judges and refine read them.
    pub summaries: Vec<Vec<AttemptSummary>>,
    pub rows: Vec<ScalingRow>,
}

/// The header of a refine attempt's extra prompt text.
pub const REFINE_HEADER: &str = "The most promising earlier attempt at this issue (its tool calls and its answer; \
check it with the tools, then give your own answer):";

/// `task` with `summary` of its selected attempt added to its issue text.
pub fn refine_task(task: &Task, summary: &AttemptSummary) -> Task {
    let mut t = task.clone();
    t.problem_statement = format!("{}\n\n{REFINE_HEADER}\n{}", task.problem_statement, summary.render());
    t
}

/// Runs `cfg.attempts` attempts per task with `policy`, then every
/// selector at every n of the sweep (and refine), with `judge` for
/// tournaments. `on_done` sees each attempt and refine episode as it ends.
pub fn evaluate(
    policy: &mut dyn Policy,
    mut judge: JudgeChoice<'_>,
    env: &Env<'_>,
    tasks: &[Task],
    episode: &EpisodeConfig,
    cfg: &ScalingConfig,
    mut on_done: impl FnMut(&Episode),
) -> Result<ScalingRun, RolloutError> {
    let attempts = run_episodes(policy, env, tasks, cfg.attempts, episode, &mut on_done)?;
    let mut summaries = summarize(&attempts, cfg.attempts);
    let mut selections = {
        let (mut evidence, mut same, mut other);
        let judge: &mut dyn Judge = match &mut judge {
            JudgeChoice::Evidence => {
                evidence = EvidenceJudge;
                &mut evidence
            }
            JudgeChoice::SamePolicy => {
                same = policy_judge(policy, env, cfg);
                &mut same
            }
            JudgeChoice::Other(p) => {
                other = policy_judge(*p, env, cfg);
                &mut other
            }
        };
        if cfg.summaries == SummarySource::Judge {
            let issues: Vec<&str> = tasks.iter().flat_map(|t| std::iter::repeat_n(t.problem_statement.as_str(), cfg.attempts)).collect();
            let written = judge.write_summaries(&issues, &attempts, cfg.summary_max_tokens).ok_or_else(|| RolloutError::Task {
                task: tasks.first().map_or_else(String::new, |t| t.instance_id.clone()),
                message: format!("summaries = judge: the {} judge writes no summaries (use a model or HTTP judge)", judge.name()),
            })?;
            let failed = written.iter().filter(|(w, _)| w.is_none()).count();
            if failed > 0 {
                tracing::warn!(failed, of = written.len(), judge = %judge.name(), "summaries the judge did not write are made from the episodes");
            }
            for (summary, (w, tokens)) in summaries.iter_mut().flatten().zip(written) {
                summary.written = w;
                summary.written_tokens = tokens;
            }
        }
        select(&attempts, &summaries, tasks, env, cfg, judge)?
    };
    let refines = if cfg.refine { refine_all(policy, env, tasks, episode, &summaries, &mut selections, &mut on_done)? } else { Vec::new() };
    let rows = table(&selections, cfg);
    Ok(ScalingRun { attempts, selections, refines, summaries, rows })
}

/// Every selector of `cfg` at every n of the sweep, on `attempts` (task
/// order, `cfg.attempts` per task, as [`run_episodes`] returns them), with
/// `judge` for tournaments. Refine is not run here.
pub fn select(
    attempts: &[Episode],
    summaries: &[Vec<AttemptSummary>],
    tasks: &[Task],
    env: &Env<'_>,
    cfg: &ScalingConfig,
    judge: &mut dyn Judge,
) -> Result<Vec<TaskSelection>, RolloutError> {
    let n = cfg.attempts;
    if attempts.len() != tasks.len() * n {
        return Err(RolloutError::Task {
            task: tasks.first().map_or_else(String::new, |t| t.instance_id.clone()),
            message: format!("{} attempts for {} tasks x {n}", attempts.len(), tasks.len()),
        });
    }
    let golds: Vec<Gold> = tasks.iter().map(|t| snapshot_and_gold(env, t).map(|(_, g)| g)).collect::<Result<_, _>>()?;
    let per_task: Vec<&[Episode]> = attempts.chunks(n).collect();
    let issues: Vec<&str> = tasks.iter().map(|t| t.problem_statement.as_str()).collect();
    let mut selections = Vec::new();
    for k in sweep(n) {
        for &selector in &cfg.selectors {
            let picked: Vec<Pick> = match selector {
                Selector::First => per_task.iter().map(|eps| pick_attempt(&eps[..k], 0)).collect(),
                Selector::Vote => per_task.iter().zip(&golds).map(|(eps, gold)| pick_vote(&eps[..k], gold, env, cfg.vote_min)).collect(),
                Selector::Tournament => {
                    let entrants: Vec<Vec<&AttemptSummary>> = summaries.iter().map(|s| s[..k].iter().collect()).collect();
                    let brackets = run_tournaments(&issues, &entrants, cfg.seed, judge);
                    per_task.iter().zip(brackets).map(|(eps, b)| pick_tournament(&eps[..k], b)).collect()
                }
            };
            for (((task, eps), p), sums) in tasks.iter().zip(&per_task).zip(picked).zip(summaries) {
                let mut sel = p.into_selection(task, selector, &eps[..k]);
                if selector == Selector::Tournament {
                    sel.cost.summary_tokens = sums[..k].iter().map(|s| s.written_tokens).sum();
                }
                selections.push(sel);
            }
        }
    }
    Ok(selections)
}

/// Each task's attempt summaries made from the episodes (`n` attempts per task).
pub fn summarize(attempts: &[Episode], n: usize) -> Vec<Vec<AttemptSummary>> {
    attempts.chunks(n).map(|eps| eps.iter().enumerate().map(|(i, e)| AttemptSummary::of(e, i)).collect()).collect()
}

fn policy_judge<'a>(policy: &'a mut dyn Policy, env: &'a Env<'_>, cfg: &ScalingConfig) -> PolicyJudge<'a> {
    let mut j = PolicyJudge::new(policy, env.tokenizer);
    j.retries = cfg.judge_retries;
    j.max_tokens = cfg.judge_max_tokens;
    j
}

/// A selector's pick for one task, before its cost and refine are added.
struct Pick {
    chosen: usize,
    answer: Vec<String>,
    score: Score,
    tournament: Option<Tournament>,
}

impl Pick {
    fn into_selection(self, task: &Task, selector: Selector, attempts: &[Episode]) -> TaskSelection {
        let mut cost = Cost {
            attempt_tokens: attempts.iter().map(|e| e.tokens.len()).sum(),
            attempt_seconds: attempts.iter().map(|e| e.seconds).sum(),
            ..Cost::default()
        };
        if let Some(t) = &self.tournament {
            cost.judge_tokens = t.judge_tokens;
            cost.judge_seconds = t.judge_seconds;
            cost.comparisons = t.matches.len();
            cost.retries = t.matches.iter().map(|m| m.retries).sum();
            cost.fallbacks = t.matches.iter().filter(|m| m.fallback.is_some()).count();
        }
        TaskSelection {
            task_id: task.instance_id.clone(),
            selector,
            attempts: attempts.len(),
            chosen: self.chosen,
            answer: self.answer,
            score: self.score,
            refined: None,
            cost,
            tournament: self.tournament,
        }
    }
}

fn pick_attempt(attempts: &[Episode], i: usize) -> Pick {
    let e = &attempts[i];
    Pick { chosen: i, answer: e.answer.clone(), score: e.score.unwrap_or_default(), tournament: None }
}

fn pick_tournament(attempts: &[Episode], t: Tournament) -> Pick {
    let winner = t.winner.unwrap_or(0);
    Pick { tournament: Some(t), ..pick_attempt(attempts, winner) }
}

/// The voted answer, scored against gold with e the mean efficiency of the
/// attempts (the search that produced the votes; at N = 1, the attempt's own).
fn pick_vote(attempts: &[Episode], gold: &Gold, env: &Env<'_>, min: Option<usize>) -> Pick {
    let answered = attempts.iter().filter(|e| e.stop_reason() == Some(StopReason::Answer)).count();
    let lists: Vec<&[String]> = attempts.iter().map(|e| e.answer.as_slice()).collect();
    let answer = vote::vote(&lists, min.unwrap_or_else(|| vote::majority(answered)));
    let e = attempts.iter().map(|a| a.score.unwrap_or_default().e).sum::<f64>() / attempts.len().max(1) as f64;
    let voted = Answer::from_strings(answer.iter().map(String::as_str));
    let s = score(&voted, gold, env.reward, e);
    Pick { chosen: closest(attempts, &voted), answer, score: s, tournament: None }
}

/// The attempt whose answer has the highest Jaccard overlap with `target`
/// (the first on ties).
fn closest(attempts: &[Episode], target: &Answer) -> usize {
    let set = |a: &Answer| -> std::collections::BTreeSet<String> { a.files.iter().chain(&a.functions).cloned().collect() };
    let t = set(target);
    let jaccard = |e: &Episode| {
        let s = set(&Answer::from_strings(e.answer.iter().map(String::as_str)));
        let union = s.union(&t).count();
        if union == 0 {
            0.0
        } else {
            s.intersection(&t).count() as f64 / union as f64
        }
    };
    let mut best = 0;
    for (i, e) in attempts.iter().enumerate() {
        if jaccard(e) > jaccard(&attempts[best]) {
            best = i;
        }
    }
    best
}

/// One refine episode per selection, all in one batch; each selection's
/// `refined` and cost are filled in.
fn refine_all(
    policy: &mut dyn Policy,
    env: &Env<'_>,
    tasks: &[Task],
    episode: &EpisodeConfig,
    summaries: &[Vec<AttemptSummary>],
    selections: &mut [TaskSelection],
    on_done: &mut impl FnMut(&Episode),
) -> Result<Vec<Episode>, RolloutError> {
    let index: std::collections::HashMap<&str, usize> = tasks.iter().enumerate().map(|(i, t)| (t.instance_id.as_str(), i)).collect();
    let refine_tasks: Vec<Task> = selections
        .iter()
        .map(|s| {
            let t = index[s.task_id.as_str()];
            refine_task(&tasks[t], &summaries[t][s.chosen])
        })
        .collect();
    let episodes = run_episodes(policy, env, &refine_tasks, 1, episode, on_done)?;
    for (s, e) in selections.iter_mut().zip(&episodes) {
        s.refined = Some(Refined { answer: e.answer.clone(), score: e.score.unwrap_or_default() });
        let t = index[s.task_id.as_str()];
        s.cost.refine_tokens = e.tokens.len() + if s.selector == Selector::Tournament { 0 } else { summaries[t][s.chosen].written_tokens };
        s.cost.refine_seconds = e.seconds;
    }
    Ok(episodes)
}

/// Rows per (n, selector), and the refined rows after them when refine ran.
pub fn table(selections: &[TaskSelection], cfg: &ScalingConfig) -> Vec<ScalingRow> {
    let mut rows = Vec::new();
    for refined in [false, true] {
        if refined && !cfg.refine {
            continue;
        }
        for k in sweep(cfg.attempts) {
            for &selector in &cfg.selectors {
                let group: Vec<&TaskSelection> = selections.iter().filter(|s| s.attempts == k && s.selector == selector).collect();
                rows.push(row(&group, selector, k, refined));
            }
        }
    }
    rows
}

fn row(group: &[&TaskSelection], selector: Selector, attempts: usize, refined: bool) -> ScalingRow {
    let n = group.len().max(1) as f64;
    let score = |s: &TaskSelection| if refined { s.final_score() } else { s.score };
    let answer_len = |s: &TaskSelection| if refined { s.refined.as_ref().map_or(0, |r| r.answer.len()) } else { s.answer.len() };
    let cost = |s: &TaskSelection| {
        let mut c = s.cost;
        if !refined {
            c.refine_tokens = 0;
            c.refine_seconds = 0.0;
        }
        c
    };
    let mean = |f: &dyn Fn(&TaskSelection) -> f64| group.iter().map(|s| f(s)).sum::<f64>() / n;
    ScalingRow {
        selector,
        refine: refined,
        attempts,
        tasks: group.len(),
        f1_file: mean(&|s| score(s).f1_file),
        f1_func: mean(&|s| score(s).f1_func),
        e: mean(&|s| score(s).e),
        reward: mean(&|s| score(s).reward),
        answered: mean(&|s| (answer_len(s) > 0) as u8 as f64),
        tokens: mean(&|s| cost(s).tokens() as f64),
        judge_tokens: mean(&|s| cost(s).judge_tokens as f64),
        seconds: mean(&|s| cost(s).seconds()),
        comparisons: group.iter().map(|s| s.cost.comparisons).sum(),
        fallbacks: group.iter().map(|s| s.cost.fallbacks).sum(),
    }
}
