//! vLLM as the rollout engine: token ids in, token ids and their sampling
//! log-probs out, over vLLM's OpenAI-compatible `/v1/completions`.
//!
//! Each live episode's turn is one request whose `prompt` is the episode's
//! token ids (so the engine never re-renders the chat template), with
//! `return_token_ids`, `logprobs: 0` (the sampled token's log-prob),
//! `stop_token_ids` from our tokenizer (the end-of-turn token) and a seed
//! per episode and turn. The answer becomes [`TurnOutput::Tokens`], exactly
//! as our own model's turns: the episode driver cannot tell them apart.
//! Requests run in parallel on at most `max_concurrency` threads (vLLM
//! batches them, and its prefix cache shares a group's prompt).
//!
//! [`VllmEngine::check`] asks the server, before any rollout, what it
//! serves: the model name must be listed, and the log-probs it returns must
//! be the processed ones (after temperature and top-p) when sampling is not
//! neutral, which vLLM does with `--logprobs-mode processed_logprobs`.
//!
//! Weight sync for GRPO: [`VllmEngine::reload_weights`] has the server load
//! a folder of safetensors in place of its weights (`/pause`,
//! `/collective_rpc reload_weights`, `/resume`: vLLM's dev endpoints,
//! `VLLM_SERVER_DEV_MODE=1`); [`VllmEngine::load_adapter`] loads a PEFT
//! adapter under a new name (`/v1/load_lora_adapter`, `--enable-lora` and
//! `VLLM_ALLOW_RUNTIME_LORA_UPDATING=1`) that the requests then name.

use crate::http::{excerpt, get_json, post_for_text, post_json, Failure, Retry};
use crate::policy::{Policy, PolicyError, TurnOutput, TurnRequest};
use serde_json::{json, Map, Value};
use std::path::Path;
use std::time::Duration;

/// Where the engine is and how to sample from it.
#[derive(Debug, Clone, PartialEq)]
pub struct VllmConfig {
    /// The server, `http(s)://host:port` (a trailing `/v1` is accepted).
    pub url: String,
    /// The `model` of each request: the name vLLM serves the model under
    /// (`--served-model-name`, else the path it was started with), or a
    /// LoRA adapter's name.
    pub served_model: String,
    /// Sampling temperature (0: greedy).
    pub temperature: f64,
    /// Nucleus sampling mass (1: off).
    pub top_p: f64,
    /// Base seed: each request's seed is derived from it, the episode and
    /// the turn.
    pub seed: u64,
    /// Token ids that end a turn (the chat template's end-of-turn token).
    pub stop_token_ids: Vec<u32>,
    /// Requests in flight at most.
    pub max_concurrency: usize,
    /// Whole-request timeout.
    pub timeout: Duration,
    pub retry: Retry,
}

/// Why the engine could not be used; each names the server.
#[derive(Debug, thiserror::Error)]
pub enum VllmError {
    #[error("vllm engine: {0}")]
    Config(String),
    #[error("vllm engine at {url}: {message}")]
    Server { url: String, message: String },
    #[error("vllm engine at {url}: unexpected response: {message}")]
    BadResponse { url: String, message: String },
}

/// What [`VllmEngine::check`] found.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerInfo {
    /// The models the server lists (`/v1/models`).
    pub models: Vec<String>,
    /// The served model's context length (`max_model_len`), when listed.
    pub max_model_len: Option<usize>,
}

/// The engine as a [`Policy`].
#[derive(Debug)]
pub struct VllmEngine {
    config: VllmConfig,
    base: String,
    agent: ureq::Agent,
    /// The adapter [`VllmEngine::load_adapter`] loaded last (requests name it).
    adapter: Option<String>,
}

