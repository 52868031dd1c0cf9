//! [`ChatTokenizer`]: a Hugging Face tokenizer folder (tokenizer.json +
//! tokenizer_config.json) with its chat template, rendering and encoding
//! conversations as transformers' `apply_chat_template` does.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value as Json};
use tokenizers::Tokenizer;

use super::error::{ChatError, Result};
use super::format::{ResponseLayout, TurnMarkers};
use super::request::ChatRequest;
use super::template::ChatTemplate;
use std::sync::OnceLock;

/// File names inside a tokenizer folder.
pub const TOKENIZER_FILE: &str = "tokenizer.json";
/// The config file that holds the chat template and special tokens.
pub const TOKENIZER_CONFIG_FILE: &str = "tokenizer_config.json";


/// Ids of the special tokens the chat format is built from. The turn markers
/// come from the chat template ([`TurnMarkers`]): ChatML's `<|im_start|>` and
/// `<|im_end|>`, Llama 3's `<|start_header_id|>` and `<|eot_id|>`. The
/// tool-call and thinking markers are single tokens in Qwen3's vocabulary and
/// plain text (several tokens) in others, such as SmolLM2's: episodes find
/// them in the decoded text either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpecialTokens {
    /// The first token of every turn's header (ChatML `<|im_start|>`, Llama 3
    /// `<|start_header_id|>`).
    pub turn_start: u32,
    /// The token that closes a turn (ChatML `<|im_end|>`, Llama 3 `<|eot_id|>`).
    pub end_of_turn: u32,
    /// `<tool_call>`, when a single token.
    pub tool_call_start: Option<u32>,
    /// `</tool_call>`
    pub tool_call_end: Option<u32>,
    /// `<tool_response>`
    pub tool_response_start: Option<u32>,
    /// `</tool_response>`
    pub tool_response_end: Option<u32>,
    /// `<think>`
    pub think_start: Option<u32>,
    /// `</think>`
    pub think_end: Option<u32>,
}

/// Tokens that end a document and so also stop generation where the
/// vocabulary has them (Qwen3, SmolLM2; Llama 3).
const DOCUMENT_ENDS: [&str; 2] = ["<|endoftext|>", "<|end_of_text|>"];

impl SpecialTokens {
    /// The optional markers' strings, in field order.
    pub const OPTIONAL: [&'static str; 6] =
        ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"];

    /// The turn markers' ids (`path` labels the error for a marker that is not
    /// one token) and the optional markers looked up.
    fn lookup(tokenizer: &Tokenizer, markers: &TurnMarkers, path: &Path) -> Result<Self> {
        let id = |token: &str| single_token_id(tokenizer, token, path);
        let maybe = |token: &str| tokenizer.token_to_id(token);
        Ok(SpecialTokens {
            turn_start: id(&markers.turn_start)?,
            end_of_turn: id(&markers.end_of_turn)?,
            tool_call_start: maybe("<tool_call>"),
            tool_call_end: maybe("</tool_call>"),
            tool_response_start: maybe("<tool_response>"),
            tool_response_end: maybe("</tool_response>"),
            think_start: maybe("<think>"),
            think_end: maybe("</think>"),
        })
    }
}

/// The id of `token`, which must be in the vocabulary (or an added token).
fn single_token_id(tokenizer: &Tokenizer, token: &str, path: &Path) -> Result<u32> {
    tokenizer
        .token_to_id(token)
        .ok_or_else(|| ChatError::MissingToken {
            path: path.to_path_buf(),
            token: token.to_string(),
        })
}

/// A tokenizer with its chat template: render, encode, decode.
#[derive(Debug)]
pub struct ChatTokenizer {
    tokenizer: Tokenizer,
    template: ChatTemplate,
    special: SpecialTokens,
    /// `bos_token`/`eos_token`/`unk_token`/`pad_token` strings, passed to the
    /// template as transformers passes `special_tokens_map`.
    special_tokens_map: Vec<(&'static str, String)>,
    /// The text of [`SpecialTokens::end_of_turn`].
    end_of_turn: String,
    stop_ids: Vec<u32>,
    dir: PathBuf,
    /// The tool-response layouts of the template, by `enable_thinking`
    /// (None, Some(false), Some(true)), probed on first use.
    layouts: [OnceLock<ResponseLayout>; 3],
}

impl ChatTokenizer {
    /// Loads `dir/tokenizer.json` and `dir/tokenizer_config.json`.
    ///
    /// The config must hold a `chat_template` and an `eos_token`; every entry
    /// of its `added_tokens_decoder` must match tokenizer.json's ids.
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Self> {
        Self::from_dir_with_template(dir, None)
    }

