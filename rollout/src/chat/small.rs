//! A small byte-level BPE tokenizer with Qwen3's chat format (or Llama 3's),
//! for fast CPU runs.
//!
//! [`write_small_tokenizer`] trains a BPE with the `tokenizers` crate on a
//! built-in deterministic corpus (Python-like code, English prose, chat-format
//! JSON tool calls, some non-ASCII text) using Qwen3's normalizer (NFC),
//! pre-tokenizer (its split regex + byte level) and byte-level decoder, then
//! appends Qwen3's 26 added tokens (same strings, same order, same flags) as
//! the last ids, and writes `tokenizer.json` plus a `tokenizer_config.json`
//! holding Qwen3's chat template. Every text encodes (byte level, no unknown
//! tokens) and renders exactly as with the real tokenizer, only into other ids.
//! [`SmallChatFormat::Llama3`] appends Llama 3.1's named special tokens
//! instead, with `configs/llama3-tools.jinja` as the chat template.

use std::path::Path;

use serde_json::{json, Map, Value as Json};
use tokenizers::models::bpe::{BpeTrainerBuilder, BPE};
use tokenizers::normalizers::unicode::NFC;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{
    AddedToken, DecoderWrapper, NormalizerWrapper, PostProcessorWrapper, PreTokenizerWrapper,
    SplitDelimiterBehavior, TokenizerBuilder, TokenizerImpl,
};

use super::error::{ChatError, Result};
use super::tokenizer::{TOKENIZER_CONFIG_FILE, TOKENIZER_FILE};

/// Qwen3's chat template, byte for byte as in its tokenizer_config.json.
pub const QWEN3_CHAT_TEMPLATE: &str = include_str!("qwen3_chat_template.jinja");

/// Qwen3's pre-tokenizer split regex.
pub const QWEN3_SPLIT_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Qwen3's added tokens in id order, with their `special` flag. In Qwen3 they
/// are ids 151643..=151668, right after the BPE vocabulary.
pub const QWEN3_ADDED_TOKENS: [(&str, bool); 26] = [
    ("<|endoftext|>", true),
    ("<|im_start|>", true),
    ("<|im_end|>", true),
    ("<|object_ref_start|>", true),
    ("<|object_ref_end|>", true),
    ("<|box_start|>", true),
    ("<|box_end|>", true),
    ("<|quad_start|>", true),
    ("<|quad_end|>", true),
    ("<|vision_start|>", true),
    ("<|vision_end|>", true),
    ("<|vision_pad|>", true),
    ("<|image_pad|>", true),
    ("<|video_pad|>", true),
    ("<tool_call>", false),
    ("</tool_call>", false),
    ("<|fim_prefix|>", false),
    ("<|fim_middle|>", false),
    ("<|fim_suffix|>", false),
    ("<|fim_pad|>", false),
    ("<|repo_name|>", false),
    ("<|file_sep|>", false),
    ("<tool_response>", false),
    ("</tool_response>", false),
    ("<think>", false),
    ("</think>", false),
];

/// Llama 3.1's named special tokens in id order (128000..=128010 there).
pub const LLAMA3_ADDED_TOKENS: [(&str, bool); 11] = [
    ("<|begin_of_text|>", true),
    ("<|end_of_text|>", true),
    ("<|reserved_special_token_0|>", true),
    ("<|reserved_special_token_1|>", true),
    ("<|finetune_right_pad_id|>", true),
    ("<|reserved_special_token_2|>", true),
    ("<|start_header_id|>", true),
    ("<|end_header_id|>", true),
    ("<|eom_id|>", true),
    ("<|eot_id|>", true),
    ("<|python_tag|>", true),
];

/// Llama 3's header-token chat format with tools declared and called as
/// Qwen does (`configs/llama3-tools.jinja`).
pub const LLAMA3_TOOLS_TEMPLATE: &str = include_str!("../../../configs/llama3-tools.jinja");

/// The chat format a small tokenizer carries: its added tokens, chat
/// template and special-token roles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SmallChatFormat {
    /// Qwen3's 26 added tokens and chat template (ChatML).
    #[default]
    Qwen3,
    /// Llama 3.1's header tokens and `configs/llama3-tools.jinja`.
    Llama3,
}

