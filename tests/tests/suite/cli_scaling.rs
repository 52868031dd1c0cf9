//! Test-time scaling end to end: `fusegrpo eval --attempts N --select ...
//! [--refine] [--judge ...] --out-dir D` on the practice repository with the
//! scripted policy (varied per attempt by the seed), `plot-scaling`, and bad
//! input. The HTTP judge against `fusegrpo serve` is in serve_http.rs.

use e2e::{fusegrpo, fusegrpo_ok, read_jsonl};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The demo's tool and episode limits (configs/smoke-cpu.toml).
const CONFIG: &str = r#"
name = "scaling-test"
[model]
path = "model"
[env]
repos_dir = "repos"
[env.tools]
max_grep_matches = 6
max_read_lines = 14
max_output_bytes = 700
max_line_chars = 80
[episode]
max_turns = 4
max_turn_tokens = 200
max_total_tokens = 2048
[sampling]
temperature = 0.7
seed = 0
"#;

/// The practice repository (seed 0), 12 of its tasks, a tiny model for the
/// tokenizer, and the config; returns (config, tasks).
fn practice(dir: &Path) -> (PathBuf, PathBuf) {
    let d = |p: &str| dir.join(p).to_str().unwrap().to_string();
    fusegrpo_ok(&["practice-repo", "--out", &d("repos"), "--seed", "0"]);
    fusegrpo_ok(&["tasks", "from-history", "--repo", "practice/shop", "--repos-dir", &d("repos"), "--out", &d("tasks.jsonl"), "--max", "12"]);
    fusegrpo_ok(&[
        "init-tiny", "--out", &d("model"), "--small-vocab", "2048", "--hidden-size", "32", "--intermediate-size", "64",
        "--layers", "1", "--corpus-repo", "practice/shop", "--repos-dir", &d("repos"),
    ]);
    std::fs::write(dir.join("run.toml"), CONFIG).unwrap();
    (dir.join("run.toml"), dir.join("tasks.jsonl"))
}

fn rows(dir: &Path) -> Vec<Value> {
    let v: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("scaling.json")).unwrap()).unwrap();
    v["rows"].as_array().unwrap().clone()
}

fn row<'a>(rows: &'a [Value], selector: &str, refine: bool, n: u64) -> &'a Value {
    rows.iter()
        .find(|r| r["selector"] == selector && r["refine"] == refine && r["attempts"] == n)
        .unwrap_or_else(|| panic!("no row {selector} refine={refine} N={n}"))
}

/// The selections without their timings (which vary run to run).
fn selections(dir: &Path) -> Vec<Value> {
    read_jsonl(&dir.join("selection.jsonl"))
        .into_iter()
        .map(|mut s| {
            s["cost"]["attempt_seconds"] = Value::Null;
            s["cost"]["refine_seconds"] = Value::Null;
            s
        })
        .collect()
}

#[test]
fn vote_and_tournament_beat_one_attempt_on_practice_tasks() {
    let tmp = tempfile::tempdir().unwrap();
    let (cfg, tasks) = practice(tmp.path());
    let out = tmp.path().join("eval");
    let run = |dir: &Path| {
        fusegrpo_ok(&[
            "eval", "--config", cfg.to_str().unwrap(), "--tasks", tasks.to_str().unwrap(), "--policy", "scripted",
            "--attempts", "8", "--select", "first,vote,tournament", "--refine", "--out-dir", dir.to_str().unwrap(),
        ])
    };
    let table = run(&out);
    assert!(table.contains("tournament+refine") && table.contains("tokens/task"), "{table}");
    let rows = rows(&out);
    assert_eq!(rows.len(), 4 * 3 * 2, "N = 1, 2, 4, 8 x 3 selectors, with and without refine");
    let f1 = |r: &Value| (r["f1_file"].as_f64().unwrap(), r["f1_func"].as_f64().unwrap());
    let one = f1(row(&rows, "first", false, 1));
    for selector in ["vote", "tournament"] {
        let (file, func) = f1(row(&rows, selector, false, 8));
        assert!(file > one.0 && func > one.1, "{selector} at N = 8: F1 ({file}, {func}) vs one attempt {one:?}");
        assert_eq!(f1(row(&rows, selector, false, 1)), one, "{selector} of a single attempt is that attempt");
    }
    assert_eq!(f1(row(&rows, "first", false, 8)), one, "first ignores the other attempts");
    // Cost grows with N; the evidence judge spends no tokens.
    let tokens = |n| row(&rows, "vote", false, n)["tokens"].as_f64().unwrap();
    assert!(tokens(8) > 7.0 * tokens(1), "{} vs {}", tokens(8), tokens(1));
    assert_eq!(row(&rows, "tournament", false, 8)["judge_tokens"], 0.0);
    assert_eq!(row(&rows, "tournament", false, 8)["comparisons"], 12 * 7);
    assert!(row(&rows, "vote", true, 8)["tokens"].as_f64().unwrap() > tokens(8), "refine adds its attempt's tokens");

    assert_eq!(read_jsonl(&out.join("attempts.jsonl")).len(), 12 * 8);
    let sums = read_jsonl(&out.join("summaries.jsonl"));
    assert_eq!(sums.len(), 12 * 8);
    assert!(sums.iter().all(|s| s["written"].is_null() && s["calls"].is_array() && s["support"].is_object()));
    let sel = selections(&out);
    assert_eq!(sel.len(), 4 * 3 * 12);
    assert_eq!(read_jsonl(&out.join("refine.jsonl")).len(), sel.len());
    for s in sel.iter().filter(|s| s["selector"] == "tournament" && s["attempts"] == 8) {
        let matches = s["tournament"]["matches"].as_array().unwrap();
        assert_eq!(matches.len(), 7);
        assert_eq!(s["tournament"]["winner"], s["chosen"]);
        assert!(s["refined"]["score"]["reward"].is_number());
    }
    let png = std::fs::read(out.join("scaling.png")).unwrap();
    assert_eq!(&png[..4], b"\x89PNG");

    // Same seed, same attempts and selections.
    let again = tmp.path().join("again");
    run(&again);
    assert_eq!(selections(&again), sel);

    // plot-scaling redraws from scaling.json.
    let redrawn = tmp.path().join("redrawn.png");
    fusegrpo_ok(&["plot-scaling", out.to_str().unwrap(), "--out", redrawn.to_str().unwrap()]);
    assert_eq!(&std::fs::read(&redrawn).unwrap()[..4], b"\x89PNG");
}

