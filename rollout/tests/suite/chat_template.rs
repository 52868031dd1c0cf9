//! Chat rendering and encoding against transformers' `apply_chat_template`.
//!
//! The golden fixtures in `tests/fixtures/chat/*.json` were made by
//! `scripts/make_chat_fixtures.py` with the real Qwen3 tokenizer; every case
//! must match in text and in ids. The real tokenizer is found like
//! `scripts/fetch-qwen-tokenizer.sh` caches it: `$FUSEGRPO_QWEN_TOKENIZER`, else
//! `~/.cache/fusegrpo/qwen3-tokenizer`. These tests fail (never skip) without it.

use std::path::{Path, PathBuf};

use rollout::chat::{
    write_small_tokenizer, ChatError, ChatRequest, ChatTokenizer, QWEN3_ADDED_TOKENS,
    QWEN3_CHAT_TEMPLATE, SMALL_VOCAB_MIN,
};
use serde::Deserialize;

/// The real Qwen3 tokenizer folder; panics with the fix if it is missing.
fn qwen_tokenizer_dir() -> PathBuf {
    let dir = match std::env::var_os("FUSEGRPO_QWEN_TOKENIZER") {
        Some(dir) => PathBuf::from(dir),
        None => {
            let home = std::env::var_os("HOME").expect("HOME is not set");
            PathBuf::from(home).join(".cache/fusegrpo/qwen3-tokenizer")
        }
    };
    for file in ["tokenizer.json", "tokenizer_config.json"] {
        assert!(
            dir.join(file).is_file(),
            "the real Qwen3 tokenizer is missing: {} not found. Run \
             `scripts/fetch-qwen-tokenizer.sh` (or set FUSEGRPO_QWEN_TOKENIZER to its folder).",
            dir.join(file).display()
        );
    }
    dir
}

fn qwen() -> ChatTokenizer {
    let dir = qwen_tokenizer_dir();
    ChatTokenizer::from_dir(&dir).unwrap_or_else(|e| panic!("loading {}: {e}", dir.display()))
}

#[derive(Deserialize)]
pub(crate) struct Fixture {
    pub(crate) name: String,
    #[serde(flatten)]
    request: ChatRequest,
    expected: Expected,
}

#[derive(Deserialize)]
struct Expected {
    text: String,
    ids: Vec<u32>,
}

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/chat")
}

fn load_fixtures() -> Vec<Fixture> {
    load_fixtures_in(&fixtures_dir())
}

/// The golden fixtures of a folder, by name.
pub(crate) fn load_fixtures_in(dir: &Path) -> Vec<Fixture> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("readable dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    paths
        .iter()
        .map(|p| {
            let text = std::fs::read_to_string(p).unwrap();
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        })
        .collect()
}

/// Where two texts first differ, with a little context on each side.
fn text_diff(ours: &str, theirs: &str) -> Option<String> {
    let (a, b): (Vec<char>, Vec<char>) = (ours.chars().collect(), theirs.chars().collect());
    let pos = (0..a.len().max(b.len())).find(|&i| a.get(i) != b.get(i))?;
    let around = |s: &[char]| -> String {
        s[pos.saturating_sub(30)..(pos + 30).min(s.len())]
            .iter()
            .collect()
    };
    Some(format!(
        "text differs at char {pos} (ours {} chars, transformers {}):\n  ours:         {:?}\n  transformers: {:?}",
        a.len(),
        b.len(),
        around(&a),
        around(&b)
    ))
}

/// Where two id lists first differ, with a little context.
fn ids_diff(ours: &[u32], theirs: &[u32]) -> Option<String> {
    let pos = (0..ours.len().max(theirs.len())).find(|&i| ours.get(i) != theirs.get(i))?;
    let around = |s: &[u32]| s[pos.saturating_sub(5)..(pos + 5).min(s.len())].to_vec();
    Some(format!(
        "ids differ at index {pos} (ours {} ids, transformers {}): ours {:?} vs transformers {:?}",
        ours.len(),
        theirs.len(),
        around(ours),
        around(theirs)
    ))
}

#[test]
fn golden_fixtures_match_transformers() {
    check_fixtures(&qwen(), &load_fixtures());
}

/// Every fixture renders to transformers' text and ids, and its text encodes
/// to its ids.
pub(crate) fn check_fixtures(tok: &ChatTokenizer, fixtures: &[Fixture]) {
    assert!(
        fixtures.len() >= 15,
        "expected the golden fixtures, found {}",
        fixtures.len()
    );
    let mut failures = Vec::new();
    for fx in fixtures {
        let (text, ids) = match tok.render_ids(&fx.request) {
            Ok(out) => out,
            Err(e) => {
                failures.push(format!("[{}] render failed: {e}", fx.name));
                continue;
            }
        };
        if let Some(d) = text_diff(&text, &fx.expected.text) {
            failures.push(format!("[{}] {d}", fx.name));
        }
        if let Some(d) = ids_diff(&ids, &fx.expected.ids) {
            failures.push(format!("[{}] {d}", fx.name));
        }
        // Encoding transformers' own text must give its ids too.
        let from_expected = tok.encode(&fx.expected.text).unwrap();
        if let Some(d) = ids_diff(&from_expected, &fx.expected.ids) {
            failures.push(format!("[{}] encoding the expected text: {d}", fx.name));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} fixtures differ:\n{}",
        failures.len(),
        fixtures.len(),
        failures.join("\n")
    );
    eprintln!("{} chat fixtures identical in text and ids", fixtures.len());
}