impl SmallChatFormat {
    /// The added tokens, in id order, with their `special` flag.
    pub fn added_tokens(self) -> &'static [(&'static str, bool)] {
        match self {
            SmallChatFormat::Qwen3 => &QWEN3_ADDED_TOKENS,
            SmallChatFormat::Llama3 => &LLAMA3_ADDED_TOKENS,
        }
    }
}

/// The 256 byte-level symbols every byte-level BPE starts from.
const BYTE_ALPHABET: usize = 256;

/// Smallest vocabulary: the byte alphabet plus the added tokens (no merges).
pub const SMALL_VOCAB_MIN: usize = BYTE_ALPHABET + QWEN3_ADDED_TOKENS.len();

type Bpe = TokenizerImpl<
    BPE,
    NormalizerWrapper,
    PreTokenizerWrapper,
    PostProcessorWrapper,
    DecoderWrapper,
>;

/// Trains the small tokenizer and writes `tokenizer.json` and
/// `tokenizer_config.json` into `out_dir` (created if needed).
///
/// The result has exactly `vocab_size` ids: `vocab_size - 26` BPE tokens then
/// Qwen3's 26 added tokens. Deterministic: the same `vocab_size` always gives
/// the same files. Errors if `vocab_size` is below [`SMALL_VOCAB_MIN`] or
/// above what the built-in corpus supports.
pub fn write_small_tokenizer(out_dir: impl AsRef<Path>, vocab_size: usize) -> Result<()> {
    write_small_tokenizer_with(out_dir, vocab_size, &[])
}

/// [`write_small_tokenizer`] with `extra_docs` added to the training corpus
/// (the text a run will see: a repository's files, the tool declarations),
/// so that text tokenizes into fewer ids. Deterministic for the same inputs.
pub fn write_small_tokenizer_with(out_dir: impl AsRef<Path>, vocab_size: usize, extra_docs: &[String]) -> Result<()> {
    write_small_tokenizer_in(out_dir, vocab_size, extra_docs, SmallChatFormat::Qwen3)
}

/// [`write_small_tokenizer_with`] in a chat `format`: its added tokens are
/// the last ids, its template and special tokens are in the config.
pub fn write_small_tokenizer_in(out_dir: impl AsRef<Path>, vocab_size: usize, extra_docs: &[String], format: SmallChatFormat) -> Result<()> {
    let out_dir = out_dir.as_ref();
    let tokenizer = train_small_tokenizer(vocab_size, extra_docs, format.added_tokens())?;
    std::fs::create_dir_all(out_dir).map_err(|source| ChatError::Io {
        path: out_dir.to_path_buf(),
        source,
    })?;
    let tok_path = out_dir.join(TOKENIZER_FILE);
    tokenizer
        .save(&tok_path, false)
        .map_err(|e| ChatError::tokenizer(format!("writing {}", tok_path.display()), e))?;
    let cfg_path = out_dir.join(TOKENIZER_CONFIG_FILE);
    let first_added = vocab_size - format.added_tokens().len();
    let config = match format {
        SmallChatFormat::Qwen3 => qwen3_tokenizer_config(first_added),
        SmallChatFormat::Llama3 => llama3_tokenizer_config(first_added),
    };
    let text = serde_json::to_string_pretty(&config).expect("a JSON value always serializes");
    std::fs::write(&cfg_path, text + "\n").map_err(|source| ChatError::Io {
        path: cfg_path,
        source,
    })
}