/// `http://host:port` of `url`, without a trailing `/` or `/v1`.
pub fn base_url(url: &str) -> Result<String, VllmError> {
    let u = url.trim().trim_end_matches('/');
    if !(u.starts_with("http://") || u.starts_with("https://")) {
        return Err(VllmError::Config(format!("url {url:?} must start with http:// or https://")));
    }
    Ok(u.strip_suffix("/v1").unwrap_or(u).to_string())
}

impl VllmEngine {
    pub fn new(config: VllmConfig) -> Result<Self, VllmError> {
        let base = base_url(&config.url)?;
        if config.max_concurrency == 0 {
            return Err(VllmError::Config("max_concurrency must be at least 1".into()));
        }
        if config.served_model.trim().is_empty() {
            return Err(VllmError::Config("served_model is empty: name the model vLLM serves (its --served-model-name)".into()));
        }
        if config.stop_token_ids.is_empty() {
            return Err(VllmError::Config("no stop token ids: the chat template's end-of-turn token is needed".into()));
        }
        let agent = ureq::AgentBuilder::new().timeout(config.timeout).build();
        Ok(VllmEngine { config, base, agent, adapter: None })
    }

    pub fn config(&self) -> &VllmConfig {
        &self.config
    }

    /// The server's base URL (`http://host:port`).
    pub fn base(&self) -> &str {
        &self.base
    }

    /// The base seed the requests' seeds derive from (GRPO gives each step
    /// its own, so that steps do not repeat their samples).
    pub fn set_seed(&mut self, seed: u64) {
        self.config.seed = seed;
    }

    /// The model the requests name: `served_model`, or the adapter loaded
    /// last.
    pub fn model(&self) -> &str {
        self.adapter.as_deref().unwrap_or(&self.config.served_model)
    }

    /// Requests name `name`, an adapter the server already has.
    pub fn use_adapter(&mut self, name: &str) {
        self.adapter = Some(name.to_string());
    }

    /// Requests name `served_model` again (not the adapter loaded last).
    pub fn use_base(&mut self) {
        self.adapter = None;
    }

    /// POSTs to one of vLLM's dev endpoints (`VLLM_SERVER_DEV_MODE=1`).
    fn dev_post(&self, path: &str, body: &Value) -> Result<Value, VllmError> {
        let url = format!("{}{path}", self.base);
        post_json(&self.agent, &url, &[], body, &self.config.retry, || ()).map_err(|f| match f {
            Failure::Status { status: 404, .. } => VllmError::Server {
                url: self.base.clone(),
                message: format!(
                    "POST {path}: not found: weight sync needs vLLM's dev endpoints; start vLLM with VLLM_SERVER_DEV_MODE=1 in its environment (`fusegrpo engine vllm` sets it)"
                ),
            },
            f => self.server_error(&format!("POST {path}"), f),
        })
    }

    /// Has the server load the safetensors in `folder` (whole model, the
    /// names of the served architecture's checkpoints) in place of its
    /// weights: `/pause` (requests in flight finish, caches cleared),
    /// `/collective_rpc` `reload_weights` with `weights_path`, `/resume`
    /// (also after a failed reload). `folder` must be readable by the server.
    pub fn reload_weights(&self, folder: &Path) -> Result<(), VllmError> {
        self.dev_post("/pause?mode=wait&clear_cache=true", &json!({}))?;
        let path = folder.to_string_lossy();
        let reloaded = self.dev_post("/collective_rpc", &json!({"method": "reload_weights", "kwargs": {"weights_path": path}}));
        let resumed = self.resume();
        reloaded?;
        resumed
    }

    /// `/resume`: lets a paused server schedule again (harmless when it
    /// runs). A trainer killed between `/pause` and `/resume` leaves the
    /// server paused, every request waiting: the next one resumes it first.
    pub fn resume(&self) -> Result<(), VllmError> {
        self.dev_post("/resume", &json!({})).map(|_| ())
    }

