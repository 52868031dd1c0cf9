//! Episodes: one task, one policy, turn after turn, as an explicit state
//! machine (generating -> awaiting tools -> generating ... -> done).
//!
//! The training sequence is exactly the tokens the policy was fed and
//! produced, appended turn by turn: the prompt from the chat template, each
//! assistant turn as generated, and each tool-response block tokenized once.
//! `loss_mask` is 1 only on tokens the policy produced, and `logprobs` holds
//! their sampling log-probs (0 elsewhere).

pub mod driver;
pub mod filter;
pub mod opening;
pub mod summary;
pub mod prompt;

use crate::entities::EntitySet;
use crate::reward::Score;
use serde::{Deserialize, Serialize};

/// Why an episode ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The policy answered (a turn with no tool call).
    Answer,
    /// The turn limit was reached while the policy still called tools.
    MaxTurns,
    /// A turn hit its token limit before its end-of-turn token.
    MaxTokens,
    /// The next tool responses would not fit the context window.
    ContextFull,
    /// A turn held a malformed tool call and the config ends such episodes.
    Malformed,
}

/// Where an episode is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Waiting for the policy's next turn.
    Generating,
    /// The last turn's tool calls are being run.
    AwaitingTools,
    /// Finished.
    Done(StopReason),
}

/// What to do with a turn holding a malformed `<tool_call>` block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MalformedCalls {
    /// Answer the block with an error text (it costs the model a call that
    /// gains nothing) and continue.
    #[default]
    Continue,
    /// End the episode with [`StopReason::Malformed`] (no answer, reward 0).
    End,
}

/// Qwen3's thinking switch for episodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Thinking {
    /// Pre-fill an empty think block (`enable_thinking=False`).
    #[default]
    Off,
    /// Let the model think before each turn.
    On,
}

/// Limits and modes of episodes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EpisodeConfig {
    /// Assistant turns at most (the last must answer).
    pub max_turns: usize,
    /// New tokens per assistant turn at most.
    pub max_turn_tokens: usize,
    /// Tokens in the whole sequence at most (the context window).
    pub max_total_tokens: usize,
    pub malformed_calls: MalformedCalls,
    pub thinking: Thinking,
}

impl EpisodeConfig {
    /// The most policy (assistant) tokens one episode can hold:
    /// `max_turns x max_turn_tokens`, at most the context window. The
    /// constant normalizer of Dr. GRPO (TRL's `max_completion_length`).
    pub fn policy_token_budget(&self) -> usize {
        (self.max_turns * self.max_turn_tokens).min(self.max_total_tokens).max(1)
    }
}

impl Default for EpisodeConfig {
    fn default() -> Self {
        EpisodeConfig {
            max_turns: 8,
            max_turn_tokens: 512,
            max_total_tokens: 16_384,
            malformed_calls: MalformedCalls::Continue,
            thinking: Thinking::Off,
        }
    }
}

/// One tool call of a turn and what it returned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallRecord {
    /// The tool name, when the block parsed.
    pub name: Option<String>,
    /// The arguments object, when the block parsed.
    pub arguments: Option<serde_json::Value>,
    pub output: String,
    pub entities: EntitySet,
    pub error: bool,
}

/// One assistant turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnRecord {
    /// The turn's text as generated (end-of-turn token excluded).
    pub text: String,
    /// Tokens the policy produced in this turn.
    pub tokens: usize,
    /// Its tool calls in the order written (empty for the answer).
    pub calls: Vec<CallRecord>,
    /// Tokens appended after the turn (tool responses + next prompt).
    pub response_tokens: usize,
    pub generate_seconds: f64,
    pub tools_seconds: f64,
}

/// One episode: its tokens, turns, answer and score.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Episode {
    pub task_id: String,
    /// Index within its task's group.
    pub sample: usize,
    pub tokens: Vec<u32>,
    pub loss_mask: Vec<u8>,
    pub logprobs: Vec<f32>,
    pub prompt_tokens: usize,
    pub turns: Vec<TurnRecord>,
    pub phase: Phase,
    /// The answer's entities (files and functions), when it answered.
    pub answer: Vec<String>,
    pub score: Option<Score>,
    pub seconds: f64,
}

impl Episode {
    /// Why it ended (None while running).
    pub fn stop_reason(&self) -> Option<StopReason> {
        match self.phase {
            Phase::Done(r) => Some(r),
            _ => None,
        }
    }

    /// Tokens the policy produced.
    pub fn policy_tokens(&self) -> usize {
        self.loss_mask.iter().filter(|&&m| m == 1).count()
    }

    /// Whether it ended with a non-empty answer.
    pub fn answered(&self) -> bool {
        self.stop_reason() == Some(StopReason::Answer) && !self.answer.is_empty()
    }

    /// The reward GRPO's advantages use: R plus `config.answer_bonus` when
    /// it [answered](Self::answered) ([`crate::reward::training_reward`]).
    pub fn training_reward(&self, config: &crate::reward::RewardConfig) -> f64 {
        crate::reward::training_reward(self.score.as_ref(), self.answered(), config)
    }

    /// Tool calls over all turns.
    pub fn tool_calls(&self) -> usize {
        self.turns.iter().map(|t| t.calls.len()).sum()
    }
}
