//! OpenAI's chat-completions format and Qwen3's, both ways, as pure JSON and
//! text functions (no HTTP here).
//!
//! Qwen3 (and so our episodes and chat template) writes tool calls inline:
//! `<tool_call>\n{"name": .., "arguments": {..}}\n</tool_call>` blocks after
//! the turn's text, and takes transformers-style messages whose assistant
//! `tool_calls` carry `arguments` as JSON objects and whose tool messages
//! answer the calls in order. OpenAI's format carries `arguments` as a JSON
//! *string*, gives every call an `id`, and ties each tool message to one
//! with `tool_call_id`.
//!
//! - Client side ([`super::http::HttpTeacher`]): [`to_openai_messages`] turns
//!   an episode's messages into a request, [`qwen3_text_from_openai`] turns
//!   the response's message back into the text Qwen3 would have written.
//! - Server side (`fusegrpo serve`): [`from_openai_messages`] turns a
//!   request's messages into template input, [`split_completion`] splits the
//!   generated text into reasoning, content and calls, [`openai_tool_calls`]
//!   writes the calls in OpenAI's shape.
//!
//! Round trip: for text as Qwen3's template lays it out (content without
//! surrounding whitespace, then the blocks, newline-separated),
//! `qwen3_text_from_openai(message of split_completion(text)) == text`.

use crate::chat::{python_json_dumps, DumpOptions};
use crate::toolcall::{parse_tool_calls, ToolCall, TOOL_CALL_CLOSE, TOOL_CALL_OPEN};
use serde_json::{json, Map, Value};
use std::collections::VecDeque;

/// A message or field that cannot be converted; `field` is a JSON path such
/// as `messages[2].tool_calls[0].function.name`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct FormatError {
    /// Where in the input the problem is.
    pub field: String,
    /// What is wrong there.
    pub message: String,
}

impl FormatError {
    fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        FormatError {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// The deterministic id of call `k` (0-based) of assistant turn `turn`
/// (0-based among the conversation's assistant messages): `call_<turn>_<k>`.
pub fn call_id(turn: usize, k: usize) -> String {
    format!("call_{turn}_{k}")
}

/// Content given to tool messages that a conversation never answered (an
/// OpenAI endpoint rejects a call without its response).
pub const MISSING_TOOL_RESPONSE: &str = "(no response)";

/// A message's `content` as text: a string, `null`/absent (empty), or an
/// array of `{"type": "text", "text": ..}` parts (joined).
pub fn content_text(message: &Value, field: &str) -> Result<String, FormatError> {
    match message.get("content") {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for (j, part) in parts.iter().enumerate() {
                match (
                    part.get("type").and_then(Value::as_str),
                    part.get("text").and_then(Value::as_str),
                ) {
                    (Some("text"), Some(t)) => text.push_str(t),
                    _ => {
                        return Err(FormatError::new(
                            format!("{field}.content[{j}]"),
                            "only {\"type\": \"text\", \"text\": ...} parts are supported",
                        ))
                    }
                }
            }
            Ok(text)
        }
        Some(_) => Err(FormatError::new(
            format!("{field}.content"),
            "expected a string, null or an array of text parts",
        )),
    }
}

/// Transformers-style messages (an episode's) as OpenAI request messages.
///
/// Assistant calls get ids [`call_id`]`(turn, k)` and their arguments as
/// JSON strings; the tool messages that follow an assistant turn answer its
/// calls in order (`tool_call_id`). A tool message with no call left to
/// answer (the turn had a malformed call that still got a response) becomes
/// a user message holding `<tool_response>..</tool_response>`, which is what
/// Qwen3's template shows the model; calls left unanswered when the next
/// non-tool message comes get [`MISSING_TOOL_RESPONSE`]. An assistant's
/// `<think>..</think>` prefix is dropped (it is not part of OpenAI content).
pub fn to_openai_messages(messages: &[Value]) -> Result<Vec<Value>, FormatError> {
    let mut out = Vec::with_capacity(messages.len());
    let mut pending: VecDeque<String> = VecDeque::new();
    let mut turn = 0;
    for (i, m) in messages.iter().enumerate() {
        let field = format!("messages[{i}]");
        let role = m
            .get("role")
            .and_then(Value::as_str)
            .ok_or_else(|| FormatError::new(format!("{field}.role"), "missing or not a string"))?;
        if role != "tool" {
            close_pending(&mut pending, &mut out);
        }
        let content = content_text(m, &field)?;
        match role {
            "system" | "user" => out.push(json!({"role": role, "content": content})),
            "assistant" => {
                let content = strip_think(&content).trim().to_string();
                let calls = match m.get("tool_calls") {
                    None | Some(Value::Null) => Vec::new(),
                    Some(Value::Array(calls)) => calls.clone(),
                    Some(_) => return Err(FormatError::new(format!("{field}.tool_calls"), "expected an array")),
                };
                let mut tool_calls = Vec::with_capacity(calls.len());
                for (k, call) in calls.iter().enumerate() {
                    let cf = format!("{field}.tool_calls[{k}]");
                    let (name, arguments) = call_parts(call, &cf)?;
                    let arguments = match arguments {
                        None | Some(Value::Null) => "{}".to_string(),
                        Some(Value::String(s)) => s.clone(),
                        Some(v @ Value::Object(_)) => v.to_string(),
                        Some(_) => return Err(FormatError::new(format!("{cf}.arguments"), "expected an object or a JSON string")),
                    };
                    let id = call_id(turn, k);
                    pending.push_back(id.clone());
                    tool_calls.push(json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}));
                }
                turn += 1;
                if tool_calls.is_empty() {
                    out.push(json!({"role": "assistant", "content": content}));
                } else {
                    let content = if content.is_empty() { Value::Null } else { Value::String(content) };
                    out.push(json!({"role": "assistant", "content": content, "tool_calls": tool_calls}));
                }
            }
            "tool" => match pending.pop_front() {
                Some(id) => out.push(json!({"role": "tool", "tool_call_id": id, "content": content})),
                None => out.push(json!({"role": "user", "content": format!("<tool_response>\n{content}\n</tool_response>")})),
            },
            other => return Err(FormatError::new(format!("{field}.role"), format!("unknown role {other:?}"))),
        }
    }
    close_pending(&mut pending, &mut out);
    Ok(out)
}