    /// Loads the PEFT adapter in `folder` under `name` (new for each
    /// version: the prefix cache is per adapter), makes the requests name
    /// it, and unloads the one loaded before.
    pub fn load_adapter(&mut self, name: &str, folder: &Path) -> Result<(), VllmError> {
        let url = format!("{}/v1/load_lora_adapter", self.base);
        let body = json!({"lora_name": name, "lora_path": folder.to_string_lossy()});
        post_for_text(&self.agent, &url, &body, &self.config.retry).map_err(|f| match f {
            Failure::Status { status: 404 | 405, .. } => VllmError::Server {
                url: self.base.clone(),
                message: "POST /v1/load_lora_adapter: not found: LoRA sync needs vLLM started with --enable-lora --max-lora-rank R and VLLM_ALLOW_RUNTIME_LORA_UPDATING=1 (`fusegrpo engine vllm --adapter-rank R`)".into(),
            },
            f => self.server_error("POST /v1/load_lora_adapter", f),
        })?;
        if let Some(old) = self.adapter.replace(name.to_string()) {
            let url = format!("{}/v1/unload_lora_adapter", self.base);
            if let Err(f) = post_for_text(&self.agent, &url, &json!({"lora_name": old}), &self.config.retry) {
                tracing::warn!(adapter = %old, error = ?f, "could not unload the previous adapter from vLLM");
            }
        }
        Ok(())
    }

    fn server_error(&self, what: &str, f: Failure) -> VllmError {
        let message = match f {
            Failure::Status { status, tries, message } => format!("{what}: HTTP {status} after {tries} tries: {message}"),
            Failure::Transport { tries, message } => {
                format!("{what}: no answer after {tries} tries ({message}); is vLLM running there? (start it with `vllm serve`: docs/vllm.md)")
            }
            Failure::NotJson { message } => format!("{what}: {message}"),
        };
        VllmError::Server { url: self.base.clone(), message }
    }

    /// Asks the server what it serves: `served_model` must be among
    /// `/v1/models`.
    pub fn check(&self) -> Result<ServerInfo, VllmError> {
        let url = format!("{}/v1/models", self.base);
        let v = get_json(&self.agent, &url, &[], &self.config.retry).map_err(|f| self.server_error("GET /v1/models", f))?;
        let data = v["data"]
            .as_array()
            .ok_or_else(|| VllmError::BadResponse { url: self.base.clone(), message: format!("/v1/models has no data: {}", excerpt(&v.to_string())) })?;
        let models: Vec<String> = data.iter().filter_map(|m| m["id"].as_str().map(str::to_string)).collect();
        let served = data.iter().find(|m| m["id"].as_str() == Some(self.config.served_model.as_str()));
        let Some(served) = served else {
            return Err(VllmError::Server {
                url: self.base.clone(),
                message: format!(
                    "it serves {models:?}, not {:?}: set [rollout.vllm] served_model to one of them, or start vLLM with --served-model-name {}",
                    self.config.served_model, self.config.served_model
                ),
            });
        };
        let max_model_len = served["max_model_len"].as_u64().map(|n| n as usize);
        Ok(ServerInfo { models, max_model_len })
    }

    /// The log-prob of each of `tokens` after the ones before it (the first
    /// has none and is left out) under the served model, unscaled
    /// (temperature 1): vLLM's `prompt_logprobs`.
    pub fn prompt_logprobs(&self, tokens: &[u32]) -> Result<Vec<f32>, VllmError> {
        let body = json!({"model": self.model(), "prompt": tokens, "max_tokens": 1, "temperature": 1.0,
                          "top_p": 1.0, "prompt_logprobs": 0, "seed": 0});
        let url = format!("{}/v1/completions", self.base);
        let v = post_json(&self.agent, &url, &[], &body, &self.config.retry, || ()).map_err(|f| self.server_error("POST /v1/completions (prompt_logprobs)", f))?;
        let bad = |message: String| VllmError::BadResponse { url: self.base.clone(), message };
        let rows = v
            .pointer("/choices/0/prompt_logprobs")
            .and_then(Value::as_array)
            .ok_or_else(|| bad(format!("no choices[0].prompt_logprobs in {}", excerpt(&v.to_string()))))?;
        if rows.len() != tokens.len() {
            return Err(bad(format!("{} prompt log-prob rows for {} tokens", rows.len(), tokens.len())));
        }
        rows.iter()
            .zip(tokens)
            .skip(1)
            .map(|(row, t)| {
                row.get(t.to_string())
                    .and_then(|e| e["logprob"].as_f64())
                    .map(|l| l as f32)
                    .ok_or_else(|| bad(format!("prompt_logprobs row without token {t}: {}", excerpt(&row.to_string()))))
            })
            .collect()
    }