/// Trains the BPE and appends the added tokens; checks the exact size.
fn train_small_tokenizer(vocab_size: usize, extra_docs: &[String], added: &[(&str, bool)]) -> Result<Bpe> {
    let max = max_small_vocab();
    if vocab_size < SMALL_VOCAB_MIN || vocab_size > max {
        return Err(ChatError::VocabSize {
            requested: vocab_size,
            problem: if vocab_size < SMALL_VOCAB_MIN {
                "too small"
            } else {
                "too large"
            },
            min: SMALL_VOCAB_MIN,
            max,
        });
    }
    let bpe_size = vocab_size - added.len();
    let mut tokenizer = untrained_tokenizer()?;
    let mut trainer = BpeTrainerBuilder::new()
        .vocab_size(bpe_size)
        .min_frequency(0)
        .show_progress(false)
        .initial_alphabet(ByteLevel::alphabet().into_iter().collect())
        .build();
    let mut corpus = training_corpus();
    corpus.extend(extra_docs.iter().cloned());
    tokenizer
        .train(&mut trainer, corpus.iter())
        .map_err(|e| ChatError::tokenizer("training the small BPE", e))?;
    let trained = tokenizer.get_vocab_size(false);
    if trained != bpe_size {
        return Err(ChatError::VocabSize {
            requested: vocab_size,
            problem: "not reachable with the built-in corpus",
            min: SMALL_VOCAB_MIN,
            max: trained + added.len(),
        });
    }
    add_tokens(&mut tokenizer, added);
    debug_assert_eq!(tokenizer.get_vocab_size(true), vocab_size);
    Ok(tokenizer)
}

/// Largest vocabulary the built-in corpus is known to reach (checked by a test).
pub fn max_small_vocab() -> usize {
    32_768
}

/// Qwen3's pipeline (NFC, split regex + byte level, byte-level decoding) with
/// an empty BPE model.
fn untrained_tokenizer() -> Result<Bpe> {
    let split = Split::new(
        SplitPattern::Regex(QWEN3_SPLIT_REGEX.into()),
        SplitDelimiterBehavior::Isolated,
        false,
    )
    .map_err(|e| ChatError::tokenizer("compiling Qwen3's split regex", e))?;
    let byte_level = ByteLevel::new(false, false, false);
    let pre = Sequence::new(vec![split.into(), byte_level.into()]);
    TokenizerBuilder::new()
        .with_model(BPE::default())
        .with_normalizer(Some(NFC.into()))
        .with_pre_tokenizer(Some(pre.into()))
        .with_post_processor(Some(byte_level.into()))
        .with_decoder(Some(byte_level.into()))
        .build()
        .map_err(|e| ChatError::tokenizer("building the small tokenizer", e))
}

/// Appends the added tokens, in order and with their flags (never
/// normalized, no stripping).
fn add_tokens(tokenizer: &mut Bpe, added: &[(&str, bool)]) {
    for &(content, special) in added {
        let token = AddedToken::from(content, special).normalized(false);
        if special {
            tokenizer.add_special_tokens(&[token]);
        } else {
            tokenizer.add_tokens(&[token]);
        }
    }
}

/// tokenizer_config.json's `added_tokens_decoder` for `added` numbered from
/// `first_added_id`.
fn added_tokens_decoder(added: &[(&str, bool)], first_added_id: usize) -> Json {
    let mut decoder = Map::new();
    for (i, (content, special)) in added.iter().enumerate() {
        decoder.insert(
            (first_added_id + i).to_string(),
            json!({
                "content": content, "lstrip": false, "normalized": false,
                "rstrip": false, "single_word": false, "special": special,
            }),
        );
    }
    Json::Object(decoder)
}

/// Llama 3.1 Instruct's special-token roles (the
/// end of a turn is the eos token) in a tokenizer_config.json, the added tokens renumbered from
/// `first_added_id` and `configs/llama3-tools.jinja` as the template.
fn llama3_tokenizer_config(first_added_id: usize) -> Json {
    json!({
        "added_tokens_decoder": added_tokens_decoder(&LLAMA3_ADDED_TOKENS, first_added_id),
        "bos_token": "<|begin_of_text|>",
        "chat_template": LLAMA3_TOOLS_TEMPLATE,
        "clean_up_tokenization_spaces": false,
        "eos_token": "<|eot_id|>",
        "model_max_length": 131072,
        "tokenizer_class": "PreTrainedTokenizerFast",
    })
}

/// Qwen3's tokenizer_config.json with the added tokens renumbered from
/// `first_added_id`.
fn qwen3_tokenizer_config(first_added_id: usize) -> Json {
    let decoder = added_tokens_decoder(&QWEN3_ADDED_TOKENS, first_added_id);
    let additional: Vec<&str> = QWEN3_ADDED_TOKENS
        .iter()
        .filter(|(content, special)| *special && *content != "<|endoftext|>")
        .map(|(content, _)| *content)
        .collect();
    json!({
        "add_bos_token": false,
        "add_prefix_space": false,
        "added_tokens_decoder": decoder,
        "additional_special_tokens": additional,
        "bos_token": null,
        "chat_template": QWEN3_CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": false,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 131072,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": false,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": null,
    })
}

