//! Chat format: a model's tokenizer and chat template (Qwen3's, ChatML, Llama 3),
//! rendered identically to transformers.
//!
//! Overview:
//! - [`ChatTokenizer`] loads a Hugging Face tokenizer folder (`tokenizer.json`
//!   and `tokenizer_config.json`), renders a [`ChatRequest`] (transformers'
//!   message format: system/user/assistant/tool roles, `tool_calls`,
//!   `reasoning_content`, inline `<think>`) with the folder's own chat template,
//!   and encodes/decodes text. Text and ids match transformers'
//!   `apply_chat_template` (golden fixtures in `rollout/tests/fixtures/chat`).
//! - The template runs in minijinja set up as transformers sets up Jinja2
//!   (`template`), with a `tojson` that is Python's `json.dumps` byte for byte
//!   (`pyjson`).
//! - [`write_small_tokenizer`] trains a small byte-level BPE that keeps Qwen3's
//!   pipeline, chat template and special tokens (or Llama 3's header tokens
//!   and `configs/llama3-tools.jinja`: [`SmallChatFormat`]), for fast CPU runs.
//! - [`SpecialTokens`] holds the ids the token-level chat format is built from:
//!   the turn markers ([`TurnMarkers`], probed from the template: ChatML's
//!   `<|im_start|>`/`<|im_end|>`, Llama 3's `<|start_header_id|>`/`<|eot_id|>`),
//!   and `<tool_call>`, `<think>`, ... where they are single tokens.
//! - [`ResponseLayout`]: how the template lays out tool responses between two
//!   assistant turns, probed from the template (episodes append exactly that).

mod error;
mod format;
mod pyjson;
mod request;
mod small;
mod template;
mod tokenizer;

pub use error::{ChatError, Result};
pub use format::{ResponseLayout, TurnMarkers};
pub use pyjson::{dumps as python_json_dumps, DumpOptions};
pub use small::{
    max_small_vocab, write_small_tokenizer, write_small_tokenizer_in, write_small_tokenizer_with, SmallChatFormat,
    LLAMA3_ADDED_TOKENS, LLAMA3_TOOLS_TEMPLATE, QWEN3_ADDED_TOKENS, QWEN3_CHAT_TEMPLATE, QWEN3_SPLIT_REGEX,
    SMALL_VOCAB_MIN,
};
pub use request::ChatRequest;
pub use tokenizer::{ChatTokenizer, SpecialTokens, Within, COUNT_CHUNK, TOKENIZER_CONFIG_FILE, TOKENIZER_FILE};