#[test]
fn fixtures_cover_the_required_cases() {
    let names: Vec<String> = load_fixtures().into_iter().map(|f| f.name).collect();
    for needed in [
        "tools_declared_with_system",
        "single_tool_call",
        "parallel_tool_calls",
        "arguments_as_string",
        "reasoning_content_after_last_query",
        "inline_think_multi_step",
        "multi_turn_earlier_assistant",
        "enable_thinking_false",
        "non_ascii",
        "no_system_generation_prompt",
        "system_no_generation_prompt",
    ] {
        assert!(
            names.iter().any(|n| n == needed),
            "missing fixture {needed}"
        );
    }
}

#[test]
fn real_tokenizer_special_tokens_and_round_trip() {
    let tok = qwen();
    let s = *tok.special();
    assert_eq!((s.turn_start, s.end_of_turn), (151644, 151645));
    assert_eq!(tok.end_of_turn_text(), "<|im_end|>");
    assert_eq!((s.tool_call_start, s.tool_call_end), (Some(151657), Some(151658)));
    assert_eq!(
        (s.tool_response_start, s.tool_response_end),
        (Some(151665), Some(151666))
    );
    assert_eq!((s.think_start, s.think_end), (Some(151667), Some(151668)));
    assert_eq!(tok.stop_ids(), &[151645, 151643]);
    assert_eq!(tok.vocab_size(), 151669);
    assert_eq!(
        tok.encode("<|im_start|>user\nhi<|im_end|>").unwrap()[..1],
        [151644]
    );
    let text = "<think>\nnaïve 日本語 🍣\n</think>\n\n<tool_call>\n{\"a\": 1}\n</tool_call>";
    assert_eq!(tok.decode(&tok.encode(text).unwrap()).unwrap(), text);
}

#[test]
fn builtin_template_is_qwen3s() {
    let path = qwen_tokenizer_dir().join("tokenizer_config.json");
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(
        config["chat_template"].as_str().unwrap(),
        QWEN3_CHAT_TEMPLATE
    );
    let decoder = config["added_tokens_decoder"].as_object().unwrap();
    let real: Vec<(String, bool)> = decoder
        .values()
        .map(|t| {
            (
                t["content"].as_str().unwrap().to_string(),
                t["special"].as_bool().unwrap(),
            )
        })
        .collect();
    let ours: Vec<(String, bool)> = QWEN3_ADDED_TOKENS
        .iter()
        .map(|(c, s)| (c.to_string(), *s))
        .collect();
    assert_eq!(ours, real);
}

#[test]
fn render_errors_are_typed() {
    let tok = qwen();
    let empty = ChatRequest::default();
    assert!(matches!(tok.render(&empty), Err(ChatError::Request(_))));
    let bad = ChatRequest {
        messages: vec![serde_json::json!("not an object")],
        ..ChatRequest::default()
    };
    assert!(matches!(tok.render(&bad), Err(ChatError::Request(_))));
    let dir = tempfile::tempdir().unwrap();
    let err = ChatTokenizer::from_dir(dir.path()).unwrap_err();
    assert!(err.to_string().contains("tokenizer.json"), "{err}");
}

// ---- the small tokenizer -------------------------------------------------

fn small(vocab: usize) -> (tempfile::TempDir, ChatTokenizer) {
    let dir = tempfile::tempdir().unwrap();
    write_small_tokenizer(dir.path(), vocab).unwrap();
    let tok = ChatTokenizer::from_dir(dir.path()).unwrap();
    (dir, tok)
}

#[test]
fn small_tokenizer_is_deterministic_and_exact() {
    let vocab = 1000;
    let (a, tok) = small(vocab);
    let (b, _) = small(vocab);
    for file in ["tokenizer.json", "tokenizer_config.json"] {
        let (x, y) = (
            std::fs::read(a.path().join(file)).unwrap(),
            std::fs::read(b.path().join(file)).unwrap(),
        );
        assert!(x == y, "{file} differs between two trainings");
    }
    assert_eq!(tok.vocab_size(), vocab);
    let n_added = QWEN3_ADDED_TOKENS.len();
    for (i, (token, _)) in QWEN3_ADDED_TOKENS.iter().enumerate() {
        let id = (vocab - n_added + i) as u32;
        assert_eq!(tok.encode(token).unwrap(), vec![id], "{token}");
        assert_eq!(tok.decode(&[id]).unwrap(), *token);
    }
    let id = |t: &str| tok.token_id(t).unwrap();
    assert_eq!(tok.stop_ids(), &[id("<|im_end|>"), id("<|endoftext|>")]);
    assert_eq!((tok.special().turn_start, tok.special().end_of_turn), (id("<|im_start|>"), id("<|im_end|>")));
    // Every id decodes and no id is out of range.
    let max_id = (0..vocab as u32).filter_map(|i| tok.id_to_token(i)).count();
    assert_eq!(max_id, vocab);
}

