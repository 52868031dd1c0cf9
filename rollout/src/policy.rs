//! The policy interface: what drives an episode's assistant turns.
//!
//! Token in, token out: a policy sees each live episode's full token
//! sequence (ending with the assistant generation prompt) and its
//! conversation as messages, and returns the next turn, either as token ids
//! with their sampling log-probs (our model) or as text (a teacher without
//! token access, whose text the driver tokenizes once).

use serde_json::Value;

/// One live episode asking for its next assistant turn.
#[derive(Debug, Clone, Copy)]
pub struct TurnRequest<'a> {
    /// Stable key of the episode for the whole rollout (policies may keep
    /// per-episode state, e.g. a KV cache, under it).
    pub episode: u64,
    /// Every token so far, ending with `<|im_start|>assistant\n` (+ an empty
    /// think block when thinking is off).
    pub tokens: &'a [u32],
    /// The same conversation as transformers-style messages.
    pub messages: &'a [Value],
    /// The tools declared to the model (JSON schemas).
    pub tools: &'a [Value],
    /// The repository snapshot the episode's tools run on, where the
    /// driver has one. Only a scripted teacher consults it (the guided
    /// teacher asks its search index); a model policy never does.
    pub snapshot: Option<&'a crate::repo::Snapshot>,
    /// Upper bound on new tokens for this turn.
    pub max_new_tokens: usize,
}

/// A policy's next turn for one episode.
#[derive(Debug, Clone, PartialEq)]
pub enum TurnOutput {
    /// Sampled token ids (ending with the end-of-turn token when the turn
    /// ended normally) and their log-probs under the sampling distribution.
    Tokens { ids: Vec<u32>, logprobs: Vec<f32> },
    /// Text of the whole turn (without the end-of-turn token); the driver
    /// tokenizes it and appends the end-of-turn token. Log-probs are unknown.
    Text(String),
}

/// Why a policy could not produce turns (ends the rollout, not the process).
#[derive(Debug, thiserror::Error)]
#[error("policy {policy}: {message}")]
pub struct PolicyError {
    pub policy: String,
    pub message: String,
}

/// Anything that writes assistant turns.
pub trait Policy {
    /// A short name for logs and errors.
    fn name(&self) -> String;

    /// The next turn of every requested episode, in request order. All live
    /// episodes are passed at once so a model can batch them.
    fn next_turns(&mut self, requests: &[TurnRequest<'_>]) -> Result<Vec<TurnOutput>, PolicyError>;

    /// The episode ended: release anything kept for it.
    fn finish(&mut self, _episode: u64) {}

    /// Once `flag` is set, the current [`Policy::next_turns`] may end early
    /// with an error (the driver then reports the run cancelled); `None`
    /// forgets it. A policy that ignores it is stopped at turn boundaries.
    fn interrupt_on(&mut self, _flag: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>) {}

    /// Samples at `temperature` (0: greedy) from the next turn on, until
    /// set again; `false` when this policy has no temperature to set (the
    /// scripted teacher), nothing changed. The MCP server keeps one policy
    /// for every call, each with its own temperature.
    fn set_temperature(&mut self, _temperature: f64) -> bool {
        false
    }

    /// How many episodes may run at once (`None`: any number); the driver
    /// starts the others as earlier ones end. A model whose KV budget cannot
    /// keep every live episode's cache says so (`[rollout] max_live_episodes`),
    /// so that caches are not dropped and prefilled again at every turn.
    fn max_live(&self) -> Option<usize> {
        None
    }

    /// Seeds drawn from the policy's random stream so far (a sampling model
    /// draws one per [`Policy::next_turns`]; 0 for a policy without one).
    fn draws(&self) -> u64 {
        0
    }

    /// Draws `n` seeds and drops them, as `n` more calls would have: ranks
    /// that shared a batch and decoded fewer rounds than the busiest one
    /// stay in step with one process that decoded the whole batch.
    fn skip_draws(&mut self, _n: u64) {}
}
