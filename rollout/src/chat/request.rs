//! [`ChatRequest`]: a conversation to render, what the chat template and
//! the layout probe both take.

use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

/// A conversation to render, in the transformers message format.
///
/// Messages are JSON objects with a `role` (system/user/assistant/tool) and
/// `content`; assistant messages may carry `tool_calls`
/// (`[{"type": "function", "function": {"name": .., "arguments": {..} or ".."}}]`)
/// and `reasoning_content`, or put their thinking inline in `<think>...</think>`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    /// The conversation, oldest first.
    pub messages: Vec<Json>,
    /// Tool (function) JSON schemas declared to the model, if any.
    #[serde(default)]
    pub tools: Option<Vec<Json>>,
    /// Append the header of a new assistant turn (`<|im_start|>assistant\n`).
    #[serde(default)]
    pub add_generation_prompt: bool,
    /// Qwen3's switch: `Some(false)` pre-fills an empty think block.
    #[serde(default)]
    pub enable_thinking: Option<bool>,
}