    /// [`ChatTokenizer::from_dir`] with the chat template read from
    /// `template` (a Jinja file) instead of the config's `chat_template`.
    pub fn from_dir_with_template(dir: impl AsRef<Path>, template: Option<&Path>) -> Result<Self> {
        let dir = dir.as_ref();
        let tok_path = dir.join(TOKENIZER_FILE);
        if !tok_path.is_file() {
            return Err(ChatError::Io {
                path: tok_path,
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"),
            });
        }
        let tokenizer = Tokenizer::from_file(&tok_path)
            .map_err(|e| ChatError::tokenizer(format!("loading {}", tok_path.display()), e))?;
        let cfg_path = dir.join(TOKENIZER_CONFIG_FILE);
        let config = read_json(&cfg_path)?;
        let template = match template {
            Some(file) => {
                let src = std::fs::read_to_string(file)
                    .map_err(|source| ChatError::Io { path: file.to_path_buf(), source })?;
                ChatTemplate::new(src, file)?
            }
            None => ChatTemplate::new(chat_template_source(&config, &cfg_path)?, &cfg_path)?,
        };
        check_added_tokens(&tokenizer, &config, &cfg_path)?;

        let mut special_tokens_map = Vec::new();
        for key in ["bos_token", "eos_token", "unk_token", "pad_token"] {
            if let Some(token) = token_string(&config, key, &cfg_path)? {
                special_tokens_map.push((key, token));
            }
        }
        let eos = token_string(&config, "eos_token", &cfg_path)?.ok_or_else(|| {
            ChatError::MissingKey {
                path: cfg_path.clone(),
                key: "eos_token".into(),
            }
        })?;
        let render = |req: &ChatRequest| template.render(template_context(&special_tokens_map, req)?);
        let added: Vec<String> = tokenizer.get_added_tokens_decoder().into_values().map(|t| t.content).collect();
        let markers = TurnMarkers::probe(render, &added)?;
        let special = SpecialTokens::lookup(&tokenizer, &markers, &tok_path)?;
        // The end of a turn, the config's eos token, then the document end.
        let mut stop_ids = vec![special.end_of_turn, single_token_id(&tokenizer, &eos, &cfg_path)?];
        stop_ids.extend(DOCUMENT_ENDS.iter().filter_map(|t| tokenizer.token_to_id(t)));
        let mut seen = std::collections::HashSet::new();
        stop_ids.retain(|id| seen.insert(*id));
        Ok(ChatTokenizer {
            tokenizer,
            template,
            special,
            special_tokens_map,
            end_of_turn: markers.end_of_turn,
            stop_ids,
            dir: dir.to_path_buf(),
            layouts: Default::default(),
        })
    }

    /// The text that closes a turn (ChatML `<|im_end|>`, Llama 3
    /// `<|eot_id|>`), as the template writes it.
    pub fn end_of_turn_text(&self) -> &str {
        &self.end_of_turn
    }

    /// How the template lays out tool responses and the next assistant
    /// header after a turn ([`ResponseLayout`]), probed once per mode.
    pub fn response_layout(&self, enable_thinking: Option<bool>) -> Result<&ResponseLayout> {
        let slot = &self.layouts[match enable_thinking {
            None => 0,
            Some(false) => 1,
            Some(true) => 2,
        }];
        if let Some(l) = slot.get() {
            return Ok(l);
        }
        let probed = ResponseLayout::probe(|req| self.render(req), self.end_of_turn_text(), enable_thinking)?;
        Ok(slot.get_or_init(|| probed))
    }

    /// Renders a conversation to text exactly as transformers'
    /// `apply_chat_template(..., tokenize=False)` does.
    ///
    /// Like transformers, keys whose value is `null` are dropped from each
    /// message, and `thinking`/`reasoning` are aliased to `reasoning_content`.
    pub fn render(&self, request: &ChatRequest) -> Result<String> {
        self.template.render(template_context(&self.special_tokens_map, request)?)
    }

