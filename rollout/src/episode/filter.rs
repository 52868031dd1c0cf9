//! Which teacher trajectories SFT learns from (FuseSearch's dual-metric
//! filter plus a calls-per-turn range and SERA's truncation-ratio rule).
//!
//! An episode is kept when it answered, its F1 >= `min_f1` (rho_F), its
//! efficiency e >= `min_e` (rho_e), and its mean tool calls per tool-calling
//! turn lie in `[min_calls_per_turn, max_calls_per_turn]`. Episodes longer
//! than the SFT context window (`max_tokens`) are cut after the last
//! assistant turn that fits; the share of tokens cut is the truncation ratio,
//! and an episode whose ratio exceeds `max_truncation_ratio` is dropped (0
//! keeps only trajectories that fit whole). Among a task's survivors, whole
//! trajectories come first, then higher reward; `max_per_task` keeps the best.
//! Every drop is counted under the first rule it fails.

use super::{Episode, StopReason};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `[sft.filter]` of a run config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FilterConfig {
    /// rho_F: lowest F1 (w_file * F1_file + w_func * F1_func) kept.
    pub min_f1: f64,
    /// rho_e: lowest tool efficiency e kept.
    pub min_e: f64,
    /// Mean tool calls per tool-calling turn, lowest kept.
    pub min_calls_per_turn: f64,
    /// Mean tool calls per tool-calling turn, highest kept.
    pub max_calls_per_turn: f64,
    /// Keep only episodes that ended with an answer.
    pub require_answer: bool,
    /// The SFT context window in tokens.
    pub max_tokens: usize,
    /// Largest share of an episode's tokens that may be cut to fit `max_tokens`.
    pub max_truncation_ratio: f64,
    /// Trajectories kept per task at most (0 = all).
    pub max_per_task: usize,
}

impl Default for FilterConfig {
    fn default() -> Self {
        FilterConfig {
            min_f1: 0.5,
            min_e: 0.2,
            min_calls_per_turn: 2.0,
            max_calls_per_turn: 8.0,
            require_answer: true,
            max_tokens: 16_384,
            max_truncation_ratio: 0.0,
            max_per_task: 0,
        }
    }
}

/// The rule an episode failed first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DropRule {
    /// It did not end with an answer.
    NoAnswer,
    /// F1 < rho_F.
    LowF1,
    /// e < rho_e.
    LowE,
    /// Mean calls per tool turn outside the range.
    CallsPerTurn,
    /// Cutting it to the context window would lose more than the allowed ratio.
    Truncation,
    /// Beyond `max_per_task` better trajectories of its task.
    PerTaskCap,
}

/// One training sequence for SFT.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SftExample {
    pub task_id: String,
    pub sample: usize,
    pub tokens: Vec<u32>,
    /// 1 on the policy's own tokens.
    pub loss_mask: Vec<u8>,
    /// Tokens cut off the end to fit the context window.
    pub truncated_tokens: usize,
    pub reward: f64,
}

/// Counts of a filtering pass, with the thresholds used.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FilterReport {
    pub total: usize,
    pub kept: usize,
    /// Kept after cutting to the context window.
    pub kept_truncated: usize,
    pub dropped: BTreeMap<DropRule, usize>,
    pub config: FilterConfig,
}

impl FilterReport {
    /// One line per rule: `kept 41 of 96 (dropped: low_f1 30, low_e 12, ...)`.
    pub fn summary(&self) -> String {
        let dropped: Vec<String> = self
            .dropped
            .iter()
            .map(|(r, n)| format!("{} {n}", serde_json::to_value(r).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default()))
            .collect();
        format!(
            "kept {} of {} ({} cut to {} tokens); dropped: {}",
            self.kept,
            self.total,
            self.kept_truncated,
            self.config.max_tokens,
            if dropped.is_empty() { "none".into() } else { dropped.join(", ") }
        )
    }
}

/// Mean tool calls per turn that called tools (0 when none did).
pub fn calls_per_turn(e: &Episode) -> f64 {
    let tool_turns = e.turns.iter().filter(|t| !t.calls.is_empty()).count();
    if tool_turns == 0 {
        0.0
    } else {
        e.tool_calls() as f64 / tool_turns as f64
    }
}