fn close_pending(pending: &mut VecDeque<String>, out: &mut Vec<Value>) {
    for id in pending.drain(..) {
        out.push(json!({"role": "tool", "tool_call_id": id, "content": MISSING_TOOL_RESPONSE}));
    }
}

/// `name` and `arguments` of a call written either OpenAI's way
/// (`{"function": {..}}`) or flat (`{"name", "arguments"}`).
fn call_parts<'a>(
    call: &'a Value,
    field: &str,
) -> Result<(&'a str, Option<&'a Value>), FormatError> {
    let (f, field) = match call.get("function") {
        Some(f) => (f, format!("{field}.function")),
        None => (call, field.to_string()),
    };
    if !f.is_object() {
        return Err(FormatError::new(field, "expected an object"));
    }
    let name = f
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| FormatError::new(format!("{field}.name"), "missing or not a string"))?;
    Ok((name, f.get("arguments")))
}

/// The text after `</think>` (start trimmed of newlines), or all of it.
fn strip_think(text: &str) -> &str {
    match text.rfind("</think>") {
        Some(i) => text[i + "</think>".len()..].trim_start_matches('\n'),
        None => text,
    }
}

/// One call as Qwen3 writes it:
/// `<tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>`, with
/// ARGS in Python's `json.dumps` layout (as the chat template's `tojson`).
/// `arguments` that is a string is parsed when it holds a JSON object (an
/// empty string is `{}`), else written verbatim, so a malformed call from a
/// teacher stays malformed.
pub fn qwen3_tool_call_block(name: &str, arguments: Option<&Value>) -> String {
    let args = match arguments {
        None | Some(Value::Null) => "{}".to_string(),
        Some(Value::String(s)) if s.trim().is_empty() => "{}".to_string(),
        Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
            Ok(v @ Value::Object(_)) => python_json_dumps(&v, &DumpOptions::default()),
            _ => s.clone(),
        },
        Some(v) => python_json_dumps(v, &DumpOptions::default()),
    };
    let name = serde_json::to_string(name).unwrap_or_else(|_| format!("\"{name}\""));
    format!("{TOOL_CALL_OPEN}\n{{\"name\": {name}, \"arguments\": {args}}}\n{TOOL_CALL_CLOSE}")
}

