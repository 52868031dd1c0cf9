//! A teacher behind any OpenAI-compatible `/v1/chat/completions` endpoint
//! with tool calling (a hosted model, vLLM, `fusegrpo serve`).
//!
//! Each turn, every live episode's conversation is converted to OpenAI's
//! format ([`super::openai::to_openai_messages`]) and sent with the tools;
//! requests for all episodes run in parallel on a bounded number of threads,
//! optionally paced to a request rate, and retried with exponential backoff
//! on 408/429/5xx and transport failures (honouring `Retry-After`). The
//! response's `content` and `tool_calls` become the text Qwen3 would have
//! written ([`super::openai::qwen3_text_from_openai`]), returned as
//! [`TurnOutput::Text`].

use super::openai::{qwen3_text_from_openai, to_openai_messages, FormatError};
use crate::http::{excerpt, post_json, Failure, Retry};
use crate::policy::{Policy, PolicyError, TurnOutput, TurnRequest};
use serde_json::{json, Map, Value};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How to reach and drive the teacher.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpTeacherConfig {
    /// The endpoint: a full `.../chat/completions` URL, a base ending in
    /// `/v1`, or a bare `http(s)://host:port` (`/v1/chat/completions` is
    /// appended as needed).
    pub endpoint: String,
    /// The `model` field of each request.
    pub model: String,
    /// Sampling temperature (`None`: the endpoint's default).
    pub temperature: Option<f64>,
    /// Nucleus sampling mass (`None`: the endpoint's default).
    pub top_p: Option<f64>,
    /// Cap on new tokens per turn; each request asks for the smaller of this
    /// and the turn's `max_new_tokens`.
    pub max_tokens: Option<usize>,
    /// Base seed; each request sends a seed derived from it, the episode and
    /// the turn, so reruns ask for the same draws (endpoints honour it on a
    /// best-effort basis). `None`: no seed sent.
    pub seed: Option<u64>,
    /// Name of the environment variable holding the API key, sent as
    /// `Authorization: Bearer <key>` (`None`: no header).
    pub api_key_env: Option<String>,
    /// Requests in flight at most.
    pub concurrency: usize,
    /// Requests started per second at most, retries included (`None`: no pacing).
    pub requests_per_second: Option<f64>,
    /// Retries of one request after the first try.
    pub max_retries: u32,
    /// Wait before the first retry; doubled each retry up to `max_backoff`.
    pub initial_backoff: Duration,
    /// Longest wait between tries (also caps `Retry-After`).
    pub max_backoff: Duration,
    /// Whole-request timeout (connect, send, wait, read).
    pub timeout: Duration,
    /// Extra fields merged into every request body, e.g.
    /// `{"chat_template_kwargs": {"enable_thinking": false}}` for vLLM.
    pub extra_body: Map<String, Value>,
}

impl HttpTeacherConfig {
    /// Defaults for everything but the endpoint and the model name: endpoint
    /// sampling defaults, 8 requests in flight, no pacing, 5 retries from
    /// 0.5 s up to 30 s, 300 s timeout.
    pub fn new(endpoint: impl Into<String>, model: impl Into<String>) -> Self {
        HttpTeacherConfig {
            endpoint: endpoint.into(),
            model: model.into(),
            temperature: None,
            top_p: None,
            max_tokens: None,
            seed: None,
            api_key_env: None,
            concurrency: 8,
            requests_per_second: None,
            max_retries: 5,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(30),
            timeout: Duration::from_secs(300),
            extra_body: Map::new(),
        }
    }
}

/// Why a teacher request failed; each names the endpoint.
#[derive(Debug, thiserror::Error)]
pub enum HttpTeacherError {
    /// The configuration cannot work.
    #[error("http teacher: {0}")]
    Config(String),
    /// The endpoint answered with an error status (after any retries).
    #[error("{endpoint}: HTTP {status} after {tries} tries: {message}")]
    Status {
        endpoint: String,
        status: u16,
        tries: u32,
        /// The OpenAI error message, or the start of the body.
        message: String,
    },
    /// No HTTP answer: connection, timeout, I/O (after any retries).
    #[error("{endpoint}: {message} (after {tries} tries)")]
    Transport {
        endpoint: String,
        tries: u32,
        message: String,
    },
    /// The answer is not a chat completion we can read.
    #[error("{endpoint}: unexpected response: {message}")]
    BadResponse { endpoint: String, message: String },
    /// An episode's messages cannot be written in OpenAI's format.
    #[error("episode {episode}: {source}")]
    Messages {
        episode: u64,
        #[source]
        source: FormatError,
    },
}