    /// Renders and encodes: `(text, ids)` as `apply_chat_template` gives them
    /// with `tokenize=False` and `tokenize=True`.
    pub fn render_ids(&self, request: &ChatRequest) -> Result<(String, Vec<u32>)> {
        let text = self.render(request)?;
        let ids = self.encode(&text)?;
        Ok((text, ids))
    }

    /// Encodes text without adding special tokens (Qwen3 has no BOS); special
    /// tokens written in the text (`<|im_start|>`, `<tool_call>`, ...) become
    /// their single ids.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let encoding = self
            .tokenizer
            .encode(text, false)
            .map_err(|e| ChatError::tokenizer("encoding text", e))?;
        Ok(encoding.get_ids().to_vec())
    }

    /// `text`'s ids if it is at most `limit` tokens; else how many it has
    /// at least ([`Within::Over`]), found cheaply: a text longer than
    /// [`COUNT_CHUNK`] bytes is counted a chunk at a time, cut before
    /// whitespace, and the count stops once it is past `limit` by more
    /// than the seams can account for. So a prompt far over a context
    /// costs what its first context's worth of tokens costs, in time and
    /// in memory (tokenizing whole takes some hundreds of bytes per byte).
    pub fn encode_within(&self, text: &str, limit: usize) -> Result<Within> {
        if text.len() > COUNT_CHUNK {
            let (mut counted, mut seams, mut rest) = (0usize, 0usize, text);
            while !rest.is_empty() {
                let cut = chunk_end(rest, COUNT_CHUNK);
                counted += self.encode(&rest[..cut])?.len();
                rest = &rest[cut..];
                if !rest.is_empty() {
                    seams += 1;
                }
                let sure = counted.saturating_sub(SEAM_MARGIN * seams);
                if sure > limit {
                    return Ok(Within::Over { at_least: sure, exact: false });
                }
            }
        }
        let ids = self.encode(text)?;
        Ok(if ids.len() > limit { Within::Over { at_least: ids.len(), exact: true } } else { Within::Fits(ids) })
    }

    /// How many tokens `text` has: exact up to [`COUNT_CHUNK`] bytes; a
    /// longer text is counted a chunk at a time (within a few tokens per
    /// chunk of the whole's count), so that counting a huge text takes
    /// memory for one chunk.
    pub fn count_tokens(&self, text: &str) -> Result<usize> {
        let (mut counted, mut rest) = (0usize, text);
        while !rest.is_empty() {
            let cut = chunk_end(rest, COUNT_CHUNK);
            counted += self.encode(&rest[..cut])?.len();
            rest = &rest[cut..];
        }
        Ok(counted)
    }

    /// Decodes ids to text, keeping special tokens.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.tokenizer
            .decode(ids, false)
            .map_err(|e| ChatError::tokenizer("decoding ids", e))
    }

    /// The id of a token string (vocabulary or added token), if any.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.tokenizer.token_to_id(token)
    }

    /// The string of a token id, if any.
    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.tokenizer.id_to_token(id)
    }

    /// Ids of the chat format's special tokens.
    pub fn special(&self) -> &SpecialTokens {
        &self.special
    }

    /// Ids that end generation: the end of a turn, the config's `eos_token`,
    /// and the end-of-document token (`<|endoftext|>`, `<|end_of_text|>`),
    /// once each: Qwen3's `<|im_end|>`, `<|endoftext|>`, as its
    /// generation_config lists them.
    pub fn stop_ids(&self) -> &[u32] {
        &self.stop_ids
    }

    /// Number of ids, added tokens included (151669 for Qwen3; the model's
    /// embedding may be larger, e.g. 151936).
    pub fn vocab_size(&self) -> usize {
        self.tokenizer.get_vocab_size(true)
    }

    /// The folder this tokenizer was loaded from.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The underlying `tokenizers` tokenizer.
    pub fn inner(&self) -> &Tokenizer {
        &self.tokenizer
    }
}

/// Texts longer than this are counted a chunk of this many bytes at a time
/// by [`ChatTokenizer::encode_within`].
pub const COUNT_CHUNK: usize = 64 << 10;