/// An OpenAI response message (`content` + `tool_calls`) as the turn text
/// Qwen3 would have written: the content (trimmed), then one block per call
/// ([`qwen3_tool_call_block`]), joined by newlines as the chat template joins
/// them. Reasoning fields are dropped.
pub fn qwen3_text_from_openai(message: &Value) -> Result<String, FormatError> {
    let mut text = content_text(message, "message")?.trim().to_string();
    let calls = match message.get("tool_calls") {
        None | Some(Value::Null) => return Ok(text),
        Some(Value::Array(calls)) => calls,
        Some(_) => return Err(FormatError::new("message.tool_calls", "expected an array")),
    };
    for (k, call) in calls.iter().enumerate() {
        let (name, arguments) = call_parts(call, &format!("message.tool_calls[{k}]"))?;
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&qwen3_tool_call_block(name, arguments));
    }
    Ok(text)
}

/// OpenAI request messages as transformers-style messages for the chat
/// template: `content` as a string, each call's `arguments` parsed from its
/// JSON string into an object (so the template writes it in Qwen3's own
/// layout; a string that is not a JSON object is kept as is), ids dropped.
/// The OpenAI `developer` role is read as `system`.
pub fn from_openai_messages(messages: &Value) -> Result<Vec<Value>, FormatError> {
    let Value::Array(messages) = messages else {
        return Err(FormatError::new(
            "messages",
            "expected an array of messages",
        ));
    };
    if messages.is_empty() {
        return Err(FormatError::new("messages", "must not be empty"));
    }
    let mut out = Vec::with_capacity(messages.len());
    for (i, m) in messages.iter().enumerate() {
        let field = format!("messages[{i}]");
        if !m.is_object() {
            return Err(FormatError::new(field, "expected an object"));
        }
        let role = m
            .get("role")
            .and_then(Value::as_str)
            .ok_or_else(|| FormatError::new(format!("{field}.role"), "missing or not a string"))?;
        let content = content_text(m, &field)?;
        match role {
            "system" | "developer" => out.push(json!({"role": "system", "content": content})),
            "user" | "tool" => out.push(json!({"role": role, "content": content})),
            "assistant" => {
                let mut msg = Map::new();
                msg.insert("role".into(), "assistant".into());
                msg.insert("content".into(), content.into());
                if let Some(r) = m.get("reasoning_content").and_then(Value::as_str) {
                    msg.insert("reasoning_content".into(), r.into());
                }
                match m.get("tool_calls") {
                    None | Some(Value::Null) => {}
                    Some(Value::Array(calls)) if calls.is_empty() => {}
                    Some(Value::Array(calls)) => {
                        let mut list = Vec::with_capacity(calls.len());
                        for (k, call) in calls.iter().enumerate() {
                            let cf = format!("{field}.tool_calls[{k}]");
                            let (name, arguments) = call_parts(call, &cf)?;
                            let arguments = match arguments {
                                None | Some(Value::Null) => Value::Object(Map::new()),
                                Some(Value::String(s)) if s.trim().is_empty() => {
                                    Value::Object(Map::new())
                                }
                                Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
                                    Ok(v @ Value::Object(_)) => v,
                                    _ => Value::String(s.clone()),
                                },
                                Some(v @ Value::Object(_)) => v.clone(),
                                Some(_) => {
                                    return Err(FormatError::new(
                                        format!("{cf}.function.arguments"),
                                        "expected a JSON string (or an object)",
                                    ))
                                }
                            };
                            list.push(json!({"type": "function", "function": {"name": name, "arguments": arguments}}));
                        }
                        msg.insert("tool_calls".into(), Value::Array(list));
                    }
                    Some(_) => {
                        return Err(FormatError::new(
                            format!("{field}.tool_calls"),
                            "expected an array",
                        ))
                    }
                }
                out.push(Value::Object(msg));
            }
            other => {
                return Err(FormatError::new(
                    format!("{field}.role"),
                    format!("unknown role {other:?}"),
                ))
            }
        }
    }
    Ok(out)
}