/// Where to cut `mask` to fit `max_tokens`: just after the last policy
/// token (end of an assistant turn) at or before `max_tokens`. `None` when
/// no assistant turn ends within the window.
pub fn fitting_cut(mask: &[u8], max_tokens: usize) -> Option<usize> {
    if mask.len() <= max_tokens {
        return Some(mask.len());
    }
    (1..=max_tokens).rev().find(|&end| mask[end - 1] == 1 && mask[end] == 0)
}

/// The first rule `e` fails, else the example it makes.
fn check(e: &Episode, cfg: &FilterConfig) -> Result<SftExample, DropRule> {
    let score = e.score.unwrap_or_default();
    if cfg.require_answer && e.stop_reason() != Some(StopReason::Answer) {
        return Err(DropRule::NoAnswer);
    }
    if score.f1 < cfg.min_f1 {
        return Err(DropRule::LowF1);
    }
    if score.e < cfg.min_e {
        return Err(DropRule::LowE);
    }
    let cpt = calls_per_turn(e);
    if cpt < cfg.min_calls_per_turn || cpt > cfg.max_calls_per_turn {
        return Err(DropRule::CallsPerTurn);
    }
    let cut = fitting_cut(&e.loss_mask, cfg.max_tokens).ok_or(DropRule::Truncation)?;
    let truncated = e.tokens.len() - cut;
    if truncated as f64 > cfg.max_truncation_ratio * e.tokens.len() as f64 {
        return Err(DropRule::Truncation);
    }
    Ok(SftExample {
        task_id: e.task_id.clone(),
        sample: e.sample,
        tokens: e.tokens[..cut].to_vec(),
        loss_mask: e.loss_mask[..cut].to_vec(),
        truncated_tokens: truncated,
        reward: score.reward,
    })
}

