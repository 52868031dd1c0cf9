//! Reading an OpenAI chat-completions request: every field we use is
//! checked, and a bad one gives a 400 naming it (`param`), as OpenAI does.

use lm::sampling::SamplerConfig;
use rollout::teacher::openai::from_openai_messages;
use serde_json::{json, Value};

/// The kind of an API error, written as OpenAI's `error.type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApiErrorKind {
    /// The request is malformed or asks for something unsupported (400/413).
    InvalidRequest,
    /// No such endpoint (404) or method (405).
    NotFound,
    /// Our fault: generation or decoding failed (500).
    Server,
}

impl ApiErrorKind {
    /// OpenAI's name for it.
    pub fn as_str(self) -> &'static str {
        match self {
            ApiErrorKind::InvalidRequest => "invalid_request_error",
            ApiErrorKind::NotFound => "not_found_error",
            ApiErrorKind::Server => "server_error",
        }
    }
}

/// An error answer: HTTP status and OpenAI's error body.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("HTTP {status} ({}): {message}", kind.as_str())]
pub struct ApiError {
    pub status: u16,
    pub kind: ApiErrorKind,
    /// The request field at fault (a JSON path such as `messages[1].role`).
    pub param: Option<String>,
    pub message: String,
}

impl ApiError {
    /// A 400 about `param`.
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> Self {
        let param = param.into();
        let message = format!("{param}: {}", message.into());
        ApiError {
            status: 400,
            kind: ApiErrorKind::InvalidRequest,
            param: Some(param),
            message,
        }
    }

    /// A 400 about the whole body.
    pub fn bad_body(message: impl Into<String>) -> Self {
        ApiError {
            status: 400,
            kind: ApiErrorKind::InvalidRequest,
            param: None,
            message: message.into(),
        }
    }

    /// A 500.
    pub fn server(message: impl Into<String>) -> Self {
        ApiError {
            status: 500,
            kind: ApiErrorKind::Server,
            param: None,
            message: message.into(),
        }
    }

    /// `{"error": {"message", "type", "param", "code"}}`.
    pub fn body(&self) -> Value {
        json!({"error": {"message": self.message, "type": self.kind.as_str(), "param": self.param, "code": Value::Null}})
    }
}

/// A checked chat-completions request.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatCompletionRequest {
    /// The `model` field, if given (any name is served by our one model).
    pub model: Option<String>,
    /// Transformers-style messages for the chat template.
    pub messages: Vec<Value>,
    /// Tools to declare (`None` when absent, empty, or `tool_choice` is `"none"`).
    pub tools: Option<Vec<Value>>,
    /// temperature (default 1.0, as OpenAI), top_p (1.0), top_k (vLLM's; off).
    pub sampler: SamplerConfig,
    /// `max_tokens` or `max_completion_tokens`.
    pub max_tokens: Option<usize>,
    /// Seed of this request's draws.
    pub seed: Option<u64>,
    /// `chat_template_kwargs.enable_thinking` (vLLM's extension).
    pub enable_thinking: Option<bool>,
    /// Return the sampled tokens' log-probs (`logprobs: true`).
    pub logprobs: bool,
}