/// A generated assistant turn split OpenAI's way.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    /// The `<think>` block's text, when the turn has a `</think>`.
    pub reasoning: Option<String>,
    /// Text outside the reasoning and the well-formed call blocks, segments
    /// trimmed and joined by newlines. Malformed or unclosed blocks stay here
    /// verbatim, so nothing the model wrote is lost.
    pub content: String,
    /// The well-formed calls, in order.
    pub tool_calls: Vec<ToolCall>,
}

/// Split a generated turn (without its end-of-turn token) into reasoning,
/// content and calls. Never panics.
pub fn split_completion(text: &str) -> Completion {
    let (reasoning, mut rest) = match text.find("</think>") {
        Some(i) => {
            let before = &text[..i];
            let inner = before.rsplit("<think>").next().unwrap_or(before);
            (
                Some(inner.trim_matches('\n').to_string()),
                text[i + "</think>".len()..].trim_start_matches('\n'),
            )
        }
        None => (None, text),
    };
    let mut segments: Vec<&str> = Vec::new();
    let mut tool_calls = Vec::new();
    while let Some(open) = rest.find(TOOL_CALL_OPEN) {
        let after_open = &rest[open + TOOL_CALL_OPEN.len()..];
        let Some(close) = block_close(after_open) else {
            break;
        };
        let end = open + TOOL_CALL_OPEN.len() + close + TOOL_CALL_CLOSE.len();
        let block = &rest[open..end];
        match parse_tool_calls(block).into_iter().next() {
            Some(Ok(call)) => {
                segments.push(&rest[..open]);
                tool_calls.push(call);
            }
            _ => segments.push(&rest[..end]),
        }
        rest = &rest[end..];
    }
    segments.push(rest);
    let content = segments
        .iter()
        .map(|s| s.trim())
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join("\n");
    Completion {
        reasoning,
        content,
        tool_calls,
    }
}

/// Where the block whose body starts `body` closes: the first
/// `</tool_call>` whose body parses as JSON (a string may contain the tag),
/// else the first one (as [`parse_tool_calls`] decides).
fn block_close(body: &str) -> Option<usize> {
    let candidates: Vec<usize> = body
        .match_indices(TOOL_CALL_CLOSE)
        .map(|(i, _)| i)
        .take(8)
        .collect();
    candidates
        .iter()
        .find(|&&i| serde_json::from_str::<Value>(body[..i].trim()).is_ok())
        .or(candidates.first())
        .copied()
}

/// Calls in OpenAI's response shape: `{"id": "<id_prefix><k>", "type":
/// "function", "function": {"name", "arguments": <JSON string>}}`.
pub fn openai_tool_calls(calls: &[ToolCall], id_prefix: &str) -> Vec<Value> {
    calls
        .iter()
        .enumerate()
        .map(|(k, c)| {
            json!({"id": format!("{id_prefix}{k}"), "type": "function",
                   "function": {"name": c.name, "arguments": Value::Object(c.arguments.clone()).to_string()}})
        })
        .collect()
}

