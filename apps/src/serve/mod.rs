//! `fusegrpo serve`: an OpenAI-compatible chat-completions server over our
//! own model, so anything that speaks OpenAI's API (curl, the OpenAI SDKs,
//! [`rollout::teacher::http::HttpTeacher`]) can drive it.
//!
//! - [`ChatServer`] owns the model and tokenizer and answers requests as
//!   plain data: [`ChatServer::handle`]`(method, path, body) -> (status, JSON)`;
//!   [`ChatServer::run`] feeds it the requests [`http`] reads, one at a
//!   time (the model is the bottleneck), while each connection is read and
//!   answered on a thread of its own, within bounds no client sets.
//! - Endpoints: `GET /v1/models`, `POST /v1/chat/completions`, `GET /health`.
//! - A completion: the messages (with tools) are rendered by the chat
//!   template with the generation prompt, generated until `<|im_end|>`/eos or
//!   `max_tokens`, then split into `content`, `tool_calls` (OpenAI's shape,
//!   `arguments` a JSON string) and `reasoning_content` by
//!   [`rollout::teacher::openai::split_completion`]; `finish_reason` is
//!   `tool_calls`, `stop` or `length`; `usage` counts prompt and completion
//!   tokens (the stop token included).
//! - [`request`]: every field is checked; a bad one is a 400 with OpenAI's
//!   error body naming it. Nothing a client sends can panic the server.
//! - A client that hangs up during its completion stops the generation
//!   before the next token ([`http::Probe`]: a failed write, not a peer
//!   that only stopped sending), so the next request does not wait.
//! - A prompt is counted cheaply before it is tokenized whole
//!   ([`rollout::chat::ChatTokenizer::encode_within`]): one far over the
//!   context costs what its first context's worth of tokens cost.

pub mod http;
pub mod request;

use lm::generate::{generate_until, GenerateConfig};
use lm::model::CausalLm;
use rand::{Rng, SeedableRng};
use request::{parse_request, ApiError, ApiErrorKind};
use rollout::chat::{ChatRequest, ChatTokenizer, Within};
use rollout::teacher::openai::{openai_message, split_completion};
use serde_json::{json, Value};
use std::net::{SocketAddr, TcpListener};

/// Settings of the server.
#[derive(Debug, Clone, PartialEq)]
pub struct ServeConfig {
    /// The model id `/v1/models` lists and responses carry.
    pub model_name: String,
    /// New tokens when a request gives no `max_tokens` (capped by the context).
    pub default_max_tokens: usize,
    /// Seed of the server's RNG, which draws a seed for each request that
    /// gives none (requests with a `seed` are reproducible on their own).
    pub seed: u64,
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot listen on {addr}: {message}")]
    Bind { addr: String, message: String },
    #[error("the tokenizer has {tokenizer} ids but the model's vocabulary has only {model}")]
    VocabMismatch { tokenizer: usize, model: usize },
}

/// The model, its tokenizer and the server's state.
pub struct ChatServer {
    model: CausalLm,
    tokenizer: ChatTokenizer,
    config: ServeConfig,
    rng: rand_chacha::ChaCha8Rng,
    /// Completions answered so far (names responses and call ids).
    served: u64,
    stop_tokens: Vec<u32>,
}

impl ChatServer {
    /// Check that the tokenizer fits the model.
    pub fn new(
        model: CausalLm,
        tokenizer: ChatTokenizer,
        config: ServeConfig,
    ) -> Result<Self, ServeError> {
        let (tok_vocab, model_vocab) = (tokenizer.vocab_size(), model.config().vocab_size);
        if tok_vocab > model_vocab {
            return Err(ServeError::VocabMismatch {
                tokenizer: tok_vocab,
                model: model_vocab,
            });
        }
        let stop_tokens = tokenizer.stop_ids().to_vec();
        let rng = rand_chacha::ChaCha8Rng::seed_from_u64(config.seed);
        Ok(ChatServer {
            model,
            tokenizer,
            config,
            rng,
            served: 0,
            stop_tokens,
        })
    }

    /// The `GET /v1/models` body.
    pub fn models(&self) -> Value {
        json!({"object": "list", "data": [{"id": self.config.model_name, "object": "model", "created": 0, "owned_by": "fusegrpo"}]})
    }

    /// Route one request: `(status, JSON body)`. Never panics on client input.
    pub fn handle(&mut self, method: &str, path: &str, body: &[u8]) -> (u16, Value) {
        self.handle_until(method, path, body, &|| false)
    }