/// Parse and check a request body.
pub fn parse_request(body: &[u8]) -> Result<ChatCompletionRequest, ApiError> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_body(format!("the request body is not valid JSON: {e}")))?;
    let Value::Object(obj) = &v else {
        return Err(ApiError::bad_body("the request body must be a JSON object"));
    };
    let field = |name: &str| obj.get(name).filter(|v| !v.is_null());

    let model = match field("model") {
        None => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return Err(ApiError::invalid("model", "expected a string")),
    };
    let messages = from_openai_messages(obj.get("messages").unwrap_or(&Value::Null))
        .map_err(|e| ApiError::invalid(e.field, e.message))?;

    let tool_choice_none = match field("tool_choice") {
        None => false,
        Some(Value::String(s)) if s == "auto" => false,
        Some(Value::String(s)) if s == "none" => true,
        Some(_) => {
            return Err(ApiError::invalid(
                "tool_choice",
                "only \"auto\" and \"none\" are supported",
            ))
        }
    };
    let tools = match field("tools") {
        None => None,
        Some(Value::Array(tools)) => {
            for (i, t) in tools.iter().enumerate() {
                if t.get("type").is_some_and(|ty| ty != "function") {
                    return Err(ApiError::invalid(
                        format!("tools[{i}].type"),
                        "only \"function\" tools are supported",
                    ));
                }
                if !t.pointer("/function/name").is_some_and(Value::is_string) {
                    return Err(ApiError::invalid(
                        format!("tools[{i}].function.name"),
                        "missing or not a string",
                    ));
                }
            }
            (!tools.is_empty() && !tool_choice_none).then(|| tools.clone())
        }
        Some(_) => return Err(ApiError::invalid("tools", "expected an array")),
    };

    let number = |name: &str| -> Result<Option<f64>, ApiError> {
        match field(name) {
            None => Ok(None),
            Some(v) => v
                .as_f64()
                .filter(|x| x.is_finite())
                .map(Some)
                .ok_or_else(|| ApiError::invalid(name, "expected a number")),
        }
    };
    let integer = |name: &str| -> Result<Option<i64>, ApiError> {
        match field(name) {
            None => Ok(None),
            Some(v) => v
                .as_i64()
                .or_else(|| v.as_u64().map(|u| u as i64))
                .map(Some)
                .ok_or_else(|| ApiError::invalid(name, "expected an integer")),
        }
    };
    let temperature = number("temperature")?.unwrap_or(1.0);
    if temperature < 0.0 {
        return Err(ApiError::invalid(
            "temperature",
            format!("must be >= 0, got {temperature}"),
        ));
    }
    let top_p = number("top_p")?.unwrap_or(1.0);
    if !(top_p > 0.0 && top_p <= 1.0) {
        return Err(ApiError::invalid(
            "top_p",
            format!("must be in (0, 1], got {top_p}"),
        ));
    }
    let top_k = match integer("top_k")? {
        None | Some(-1) | Some(0) => 0,
        Some(k) if k > 0 => k as usize,
        Some(k) => {
            return Err(ApiError::invalid(
                "top_k",
                format!("must be >= 0 (or -1 for off), got {k}"),
            ))
        }
    };
    let max_tokens = match (integer("max_completion_tokens")?, integer("max_tokens")?) {
        (Some(m), _) => Some(("max_completion_tokens", m)),
        (None, Some(m)) => Some(("max_tokens", m)),
        (None, None) => None,
    };
    let max_tokens = match max_tokens {
        None => None,
        Some((name, m)) if m < 1 => {
            return Err(ApiError::invalid(name, format!("must be >= 1, got {m}")))
        }
        Some((_, m)) => Some(m as usize),
    };
    let seed = integer("seed")?.map(|s| s as u64);
    match integer("n")? {
        None | Some(1) => {}
        Some(n) => {
            return Err(ApiError::invalid(
                "n",
                format!("only n = 1 is supported, got {n}"),
            ))
        }
    }
    match field("stream") {
        None | Some(Value::Bool(false)) => {}
        Some(_) => return Err(ApiError::invalid("stream", "streaming is not supported")),
    }
    match field("stop") {
        None => {}
        Some(Value::Array(a)) if a.is_empty() => {}
        Some(_) => {
            return Err(ApiError::invalid(
                "stop",
                "stop sequences are not supported (generation stops at the end of the turn)",
            ))
        }
    }
    let logprobs = match field("logprobs") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(ApiError::invalid("logprobs", "expected a boolean")),
    };
    if integer("top_logprobs")?.is_some_and(|k| k > 0) {
        return Err(ApiError::invalid("top_logprobs", "not supported"));
    }
    let enable_thinking = match field("chat_template_kwargs") {
        None => None,
        Some(Value::Object(kw)) => match kw.get("enable_thinking") {
            None | Some(Value::Null) => None,
            Some(Value::Bool(b)) => Some(*b),
            Some(_) => {
                return Err(ApiError::invalid(
                    "chat_template_kwargs.enable_thinking",
                    "expected a boolean",
                ))
            }
        },
        Some(_) => {
            return Err(ApiError::invalid(
                "chat_template_kwargs",
                "expected an object",
            ))
        }
    };
    Ok(ChatCompletionRequest {
        model,
        messages,
        tools,
        sampler: SamplerConfig {
            temperature,
            top_p,
            top_k,
        },
        max_tokens,
        seed,
        enable_thinking,
        logprobs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: Value) -> Result<ChatCompletionRequest, ApiError> {
        parse_request(v.to_string().as_bytes())
    }

    #[test]
    fn a_full_request_parses() {
        let r = parse(json!({
            "model": "tiny", "temperature": 0, "top_p": 0.9, "max_tokens": 12, "seed": -3, "n": 1, "stream": false,
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "function", "function": {"name": "grep", "parameters": {"type": "object"}}}],
            "chat_template_kwargs": {"enable_thinking": false}, "logprobs": true, "user": "ignored"
        }))
        .unwrap();
        assert_eq!(r.model.as_deref(), Some("tiny"));
        assert_eq!(
            r.sampler,
            SamplerConfig {
                temperature: 0.0,
                top_p: 0.9,
                top_k: 0
            }
        );
        assert_eq!(r.max_tokens, Some(12));
        assert_eq!(r.seed, Some((-3i64) as u64));
        assert_eq!(r.tools.as_ref().map(Vec::len), Some(1));
        assert_eq!(r.enable_thinking, Some(false));
        assert!(r.logprobs);
        let none = parse(
            json!({"messages": [{"role": "user", "content": "hi"}], "tool_choice": "none",
            "tools": [{"type": "function", "function": {"name": "grep"}}]}),
        )
        .unwrap();
        assert_eq!(none.tools, None);
        assert_eq!(none.sampler.temperature, 1.0);
    }

    #[test]
    fn bad_fields_are_named() {
        let msgs = json!([{"role": "user", "content": "hi"}]);
        for (body, param) in [
            (
                json!({"messages": msgs, "temperature": "hot"}),
                "temperature",
            ),
            (json!({"messages": msgs, "temperature": -1}), "temperature"),
            (json!({"messages": msgs, "top_p": 0}), "top_p"),
            (json!({"messages": msgs, "max_tokens": 0}), "max_tokens"),
            (
                json!({"messages": msgs, "max_completion_tokens": 1.5}),
                "max_completion_tokens",
            ),
            (json!({"messages": msgs, "n": 2}), "n"),
            (json!({"messages": msgs, "stream": true}), "stream"),
            (json!({"messages": msgs, "stop": ["x"]}), "stop"),
            (json!({"messages": msgs, "tools": {}}), "tools"),
            (
                json!({"messages": msgs, "tools": [{"type": "function", "function": {}}]}),
                "tools[0].function.name",
            ),
            (
                json!({"messages": msgs, "tool_choice": "required"}),
                "tool_choice",
            ),
            (json!({"messages": msgs, "model": 3}), "model"),
            (json!({}), "messages"),
            (
                json!({"messages": [{"role": "user", "content": {"a": 1}}]}),
                "messages[0].content",
            ),
        ] {
            let err = parse(body.clone()).unwrap_err();
            assert_eq!(
                (err.status, err.param.as_deref()),
                (400, Some(param)),
                "{body}"
            );
            assert_eq!(err.body()["error"]["param"], param);
            assert!(err.body()["error"]["message"]
                .as_str()
                .unwrap()
                .contains(param));
        }
        let err = parse_request(b"{\"messages\": [").unwrap_err();
        assert_eq!((err.status, err.param.clone()), (400, None));
        assert!(err.message.contains("not valid JSON"), "{}", err.message);
        assert_eq!(parse_request(b"[1]").unwrap_err().status, 400);
    }
}
