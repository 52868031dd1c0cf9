//! The reward R = alpha * F1 + gamma * F1 * e, with
//! F1 = w_file * F1_file + w_func * F1_func (DESIGN.md).
//!
//! GRPO's advantages may add a format term to R: `answer_bonus` for an
//! episode that ends with a non-empty answer ([`training_reward`]). R, the
//! reward every table and metric reports, never includes it.

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::answer::{f1, Answer};

/// Gold entities of a task (same shape as an answer).
pub type Gold = Answer;

/// Reward weights. Raw TOML/JSON is checked by [`RewardConfig::validate`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RewardConfig {
    /// Weight of file-level F1 in F1.
    pub w_file: f64,
    /// Weight of function-level F1 in F1.
    pub w_func: f64,
    /// Weight of F1 alone in R.
    pub alpha: f64,
    /// Weight of F1 * e in R.
    pub gamma: f64,
    /// Added to the reward GRPO's advantages are computed from (never to R)
    /// for an episode that ends with a non-empty answer. 0 (the default)
    /// turns it off; a small value (0.1) gives a policy that rarely answers
    /// a signal to learn to answer at all.
    pub answer_bonus: f64,
}

impl Default for RewardConfig {
    fn default() -> Self {
        Self { w_file: 0.5, w_func: 0.5, alpha: 1.0, gamma: 1.0, answer_bonus: 0.0 }
    }
}

/// A reward weight that is not a finite number >= 0.
#[derive(Debug, Error, PartialEq)]
#[error("reward config: '{field}' must be a finite number >= 0, got {value}")]
pub struct RewardConfigError {
    /// The field.
    pub field: &'static str,
    /// Its value.
    pub value: f64,
}

impl RewardConfig {
    /// Checks every weight is finite and non-negative.
    pub fn validate(&self) -> Result<(), RewardConfigError> {
        let fields = [("w_file", self.w_file), ("w_func", self.w_func), ("alpha", self.alpha), ("gamma", self.gamma), ("answer_bonus", self.answer_bonus)];
        match fields.into_iter().find(|(_, v)| !v.is_finite() || *v < 0.0) {
            Some((field, value)) => Err(RewardConfigError { field, value }),
            None => Ok(()),
        }
    }
}

/// Every number of one episode's reward.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Score {
    /// File-level F1.
    pub f1_file: f64,
    /// Function-level F1.
    pub f1_func: f64,
    /// Weighted F1.
    pub f1: f64,
    /// Tool efficiency.
    pub e: f64,
    /// The reward.
    pub reward: f64,
}

/// The largest R (and weighted F1) an episode may hold. R = alpha * F1 +
/// gamma * F1 * e is at most (alpha + gamma) * (w_file + w_func), which
/// episodes do not record; the shipped configs give 2, and a number above
/// this bound is a broken file, not a config.
pub const MAX_REWARD: f64 = 100.0;

impl Score {
    /// The first number outside its range, as (field, value, the range in
    /// words): F1_file, F1_func and e in [0, 1]; F1 and R finite, in
    /// [0, [`MAX_REWARD`]].
    pub fn out_of_range(&self) -> Option<(&'static str, f64, String)> {
        let unit = [("f1_file", self.f1_file), ("f1_func", self.f1_func), ("e", self.e)];
        let weighted = [("f1", self.f1), ("reward", self.reward)];
        let bad = |max: f64| move |(_, v): &(&'static str, f64)| !(0.0..=max).contains(v);
        if let Some((field, value)) = unit.into_iter().find(bad(1.0)) {
            return Some((field, value, "a number in [0, 1]".into()));
        }
        let (field, value) = weighted.into_iter().find(bad(MAX_REWARD))?;
        Some((field, value, format!("a finite number in [0, {MAX_REWARD}] (R = alpha*F1 + gamma*F1*e)")))
    }
}

/// The reward GRPO's advantages use: R (`reward`, 0 without a score) plus
/// `answer_bonus` when the episode `answered` (ended with a non-empty
/// answer).
pub fn training_reward(score: Option<&Score>, answered: bool, config: &RewardConfig) -> f64 {
    score.map_or(0.0, |s| s.reward) + if answered { config.answer_bonus } else { 0.0 }
}

/// Scores an answer against gold with efficiency `e`.
pub fn score(answer: &Answer, gold: &Gold, config: &RewardConfig, e: f64) -> Score {
    let f1_file = f1(&answer.files, &gold.files);
    let f1_func = f1(&answer.functions, &gold.functions);
    let f1 = config.w_file * f1_file + config.w_func * f1_func;
    let reward = config.alpha * f1 + config.gamma * f1 * e;
    Score { f1_file, f1_func, f1, e, reward }
}