    /// [`Self::handle`], with a completion stopped (status 499) once
    /// `cancelled()` says so (the client hung up).
    pub fn handle_until(&mut self, method: &str, path: &str, body: &[u8], cancelled: &dyn Fn() -> bool) -> (u16, Value) {
        let path = path.split('?').next().unwrap_or(path).trim_end_matches('/');
        let result = match (method, path) {
            ("POST", "/v1/chat/completions") => self.chat_completion_until(body, cancelled),
            ("GET", "/v1/models") => Ok(self.models()),
            ("GET", "/health") => Ok(json!({"status": "ok"})),
            (_, "/v1/chat/completions" | "/v1/models" | "/health") => Err(ApiError {
                status: 405,
                kind: ApiErrorKind::NotFound,
                param: None,
                message: format!("{method} is not allowed on {path}"),
            }),
            _ => Err(ApiError {
                status: 404,
                kind: ApiErrorKind::NotFound,
                param: None,
                message: format!(
                    "no endpoint {method} {path} (try POST /v1/chat/completions or GET /v1/models)"
                ),
            }),
        };
        match result {
            Ok(v) => (200, v),
            Err(e) => (e.status, e.body()),
        }
    }

    /// `POST /v1/chat/completions`.
    pub fn chat_completion(&mut self, body: &[u8]) -> Result<Value, ApiError> {
        self.chat_completion_until(body, &|| false)
    }

    /// [`Self::chat_completion`] that stops generating once `cancelled()`
    /// says so: a 499 (nginx's "client closed request"), which nobody reads
    /// but the log.
    pub fn chat_completion_until(&mut self, body: &[u8], cancelled: &dyn Fn() -> bool) -> Result<Value, ApiError> {
        let req = parse_request(body)?;
        let t0 = std::time::Instant::now();
        let chat = ChatRequest {
            messages: req.messages,
            tools: req.tools,
            add_generation_prompt: true,
            enable_thinking: req.enable_thinking,
        };
        let text = self
            .tokenizer
            .render(&chat)
            .map_err(|e| ApiError::invalid("messages", e.to_string()))?;
        let context = self.model.config().max_position_embeddings;
        let prompt = match self.tokenizer.encode_within(&text, context.saturating_sub(1)) {
            Ok(Within::Fits(ids)) => ids,
            Ok(Within::Over { at_least, exact }) => {
                let more = if exact { "" } else { "more than " };
                return Err(ApiError::invalid(
                    "messages",
                    format!("the prompt is {more}{at_least} tokens; the model's context is {context}"),
                ));
            }
            Err(e) => return Err(ApiError::invalid("messages", e.to_string())),
        };
        drop(text);
        let room = context - prompt.len();
        let max_tokens = match req.max_tokens {
            Some(m) if m > room => {
                return Err(ApiError::invalid(
                    "max_tokens",
                    format!("{m} new tokens do not fit: the prompt is {} tokens of a {context}-token context", prompt.len()),
                ))
            }
            Some(m) => m,
            None => self.config.default_max_tokens.min(room),
        };
        let seed = req.seed.unwrap_or_else(|| self.rng.random());
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let cfg = GenerateConfig {
            max_new_tokens: max_tokens,
            sampler: req.sampler,
            stop_tokens: self.stop_tokens.clone(),
        };
        let generation = generate_until(&self.model, std::slice::from_ref(&prompt), &cfg, &mut rng, cancelled)
            .map_err(|e| match e {
                lm::error::Error::Cancelled { tokens } => ApiError {
                    status: 499,
                    kind: ApiErrorKind::InvalidRequest,
                    param: None,
                    message: format!("the client closed the connection; generation stopped after {tokens} of at most {max_tokens} tokens"),
                },
                e => ApiError::server(format!("generation failed: {e}")),
            })?
            .pop()
            .ok_or_else(|| ApiError::server("generation returned no row"))?;
        let ended = generation
            .ids
            .last()
            .is_some_and(|t| self.stop_tokens.contains(t));
        let body_ids = if ended {
            &generation.ids[..generation.ids.len() - 1]
        } else {
            &generation.ids[..]
        };
        let text = self
            .tokenizer
            .decode(body_ids)
            .map_err(|e| ApiError::server(format!("decoding: {e}")))?;
        let completion = split_completion(&text);
        let n = self.served;
        self.served += 1;
        let finish_reason = if !ended {
            "length"
        } else if completion.tool_calls.is_empty() {
            "stop"
        } else {
            "tool_calls"
        };
        let logprobs = if req.logprobs {
            let content: Vec<Value> = generation
                .ids
                .iter()
                .zip(&generation.logprobs)
                .map(|(&id, &lp)| {
                    let token = self.tokenizer.decode(&[id]).unwrap_or_default();
                    json!({"token": token, "logprob": lp, "bytes": token.as_bytes(), "top_logprobs": []})
                })
                .collect();
            json!({"content": content})
        } else {
            Value::Null
        };
        let secs = t0.elapsed().as_secs_f64();
        tracing::info!(
            prompt_tokens = prompt.len(),
            completion_tokens = generation.ids.len(),
            finish_reason,
            secs,
            "completion"
        );
        let created = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Ok(json!({
            "id": format!("chatcmpl-{n}"),
            "object": "chat.completion",
            "created": created,
            "model": self.config.model_name,
            "choices": [{
                "index": 0,
                "message": openai_message(&completion, &format!("call_{n}_")),
                "logprobs": logprobs,
                "finish_reason": finish_reason,
            }],
            "usage": {
                "prompt_tokens": prompt.len(),
                "completion_tokens": generation.ids.len(),
                "total_tokens": prompt.len() + generation.ids.len(),
            },
        }))
    }

