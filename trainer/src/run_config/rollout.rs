//! `[rollout]` and `[rollout.vllm]`: the shape of rollouts and what
//! generates them.

use serde::{Deserialize, Serialize};

/// Shape of rollouts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RolloutSection {
    /// Episodes per task (G).
    pub group: usize,
    /// Bound on rows x (tokens + new tokens) in one generation batch.
    pub max_batch_tokens: usize,
    /// Bound on KV slots held at once (parked caches and the decoding
    /// batch's, left padding included); episodes whose parked cache does not
    /// fit are prefilled again at their next turn. At least 2 x
    /// `[episode] max_total_tokens`. Unset: unbounded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_kv_tokens: Option<usize>,
    /// Bound on tokens in one prefill forward (longer prefills are split).
    #[serde(skip_serializing_if = "is_default_prefill")]
    pub max_prefill_tokens: usize,
    /// Episodes running at once (rounded down to whole groups, at least
    /// one group); the next start as earlier ones end. With many tasks
    /// (`eval` of a large file), every episode live at once can hold more
    /// cache than `max_kv_tokens`, which then drops caches and prefills
    /// them again at every turn; about `max_kv_tokens / (2 x [episode]
    /// max_total_tokens)` never drops one. Unset: every episode of a call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_live_episodes: Option<usize>,
    /// What generates the model's turns: our own decoding (`builtin`) or a
    /// vLLM server (`vllm`, `[rollout.vllm]`).
    #[serde(skip_serializing_if = "is_builtin")]
    pub engine: Engine,
    /// The vLLM server when `engine = "vllm"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vllm: Option<VllmSection>,
    /// Steps the rollouts may lag the weights they train: 0 generates each
    /// step's rollouts with its own weights, then updates; 1 generates step
    /// t+1's rollouts with step t's weights while step t updates (one-step
    /// off-policy, as verl, NeMo-RL and SkyRL overlap them), corrected by
    /// `[grpo] rollout_correction = "tis"`.
    #[serde(skip_serializing_if = "is_zero")]
    pub off_policy: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// `[rollout] engine`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    #[default]
    Builtin,
    Vllm,
}

fn is_builtin(e: &Engine) -> bool {
    *e == Engine::Builtin
}

/// `[rollout.vllm]`: where the vLLM server is and how to talk to it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct VllmSection {
    /// The server, `http://host:port`.
    pub url: String,
    /// The name vLLM serves the model (or the LoRA adapter) under.
    pub served_model: String,
    /// Requests in flight at most (vLLM batches them).
    pub max_concurrency: usize,
    /// Whole-request timeout, seconds.
    pub timeout_s: f64,
    /// Retries of a failed request (no connection, 408/429/5xx), with
    /// exponential backoff from 0.5 s up to 30 s.
    pub max_retries: u32,
    /// Largest mean |difference| between the engine's log-probs of a probe
    /// text and this config's model's, checked at start: the server must
    /// serve the same weights. f32 on both sides agrees to ~1e-5; bf16 on
    /// either side needs ~0.02.
    pub probe_tolerance: f64,
    /// When the server does not serve this config's model: false (the
    /// default) stops with an error; true loads it onto the server (the
    /// adapter under a name of its own, or the weights in place), as
    /// `pipeline` needs for its stages' models.
    pub load_model: bool,
}

impl Default for VllmSection {
    fn default() -> Self {
        VllmSection {
            url: "http://127.0.0.1:8000".into(),
            served_model: String::new(),
            max_concurrency: 64,
            timeout_s: 600.0,
            max_retries: 5,
            probe_tolerance: 1e-3,
            load_model: false,
        }
    }
}

/// Tokens per prefill forward unless set.
pub const DEFAULT_MAX_PREFILL_TOKENS: usize = 16_384;

fn is_default_prefill(n: &usize) -> bool {
    *n == DEFAULT_MAX_PREFILL_TOKENS
}

impl RolloutSection {
    pub fn limits(&self) -> crate::model_policy::RolloutLimits {
        crate::model_policy::RolloutLimits { max_batch_tokens: self.max_batch_tokens, max_kv_tokens: self.max_kv_tokens, max_prefill_tokens: self.max_prefill_tokens, max_live: self.max_live_episodes }
    }
}

impl Default for RolloutSection {
    fn default() -> Self {
        RolloutSection {
            group: 4,
            max_batch_tokens: 262_144,
            max_kv_tokens: None,
            max_prefill_tokens: DEFAULT_MAX_PREFILL_TOKENS,
            max_live_episodes: None,
            engine: Engine::Builtin,
            vllm: None,
            off_policy: 0,
        }
    }
}