    /// With sampling that is not neutral (temperature or top-p not 1), the
    /// log-probs that come back must be of the distribution sampled from
    /// (vLLM's `--logprobs-mode processed_logprobs`), not of the raw
    /// logits: the most likely next token of `prompt` at temperature 0.5
    /// must have another log-prob than at 1. Ok when it cannot tell (a next
    /// token of probability ~1).
    pub fn check_processed_logprobs(&self, prompt: &[u32]) -> Result<(), VllmError> {
        let c = &self.config;
        if c.temperature == 1.0 && c.top_p == 1.0 || c.temperature == 0.0 {
            return Ok(());
        }
        let top = |temperature: f64| -> Result<f64, VllmError> {
            let body = json!({"model": self.model(), "prompt": prompt, "max_tokens": 1, "temperature": temperature,
                              "top_p": 1.0, "logprobs": 1, "seed": 0});
            let url = format!("{}/v1/completions", self.base);
            let v = post_json(&self.agent, &url, &[], &body, &c.retry, || ()).map_err(|f| self.server_error("POST /v1/completions (log-prob mode)", f))?;
            v.pointer("/choices/0/logprobs/top_logprobs/0")
                .and_then(Value::as_object)
                .and_then(|m| m.values().filter_map(Value::as_f64).reduce(f64::max))
                .ok_or_else(|| VllmError::BadResponse { url: self.base.clone(), message: format!("no top_logprobs in {}", excerpt(&v.to_string())) })
        };
        let (raw, half) = (top(1.0)?, top(0.5)?);
        if raw > -1e-4 {
            tracing::warn!(url = %self.base, "cannot tell vLLM's log-prob mode: the probe's next token has probability ~1");
            return Ok(());
        }
        if (raw - half).abs() < 1e-6 {
            return Err(VllmError::Server {
                url: self.base.clone(),
                message: format!(
                    "it returns log-probs of the raw logits (the same {raw:.6} at temperature 1 and 0.5), not of the distribution it samples from: start vLLM with --logprobs-mode processed_logprobs"
                ),
            });
        }
        Ok(())
    }

    /// The seed of one episode's turn (non-negative 63 bits, as OpenAI's is signed).
    pub fn seed_of(&self, request: &TurnRequest<'_>) -> u64 {
        let turn = request.messages.iter().filter(|m| m["role"] == "assistant").count() as u64;
        self.config.seed.wrapping_add(request.episode.wrapping_mul(1_000_003)).wrapping_add(turn) & (i64::MAX as u64)
    }

    /// The `/v1/completions` body of one episode's turn.
    pub fn request_body(&self, request: &TurnRequest<'_>) -> Value {
        let c = &self.config;
        let mut body = Map::new();
        body.insert("model".into(), self.model().into());
        body.insert("prompt".into(), json!(request.tokens));
        body.insert("max_tokens".into(), request.max_new_tokens.into());
        body.insert("temperature".into(), c.temperature.into());
        body.insert("top_p".into(), c.top_p.into());
        body.insert("seed".into(), self.seed_of(request).into());
        body.insert("logprobs".into(), 0.into());
        body.insert("return_token_ids".into(), true.into());
        body.insert("stop_token_ids".into(), json!(c.stop_token_ids));
        body.insert("skip_special_tokens".into(), false.into());
        body.insert("spaces_between_special_tokens".into(), false.into());
        Value::Object(body)
    }