    /// Answer the requests of every connection to `listener`, one at a
    /// time, forever ([`http::serve`] reads them, each on its connection's
    /// own thread, within `limits`).
    pub fn run(&mut self, listener: TcpListener, limits: http::Limits) {
        let jobs = http::serve(listener, limits);
        for job in jobs {
            let (method, path) = (job.request.method.clone(), job.request.path.clone());
            let large = job.request.body.len() > 1 << 20;
            let (status, value) = self.handle_until(&method, &path, &job.request.body, &|| job.probe.hung_up());
            if status != 200 {
                tracing::warn!(%method, %path, status, error = %value["error"]["message"], "request refused");
            }
            job.answer(http::Response { status, body: value.to_string() });
            if large {
                release_memory();
            }
        }
    }
}

/// Give the memory a large request took back to the system (glibc keeps
/// freed heap for reuse, so one 30 MB prompt would hold its peak for good).
fn release_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free heap pages to the system.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Listen on `host:port` (port 0: any free port); the listener and the
/// address it is bound to.
pub fn bind(host: &str, port: u16) -> Result<(TcpListener, SocketAddr), ServeError> {
    let addr = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let bind_error = |message: String| ServeError::Bind { addr: addr.clone(), message };
    let listener = TcpListener::bind(&addr).map_err(|e| bind_error(e.to_string()))?;
    let bound = listener.local_addr().map_err(|e| bind_error(e.to_string()))?;
    Ok((listener, bound))
}

#[cfg(test)]
mod tests {
    use super::*;
    use lm::config::ModelConfig;
    use candle_core::{DType, Device, Tensor};
    use rollout::chat::write_small_tokenizer;
    use std::collections::HashMap;

    /// A one-layer Qwen3 whose greedy continuation of `after` is `script`:
    /// attention and MLP write nothing (`o_proj`, `down_proj` = 0), so the
    /// logits depend on the current token only, and `lm_head` maps each token
    /// of the chain to the next. `None` if a token would need two successors.
    fn scripted_model(
        tok: &ChatTokenizer,
        after: u32,
        script: &[u32],
    ) -> Option<(ModelConfig, lm::weights::TensorMap)> {
        let chain: Vec<u32> = std::iter::once(after)
            .chain(script.iter().copied())
            .collect();
        let mut next: HashMap<u32, u32> = HashMap::new();
        for w in chain.windows(2) {
            if next.insert(w[0], w[1]).is_some_and(|old| old != w[1]) {
                let pieces: Vec<String> =
                    chain.iter().map(|&t| tok.decode(&[t]).unwrap()).collect();
                println!(
                    "token {:?} needs two successors in {pieces:?}",
                    tok.decode(&[w[0]]).unwrap()
                );
                return None;
            }
        }
        let cfg = ModelConfig::new_tiny(tok.vocab_size(), 64, 128, 1, 4, 2, 32, false);
        let mut w = lm::init::random_weights(&cfg, 1, DType::F32, &Device::Cpu).unwrap();
        let emb = w["model.embed_tokens.weight"].to_vec2::<f32>().unwrap();
        let mut head = vec![vec![0f32; 64]; cfg.vocab_size];
        for (&a, &b) in &next {
            let e = &emb[a as usize];
            let norm = e.iter().map(|x| x * x).sum::<f32>().sqrt();
            head[b as usize]
                .iter_mut()
                .zip(e)
                .for_each(|(h, x)| *h += 10.0 * x / norm);
        }
        let flat: Vec<f32> = head.into_iter().flatten().collect();
        w.insert(
            "lm_head.weight".into(),
            Tensor::from_vec(flat, (cfg.vocab_size, 64), &Device::Cpu).unwrap(),
        );
        for name in [
            "model.layers.0.self_attn.o_proj.weight",
            "model.layers.0.mlp.down_proj.weight",
        ] {
            let zero = w[name].zeros_like().unwrap();
            w.insert(name.into(), zero);
        }
        Some((cfg, w))
    }