/// The normalized chat-completions URL of `endpoint` (see
/// [`HttpTeacherConfig::endpoint`]).
pub fn chat_completions_url(endpoint: &str) -> Result<String, HttpTeacherError> {
    let e = endpoint.trim().trim_end_matches('/');
    if !(e.starts_with("http://") || e.starts_with("https://")) {
        return Err(HttpTeacherError::Config(format!(
            "endpoint {endpoint:?} must start with http:// or https://"
        )));
    }
    Ok(if e.ends_with("/chat/completions") {
        e.to_string()
    } else if e.ends_with("/v1") {
        format!("{e}/chat/completions")
    } else {
        format!("{e}/v1/chat/completions")
    })
}

/// Paces request starts to a rate shared by all worker threads.
#[derive(Debug)]
struct Pacer {
    interval: Option<Duration>,
    next: Mutex<Instant>,
}

impl Pacer {
    fn new(per_second: Option<f64>) -> Self {
        Pacer {
            interval: per_second.map(|r| Duration::from_secs_f64(1.0 / r)),
            next: Mutex::new(Instant::now()),
        }
    }

    /// Sleep until this caller's slot.
    fn wait(&self) {
        let Some(interval) = self.interval else {
            return;
        };
        let now = Instant::now();
        let at = {
            let mut next = self.next.lock().unwrap_or_else(|e| e.into_inner());
            let at = (*next).max(now);
            *next = at + interval;
            at
        };
        std::thread::sleep(at.saturating_duration_since(now));
    }
}

/// The HTTP teacher policy.
#[derive(Debug)]
pub struct HttpTeacher {
    config: HttpTeacherConfig,
    url: String,
    api_key: Option<String>,
    agent: ureq::Agent,
    pacer: Pacer,
}

impl HttpTeacher {
    /// Check the configuration and read the API key from its variable.
    pub fn new(config: HttpTeacherConfig) -> Result<Self, HttpTeacherError> {
        let url = chat_completions_url(&config.endpoint)?;
        if config.concurrency == 0 {
            return Err(HttpTeacherError::Config(
                "concurrency must be at least 1".into(),
            ));
        }
        if let Some(r) = config.requests_per_second {
            if !(r.is_finite() && r > 0.0) {
                return Err(HttpTeacherError::Config(format!(
                    "requests_per_second must be > 0, got {r}"
                )));
            }
        }
        let api_key = match &config.api_key_env {
            None => None,
            Some(var) => Some(std::env::var(var).map_err(|_| {
                HttpTeacherError::Config(format!(
                    "the API key variable {var} is not set (or not UTF-8)"
                ))
            })?),
        };
        let agent = ureq::AgentBuilder::new().timeout(config.timeout).build();
        let pacer = Pacer::new(config.requests_per_second);
        Ok(HttpTeacher {
            config,
            url,
            api_key,
            agent,
            pacer,
        })
    }

    /// The chat-completions URL requests go to.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The request body for one episode's turn.
    pub fn request_body(&self, request: &TurnRequest<'_>) -> Result<Value, HttpTeacherError> {
        let messages =
            to_openai_messages(request.messages).map_err(|source| HttpTeacherError::Messages {
                episode: request.episode,
                source,
            })?;
        let c = &self.config;
        let max_tokens = c
            .max_tokens
            .map_or(request.max_new_tokens, |m| m.min(request.max_new_tokens));
        let mut body = Map::new();
        body.insert("model".into(), c.model.clone().into());
        body.insert("messages".into(), Value::Array(messages));
        if !request.tools.is_empty() {
            body.insert("tools".into(), Value::Array(request.tools.to_vec()));
        }
        body.insert("max_tokens".into(), max_tokens.into());
        if let Some(t) = c.temperature {
            body.insert("temperature".into(), t.into());
        }
        if let Some(p) = c.top_p {
            body.insert("top_p".into(), p.into());
        }
        if let Some(seed) = c.seed {
            let turn = request
                .messages
                .iter()
                .filter(|m| m["role"] == "assistant")
                .count() as u64;
            let derived = seed
                .wrapping_add(request.episode.wrapping_mul(1_000_003))
                .wrapping_add(turn);
            // OpenAI's seed is a signed 64-bit integer.
            body.insert("seed".into(), json!(derived & (i64::MAX as u64)));
        }
        for (k, v) in &c.extra_body {
            body.insert(k.clone(), v.clone());
        }
        Ok(Value::Object(body))
    }