/// A tiny deterministic PRNG (xorshift64*) so the corpus never changes.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

const NOUNS: &[&str] = &[
    "file",
    "test",
    "function",
    "value",
    "result",
    "error",
    "list",
    "name",
    "path",
    "line",
    "model",
    "token",
    "reward",
    "policy",
    "group",
    "repository",
    "module",
    "class",
    "method",
    "argument",
    "string",
    "number",
    "table",
    "index",
    "buffer",
    "config",
    "user",
    "message",
    "server",
    "request",
    "response",
    "query",
    "cache",
    "batch",
    "step",
    "loss",
    "gradient",
    "parser",
    "tree",
    "node",
    "graph",
    "matrix",
    "vector",
    "record",
    "field",
    "key",
    "count",
    "window",
    "process",
    "thread",
    "queue",
    "stream",
    "socket",
    "header",
    "payload",
    "score",
];
const VERBS: &[&str] = &[
    "read", "write", "parse", "check", "return", "compute", "update", "load", "save", "find",
    "open", "close", "build", "run", "fix", "print", "sort", "filter", "split", "merge", "send",
    "receive", "create", "delete", "validate", "render", "encode", "decode", "train", "evaluate",
    "search", "replace", "count", "format", "handle", "raise", "call", "test",
];
const ADJECTIVES: &[&str] = &[
    "new", "old", "empty", "small", "large", "first", "last", "next", "previous", "valid",
    "invalid", "local", "global", "default", "current", "final", "simple", "quick", "slow",
    "broken", "correct", "missing", "unique", "sorted", "total", "random", "hidden", "public",
];
const FILLER: &[&str] = &[
    "the", "a", "an", "this", "that", "of", "to", "in", "for", "with", "and", "or", "but", "is",
    "was", "will", "should", "can", "we", "it", "then", "when", "if", "because", "so", "not",
    "all", "each", "every", "before", "after", "from", "into", "by", "on", "at",
];
const NON_ASCII: &[&str] = &[
    "café",
    "naïve",
    "résumé",
    "über",
    "Straße",
    "señor",
    "façade",
    "déjà vu",
    "Ångström",
    "日本語",
    "中文文本",
    "翻译",
    "こんにちは",
    "안녕하세요",
    "Привет",
    "Ελληνικά",
    "שלום",
    "مرحبا",
    "🙂",
    "🚀",
    "✅",
    "🍣",
    "—",
    "«guillemets»",
    "…",
    "€",
    "½",
    "→",
];
const TOOLS: &[&str] = &[
    "read_file",
    "run_tests",
    "search",
    "list_dir",
    "edit_file",
    "apply_patch",
];

/// The training documents: code, prose, chat-format tool calls, non-ASCII.
fn training_corpus() -> Vec<String> {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut docs = Vec::new();
    for i in 0..4000 {
        let doc = match i % 4 {
            0 => python_doc(&mut rng),
            1 => prose_doc(&mut rng),
            2 => chat_doc(&mut rng),
            _ => mixed_doc(&mut rng),
        };
        docs.push(doc);
    }
    docs
}

const ONSETS: &[&str] = &[
    "b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "z", "ch",
    "sh", "th", "st", "pr", "tr", "bl", "gr", "qu", "sp", "",
];
const VOWELS: &[&str] = &[
    "a", "e", "i", "o", "u", "ai", "ea", "ou", "io", "y", "ee", "oa",
];
const CODAS: &[&str] = &[
    "", "", "n", "r", "s", "t", "l", "m", "ng", "ck", "x", "nd", "st",
];

/// An invented word of 1-4 syllables: gives the trainer many distinct merges.
fn pseudo_word(rng: &mut Rng) -> String {
    let mut word = String::new();
    for _ in 0..1 + rng.below(4) {
        word.push_str(rng.pick(ONSETS));
        word.push_str(rng.pick(VOWELS));
        word.push_str(rng.pick(CODAS));
    }
    word
}