/// Filter `episodes` for SFT; examples come back grouped by task in first
/// appearance order, best first within a task.
pub fn filter(episodes: &[Episode], cfg: &FilterConfig) -> (Vec<SftExample>, FilterReport) {
    let mut dropped: BTreeMap<DropRule, usize> = BTreeMap::new();
    let mut by_task: Vec<(String, Vec<SftExample>)> = Vec::new();
    for e in episodes {
        match check(e, cfg) {
            Err(rule) => *dropped.entry(rule).or_default() += 1,
            Ok(ex) => match by_task.iter_mut().find(|(t, _)| *t == ex.task_id) {
                Some((_, v)) => v.push(ex),
                None => by_task.push((ex.task_id.clone(), vec![ex])),
            },
        }
    }
    let mut kept = Vec::new();
    for (_, mut v) in by_task {
        v.sort_by(|a, b| {
            (a.truncated_tokens > 0)
                .cmp(&(b.truncated_tokens > 0))
                .then(b.reward.total_cmp(&a.reward))
                .then(a.sample.cmp(&b.sample))
        });
        if cfg.max_per_task > 0 && v.len() > cfg.max_per_task {
            *dropped.entry(DropRule::PerTaskCap).or_default() += v.len() - cfg.max_per_task;
            v.truncate(cfg.max_per_task);
        }
        kept.extend(v);
    }
    let report = FilterReport {
        total: episodes.len(),
        kept: kept.len(),
        kept_truncated: kept.iter().filter(|x| x.truncated_tokens > 0).count(),
        dropped,
        config: cfg.clone(),
    };
    (kept, report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::episode::{CallRecord, Phase, TurnRecord};
    use crate::reward::Score;

    fn call() -> CallRecord {
        CallRecord { name: Some("grep".into()), arguments: None, output: String::new(), entities: Default::default(), error: false }
    }

    fn turn(calls: usize) -> TurnRecord {
        TurnRecord { text: String::new(), tokens: 1, calls: vec![call(); calls], response_tokens: 0, generate_seconds: 0.0, tools_seconds: 0.0 }
    }

    /// An episode of `task`: prompt (4 tokens), then turns of 3 policy tokens
    /// and 5 response tokens each, the last turn (the answer) with no response.
    fn episode(task: &str, sample: usize, f1: f64, e: f64, calls: &[usize], stop: StopReason) -> Episode {
        let mut mask = vec![0u8; 4];
        for (i, _) in calls.iter().enumerate() {
            mask.extend([1, 1, 1]);
            if i + 1 < calls.len() {
                mask.extend([0; 5]);
            }
        }
        Episode {
            task_id: task.into(),
            sample,
            tokens: (0..mask.len() as u32).collect(),
            logprobs: vec![0.0; mask.len()],
            loss_mask: mask,
            prompt_tokens: 4,
            turns: calls.iter().map(|&c| turn(c)).collect(),
            phase: Phase::Done(stop),
            answer: vec![],
            score: Some(Score { f1_file: f1, f1_func: f1, f1, e, reward: f1 + f1 * e }),
            seconds: 0.0,
        }
    }

    #[test]
    fn each_rule_drops_what_it_names() {
        let cfg = FilterConfig { min_f1: 0.5, min_e: 0.3, min_calls_per_turn: 2.0, max_calls_per_turn: 4.0, max_tokens: 100, ..Default::default() };
        let eps = vec![
            episode("a", 0, 0.9, 0.5, &[3, 2, 0], StopReason::Answer),   // kept
            episode("a", 1, 0.9, 0.5, &[3, 0], StopReason::MaxTurns),    // no answer
            episode("b", 0, 0.4, 0.5, &[3, 0], StopReason::Answer),      // low F1
            episode("b", 1, 0.9, 0.2, &[3, 0], StopReason::Answer),      // low e
            episode("c", 0, 0.9, 0.5, &[1, 0], StopReason::Answer),      // 1 call per turn
            episode("c", 1, 0.9, 0.5, &[6, 4, 0], StopReason::Answer),   // 5 calls per turn
        ];
        let (kept, report) = filter(&eps, &cfg);
        assert_eq!(kept.len(), 1);
        assert_eq!((kept[0].task_id.as_str(), kept[0].sample), ("a", 0));
        let want: BTreeMap<DropRule, usize> =
            [(DropRule::NoAnswer, 1), (DropRule::LowF1, 1), (DropRule::LowE, 1), (DropRule::CallsPerTurn, 2)].into();
        assert_eq!(report.dropped, want);
        assert_eq!(report.total, report.kept + report.dropped.values().sum::<usize>());
        assert!(report.summary().contains("low_f1 1"), "{}", report.summary());
    }

    #[test]
    fn truncation_cuts_at_a_turn_end_and_whole_trajectories_come_first() {
        // 4 + 3 + 5 + 3 + 5 + 3 = 23 tokens; turn ends at 7, 15 and 23.
        let long = episode("t", 0, 1.0, 1.0, &[2, 2, 0], StopReason::Answer);
        assert_eq!(long.tokens.len(), 23);
        assert_eq!(fitting_cut(&long.loss_mask, 23), Some(23));
        assert_eq!(fitting_cut(&long.loss_mask, 20), Some(15));
        assert_eq!(fitting_cut(&long.loss_mask, 6), None, "no turn ends within the window");
        let cfg = |ratio: f64| FilterConfig { min_f1: 0.0, min_e: 0.0, max_tokens: 20, max_truncation_ratio: ratio, ..Default::default() };
        let (kept, report) = filter(std::slice::from_ref(&long), &cfg(0.0));
        assert!(kept.is_empty() && report.dropped[&DropRule::Truncation] == 1, "ratio 0 keeps only whole trajectories");
        let (kept, report) = filter(std::slice::from_ref(&long), &cfg(0.4));
        assert_eq!((kept[0].tokens.len(), kept[0].truncated_tokens, report.kept_truncated), (15, 8, 1));
        assert_eq!(kept[0].loss_mask.len(), 15);
        // A whole, lower-reward trajectory of the same task beats the cut one.
        let mut short = episode("t", 1, 0.6, 1.0, &[2, 0], StopReason::Answer);
        short.score.as_mut().unwrap().reward = 0.1;
        let (kept, report) = filter(&[long, short], &FilterConfig { max_per_task: 1, ..cfg(0.4) });
        assert_eq!((kept.len(), kept[0].sample, kept[0].truncated_tokens), (1, 1, 0));
        assert_eq!(report.dropped[&DropRule::PerTaskCap], 1);
    }
}