    /// POST one body, retrying as configured; the parsed response.
    pub fn post(&self, body: &Value) -> Result<Value, HttpTeacherError> {
        let headers: Vec<(&str, String)> = self.api_key.iter().map(|key| ("Authorization", format!("Bearer {key}"))).collect();
        let retry = Retry {
            max_retries: self.config.max_retries,
            initial_backoff: self.config.initial_backoff,
            max_backoff: self.config.max_backoff,
        };
        let endpoint = self.url.clone();
        post_json(&self.agent, &self.url, &headers, body, &retry, || self.pacer.wait()).map_err(|f| match f {
            Failure::Status { status, tries, message } => HttpTeacherError::Status { endpoint, status, tries, message },
            Failure::Transport { tries, message } => HttpTeacherError::Transport { endpoint, tries, message },
            Failure::NotJson { message } => HttpTeacherError::BadResponse { endpoint, message },
        })
    }

    /// One episode's turn: build, send, convert back to Qwen3 text.
    pub fn turn(&self, request: &TurnRequest<'_>) -> Result<String, HttpTeacherError> {
        let body = self.request_body(request)?;
        let response = self.post(&body)?;
        self.response_text(&response)
    }

    /// The Qwen3 text of a chat-completion response (its first choice).
    pub fn response_text(&self, response: &Value) -> Result<String, HttpTeacherError> {
        let bad = |message: String| HttpTeacherError::BadResponse {
            endpoint: self.url.clone(),
            message,
        };
        let message = response.pointer("/choices/0/message").ok_or_else(|| {
            bad(format!(
                "no choices[0].message in {}",
                excerpt(&response.to_string())
            ))
        })?;
        qwen3_text_from_openai(message).map_err(|e| bad(e.to_string()))
    }
}

impl Policy for HttpTeacher {
    fn name(&self) -> String {
        format!("http:{}", self.url)
    }

