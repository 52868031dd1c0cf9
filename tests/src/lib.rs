//! Helpers for the end-to-end tests in `tests/tests/suite/`: they run the real
//! `fusegrpo` binary (built by `cargo build --bin fusegrpo`, which the
//! README's test command runs first) as a user would.

pub mod module_graph;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};


/// The `fusegrpo` binary of the same profile as the running test, or the
/// one `FUSEGRPO_TEST_BIN` names (to run the suite against another build,
/// e.g. to show a regression test fails before its fix).
pub fn fusegrpo_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("FUSEGRPO_TEST_BIN") {
        return PathBuf::from(bin);
    }
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

/// Run and require exit status 1, an error and not a panic; returns stderr.
pub fn fusegrpo_fails(args: &[&str]) -> String {
    let out = fusegrpo(args);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "fusegrpo {args:?} should fail with status 1:\n{err}");
    assert!(!err.contains("panicked"), "{err}");
    err
}

/// A path as the `&str` an argument list takes.
pub fn s(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 path")
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

/// The model fixtures, lm/tests/fixtures (made by scripts/make_model_fixtures.py).
pub fn model_fixture(case: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../lm/tests/fixtures").join(case)
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

pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// A small shop repository (`repos/acme__shop`, two files, one commit)
/// and its 2 tasks with gold (`tasks.jsonl`) in `dir`.
pub fn shop_repo(dir: &Path) {
    let repo = dir.join("repos/acme__shop");
    std::fs::create_dir_all(repo.join("shop")).unwrap();
    std::fs::write(
        repo.join("shop/cart.py"),
        "class Cart:\n    def add_item(self, item):\n        if item.price < 0:\n            raise ValueError('negative price in cart')\n        self.items.append(item)\n",
    )
    .unwrap();
    std::fs::write(repo.join("shop/tax.py"), "def compute_tax(total):\n    return total * 0.2\n").unwrap();
    git(&repo, &["init", "-q"]);
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-qm", "init"]);
    let commit = git(&repo, &["rev-parse", "HEAD"]);
    let task = |id: &str, text: &str, file: &str, func: &str| {
        serde_json::json!({"instance_id": id, "repo": "acme/shop", "base_commit": commit, "problem_statement": text,
                           "gold": {"files": [file], "functions": [format!("{file}:{func}")]}})
        .to_string()
    };
    std::fs::write(
        dir.join("tasks.jsonl"),
        [
            task("shop-1", "Adding an item fails with 'negative price in cart' for discounts; `add_item` should allow them.", "shop/cart.py", "Cart.add_item"),
            task("shop-2", "`compute_tax` uses a flat rate; it must depend on the region.", "shop/tax.py", "compute_tax"),
        ]
        .join("\n"),
    )
    .unwrap();
}

/// The shop repository and tasks ([`shop_repo`]), a tiny random model and
/// a run config (`run.toml`, rollout + training sections) in `dir`.
pub fn shop_world(dir: &Path) -> std::path::PathBuf {
    shop_repo(dir);
    fusegrpo_ok(&["init-tiny", "--out", dir.join("model").to_str().unwrap(), "--small-vocab", "1024", "--seed", "2"]);
    let cfg = dir.join("run.toml");
    std::fs::write(
        &cfg,
        "name = \"e2e\"\n[model]\npath = \"model\"\n[env]\nrepos_dir = \"repos\"\n[episode]\nmax_turns = 3\nmax_turn_tokens = 16\n[rollout]\ngroup = 2\n[sampling]\ntemperature = 1.0\nseed = 3\n\
         [train]\ntasks = \"tasks.jsonl\"\nsteps = 4\ntasks_per_step = 2\nmicro_batch_rows = 3\nsave_every = 2\nkeep_last = 2\nmask_truncated = false\n\
         [grpo]\nbeta = 0.04\n[optim]\nlr = 0.001\n",
    )
    .unwrap();
    cfg
}


/// GRPO metrics lines without the wall-clock fields (they differ between
/// runs of the same steps).
pub fn without_timings(rows: Vec<serde_json::Value>) -> Vec<serde_json::Value> {
    rows.into_iter()
        .map(|mut r| {
            // Wall-clock fields: `seconds_*`, throughput, and `off_policy/`'s
            // times (its staleness stays).
            r.as_object_mut().expect("a metrics object").retain(|k, _| {
                let off_policy_time = k.starts_with("off_policy/") && k != "off_policy/staleness";
                !(k.starts_with("seconds_") || k == "tokens_per_second" || off_policy_time)
            });
            r
        })
        .collect()
}