#[test]
fn bad_scaling_input_is_a_clear_error_or_a_counted_fallback() {
    let tmp = tempfile::tempdir().unwrap();
    let (cfg, tasks) = practice(tmp.path());
    let base = ["eval", "--config", cfg.to_str().unwrap(), "--tasks", tasks.to_str().unwrap(), "--policy", "scripted", "--max-tasks", "3"];
    let fails = |extra: &[&str], needle: &str| {
        let args: Vec<&str> = base.iter().copied().chain(extra.iter().copied()).collect();
        let out = fusegrpo(&args);
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(!out.status.success(), "{extra:?} should fail");
        assert!(err.contains(needle), "{extra:?}: {err}");
    };
    fails(&["--attempts", "0"], "--attempts: must be at least 1");
    fails(&["--attempts", "9223372036854775807"], "--attempts 9223372036854775807: must be at most 1024");
    fails(&["--select", "vote"], "--select selects among attempts: give --attempts N too");
    fails(&["--attempts", "2", "--select", "vote", "--judge", "model"], "add tournament to --select");
    fails(&["--attempts", "2", "--select", "best"], "`best`: expected first, vote or tournament");
    fails(&["--attempts", "2", "--vote-min", "0"], "--vote-min: must be at least 1");
    fails(&["--attempts", "2", "--judge", "gpt"], "expected evidence, model or an http(s):// URL");
    fails(&["--attempts", "2", "--group", "3"], "--group and --attempts");
    fails(&["--attempts", "2", "--summaries", "judge"], "--summaries judge: the evidence judge writes none");

    // A judge URL that refuses: every comparison falls back to the evidence
    // judge, counted and named (N = 2: 1 match per task, N = 3: 2); no
    // attempt is lost.
    let dir = tmp.path().join("refused");
    let args: Vec<&str> = base
        .iter()
        .copied()
        .chain(["--attempts", "3", "--select", "tournament", "--judge", "http://127.0.0.1:9", "--out-dir", dir.to_str().unwrap()])
        .collect();
    let out = fusegrpo(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("judge http://127.0.0.1:9: 9 of 9 comparisons decided by the evidence fallback"), "{table}");
    assert_eq!(read_jsonl(&dir.join("attempts.jsonl")).len(), 9);
    let sel = read_jsonl(&dir.join("selection.jsonl"));
    let at3: Vec<&Value> = sel.iter().filter(|s| s["attempts"] == 3).collect();
    assert_eq!(at3.len(), 3);
    for s in at3 {
        assert_eq!(s["cost"]["fallbacks"], 2);
        let why = s["tournament"]["matches"][0]["fallback"].as_str().unwrap();
        assert!(why.contains("judge failed") && why.contains("127.0.0.1:9"), "{why}");
    }

    // The scripted policy as its own judge answers with tool calls, not A or
    // B: retried, then decided by the fallback, counted.
    let dir = tmp.path().join("nonsense");
    let args: Vec<&str> = base
        .iter()
        .copied()
        .chain(["--attempts", "2", "--select", "tournament", "--judge", "model", "--out-dir", dir.to_str().unwrap()])
        .collect();
    let out = fusegrpo(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let sel = read_jsonl(&dir.join("selection.jsonl"));
    let m = &sel.iter().find(|s| s["attempts"] == 2).unwrap()["tournament"]["matches"][0];
    assert_eq!(m["retries"], 2);
    assert!(m["fallback"].as_str().unwrap().contains("malformed answer after 3 tries"), "{m}");

    let err = fusegrpo(&["plot-scaling", tmp.path().to_str().unwrap()]);
    assert!(!err.status.success());
    assert!(String::from_utf8_lossy(&err.stderr).contains("scaling.json: cannot read it"));
}