    /// All requests in parallel on at most `concurrency` threads; the first
    /// failure stops new requests and is returned.
    fn next_turns(&mut self, requests: &[TurnRequest<'_>]) -> Result<Vec<TurnOutput>, PolicyError> {
        let this = &*self;
        let results = crate::http::parallel(requests.len(), this.config.concurrency, |i| this.turn(&requests[i]));
        let name = self.name();
        if let Some(err) = results.iter().flatten().find_map(|r| r.as_ref().err()) {
            return Err(PolicyError {
                policy: name,
                message: err.to_string(),
            });
        }
        results
            .into_iter()
            .map(|r| match r {
                Some(Ok(text)) => Ok(TurnOutput::Text(text)),
                _ => Err(PolicyError {
                    policy: name.clone(),
                    message: "a request was not sent".into(),
                }),
            })
            .collect()
    }

    fn set_temperature(&mut self, temperature: f64) -> bool {
        self.config.temperature = Some(temperature);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{StubReply, StubServer};

    #[test]
    fn endpoint_forms_normalize() {
        for (given, want) in [
            ("http://h:1", "http://h:1/v1/chat/completions"),
            ("http://h:1/v1/", "http://h:1/v1/chat/completions"),
            (
                "https://api.x.com/v1/chat/completions",
                "https://api.x.com/v1/chat/completions",
            ),
        ] {
            assert_eq!(chat_completions_url(given).unwrap(), want);
        }
        assert!(matches!(
            chat_completions_url("h:1"),
            Err(HttpTeacherError::Config(_))
        ));
    }

    #[test]
    fn config_is_checked_and_key_variable_must_exist() {
        let mut c = HttpTeacherConfig::new("http://127.0.0.1:9", "m");
        c.api_key_env = Some("FUSEGRPO_TEST_SURELY_UNSET_KEY".into());
        let err = HttpTeacher::new(c.clone()).unwrap_err().to_string();
        assert!(err.contains("FUSEGRPO_TEST_SURELY_UNSET_KEY"), "{err}");
        c.api_key_env = None;
        c.concurrency = 0;
        assert!(HttpTeacher::new(c).is_err());
    }

    #[test]
    fn request_body_carries_tools_caps_and_seeds() {
        let mut c = HttpTeacherConfig::new("http://127.0.0.1:9/v1", "teacher");
        c.max_tokens = Some(100);
        c.temperature = Some(0.0);
        c.seed = Some(7);
        c.extra_body.insert(
            "chat_template_kwargs".into(),
            json!({"enable_thinking": false}),
        );
        let t = HttpTeacher::new(c).unwrap();
        let messages = [json!({"role": "user", "content": "q"})];
        let tools = [json!({"type": "function", "function": {"name": "grep", "parameters": {}}})];
        let req = |episode, max_new_tokens| TurnRequest {
            episode,
            tokens: &[],
            messages: &messages,
            tools: &tools,
            snapshot: None,
            max_new_tokens,
        };
        let body = t.request_body(&req(3, 50)).unwrap();
        assert_eq!(body["model"], "teacher");
        assert_eq!(body["max_tokens"], 50);
        assert_eq!(body["tools"][0]["function"]["name"], "grep");
        assert_eq!(body["temperature"], 0.0);
        assert_eq!(body["chat_template_kwargs"]["enable_thinking"], false);
        assert_eq!(t.request_body(&req(3, 500)).unwrap()["max_tokens"], 100);
        assert_eq!(body["seed"], t.request_body(&req(3, 50)).unwrap()["seed"]);
        assert_ne!(body["seed"], t.request_body(&req(4, 50)).unwrap()["seed"]);
    }

    /// A server answering canned (status, body) pairs in order, with
    /// `Retry-After: 0`.
    fn canned_server(replies: Vec<(u16, String)>) -> StubServer {
        StubServer::canned(replies.into_iter().map(|(status, body)| StubReply::text(status, body).header("Retry-After", "0")).collect())
    }

    #[test]
    fn retries_5xx_and_429_then_converts_the_answer() {
        let ok = json!({"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": "Looking.",
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": "glob", "arguments": "{\"pattern\":\"*.py\"}"}}]}}]});
        let server = canned_server(vec![
            (503, "{\"error\": {\"message\": \"busy\"}}".into()),
            (429, "slow down".into()),
            (200, ok.to_string()),
        ]);
        let mut c = HttpTeacherConfig::new(server.url.clone(), "m");
        c.initial_backoff = Duration::from_millis(1);
        let mut t = HttpTeacher::new(c).unwrap();
        let messages = [json!({"role": "user", "content": "q"})];
        let req = TurnRequest {
            episode: 0,
            tokens: &[],
            messages: &messages,
            tools: &[],
            snapshot: None,
            max_new_tokens: 8,
        };
        let out = t.next_turns(&[req]).unwrap();
        assert_eq!(
            out,
            vec![TurnOutput::Text("Looking.\n<tool_call>\n{\"name\": \"glob\", \"arguments\": {\"pattern\": \"*.py\"}}\n</tool_call>".into())]
        );
        let seen: Vec<String> = server.requests().into_iter().map(|r| r.body).collect();
        assert_eq!(seen.len(), 3);
        assert_eq!(seen[0], seen[2]);
    }

    #[test]
    fn errors_name_the_endpoint_and_status() {
        let server = canned_server(vec![(
            401,
            "{\"error\": {\"message\": \"bad key\"}}".into(),
        )]);
        let url = server.url.clone();
        let mut t = HttpTeacher::new(HttpTeacherConfig::new(url.clone(), "m")).unwrap();
        let messages = [json!({"role": "user", "content": "q"})];
        let req = TurnRequest {
            episode: 0,
            tokens: &[],
            messages: &messages,
            tools: &[],
            snapshot: None,
            max_new_tokens: 8,
        };
        let err = t.next_turns(&[req]).unwrap_err().message;
        assert!(
            err.contains(&url) && err.contains("HTTP 401") && err.contains("bad key"),
            "{err}"
        );
        assert_eq!(server.requests().len(), 1);
    }
}