    /// The turn of a completion: its token ids (ending with the stop token
    /// when the turn ended normally) and their log-probs.
    pub fn parse_turn(&self, response: &Value, max_new_tokens: usize) -> Result<TurnOutput, VllmError> {
        let bad = |message: String| VllmError::BadResponse { url: self.base.clone(), message };
        let choice = response.pointer("/choices/0").ok_or_else(|| bad(format!("no choices[0] in {}", excerpt(&response.to_string()))))?;
        let ids: Vec<u32> = choice["token_ids"]
            .as_array()
            .ok_or_else(|| bad("choices[0] has no token_ids: the server ignores return_token_ids (vLLM 0.10 or newer is needed)".into()))?
            .iter()
            .map(|t| t.as_u64().and_then(|t| u32::try_from(t).ok()))
            .collect::<Option<_>>()
            .ok_or_else(|| bad("choices[0].token_ids holds a non-integer".into()))?;
        let logprobs: Vec<f32> = choice
            .pointer("/logprobs/token_logprobs")
            .and_then(Value::as_array)
            .ok_or_else(|| bad("choices[0] has no logprobs.token_logprobs".into()))?
            .iter()
            .map(|l| l.as_f64().map(|l| l as f32))
            .collect::<Option<_>>()
            .ok_or_else(|| bad("choices[0].logprobs.token_logprobs holds a non-number".into()))?;
        if ids.len() != logprobs.len() {
            return Err(bad(format!("{} token ids but {} log-probs", ids.len(), logprobs.len())));
        }
        if ids.len() > max_new_tokens {
            return Err(bad(format!("{} new tokens for max_tokens {max_new_tokens}", ids.len())));
        }
        let stopped = ids.last().is_some_and(|t| self.config.stop_token_ids.contains(t));
        if choice["finish_reason"] == "stop" && !stopped && ids.len() < max_new_tokens {
            // A stop without its token in token_ids: the driver needs it to
            // close the turn as the model wrote it.
            return Err(bad(format!("finish_reason stop but the last token {:?} is not a stop token id {:?}", ids.last(), self.config.stop_token_ids)));
        }
        Ok(TurnOutput::Tokens { ids, logprobs })
    }

    /// One episode's turn: build, send, read.
    pub fn turn(&self, request: &TurnRequest<'_>) -> Result<TurnOutput, VllmError> {
        let body = self.request_body(request);
        let url = format!("{}/v1/completions", self.base);
        let response = post_json(&self.agent, &url, &[], &body, &self.config.retry, || ()).map_err(|f| self.server_error("POST /v1/completions", f))?;
        self.parse_turn(&response, request.max_new_tokens)
    }
}

impl Policy for VllmEngine {
    fn name(&self) -> String {
        format!("vllm:{}", self.base)
    }

