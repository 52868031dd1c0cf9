//! JSON over HTTP with retries: what the HTTP teacher
//! ([`crate::teacher::http`]) and the vLLM rollout engine
//! ([`crate::engine::vllm`]) send their requests with.
//!
//! A POST is retried with exponential backoff on 408/429/5xx and on
//! transport failures (no connection, timeout), honouring `Retry-After`;
//! other statuses and unreadable answers fail at once.

use serde_json::Value;
use std::time::Duration;

/// How often and how patiently a request is tried again.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Retry {
    /// Retries of one request after the first try.
    pub max_retries: u32,
    /// Wait before the first retry; doubled each retry up to `max_backoff`.
    pub initial_backoff: Duration,
    /// Longest wait between tries (also caps `Retry-After`).
    pub max_backoff: Duration,
}

/// Why a request failed, after any retries (the caller names the endpoint).
#[derive(Debug, Clone, PartialEq)]
pub enum Failure {
    /// The endpoint answered with an error status.
    Status {
        status: u16,
        tries: u32,
        /// The OpenAI-style `error.message`, or the start of the body.
        message: String,
    },
    /// No HTTP answer: connection, timeout, I/O.
    Transport { tries: u32, message: String },
    /// An answer that is not JSON.
    NotJson { message: String },
}

/// POSTs `body` as JSON to `url` (with `headers`), retrying as `retry`
/// says; `before_try` runs before every try (pacing). The parsed answer.
pub fn post_json(
    agent: &ureq::Agent,
    url: &str,
    headers: &[(&str, String)],
    body: &Value,
    retry: &Retry,
    before_try: impl Fn(),
) -> Result<Value, Failure> {
    send_json(agent, url, headers, Some(body), retry, before_try)
}

/// GETs `url` and parses its JSON answer, retrying as [`post_json`] does.
pub fn get_json(agent: &ureq::Agent, url: &str, headers: &[(&str, String)], retry: &Retry) -> Result<Value, Failure> {
    send_json(agent, url, headers, None, retry, || ())
}

/// POSTs `body` as JSON to `url`, retrying as [`post_json`] does, for an
/// endpoint that answers in plain text: the answer's text.
pub fn post_for_text(agent: &ureq::Agent, url: &str, body: &Value, retry: &Retry) -> Result<String, Failure> {
    send(agent, url, &[], Some(body), retry, || ())
}

/// [`send`], the answer parsed as JSON (an empty answer is `null`).
fn send_json(
    agent: &ureq::Agent,
    url: &str,
    headers: &[(&str, String)],
    body: Option<&Value>,
    retry: &Retry,
    before_try: impl Fn(),
) -> Result<Value, Failure> {
    let text = send(agent, url, headers, body, retry, before_try)?;
    if text.trim().is_empty() {
        return Ok(Value::Null);
    }
    serde_json::from_str(&text).map_err(|e| Failure::NotJson { message: format!("not JSON ({e}): {}", excerpt(&text)) })
}

/// One request (a POST of `body`, or a GET), tried again as `retry` says:
/// the answer's text.
fn send(
    agent: &ureq::Agent,
    url: &str,
    headers: &[(&str, String)],
    body: Option<&Value>,
    retry: &Retry,
    before_try: impl Fn(),
) -> Result<String, Failure> {
    let text = body.map(Value::to_string);
    let mut backoff = retry.initial_backoff;
    let mut tries = 0;
    loop {
        tries += 1;
        before_try();
        let mut req = match &text {
            Some(_) => agent.post(url).set("Content-Type", "application/json"),
            None => agent.get(url),
        };
        for (k, v) in headers {
            req = req.set(k, v);
        }
        let sent = match &text {
            Some(t) => req.send_string(t),
            None => req.call(),
        };
        let (retry_after, retryable, failure) = match sent {
            Ok(resp) => {
                return resp.into_string().map_err(|e| Failure::Transport { tries, message: format!("reading the response: {e}") });
            }
            Err(ureq::Error::Status(status, resp)) => {
                let retry_after = resp
                    .header("retry-after")
                    .and_then(|s| s.trim().parse::<f64>().ok())
                    .filter(|s| s.is_finite() && *s >= 0.0)
                    .map(Duration::from_secs_f64);
                let body = resp.into_string().unwrap_or_default();
                (retry_after, retryable_status(status), Failure::Status { status, tries, message: error_message(&body) })
            }
            Err(ureq::Error::Transport(t)) => {
                let retryable = !matches!(
                    t.kind(),
                    ureq::ErrorKind::InvalidUrl | ureq::ErrorKind::UnknownScheme | ureq::ErrorKind::InsecureRequestHttpsOnly
                );
                (None, retryable, Failure::Transport { tries, message: t.to_string() })
            }
        };
        if !retryable || tries > retry.max_retries {
            return Err(failure);
        }
        let wait = retry_after.unwrap_or(backoff).min(retry.max_backoff);
        tracing::warn!(url, error = ?failure, wait_secs = wait.as_secs_f64(), "request failed; retrying");
        std::thread::sleep(wait);
        backoff = (backoff * 2).min(retry.max_backoff);
    }
}

fn retryable_status(status: u16) -> bool {
    status == 408 || status == 429 || (500..600).contains(&status)
}

/// The OpenAI error body's `error.message` (vLLM's too), or the start of
/// the body.
pub fn error_message(body: &str) -> String {
    serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| {
            v.pointer("/error/message")
                .or_else(|| v.get("message"))
                .or_else(|| v.get("detail"))
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .unwrap_or_else(|| excerpt(body))
}

/// At most 300 characters of `s`.
pub fn excerpt(s: &str) -> String {
    const MAX: usize = 300;
    match s.char_indices().nth(MAX) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}

/// Whether `url` answers a GET with a success status within `timeout`
/// (a server's `/health`).
pub fn answers(url: &str, timeout: Duration) -> bool {
    ureq::AgentBuilder::new().timeout(timeout).build().get(url).call().is_ok()
}

/// `f(0..n)` on at most `workers` threads, results in index order; after
/// the first error no new call starts (those left are `None`). What the
/// HTTP policies send each turn's requests with.
pub fn parallel<T: Send, E: Send>(n: usize, workers: usize, f: impl Fn(usize) -> Result<T, E> + Sync) -> Vec<Option<Result<T, E>>> {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let results: std::sync::Mutex<Vec<Option<Result<T, E>>>> = std::sync::Mutex::new((0..n).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..workers.min(n) {
            s.spawn(|| loop {
                if failed.load(Ordering::Relaxed) {
                    break;
                }
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                let result = f(i);
                if result.is_err() {
                    failed.store(true, Ordering::Relaxed);
                }
                results.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(result);
            });
        }
    });
    results.into_inner().unwrap_or_else(|e| e.into_inner())
}
