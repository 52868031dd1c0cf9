//! Tool calls in Qwen3's format: `<tool_call>{"name": .., "arguments": {..}}</tool_call>`
//! blocks in the model's text, several per turn.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use thiserror::Error;

/// The opening tag of a tool call block.
pub const TOOL_CALL_OPEN: &str = "<tool_call>";
/// The closing tag of a tool call block.
pub const TOOL_CALL_CLOSE: &str = "</tool_call>";

/// One well-formed call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The tool's name (checked when run, not here).
    pub name: String,
    /// The arguments object (`{}` when the model omitted it).
    #[serde(default)]
    pub arguments: Map<String, Value>,
}

/// Why a `<tool_call>` block is not a call. `index` is the block's position
/// among the turn's blocks (0-based).
#[derive(Clone, Debug, Error, PartialEq)]
pub enum ToolCallError {
    /// The block's body is not JSON.
    #[error("tool call {index}: invalid JSON: {message}")]
    BadJson {
        /// Block index.
        index: usize,
        /// serde_json's message.
        message: String,
    },
    /// The JSON is not an object.
    #[error("tool call {index}: expected a JSON object with \"name\" and \"arguments\"")]
    NotAnObject {
        /// Block index.
        index: usize,
    },
    /// No string `name`.
    #[error("tool call {index}: missing \"name\" (a string)")]
    MissingName {
        /// Block index.
        index: usize,
    },
    /// `arguments` present but not an object.
    #[error("tool call {index}: \"arguments\" must be a JSON object")]
    ArgumentsNotObject {
        /// Block index.
        index: usize,
    },
    /// `<tool_call>` without its `</tool_call>`.
    #[error("tool call {index}: <tool_call> is not closed by </tool_call>")]
    Unclosed {
        /// Block index.
        index: usize,
    },
}

/// Every `<tool_call>` block of `text`, in order: a call or why not.
/// Text outside the blocks is ignored. Never panics.
pub fn parse_tool_calls(text: &str) -> Vec<Result<ToolCall, ToolCallError>> {
    let mut calls = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find(TOOL_CALL_OPEN) {
        let index = calls.len();
        let body_start = &rest[open + TOOL_CALL_OPEN.len()..];
        match close_of(body_start) {
            Some(close) => {
                calls.push(parse_body(&body_start[..close], index));
                rest = &body_start[close + TOOL_CALL_CLOSE.len()..];
            }
            None => {
                calls.push(Err(ToolCallError::Unclosed { index }));
                break;
            }
        }
    }
    calls
}

/// Closing tags tried per block when a JSON string itself contains `</tool_call>`.
const MAX_CLOSE_CANDIDATES: usize = 8;

/// Where the block that starts `body` ends: the first `</tool_call>` whose
/// body is valid JSON (a string argument may contain the tag), else the
/// first one.
fn close_of(body: &str) -> Option<usize> {
    let candidates: Vec<usize> =
        body.match_indices(TOOL_CALL_CLOSE).map(|(i, _)| i).take(MAX_CLOSE_CANDIDATES).collect();
    let parses = |&&i: &&usize| serde_json::from_str::<Value>(body[..i].trim()).is_ok();
    candidates.iter().find(parses).or(candidates.first()).copied()
}

/// Whether `text` has at least one `<tool_call>` opening tag.
pub fn has_tool_call(text: &str) -> bool {
    text.contains(TOOL_CALL_OPEN)
}

fn parse_body(body: &str, index: usize) -> Result<ToolCall, ToolCallError> {
    let value: Value = serde_json::from_str(body.trim())
        .map_err(|e| ToolCallError::BadJson { index, message: e.to_string() })?;
    let Value::Object(mut object) = value else {
        return Err(ToolCallError::NotAnObject { index });
    };
    let name = match object.remove("name") {
        Some(Value::String(name)) => name,
        _ => return Err(ToolCallError::MissingName { index }),
    };
    let arguments = match object.remove("arguments") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(arguments)) => arguments,
        Some(_) => return Err(ToolCallError::ArgumentsNotObject { index }),
    };
    Ok(ToolCall { name, arguments })
}

/// An assistant turn's text as Qwen3's chat template writes it: the content,
/// then one `<tool_call>` block per call, each on its own line, with the
/// arguments serialized as the template's `tojson` does (Python's
/// `json.dumps`). Teachers that produce structured calls use this so their
/// token sequences agree with a re-rendering of the conversation.
pub fn render_tool_calls(content: &str, calls: &[ToolCall]) -> String {
    let mut out = content.to_string();
    for (k, call) in calls.iter().enumerate() {
        if k > 0 || !content.is_empty() {
            out.push('\n');
        }
        let args = crate::chat::python_json_dumps(&Value::Object(call.arguments.clone()), &Default::default());
        out.push_str(&format!("<tool_call>\n{{\"name\": \"{}\", \"arguments\": {args}}}\n</tool_call>", call.name));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table() {
        let text = concat!(
            "thinking <tool_call>\n{\"name\": \"grep\", \"arguments\": {\"pattern\": \"x\"}}\n</tool_call>",
            "<tool_call>{bad</tool_call>",
            "<tool_call>[1]</tool_call>",
            "<tool_call>{\"arguments\": {}}</tool_call>",
            "<tool_call>{\"name\": \"glob\", \"arguments\": \"*.py\"}</tool_call>",
            "<tool_call>{\"name\": \"glob\"}</tool_call>",
            "<tool_call>{\"name\": \"x\""
        );
        let calls = parse_tool_calls(text);
        assert_eq!(calls.len(), 7);
        assert_eq!(calls[0].as_ref().unwrap().name, "grep");
        assert_eq!(calls[0].as_ref().unwrap().arguments["pattern"], "x");
        assert!(matches!(calls[1], Err(ToolCallError::BadJson { index: 1, .. })));
        assert_eq!(calls[2], Err(ToolCallError::NotAnObject { index: 2 }));
        assert_eq!(calls[3], Err(ToolCallError::MissingName { index: 3 }));
        assert_eq!(calls[4], Err(ToolCallError::ArgumentsNotObject { index: 4 }));
        assert!(calls[5].as_ref().unwrap().arguments.is_empty());
        assert_eq!(calls[6], Err(ToolCallError::Unclosed { index: 6 }));
    }

    #[test]
    fn no_calls() {
        assert!(parse_tool_calls("plain answer\na.py").is_empty());
        assert!(parse_tool_calls("</tool_call>").is_empty());
    }
}
