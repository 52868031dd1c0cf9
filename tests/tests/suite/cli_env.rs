//! `fusegrpo tool`, `reward`, `tasks gold` and `tasks from-history` on a
//! repository made here with git (the binary is built by `cargo build --bin fusegrpo`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn bin() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let bin = exe.parent().and_then(Path::parent).expect("target dir").join("fusegrpo");
    assert!(bin.exists(), "{} is missing: run `cargo build --bin fusegrpo` first", bin.display());
    bin
}

fn fusegrpo(args: &[&str]) -> Output {
    Command::new(bin()).args(args).env("FUSEGRPO_LOG", "warn").output().expect("spawn fusegrpo")
}

fn ok(args: &[&str]) -> serde_json::Value {
    let out = fusegrpo(args);
    assert!(out.status.success(), "fusegrpo {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .args(["-c", "user.name=T", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"])
        .args(args)
        .env("HOME", dir)
        .output()
        .expect("git");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// repos/o__r with m.py at `base`, and a fix commit on top; returns (repos dir, base, fix).
fn repo() -> (tempfile::TempDir, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("o__r");
    std::fs::create_dir(&work).unwrap();
    git(&work, &["init", "-q", "-b", "main"]);
    std::fs::write(work.join("m.py"), "class C:\n    def m(self):\n        return 1\n\ndef f():\n    return 2\n").unwrap();
    git(&work, &["add", "-A"]);
    git(&work, &["commit", "-qm", "initial version of the module"]);
    let base = git(&work, &["rev-parse", "HEAD"]);
    std::fs::write(work.join("m.py"), "class C:\n    def m(self):\n        return 10\n\ndef f():\n    return 2\n").unwrap();
    git(&work, &["commit", "-qam", "C.m must return ten, not one, per the spec"]);
    let fix = git(&work, &["rev-parse", "HEAD"]);
    (dir, base, fix)
}

#[test]
fn tool_command_prints_output_entities_error() {
    let (dir, base, _) = repo();
    let repos = dir.path().to_str().unwrap();
    let call = r#"{"name":"grep","arguments":{"pattern":"return 1"}}"#;
    let v = ok(&["tool", "--repos-dir", repos, "--repo", "o/r", "--commit", &base, "--call", call]);
    assert_eq!(v["output"], "m.py:3:        return 1\n");
    assert_eq!(v["entities"], serde_json::json!(["m.py", "m.py:C.m"]));
    assert_eq!(v["error"], false);
    let bad = r#"{"name":"read_file","arguments":{"path":"../../etc/passwd"}}"#;
    let v = ok(&["tool", "--repos-dir", repos, "--repo", "o/r", "--commit", &base, "--call", bad]);
    assert_eq!(v["error"], true);
    assert_eq!(v["entities"], serde_json::json!([]));
    let missing = fusegrpo(&["tool", "--repos-dir", repos, "--repo", "o/r", "--commit", "deadbeef", "--call", call]);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("deadbeef"));
}

#[test]
fn tasks_and_reward_commands() {
    let (dir, base, fix) = repo();
    let repos = dir.path().to_str().unwrap();
    let out = dir.path().join("tasks.jsonl");
    let work = dir.path().join("o__r");
    ok_status(&["tasks", "from-history", "--repo", work.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    let text = std::fs::read_to_string(&out).unwrap();
    let task: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(text.lines().count(), 1);
    assert_eq!(task["repo"], "o/r");
    assert_eq!(task["base_commit"], base.as_str());
    assert_eq!(task["instance_id"], format!("o__r-{}", &fix[..12]));
    assert_eq!(task["gold"]["functions"], serde_json::json!(["m.py:C.m"]));

    let gold_out = dir.path().join("gold.jsonl");
    ok_status(&["tasks", "gold", "--repos-dir", repos, "--input", out.to_str().unwrap(), "--output", gold_out.to_str().unwrap()]);
    let row: serde_json::Value = serde_json::from_str(std::fs::read_to_string(&gold_out).unwrap().trim()).unwrap();
    assert_eq!(row["functions"], serde_json::json!(["m.py:C.m"]));
    assert_eq!(row["files"], serde_json::json!(["m.py"]));

    let task_path = dir.path().join("task.json");
    std::fs::write(&task_path, text.lines().next().unwrap()).unwrap();
    let episode = dir.path().join("episode.json");
    // Calls: grep "return" -> {m.py, m.py:C.m, m.py:f} (g = 1); the same again (g = 0): e = 1/2.
    // Answer m.py:C.m = gold: F1 = 1, R = 1 + 1 * 1/2 = 1.5.
    let turns = serde_json::json!({"turns": [
        "<tool_call>{\"name\":\"grep\",\"arguments\":{\"pattern\":\"return\"}}</tool_call>",
        "<tool_call>{\"name\":\"grep\",\"arguments\":{\"pattern\":\"return\"}}</tool_call>",
        "```\nm.py:C.m\n```"
    ]});
    std::fs::write(&episode, turns.to_string()).unwrap();
    let v = ok(&["reward", "--task", task_path.to_str().unwrap(), "--episode", episode.to_str().unwrap(), "--repos-dir", repos]);
    assert_eq!((v["f1_file"].as_f64(), v["f1_func"].as_f64()), (Some(1.0), Some(1.0)));
    assert_eq!((v["e"].as_f64(), v["reward"].as_f64()), (Some(0.5), Some(1.5)));
    let no_repos = fusegrpo(&["reward", "--task", task_path.to_str().unwrap(), "--episode", episode.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&no_repos.stderr).contains("--repos-dir"));
}

fn ok_status(args: &[&str]) {
    let out = fusegrpo(args);
    assert!(out.status.success(), "fusegrpo {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// Start-up fixes Candle's thread count once (`RAYON_NUM_THREADS`, read at
/// every CPU matrix product) and keeps a value the user set.
#[test]
fn the_thread_count_is_pinned_at_start_up_unless_given() {
    let run = |set: Option<&str>| {
        let mut cmd = std::process::Command::new(e2e::fusegrpo_bin());
        cmd.args(["plot-scaling", "/nonexistent-eval-dir"]).env("FUSEGRPO_LOG", "debug").env_remove("RAYON_NUM_THREADS");
        if let Some(v) = set {
            cmd.env("RAYON_NUM_THREADS", v);
        }
        let out = cmd.output().unwrap();
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    let pinned = run(None);
    assert!(pinned.contains("threads=Set("), "{pinned}");
    let given = run(Some("1"));
    assert!(given.contains("threads=FromEnvironment(\"1\")"), "{given}");
}
