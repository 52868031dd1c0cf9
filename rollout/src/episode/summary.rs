//! The FuseSearch table of a set of episodes: means of file F1, function
//! F1, efficiency, reward, turns, tool calls per turn, tokens and time.

use super::Episode;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Mean R of each task's episodes, by task id.
pub fn task_rewards(episodes: &[Episode]) -> BTreeMap<String, f64> {
    task_means(episodes, |e| e.score.unwrap_or_default().reward)
}

/// Mean of `metric` over each task's episodes, by task id.
pub fn task_means(episodes: &[Episode], metric: impl Fn(&Episode) -> f64) -> BTreeMap<String, f64> {
    let mut sums: BTreeMap<String, (f64, usize)> = BTreeMap::new();
    for e in episodes {
        let s = sums.entry(e.task_id.clone()).or_default();
        s.0 += metric(e);
        s.1 += 1;
    }
    sums.into_iter().map(|(k, (sum, n))| (k, sum / n as f64)).collect()
}

/// Means over episodes (the `report.json` metric names).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub episodes: usize,
    pub f1_file: f64,
    pub f1_func: f64,
    pub e: f64,
    pub reward: f64,
    pub turns: f64,
    pub calls_per_turn: f64,
    pub tokens: f64,
    pub seconds: f64,
    /// Share of episodes that ended with a non-empty answer.
    pub answered: f64,
}

impl Summary {
    pub fn of(episodes: &[Episode]) -> Summary {
        let n = episodes.len();
        if n == 0 {
            return Summary::default();
        }
        let mean = |f: &dyn Fn(&Episode) -> f64| episodes.iter().map(f).sum::<f64>() / n as f64;
        let score = |e: &Episode| e.score.unwrap_or_default();
        let tool_turns: usize = episodes.iter().map(|e| e.turns.iter().filter(|t| !t.calls.is_empty()).count()).sum();
        let calls: usize = episodes.iter().map(Episode::tool_calls).sum();
        Summary {
            episodes: n,
            f1_file: mean(&|e| score(e).f1_file),
            f1_func: mean(&|e| score(e).f1_func),
            e: mean(&|e| score(e).e),
            reward: mean(&|e| score(e).reward),
            turns: mean(&|e| e.turns.len() as f64),
            calls_per_turn: if tool_turns == 0 { 0.0 } else { calls as f64 / tool_turns as f64 },
            tokens: mean(&|e| e.tokens.len() as f64),
            seconds: mean(&|e| e.seconds),
            answered: mean(&|e| e.answered() as u8 as f64),
        }
    }

    /// One table row, aligned under [`Summary::HEADER`].
    pub fn row(&self, label: &str) -> String {
        format!(
            "{label:<10} {:>8} {:>7.3} {:>7.3} {:>6.3} {:>7.3} {:>6.2} {:>10.2} {:>8.0} {:>8.2} {:>8.2}",
            self.episodes, self.f1_file, self.f1_func, self.e, self.reward, self.turns, self.calls_per_turn, self.tokens, self.seconds, self.answered
        )
    }

    pub const HEADER: &'static str =
        "stage      episodes f1_file f1_func      e  reward  turns calls/turn   tokens  seconds answered";
}