/// The assistant message of a completion in OpenAI's response shape
/// (`content` is `null` when empty and there are calls; `reasoning_content`
/// only when the turn had a think block).
pub fn openai_message(completion: &Completion, id_prefix: &str) -> Value {
    let mut m = Map::new();
    m.insert("role".into(), "assistant".into());
    let content = if completion.content.is_empty() && !completion.tool_calls.is_empty() {
        Value::Null
    } else {
        Value::String(completion.content.clone())
    };
    m.insert("content".into(), content);
    if let Some(r) = &completion.reasoning {
        m.insert("reasoning_content".into(), r.clone().into());
    }
    if !completion.tool_calls.is_empty() {
        m.insert(
            "tool_calls".into(),
            Value::Array(openai_tool_calls(&completion.tool_calls, id_prefix)),
        );
    }
    Value::Object(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO_CALLS: &str = "Searching both.\n<tool_call>\n{\"name\": \"grep\", \"arguments\": {\"pattern\": \"def get\", \"case_insensitive\": true}}\n</tool_call>\n<tool_call>\n{\"name\": \"glob\", \"arguments\": {\"pattern\": \"**/*.py\"}}\n</tool_call>";

    #[test]
    fn completion_splits_into_content_and_openai_calls() {
        let c = split_completion(TWO_CALLS);
        assert_eq!(c.reasoning, None);
        assert_eq!(c.content, "Searching both.");
        assert_eq!(c.tool_calls.len(), 2);
        let m = openai_message(&c, "call_7_");
        assert_eq!(m["tool_calls"][0]["id"], "call_7_0");
        assert_eq!(m["tool_calls"][1]["type"], "function");
        assert_eq!(m["tool_calls"][0]["function"]["name"], "grep");
        let args = m["tool_calls"][0]["function"]["arguments"]
            .as_str()
            .expect("arguments is a JSON string");
        assert_eq!(
            serde_json::from_str::<Value>(args).unwrap(),
            json!({"pattern": "def get", "case_insensitive": true})
        );
    }

    #[test]
    fn round_trip_text_to_openai_and_back() {
        let cases = [
            TWO_CALLS,
            "a.py\nb.py:Foo.bar",
            "<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"é/ü.py\", \"start_line\": 1, \"end_line\": 2.5}}\n</tool_call>",
            "<tool_call>\n{\"name\": \"grep\", \"arguments\": {\"pattern\": \"</tool_call>\"}}\n</tool_call>",
            "x\n<tool_call>\n{\"name\": \"glob\", \"arguments\": {}}\n</tool_call>",
        ];
        for text in cases {
            let message = openai_message(&split_completion(text), "call_0_");
            // Through real JSON, as it crosses HTTP.
            let message: Value = serde_json::from_str(&message.to_string()).unwrap();
            assert_eq!(qwen3_text_from_openai(&message).unwrap(), text, "{message}");
        }
    }

    /// The text built from an OpenAI message is exactly what Qwen3's chat
    /// template writes for the same message once it is converted back.
    #[test]
    fn qwen3_text_matches_the_chat_template() {
        use crate::chat::{write_small_tokenizer, ChatRequest, ChatTokenizer, SMALL_VOCAB_MIN};
        let dir = tempfile::tempdir().unwrap();
        write_small_tokenizer(dir.path(), SMALL_VOCAB_MIN).unwrap();
        let tok = ChatTokenizer::from_dir(dir.path()).unwrap();
        let response = json!({"role": "assistant", "content": "Two searches.", "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "grep", "arguments": "{\"pattern\":\"é\\\\(x\",\"glob\":\"*.py\"}"}},
            {"id": "b", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"a.py\",\"start_line\":3}"}}]});
        let text = qwen3_text_from_openai(&response).unwrap();
        let openai = json!([{"role": "user", "content": "q"}, response]);
        let messages = from_openai_messages(&openai).unwrap();
        let rendered = tok
            .render(&ChatRequest {
                messages,
                tools: None,
                add_generation_prompt: false,
                enable_thinking: Some(false),
            })
            .unwrap();
        let expected = format!("<|im_start|>assistant\n<think>\n\n</think>\n\n{text}<|im_end|>\n");
        assert!(
            rendered.ends_with(&expected),
            "template:\n{rendered}\nours:\n{expected}"
        );
    }

    #[test]
    fn malformed_and_unclosed_blocks_stay_in_content() {
        let c = split_completion("<think>\nhm\n</think>\n\nok <tool_call>{bad}</tool_call> <tool_call>\n{\"name\": \"glob\", \"arguments\": {}}\n</tool_call> tail <tool_call>{\"name\"");
        assert_eq!(c.reasoning.as_deref(), Some("hm"));
        assert_eq!(c.tool_calls.len(), 1);
        assert_eq!(
            c.content,
            "ok <tool_call>{bad}</tool_call>\ntail <tool_call>{\"name\""
        );
        let m = openai_message(
            &split_completion("<tool_call>\n{\"name\": \"glob\"}\n</tool_call>"),
            "c",
        );
        assert_eq!(m["content"], Value::Null);
    }

    #[test]
    fn openai_response_to_qwen3_text_handles_odd_arguments() {
        let message = json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "x", "type": "function", "function": {"name": "glob", "arguments": "{\"pattern\":\"*.py\",\"n\":[1,2]}"}},
            {"id": "y", "type": "function", "function": {"name": "grep", "arguments": ""}},
            {"id": "z", "type": "function", "function": {"name": "grep", "arguments": "{not json"}},
        ]});
        let text = qwen3_text_from_openai(&message).unwrap();
        assert_eq!(
            text,
            "<tool_call>\n{\"name\": \"glob\", \"arguments\": {\"pattern\": \"*.py\", \"n\": [1, 2]}}\n</tool_call>\n\
             <tool_call>\n{\"name\": \"grep\", \"arguments\": {}}\n</tool_call>\n\
             <tool_call>\n{\"name\": \"grep\", \"arguments\": {not json}\n</tool_call>"
        );
        let parsed = parse_tool_calls(&text);
        assert!(parsed[0].is_ok() && parsed[1].is_ok() && parsed[2].is_err());
        let bad =
            qwen3_text_from_openai(&json!({"tool_calls": [{"function": {"arguments": "{}"}}]}))
                .unwrap_err();
        assert_eq!(bad.field, "message.tool_calls[0].function.name");
    }

    #[test]
    fn episode_messages_become_openai_messages_with_ids() {
        let messages = vec![
            json!({"role": "system", "content": "sys"}),
            json!({"role": "user", "content": "issue"}),
            json!({"role": "assistant", "content": "<think>\nplan\n</think>\n\nlooking", "tool_calls": [
                {"type": "function", "function": {"name": "grep", "arguments": {"pattern": "x"}}},
                {"type": "function", "function": {"name": "glob", "arguments": {"pattern": "*.py"}}}]}),
            json!({"role": "tool", "content": "a.py:1:x"}),
            json!({"role": "tool", "content": "a.py"}),
            json!({"role": "tool", "content": "error: bad call"}),
            json!({"role": "assistant", "content": "", "tool_calls": [
                {"type": "function", "function": {"name": "read_file", "arguments": {"path": "a.py"}}}]}),
        ];
        let out = to_openai_messages(&messages).unwrap();
        assert_eq!(out.len(), 8);
        assert_eq!(out[2]["content"], "looking");
        assert_eq!(out[2]["tool_calls"][1]["id"], "call_0_1");
        assert_eq!(
            out[2]["tool_calls"][0]["function"]["arguments"],
            "{\"pattern\":\"x\"}"
        );
        assert_eq!(
            out[3],
            json!({"role": "tool", "tool_call_id": "call_0_0", "content": "a.py:1:x"})
        );
        assert_eq!(out[4]["tool_call_id"], "call_0_1");
        assert_eq!(
            out[5],
            json!({"role": "user", "content": "<tool_response>\nerror: bad call\n</tool_response>"})
        );
        assert_eq!(out[6]["content"], Value::Null);
        assert_eq!(out[6]["tool_calls"][0]["id"], "call_1_0");
        assert_eq!(
            out[7],
            json!({"role": "tool", "tool_call_id": "call_1_0", "content": MISSING_TOOL_RESPONSE})
        );
        let err = to_openai_messages(&[json!({"role": "wizard", "content": ""})]).unwrap_err();
        assert_eq!(err.field, "messages[0].role");
    }

    #[test]
    fn openai_request_messages_become_template_messages() {
        let req = json!([
            {"role": "developer", "content": [{"type": "text", "text": "be "}, {"type": "text", "text": "brief"}]},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_a", "type": "function", "function": {"name": "grep", "arguments": "{\"pattern\": \"x\"}"}}]},
            {"role": "tool", "tool_call_id": "call_a", "content": "a.py:1:x"}
        ]);
        let out = from_openai_messages(&req).unwrap();
        assert_eq!(out[0], json!({"role": "system", "content": "be brief"}));
        assert_eq!(out[2]["content"], "");
        assert_eq!(
            out[2]["tool_calls"][0]["function"]["arguments"],
            json!({"pattern": "x"})
        );
        assert_eq!(out[3], json!({"role": "tool", "content": "a.py:1:x"}));
        for (bad, field) in [
            (json!({}), "messages"),
            (json!([]), "messages"),
            (json!([{"content": "x"}]), "messages[0].role"),
            (
                json!([{"role": "user", "content": 5}]),
                "messages[0].content",
            ),
            (
                json!([{"role": "assistant", "tool_calls": [{"function": {"name": 1}}]}]),
                "messages[0].tool_calls[0].function.name",
            ),
            (
                json!([{"role": "assistant", "tool_calls": [{"function": {"name": "g", "arguments": 3}}]}]),
                "messages[0].tool_calls[0].function.arguments",
            ),
        ] {
            assert_eq!(
                from_openai_messages(&bad).unwrap_err().field,
                field,
                "{bad}"
            );
        }
    }
}
