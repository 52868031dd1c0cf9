//! Helpers for the end-to-end tests in `tests/tests/`: they run the real
//! `fusegrpo` binary (built by `cargo build --bin fusegrpo`, which the
//! README's test command runs first) as a user would.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The `fusegrpo` binary of the same profile as the running test.
pub fn fusegrpo_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/<test> -> target/<profile>/fusegrpo
    let bin = exe.parent().and_then(Path::parent).expect("target dir").join("fusegrpo");
    assert!(bin.exists(), "{} is missing: run `cargo build --bin fusegrpo` (scripts/test.sh does)", bin.display());
    bin
}

/// Run `fusegrpo args...`; returns the output (status not checked).
pub fn fusegrpo(args: &[&str]) -> Output {
    Command::new(fusegrpo_bin()).args(args).env("FUSEGRPO_LOG", "warn").output().expect("spawn fusegrpo")
}

/// Run and require success; returns stdout.
pub fn fusegrpo_ok(args: &[&str]) -> String {
    let out = fusegrpo(args);
    assert!(
        out.status.success(),
        "fusegrpo {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 stdout")
}

/// The trainer's golden fixtures (made by scripts/make_model_fixtures.py).
pub fn model_fixture(case: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../trainer/tests/fixtures").join(case)
}

/// The real Qwen3 tokenizer folder (scripts/fetch-qwen-tokenizer.sh).
pub fn qwen_tokenizer_dir() -> PathBuf {
    let dir = std::env::var_os("FUSEGRPO_QWEN_TOKENIZER")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/fusegrpo/qwen3-tokenizer"));
    assert!(
        dir.join("tokenizer.json").exists(),
        "the real Qwen3 tokenizer is not at {}: run scripts/fetch-qwen-tokenizer.sh",
        dir.display()
    );
    dir
}

/// Read a JSONL file into values.
pub fn read_jsonl(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .expect("jsonl")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect()
}