/// Tokens a seam between two chunks may add to the chunks' count over the
/// whole text's (the pieces next to a cut tokenize apart).
const SEAM_MARGIN: usize = 8;

/// What [`ChatTokenizer::encode_within`] found.
#[derive(Debug, Clone, PartialEq)]
pub enum Within {
    /// The text's ids: at most the limit.
    Fits(Vec<u32>),
    /// Over the limit: `at_least` tokens (the whole count when `exact`).
    Over { at_least: usize, exact: bool },
}

/// Where the first chunk of at most `max` bytes of `text` ends: before a
/// whitespace character near the end when there is one (so that the words
/// on both sides tokenize as in the whole), else at a character boundary.
fn chunk_end(text: &str, max: usize) -> usize {
    if text.len() <= max {
        return text.len();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut window = end.saturating_sub(1024);
    while !text.is_char_boundary(window) {
        window += 1;
    }
    text[window..end]
        .char_indices()
        .rev()
        .find(|&(i, c)| c.is_whitespace() && window + i > 0)
        .map_or(end, |(i, _)| window + i)
}

/// The template variables transformers passes: `messages`, `tools`,
/// `documents`, `add_generation_prompt`, the special-token strings, and
/// `enable_thinking` only when given.
fn template_context(special_tokens_map: &[(&'static str, String)], request: &ChatRequest) -> Result<minijinja::Value> {
    if request.messages.is_empty() {
        return Err(ChatError::Request("empty conversation".into()));
    }
    let messages = normalize_messages(&request.messages)?;
    let mut ctx = Map::new();
    for (key, token) in special_tokens_map {
        ctx.insert((*key).to_string(), Json::String(token.clone()));
    }
    ctx.insert("messages".into(), Json::Array(messages));
    let tools = request.tools.clone().map(Json::Array).unwrap_or(Json::Null);
    ctx.insert("tools".into(), tools);
    ctx.insert("documents".into(), Json::Null);
    ctx.insert(
        "add_generation_prompt".into(),
        Json::Bool(request.add_generation_prompt),
    );
    if let Some(enable) = request.enable_thinking {
        ctx.insert("enable_thinking".into(), Json::Bool(enable));
    }
    Ok(minijinja::Value::from_serialize(Json::Object(ctx)))
}

/// transformers' message clean-up: drop `null`-valued keys, then alias the
/// reasoning fields (`{"thinking": r, **message, "reasoning_content": r}`).
fn normalize_messages(messages: &[Json]) -> Result<Vec<Json>> {
    const REASONING_FIELDS: [&str; 3] = ["reasoning_content", "thinking", "reasoning"];
    messages
        .iter()
        .enumerate()
        .map(|(i, message)| {
            let Json::Object(map) = message else {
                return Err(ChatError::Request(format!(
                    "message {i} is not a JSON object: {message}"
                )));
            };
            let map: Map<String, Json> = map
                .iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let reasoning = REASONING_FIELDS.iter().find_map(|k| map.get(*k)).cloned();
            let Some(reasoning) = reasoning else {
                return Ok(Json::Object(map));
            };
            let mut aliased = Map::new();
            aliased.insert("thinking".into(), reasoning.clone());
            aliased.extend(map);
            aliased.insert("reasoning_content".into(), reasoning);
            Ok(Json::Object(aliased))
        })
        .collect()
}

/// Reads and parses a JSON file.
pub(crate) fn read_json(path: &Path) -> Result<Json> {
    let text = std::fs::read_to_string(path).map_err(|source| ChatError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|source| ChatError::Json {
        path: path.to_path_buf(),
        source,
    })
}

/// The template text: `chat_template` is a string, or a list of
/// `{"name", "template"}` of which we take `"default"`.
fn chat_template_source(config: &Json, path: &Path) -> Result<String> {
    let bad = |reason: &str| ChatError::BadKey {
        path: path.to_path_buf(),
        key: "chat_template".into(),
        reason: reason.into(),
    };
    match config.get("chat_template") {
        None | Some(Json::Null) => Err(ChatError::MissingKey {
            path: path.to_path_buf(),
            key: "chat_template".into(),
        }),
        Some(Json::String(s)) => Ok(s.clone()),
        Some(Json::Array(named)) => named
            .iter()
            .find(|t| t.get("name").and_then(Json::as_str) == Some("default"))
            .and_then(|t| t.get("template"))
            .and_then(Json::as_str)
            .map(str::to_string)
            .ok_or_else(|| bad("no template named \"default\"")),
        Some(_) => Err(bad("expected a string or a list of named templates")),
    }
}

/// A special-token entry: a string, `{"content": ..}`, or null/absent.
fn token_string(config: &Json, key: &str, path: &Path) -> Result<Option<String>> {
    match config.get(key) {
        None | Some(Json::Null) => Ok(None),
        Some(Json::String(s)) => Ok(Some(s.clone())),
        Some(obj @ Json::Object(_)) => match obj.get("content").and_then(Json::as_str) {
            Some(s) => Ok(Some(s.to_string())),
            None => Err(ChatError::BadKey {
                path: path.to_path_buf(),
                key: key.into(),
                reason: "object without a string `content`".into(),
            }),
        },
        Some(other) => Err(ChatError::BadKey {
            path: path.to_path_buf(),
            key: key.into(),
            reason: format!("expected a token string, got {other}"),
        }),
    }
}

/// Every `added_tokens_decoder` entry must be the same id in tokenizer.json.
fn check_added_tokens(tokenizer: &Tokenizer, config: &Json, path: &Path) -> Result<()> {
    let Some(decoder) = config.get("added_tokens_decoder") else {
        return Ok(());
    };
    let key = "added_tokens_decoder";
    let bad = |reason: String| ChatError::BadKey {
        path: path.to_path_buf(),
        key: key.into(),
        reason,
    };
    let Json::Object(entries) = decoder else {
        return Err(bad("expected an object".into()));
    };
    for (id, entry) in entries {
        let id: u32 = id
            .parse()
            .map_err(|_| bad(format!("`{id}` is not a token id")))?;
        let content = entry
            .get("content")
            .and_then(Json::as_str)
            .ok_or_else(|| bad(format!("entry {id} has no string `content`")))?;
        let actual = tokenizer.token_to_id(content);
        if actual != Some(id) {
            return Err(bad(format!(
                "`{content}` is id {id} here but {actual:?} in {TOKENIZER_FILE}"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A text under the limit gets its ids as `encode` gives them; one far
    /// over it is refused after a bounded part of it was counted; the
    /// chunks are cut before whitespace and at character boundaries.
    #[test]
    fn encode_within_counts_cheaply_and_exactly_when_it_fits() {
        let dir = tempfile::tempdir().unwrap();
        crate::chat::write_small_tokenizer(dir.path(), 2048).unwrap();
        let tok = ChatTokenizer::from_dir(dir.path()).unwrap();
        let text = "def request(self, method):\n    return self.session.send(method)\n".repeat(2000);
        assert!(text.len() > COUNT_CHUNK);
        let ids = tok.encode(&text).unwrap();
        assert_eq!(tok.encode_within(&text, ids.len()).unwrap(), Within::Fits(ids.clone()));
        match tok.encode_within(&text, ids.len() - 1).unwrap() {
            Within::Over { at_least, .. } => assert!(at_least >= ids.len() - 1 && at_least <= ids.len() + 64, "{at_least} of {}", ids.len()),
            w => panic!("{w:?}"),
        }
        // 8 MB, far over: counted until the limit is passed, not whole.
        let huge = "x ".repeat(4 << 20);
        let t = std::time::Instant::now();
        match tok.encode_within(&huge, 1000).unwrap() {
            Within::Over { at_least, exact } => assert!(at_least > 1000 && !exact),
            w => panic!("{w:?}"),
        }
        assert!(t.elapsed() < std::time::Duration::from_secs(5), "{:?}", t.elapsed());
        let s = "é".repeat(COUNT_CHUNK);
        let cut = chunk_end(&s, COUNT_CHUNK - 1);
        assert!(s.is_char_boundary(cut) && cut > 0);
        let spaced = format!("{} {}", "a".repeat(COUNT_CHUNK - 10), "b".repeat(100));
        assert_eq!(chunk_end(&spaced, COUNT_CHUNK), COUNT_CHUNK - 10, "cut before the space");
    }
}
