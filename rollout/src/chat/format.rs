//! How a model's chat template marks turns and lays out the tool responses
//! that follow an assistant turn and open the next one, learned from the
//! template itself.
//!
//! [`TurnMarkers`]: the token every turn's header starts with and the one that
//! closes a turn, read off the template's generation prompt and an assistant
//! reply (ChatML's `<|im_start|>`/`<|im_end|>`, Llama 3's
//! `<|start_header_id|>`/`<|eot_id|>`).
//!
//! An episode appends tokens turn by turn: the policy's turn ends with its
//! end-of-turn token, then the environment appends the text of the tool
//! responses and the next assistant header, tokenized once. That text is what
//! the template renders for those messages; [`ResponseLayout::probe`] finds
//! it by rendering a probe conversation whose tool outputs are unique
//! placeholders and cutting the rendering at the assistant's end-of-turn
//! marker, so any template that lays tool responses out as a prefix, the
//! outputs with a separator between them, and a suffix works: Qwen3's gives
//! exactly the layout the driver used to write by hand
//! (`\n<|im_start|>user\n<tool_response>\n..\n</tool_response><|im_end|>\n<|im_start|>assistant\n`).

use serde_json::json;

use super::error::{ChatError, Result};
use super::request::ChatRequest;

/// Placeholders that no template writes on its own.
const PROBE_USER: &str = "\u{E000}probe-user\u{E000}";
const PROBE_ASSISTANT: &str = "\u{E000}probe-assistant\u{E000}";
const OUTPUTS: [&str; 3] = ["\u{E001}out-0\u{E001}", "\u{E001}out-1\u{E001}", "\u{E001}out-2\u{E001}"];

/// The turn markers of a chat template, as text: each is an added token of
/// the vocabulary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnMarkers {
    /// What the generation prompt (the assistant's header) starts with.
    pub turn_start: String,
    /// What follows an assistant reply's content.
    pub end_of_turn: String,
}

impl TurnMarkers {
    /// Renders a user message with and without the generation prompt, and
    /// a user message with an assistant reply; each marker is the longest of
    /// `added_tokens` that the header, or the text after the reply, starts
    /// with. Errors say which did not start with an added token.
    pub fn probe(render: impl Fn(&ChatRequest) -> Result<String>, added_tokens: &[String]) -> Result<Self> {
        let user = json!({"role": "user", "content": PROBE_USER});
        let request = |messages, add_generation_prompt| ChatRequest { messages, tools: None, add_generation_prompt, enable_thinking: None };
        let without = render(&request(vec![user.clone()], false))?;
        let with = render(&request(vec![user.clone()], true))?;
        let header = with.strip_prefix(without.as_str()).ok_or_else(|| {
            ChatError::Request(format!(
                "the chat template's generation prompt is not text added at the end (without: {without:?}, with: {with:?})"
            ))
        })?;
        let turn_start = leading_token(header, added_tokens).ok_or_else(|| {
            ChatError::Request(format!("the chat template's assistant header {header:?} does not start with a special token"))
        })?;
        let reply = render(&request(vec![user, json!({"role": "assistant", "content": PROBE_ASSISTANT})], false))?;
        let at = reply
            .rfind(PROBE_ASSISTANT)
            .ok_or_else(|| ChatError::Request("the chat template dropped an assistant message's content".into()))?;
        let after = &reply[at + PROBE_ASSISTANT.len()..];
        let end_of_turn = leading_token(after, added_tokens).ok_or_else(|| {
            ChatError::Request(format!(
                "the chat template does not close an assistant turn with a special token (it writes {after:?} after the reply)"
            ))
        })?;
        Ok(TurnMarkers { turn_start, end_of_turn })
    }
}

/// The longest of `tokens` that `text` starts with.
fn leading_token(text: &str, tokens: &[String]) -> Option<String> {
    tokens.iter().filter(|t| !t.is_empty() && text.starts_with(t.as_str())).max_by_key(|t| t.len()).cloned()
}

/// The text between an assistant's end-of-turn token and the next assistant
/// turn's first generated token, for `n` tool outputs:
/// `prefix + out_0 + (between + out_i)* + suffix`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseLayout {
    pub prefix: String,
    pub between: String,
    pub suffix: String,
}

impl ResponseLayout {
    /// The layout a chat template renders (`render`, with `enable_thinking`,
    /// as the episode's prompt was rendered), whose assistant turns end with
    /// `end_of_turn`. Errors name what did not fit: a template that refuses
    /// tool messages, or one whose layout is not a repetition of the outputs.
    pub fn probe(render: impl Fn(&ChatRequest) -> Result<String>, end_of_turn: &str, enable_thinking: Option<bool>) -> Result<Self> {
        let outs = OUTPUTS;
        let tail = |outputs: &[&str]| tail(&render, end_of_turn, outputs, enable_thinking);
        let two = tail(&outs[..2])?;
        let (prefix, rest) = split_once(&two, outs[0])?;
        let (between, suffix) = split_once(rest, outs[1])?;
        let layout = ResponseLayout { prefix: prefix.into(), between: between.into(), suffix: suffix.into() };
        for n in [1, 3] {
            let want = tail(&outs[..n])?;
            let got = layout.render(&outs[..n]);
            if got != want {
                return Err(ChatError::Request(format!(
                    "the chat template lays out {n} tool responses as {want:?}, not as a repetition of its \
                     2-response layout ({got:?}); episodes need a template whose tool responses repeat"
                )));
            }
        }
        Ok(layout)
    }

    /// The text for these tool outputs.
    pub fn render<S: AsRef<str>>(&self, outputs: &[S]) -> String {
        let mut text = self.prefix.clone();
        for (i, o) in outputs.iter().enumerate() {
            if i > 0 {
                text.push_str(&self.between);
            }
            text.push_str(o.as_ref());
        }
        text.push_str(&self.suffix);
        text
    }
}

/// The rendering of a probe conversation after the assistant's end-of-turn
/// marker: `n` tool messages and the generation prompt.
fn tail(render: impl Fn(&ChatRequest) -> Result<String>, end: &str, outputs: &[&str], enable_thinking: Option<bool>) -> Result<String> {
    let mut messages = vec![
        json!({"role": "user", "content": "probe"}),
        json!({"role": "assistant", "content": PROBE_ASSISTANT, "tool_calls": [
            {"type": "function", "function": {"name": "grep", "arguments": {"pattern": "probe"}}}
        ]}),
    ];
    messages.extend(outputs.iter().map(|o| json!({"role": "tool", "content": o})));
    let req = ChatRequest { messages, tools: None, add_generation_prompt: true, enable_thinking };
    let text = render(&req)?;
    let at = text
        .find(PROBE_ASSISTANT)
        .ok_or_else(|| ChatError::Request("the chat template dropped the assistant message's content".into()))?;
    let after = &text[at..];
    let close = after.find(end).ok_or_else(|| {
        ChatError::Request(format!("the chat template does not close an assistant turn with `{end}`"))
    })?;
    Ok(after[close + end.len()..].to_string())
}

fn split_once<'a>(text: &'a str, marker: &str) -> Result<(&'a str, &'a str)> {
    text.split_once(marker).ok_or_else(|| {
        ChatError::Request(format!("the chat template does not render a tool message's content as given (in {text:?})"))
    })
}