fn identifier(rng: &mut Rng) -> String {
    match rng.below(5) {
        0 => format!("{}_{}", rng.pick(VERBS), rng.pick(NOUNS)),
        1 => format!("{}_{}", rng.pick(ADJECTIVES), rng.pick(NOUNS)),
        2 => format!("{}_{}", rng.pick(VERBS), pseudo_word(rng)),
        3 => pseudo_word(rng),
        _ => rng.pick(NOUNS).to_string(),
    }
}

fn python_doc(rng: &mut Rng) -> String {
    let func = identifier(rng);
    let (a, b) = (identifier(rng), identifier(rng));
    let n = rng.below(1000);
    let class = {
        let noun = rng.pick(NOUNS);
        let mut c = noun[..1].to_uppercase();
        c.push_str(&noun[1..]);
        c
    };
    format!(
        "import os\nfrom typing import List, Optional\n\n\nclass {class}:\n    \"\"\"{} {} {}.\"\"\"\n\n    def __init__(self, {a}: int = {n}):\n        self.{a} = {a}\n\n\ndef {func}({a}, {b}=None):\n    # {} the {} {}\n    if {b} is None:\n        {b} = []\n    for i in range(len({a})):\n        if {a}[i] > {n}:\n            {b}.append({a}[i] * 2)\n        elif not {a}[i]:\n            raise ValueError(f\"bad {{i}}: {{{a}[i]!r}}\")\n    return {b}\n\n\ndef test_{func}():\n    assert {func}([1, 2, {n}]) == [{}]\n    assert os.path.exists(\"{}/{}.py\")\n",
        rng.pick(VERBS),
        rng.pick(ADJECTIVES),
        rng.pick(NOUNS),
        rng.pick(VERBS),
        rng.pick(ADJECTIVES),
        rng.pick(NOUNS),
        n * 2,
        rng.pick(NOUNS),
        identifier(rng),
    )
}

fn sentence(rng: &mut Rng) -> String {
    let len = 6 + rng.below(10);
    let mut words = Vec::with_capacity(len);
    for j in 0..len {
        let word = match rng.below(6) {
            0 => rng.pick(NOUNS).to_string(),
            1 => rng.pick(VERBS).to_string(),
            2 => rng.pick(ADJECTIVES).to_string(),
            3 => pseudo_word(rng),
            _ => rng.pick(FILLER).to_string(),
        };
        if j == 0 {
            let mut w = word[..1].to_uppercase();
            w.push_str(&word[1..]);
            words.push(w);
        } else {
            words.push(word);
        }
    }
    let end = [".", ".", ".", "?", "!", ":"][rng.below(6)];
    format!("{}{end}", words.join(" "))
}

fn prose_doc(rng: &mut Rng) -> String {
    let mut text = String::new();
    for _ in 0..2 + rng.below(3) {
        for _ in 0..3 + rng.below(4) {
            text.push_str(&sentence(rng));
            text.push(' ');
        }
        text.push_str("\n\n");
    }
    text
}

fn chat_doc(rng: &mut Rng) -> String {
    let tool = rng.pick(TOOLS);
    let path = format!("src/{}/{}.py", rng.pick(NOUNS), identifier(rng));
    let n = rng.below(500);
    format!(
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n<think>\n{}\n</think>\n\n<tool_call>\n{{\"name\": \"{tool}\", \"arguments\": {{\"path\": \"{path}\", \"max_lines\": {n}, \"verbose\": {}}}}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n{}\n</tool_response><|im_end|>\n<|im_start|>assistant\n{}<|im_end|>\n",
        sentence(rng),
        sentence(rng),
        ["true", "false"][n % 2],
        python_doc(rng).lines().take(6).collect::<Vec<_>>().join("\n"),
        sentence(rng),
    )
}

fn mixed_doc(rng: &mut Rng) -> String {
    let mut text = String::new();
    for _ in 0..4 {
        text.push_str(&sentence(rng));
        text.push(' ');
        text.push_str(rng.pick(NON_ASCII));
        text.push(' ');
        text.push_str(&format!(
            "{{\"{}\": {}, \"{}\": \"{}\"}}\n",
            rng.pick(NOUNS),
            rng.below(10_000),
            rng.pick(NOUNS),
            rng.pick(NON_ASCII)
        ));
    }
    text
}