    /// A model that writes a tool call: the server answers in OpenAI's shape
    /// (`tool_calls` with an id, `function.arguments` a JSON string, `content`
    /// null, `finish_reason` `tool_calls`), with exact usage counts.
    /// `FUSEGRPO_SERVE_DEMO_MODEL=DIR` also saves the model there (for a
    /// manual `fusegrpo serve` + curl run).
    #[test]
    fn a_model_that_writes_a_tool_call_gets_openai_tool_calls() {
        let dir = tempfile::tempdir().unwrap();
        write_small_tokenizer(dir.path(), 2048).unwrap();
        let tok = ChatTokenizer::from_dir(dir.path()).unwrap();
        let request = json!({
            "temperature": 0, "chat_template_kwargs": {"enable_thinking": false},
            "messages": [{"role": "user", "content": "Find the Python files."}],
            "tools": [{"type": "function", "function": {"name": "glob", "parameters": {"type": "object",
                "properties": {"pattern": {"type": "string"}}}}}]
        });
        let parsed = parse_request(request.to_string().as_bytes()).unwrap();
        let chat = ChatRequest {
            messages: parsed.messages,
            tools: parsed.tools,
            add_generation_prompt: true,
            enable_thinking: Some(false),
        };
        let (_, prompt) = tok.render_ids(&chat).unwrap();
        // A token-bigram model cannot write `":` twice with different
        // successors, so with this tokenizer the call's arguments are left
        // out (they read as `{}`); the first layout whose tokens chain wins.
        let layouts = [
            "{\"name\": \"glob\", \"arguments\": {\"pattern\":\"*.py\"}}",
            "{\"name\": \"glob\"}",
        ];
        let (json, script, (cfg, weights)) = layouts
            .iter()
            .find_map(|json| {
                let mut script = tok
                    .encode(&format!("Looking.\n<tool_call>\n{json}\n</tool_call>"))
                    .unwrap();
                script.push(tok.special().end_of_turn);
                scripted_model(&tok, *prompt.last().unwrap(), &script).map(|m| (*json, script, m))
            })
            .expect("a layout whose tokens chain");
        println!("the model writes <tool_call>\n{json}\n</tool_call>");
        let expected_args = Value::Object(
            rollout::toolcall::parse_tool_calls(&format!("<tool_call>{json}</tool_call>"))[0]
                .clone()
                .unwrap()
                .arguments,
        );
        if let Some(out) = std::env::var_os("FUSEGRPO_SERVE_DEMO_MODEL") {
            let out = std::path::PathBuf::from(out);
            lm::weights::save_checkpoint(
                &out,
                &cfg,
                &weights,
                lm::weights::ShardPolicy::Single,
            )
            .unwrap();
            write_small_tokenizer(&out, 2048).unwrap();
        }
        let model = CausalLm::new(&cfg, &weights).unwrap();
        let config = ServeConfig {
            model_name: "scripted".into(),
            default_max_tokens: 64,
            seed: 0,
        };
        let mut server = ChatServer::new(model, tok, config).unwrap();
        let (status, resp) = server.handle(
            "POST",
            "/v1/chat/completions",
            request.to_string().as_bytes(),
        );
        assert_eq!(status, 200, "{resp}");
        let choice = &resp["choices"][0];
        assert_eq!(choice["finish_reason"], "tool_calls", "{resp}");
        assert_eq!(choice["message"]["content"], "Looking.");
        let call = &choice["message"]["tool_calls"][0];
        assert_eq!(call["id"], "call_0_0");
        assert_eq!(call["type"], "function");
        assert_eq!(call["function"]["name"], "glob");
        let args: Value =
            serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
        assert_eq!(args, expected_args);
        assert_eq!(resp["usage"]["prompt_tokens"], prompt.len());
        assert_eq!(resp["usage"]["completion_tokens"], script.len());
        // Cut short: finish_reason "length" and the unclosed block stays text.
        let mut short = request.clone();
        short["max_tokens"] = json!(script.len() - 3);
        let (_, resp) = server.handle("POST", "/v1/chat/completions", short.to_string().as_bytes());
        assert_eq!(resp["choices"][0]["finish_reason"], "length");
        assert!(resp["choices"][0]["message"].get("tool_calls").is_none());
        assert!(resp["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .starts_with("Looking.\n<tool_call>"));
        assert_eq!(resp["id"], "chatcmpl-1");
        // Routing and errors.
        assert_eq!(
            server.handle("GET", "/v1/models", b"").1["data"][0]["id"],
            "scripted"
        );
        assert_eq!(server.handle("GET", "/v1/chat/completions", b"").0, 405);
        assert_eq!(server.handle("POST", "/v2/x", b"").0, 404);
        assert_eq!(
            server.handle("POST", "/v1/chat/completions", b"\xff").0,
            400
        );
    }
}