#[test]
fn small_tokenizer_round_trips_and_renders_like_qwen() {
    let (_dir, tok) = small(700);
    for text in [
        "def f(x):\n    return x * 2  # double\n",
        "Plain English prose, with punctuation; and numbers 12345.",
        "naïve café — 日本語 🍣🎉 Привет ½ → \u{1F600}\t\r\n",
        "<|im_start|>user\nhi<|im_end|>\n<think>\nhm\n</think>",
    ] {
        let ids = tok.encode(text).unwrap();
        assert!(ids.iter().all(|&i| (i as usize) < 700));
        assert_eq!(tok.decode(&ids).unwrap(), text);
    }
    let real = qwen();
    for fx in load_fixtures() {
        let text = tok.render(&fx.request).unwrap();
        assert_eq!(
            text, fx.expected.text,
            "[{}] small tokenizer renders differently",
            fx.name
        );
        let ids = tok.encode(&text).unwrap();
        assert_eq!(tok.decode(&ids).unwrap(), text, "[{}]", fx.name);
        // Special tokens land on the same positions as with the real tokenizer.
        let count = |t: &ChatTokenizer, ids: &[u32]| {
            let s = t.special();
            ids.iter()
                .filter(|&&i| i == s.turn_start || Some(i) == s.tool_call_start || Some(i) == s.think_end)
                .count()
        };
        assert_eq!(
            count(&tok, &ids),
            count(&real, &fx.expected.ids),
            "[{}]",
            fx.name
        );
    }
}

#[test]
fn small_tokenizer_rejects_bad_sizes() {
    let dir = tempfile::tempdir().unwrap();
    let err = write_small_tokenizer(dir.path(), SMALL_VOCAB_MIN - 1).unwrap_err();
    assert!(matches!(err, ChatError::VocabSize { .. }), "{err}");
    assert!(err.to_string().contains("too small"), "{err}");
    let err = write_small_tokenizer(dir.path(), 10_000_000).unwrap_err();
    assert!(matches!(err, ChatError::VocabSize { .. }), "{err}");
    // The smallest size works: bytes only, no merges.
    write_small_tokenizer(dir.path(), SMALL_VOCAB_MIN).unwrap();
    let tok = ChatTokenizer::from_dir(dir.path()).unwrap();
    assert_eq!(tok.vocab_size(), SMALL_VOCAB_MIN);
}

#[test]
fn small_tokenizer_reaches_its_documented_maximum() {
    let max = rollout::chat::max_small_vocab();
    let (_dir, tok) = small(max);
    assert_eq!(tok.vocab_size(), max);
    let dir = tempfile::tempdir().unwrap();
    let err = write_small_tokenizer(dir.path(), max + 1).unwrap_err();
    assert!(err.to_string().contains("too large"), "{err}");
}

/// The tool-response layout probed from Qwen3's template is the one the
/// episode driver wrote by hand before it followed the template: so Qwen3's
/// episodes are unchanged.
#[test]
fn qwen3_tool_response_layout_is_the_hand_written_one() {
    for tok in [qwen(), small(1500).1] {
        for (thinking, header) in [(false, "<think>\n\n</think>\n\n"), (true, "")] {
            let layout = tok.response_layout(Some(thinking)).unwrap();
            let outputs = ["a.py:1: x", "b.py:2: y", "c"];
            let mut old = String::from("\n<|im_start|>user");
            for o in outputs {
                old.push_str("\n<tool_response>\n");
                old.push_str(o);
                old.push_str("\n</tool_response>");
            }
            old.push_str("<|im_end|>\n<|im_start|>assistant\n");
            old.push_str(header);
            assert_eq!(layout.render(&outputs), old, "enable_thinking={thinking}");
        }
    }
}

/// A template that renders tool messages some other way than a repetition
/// is refused with a reason, not guessed at.
#[test]
fn a_template_without_tool_messages_is_refused_by_the_probe() {
    let dir = tempfile::tempdir().unwrap();
    rollout::chat::write_small_tokenizer(dir.path(), 1500).unwrap();
    let file = dir.path().join("no-tools.jinja");
    std::fs::write(
        &file,
        "{% for m in messages %}{% if m.role == 'tool' %}{{ raise_exception('tools are not supported') }}{% endif %}\
         <|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}\
         {% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
    )
    .unwrap();
    let tok = ChatTokenizer::from_dir_with_template(dir.path(), Some(&file)).unwrap();
    let e = tok.response_layout(Some(false)).unwrap_err().to_string();
    assert!(e.contains("tools are not supported"), "{e}");
    let missing = ChatTokenizer::from_dir_with_template(dir.path(), Some(&dir.path().join("absent.jinja"))).unwrap_err().to_string();
    assert!(missing.contains("absent.jinja"), "{missing}");
}