    /// All requests in parallel on at most `max_concurrency` threads; the
    /// first failure stops new requests and is returned.
    fn next_turns(&mut self, requests: &[TurnRequest<'_>]) -> Result<Vec<TurnOutput>, PolicyError> {
        let this = &*self;
        let results = crate::http::parallel(requests.len(), this.config.max_concurrency, |i| this.turn(&requests[i]));
        let name = self.name();
        if let Some(err) = results.iter().flatten().find_map(|r| r.as_ref().err()) {
            return Err(PolicyError { policy: name, message: err.to_string() });
        }
        results
            .into_iter()
            .map(|r| r.and_then(Result::ok).ok_or_else(|| PolicyError { policy: name.clone(), message: "a request was not sent".into() }))
            .collect()
    }

    fn set_temperature(&mut self, temperature: f64) -> bool {
        self.config.temperature = temperature;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{StubReply, StubServer};
    use std::sync::atomic::Ordering;

    /// A server answering each request (`"POST /v1/completions"`, body as
    /// JSON) by `reply`.
    fn stub(reply: impl Fn(&str, &Value) -> (u16, Value) + Send + 'static) -> StubServer {
        StubServer::start(move |r| {
            let (status, body) = reply(&r.what, &r.json());
            StubReply::json(status, &body)
        })
    }

    fn config(url: &str) -> VllmConfig {
        VllmConfig {
            url: url.into(),
            served_model: "smol".into(),
            temperature: 0.7,
            top_p: 1.0,
            seed: 5,
            stop_token_ids: vec![2],
            max_concurrency: 4,
            timeout: Duration::from_secs(10),
            retry: Retry { max_retries: 2, initial_backoff: Duration::from_millis(1), max_backoff: Duration::from_millis(2) },
        }
    }

    fn request<'a>(episode: u64, tokens: &'a [u32], messages: &'a [Value]) -> TurnRequest<'a> {
        TurnRequest { episode, tokens, messages, tools: &[], snapshot: None, max_new_tokens: 8 }
    }

    /// A completion that echoes the prompt's length: ids [len, len+1, 2]
    /// (2 stops), log-probs -0.1 each.
    fn completion(body: &Value) -> Value {
        let n = body["prompt"].as_array().unwrap().len() as u64;
        json!({"choices": [{"index": 0, "text": "", "finish_reason": "stop", "token_ids": [n, n + 1, 2],
                            "logprobs": {"token_logprobs": [-0.1, -0.2, -0.3]}}]})
    }

    /// Token ids in, token ids and log-probs out, one request per episode
    /// with the episode's tokens as the prompt, the stop ids, and a seed
    /// that differs by episode and by turn; a 503 is retried.
    #[test]
    fn turns_are_token_ids_in_and_out() {
        let busy = std::sync::atomic::AtomicBool::new(true);
        let server = stub(move |what, body| {
            assert_eq!(what, "POST /v1/completions");
            if busy.swap(false, Ordering::SeqCst) {
                return (503, json!({"error": {"message": "busy"}}));
            }
            (200, completion(body))
        });
        let mut engine = VllmEngine::new(config(&format!("{}/v1/", server.url))).unwrap();
        let one_turn = [json!({"role": "user"}), json!({"role": "assistant"})];
        let (a, b): (Vec<u32>, Vec<u32>) = (vec![7, 8, 9], vec![7, 8, 9, 10, 11]);
        let out = engine.next_turns(&[request(0, &a, &one_turn[..1]), request(1, &b, &one_turn)]).unwrap();
        assert_eq!(out[0], TurnOutput::Tokens { ids: vec![3, 4, 2], logprobs: vec![-0.1, -0.2, -0.3] });
        assert_eq!(out[1], TurnOutput::Tokens { ids: vec![5, 6, 2], logprobs: vec![-0.1, -0.2, -0.3] });
        let bodies: Vec<Value> = server.requests().iter().map(|r| r.json()).collect();
        assert_eq!(bodies.len(), 3, "one retried");
        for b in &bodies {
            assert_eq!((b["model"].as_str(), b["logprobs"].as_u64(), b["return_token_ids"].as_bool()), (Some("smol"), Some(0), Some(true)));
            assert_eq!(b["stop_token_ids"], json!([2]));
            assert_eq!((b["temperature"].as_f64(), b["max_tokens"].as_u64()), (Some(0.7), Some(8)));
        }
        let seed = |len: usize| bodies.iter().find(|b| b["prompt"].as_array().unwrap().len() == len).unwrap()["seed"].as_u64().unwrap();
        assert_eq!(seed(3), 5, "episode 0, turn 0");
        assert_eq!(seed(5), 5 + 1_000_003 + 1, "episode 1, turn 1");
    }

    /// Answers the driver cannot use are errors naming what is wrong.
    #[test]
    fn malformed_completions_are_named() {
        let engine = VllmEngine::new(config("http://127.0.0.1:1")).unwrap();
        let err = |v: Value| engine.parse_turn(&v, 8).unwrap_err().to_string();
        assert!(err(json!({"choices": [{"text": "x", "logprobs": {"token_logprobs": [-1.0]}}]})).contains("return_token_ids"));
        assert!(err(json!({"choices": [{"token_ids": [1, 2], "logprobs": {"token_logprobs": [-1.0]}}]})).contains("2 token ids but 1 log-probs"));
        assert!(err(json!({"choices": [{"token_ids": [1], "finish_reason": "stop", "logprobs": {"token_logprobs": [-1.0]}}]})).contains("not a stop token"));
        assert!(err(json!({"choices": [{"token_ids": vec![1; 9], "logprobs": {"token_logprobs": vec![-1.0; 9]}}]})).contains("9 new tokens for max_tokens 8"));
        assert!(err(json!({"object": "error"})).contains("no choices[0]"));
        // A turn cut at max_tokens has no stop token, and is fine.
        let cut = engine.parse_turn(&json!({"choices": [{"token_ids": vec![1; 8], "finish_reason": "length", "logprobs": {"token_logprobs": vec![-1.0; 8]}}]}), 8);
        assert!(cut.is_ok());
    }

    /// `check`: the served model must be listed; no server, another model,
    /// and raw log-probs are each a clear error naming the fix.
    #[test]
    fn check_names_the_fix() {
        let nobody = VllmEngine::new(VllmConfig { retry: Retry { max_retries: 0, ..config("").retry }, ..config("http://127.0.0.1:1") }).unwrap();
        let e = nobody.check().unwrap_err().to_string();
        assert!(e.contains("127.0.0.1:1") && e.contains("is vLLM running there"), "{e}");

        let url = stub(|what, body| match what {
            "GET /v1/models" => (200, json!({"data": [{"id": "smol", "max_model_len": 8192}, {"id": "other"}]})),
            // Raw log-probs: the same whatever the temperature.
            _ => {
                assert!(body["logprobs"] == 1 && body["max_tokens"] == 1, "{body}");
                (200, json!({"choices": [{"logprobs": {"top_logprobs": [{"a": -0.7}]}}]}))
            }
        })
        .url;
        let engine = VllmEngine::new(config(&url)).unwrap();
        let info = engine.check().unwrap();
        assert_eq!((info.models.len(), info.max_model_len), (2, Some(8192)));
        let e = engine.check_processed_logprobs(&[1, 2]).unwrap_err().to_string();
        assert!(e.contains("--logprobs-mode processed_logprobs"), "{e}");
        let e = VllmEngine::new(VllmConfig { served_model: "smollm2".into(), ..config(&url) }).unwrap().check().unwrap_err().to_string();
        assert!(e.contains("\"smol\"") && e.contains("--served-model-name smollm2"), "{e}");
        // Greedy sampling needs no processed log-probs.
        VllmEngine::new(VllmConfig { temperature: 0.0, ..config(&url) }).unwrap().check_processed_logprobs(&[1, 2]).unwrap();

        let url = stub(|_, body| {
            let t = body["temperature"].as_f64().unwrap();
            (200, json!({"choices": [{"logprobs": {"top_logprobs": [{"a": -0.7 * t}]}}]}))
        })
        .url;
        VllmEngine::new(config(&url)).unwrap().check_processed_logprobs(&[1, 2]).unwrap();
        assert!(VllmEngine::new(config("localhost:8000")).unwrap_err().to_string().contains("http://"));
    }

    /// Whole-model sync: /pause (waiting, caches cleared), /collective_rpc
    /// reload_weights with the folder, /resume, in that order; /resume
    /// also after a failed reload; a server without the dev endpoints is
    /// named with the fix.
    #[test]
    fn reload_weights_pauses_reloads_and_resumes() {
        let fail = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let f = fail.clone();
        let server = stub(move |what, _| match what {
            "POST /collective_rpc" if f.load(Ordering::SeqCst) => (400, json!({"error": {"message": "no such file"}})),
            "POST /collective_rpc" => (200, json!({"results": [null]})),
            _ => (200, json!({"status": "ok"})),
        });
        let engine = VllmEngine::new(config(&server.url)).unwrap();
        engine.reload_weights(Path::new("/runs/a/engine-weights/step_00000003")).unwrap();
        let seen = server.requests();
        let what: Vec<&str> = seen.iter().map(|r| r.what.as_str()).collect();
        assert_eq!(what, ["POST /pause?mode=wait&clear_cache=true", "POST /collective_rpc", "POST /resume"]);
        assert_eq!(seen[1].json(), json!({"method": "reload_weights", "kwargs": {"weights_path": "/runs/a/engine-weights/step_00000003"}}));
        fail.store(true, Ordering::SeqCst);
        let e = engine.reload_weights(Path::new("/x")).unwrap_err().to_string();
        assert!(e.contains("no such file") && e.contains("/collective_rpc"), "{e}");
        assert_eq!(server.requests().last().unwrap().what, "POST /resume", "resumed after the failed reload");

        let plain = stub(|_, _| (404, json!({"detail": "Not Found"})));
        let e = VllmEngine::new(config(&plain.url)).unwrap().reload_weights(Path::new("/x")).unwrap_err().to_string();
        assert!(e.contains("VLLM_SERVER_DEV_MODE=1"), "{e}");
    }

    /// LoRA sync: each version loads under its own name, the requests name
    /// the newest, the one before is unloaded; a server without runtime
    /// LoRA loading is named with the fix.
    #[test]
    fn adapters_load_under_new_names_and_requests_follow() {
        let server = StubServer::start(|r| match r.what.as_str() {
            "POST /v1/load_lora_adapter" | "POST /v1/unload_lora_adapter" => StubReply::text(200, "Success: LoRA adapter added."),
            _ => StubReply::json(200, &completion(&r.json())),
        });
        let mut engine = VllmEngine::new(config(&server.url)).unwrap();
        let a = [7u32, 8];
        let turn = |engine: &mut VllmEngine| engine.next_turns(&[request(0, &a, &[])]).unwrap();
        turn(&mut engine);
        engine.load_adapter("fusegrpo-step-0", Path::new("/w/step_00000000")).unwrap();
        turn(&mut engine);
        engine.load_adapter("fusegrpo-step-1", Path::new("/w/step_00000001")).unwrap();
        turn(&mut engine);
        let seen: Vec<(String, Value)> = server.requests().iter().map(|r| (r.what.clone(), r.json())).collect();
        let models: Vec<&str> = seen.iter().filter(|(w, _)| w == "POST /v1/completions").map(|(_, b)| b["model"].as_str().unwrap()).collect();
        assert_eq!(models, ["smol", "fusegrpo-step-0", "fusegrpo-step-1"]);
        assert_eq!(seen[1], ("POST /v1/load_lora_adapter".into(), json!({"lora_name": "fusegrpo-step-0", "lora_path": "/w/step_00000000"})));
        assert_eq!(seen[4], ("POST /v1/unload_lora_adapter".into(), json!({"lora_name": "fusegrpo-step-0"})));
        assert_eq!(engine.model(), "fusegrpo-step-1");

        let plain = stub(|_, _| (404, json!({"detail": "Not Found"})));
        let e = VllmEngine::new(config(&plain.url)).unwrap().load_adapter("a", Path::new("/x")).unwrap_err().to_string();
        assert!(e.contains("--enable-lora") && e.contains("VLLM_ALLOW_RUNTIME_LORA_UPDATING=1"), "{e}");
    }
}
