//! `fusegrpo chat render` against transformers' `apply_chat_template`: every
//! golden fixture of `rollout/tests/fixtures/chat` (made by
//! `scripts/make_chat_fixtures.py`) must come out identical in text and ids.
//! Needs the real Qwen3 tokenizer (`scripts/fetch-qwen-tokenizer.sh`; the
//! folder is `$FUSEGRPO_QWEN_TOKENIZER`, else `~/.cache/fusegrpo/qwen3-tokenizer`).

use std::path::{Path, PathBuf};
use std::process::Command;

fn qwen_tokenizer_dir() -> PathBuf {
    let dir = match std::env::var_os("FUSEGRPO_QWEN_TOKENIZER") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME").expect("HOME is not set"))
            .join(".cache/fusegrpo/qwen3-tokenizer"),
    };
    assert!(
        dir.join("tokenizer.json").is_file() && dir.join("tokenizer_config.json").is_file(),
        "the real Qwen3 tokenizer is missing from {}. Run `scripts/fetch-qwen-tokenizer.sh` \
         (or set FUSEGRPO_QWEN_TOKENIZER to its folder).",
        dir.display()
    );
    dir
}

#[test]
fn chat_render_matches_transformers_on_every_fixture() {
    let tokenizer = qwen_tokenizer_dir();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../rollout/tests/fixtures/chat");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&fixtures)
        .unwrap_or_else(|e| panic!("{}: {e}", fixtures.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    assert!(
        paths.len() >= 15,
        "expected the chat fixtures in {}",
        fixtures.display()
    );
    let work = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for path in &paths {
        let fixture: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let name = fixture["name"].as_str().unwrap().to_string();
        // The CLI input: the fixture without its name and expectations.
        let mut input = fixture.clone();
        let obj = input.as_object_mut().unwrap();
        obj.remove("name");
        obj.remove("expected");
        if obj["enable_thinking"].is_null() {
            obj.remove("enable_thinking");
        }
        let conv = work.path().join(format!("{name}.json"));
        std::fs::write(&conv, serde_json::to_string(&input).unwrap()).unwrap();
        let out = Command::new(e2e::fusegrpo_bin())
            .args(["chat", "render", "--tokenizer"])
            .arg(&tokenizer)
            .arg("--input")
            .arg(&conv)
            .output()
            .unwrap();
        if !out.status.success() {
            failures.push(format!(
                "[{name}] exit {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
            continue;
        }
        let stdout = String::from_utf8(out.stdout).unwrap();
        assert_eq!(stdout.lines().count(), 1, "[{name}] one JSON line expected");
        let got: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        for key in ["text", "ids"] {
            if got[key] != fixture["expected"][key] {
                failures.push(format!(
                    "[{name}] `{key}` differs from transformers:\n  ours:         {}\n  transformers: {}",
                    got[key], fixture["expected"][key]
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} differ:\n{}",
        failures.len(),
        paths.len(),
        failures.join("\n")
    );
}
