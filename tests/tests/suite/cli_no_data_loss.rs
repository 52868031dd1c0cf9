//! Issue 37's regressions, one test per defect (named after it): a refused
//! command changes no file, a failure never exits 0, an interrupt is
//! visible to scripts, and messages name what is wrong.

use e2e::{fusegrpo, fusegrpo_bin, fusegrpo_ok, read_jsonl, shop_world, fusegrpo_fails as fails, s};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Every file under `dir` with its bytes (empty when `dir` is absent).
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries {
            let path = e.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.insert(path.strip_prefix(dir).unwrap().to_path_buf(), std::fs::read(&path).unwrap());
            }
        }
    }
    out
}


/// A copy of `cfg` beside it (relative paths still hold) with `from` replaced by `to`.
fn edit(cfg: &Path, from: &str, to: &str) -> PathBuf {
    static COPIES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let text = std::fs::read_to_string(cfg).unwrap();
    assert!(text.contains(from), "{from} not in the config");
    let n = COPIES.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let out = cfg.with_file_name(format!("edited-{n}.toml"));
    std::fs::write(&out, text.replacen(from, to, 1)).unwrap();
    out
}


#[test]
fn defect_1_rerun_without_resume_refuses_and_keeps_the_run() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = shop_world(tmp.path());
    let run = tmp.path().join("run");
    fusegrpo_ok(&["train", "--config", s(&cfg), "--out", s(&run), "--max-steps", "2", "--save-every", "1"]);
    let before = snapshot(&run);
    assert_eq!(read_jsonl(&run.join("metrics.jsonl")).len(), 2);
    // The issue's reproduction: a fresh run of 1 step into the same folder.
    let err = fails(&["train", "--config", s(&cfg), "--out", s(&run), "--max-steps", "1", "--save-every", "1"]);
    assert!(err.contains("already holds a run") && err.contains("--resume auto") && err.contains("--overwrite"), "{err}");
    assert_eq!(snapshot(&run), before, "a refused rerun changes nothing");
    // Also when it would fail at start-up afterwards (a bad repos_dir).
    let bad = edit(&cfg, "repos_dir = \"repos\"", "repos_dir = \"nowhere\"");
    fails(&["train", "--config", s(&bad), "--out", s(&run), "--max-steps", "1"]);
    assert_eq!(snapshot(&run), before);
    // --resume auto in a folder whose run saved no checkpoint yet (its
    // metrics lines are of steps to redo, as after a crash in step 2 with
    // save_every 5): the run starts over them, as the pipeline's resume does.
    let early = tmp.path().join("early");
    fusegrpo_ok(&["train", "--config", s(&cfg), "--out", s(&early), "--max-steps", "1", "--save-every", "1"]);
    std::fs::remove_dir_all(early.join("step_00000001")).unwrap();
    fusegrpo_ok(&["train", "--config", s(&cfg), "--out", s(&early), "--max-steps", "1", "--resume", "auto"]);
    assert_eq!(read_jsonl(&early.join("metrics.jsonl")).len(), 1);
    // --overwrite starts over: the old checkpoints and metrics go.
    fusegrpo_ok(&["train", "--config", s(&cfg), "--out", s(&run), "--max-steps", "1", "--save-every", "1", "--overwrite"]);
    assert!(run.join("step_00000001/DONE").exists() && !run.join("step_00000002").exists());
    assert_eq!(read_jsonl(&run.join("metrics.jsonl")).len(), 1);
}

#[test]
fn defect_1_resume_from_an_older_checkpoint_keeps_the_newer_ones_unless_asked() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = shop_world(tmp.path());
    let run = tmp.path().join("run");
    fusegrpo_ok(&["train", "--config", s(&cfg), "--out", s(&run), "--max-steps", "3", "--save-every", "1"]);
    let before = snapshot(&run);
    let older = run.join("step_00000002");
    let err = fails(&["train", "--config", s(&cfg), "--out", s(&run), "--resume", s(&older), "--max-steps", "3"]);
    assert!(err.contains("would overwrite the newer checkpoint step 3"), "{err}");
    assert_eq!(snapshot(&run), before);
    // Asked: step 3 is redone from step 2, and (exact resume) equals the first run's.
    fusegrpo_ok(&["train", "--config", s(&cfg), "--out", s(&run), "--resume", s(&older), "--max-steps", "3", "--overwrite"]);
    let weights = |m: &BTreeMap<PathBuf, Vec<u8>>| m[Path::new("step_00000003/model.safetensors")].clone();
    assert_eq!(weights(&snapshot(&run)), weights(&before));
    assert_eq!(read_jsonl(&run.join("metrics.jsonl")).len(), 3);
}

#[test]
fn defect_2_group_0_and_max_tasks_0_fail_and_keep_the_output() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = shop_world(tmp.path());
    let tasks = tmp.path().join("tasks.jsonl");
    let out = tmp.path().join("episodes.jsonl");
    std::fs::write(&out, "{\"kept\": true}\n").unwrap();
    for cmd in ["eval", "rollout"] {
        let err = fails(&[cmd, "--config", s(&cfg), "--tasks", s(&tasks), "--policy", "scripted", "--group", "0", "--out", s(&out)]);
        assert!(err.contains("--group 0"), "{err}");
        let err = fails(&[cmd, "--config", s(&cfg), "--tasks", s(&tasks), "--policy", "scripted", "--max-tasks", "0", "--out", s(&out)]);
        assert!(err.contains("--max-tasks 0"), "{err}");
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "{\"kept\": true}\n");
    }
    // A good run replaces the file whole (through a temporary, renamed).
    fusegrpo_ok(&["rollout", "--config", s(&cfg), "--tasks", s(&tasks), "--policy", "scripted", "--group", "1", "--out", s(&out)]);
    assert_eq!(read_jsonl(&out).len(), 2);
    assert!(!tmp.path().join("episodes.jsonl.partial").exists());
}

#[test]
fn defect_3_bad_tasks_are_all_reported_at_start() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = shop_world(tmp.path());
    let tasks = tmp.path().join("tasks.jsonl");
    let good = std::fs::read_to_string(&tasks).unwrap();
    let first: serde_json::Value = serde_json::from_str(good.lines().next().unwrap()).unwrap();
    let mut missing_commit = first.clone();
    missing_commit["instance_id"] = "no-commit".into();
    missing_commit["base_commit"] = "0123456789abcdef0123456789abcdef01234567".into();
    let mut empty_gold = first.clone();
    empty_gold["instance_id"] = "no-gold".into();
    empty_gold["gold"] = serde_json::json!({"files": [], "functions": []});
    std::fs::write(&tasks, format!("{good}\n{missing_commit}\n{empty_gold}\n")).unwrap();
    // The model cannot load: the tasks must be refused before it is tried.
    std::fs::write(tmp.path().join("model/model.safetensors"), b"not weights").unwrap();
    let run = tmp.path().join("run");
    let err = fails(&["train", "--config", s(&cfg), "--out", s(&run)]);
    assert!(err.contains("2 of 4 tasks"), "{err}");
    assert!(err.contains("tasks.jsonl:3: task 'no-commit': base_commit"), "{err}");
    assert!(err.contains("tasks.jsonl:4: task 'no-gold': gold lists no file"), "{err}");
    assert!(!err.contains("safetensors"), "tasks are checked before the weights load: {err}");
    assert!(!run.exists(), "nothing written");
    // --skip-bad-tasks drops them with a count (and then meets the bad weights).
    let err = fails(&["train", "--config", s(&cfg), "--out", s(&run), "--skip-bad-tasks"]);
    assert!(err.contains("dropped 2 of 4 tasks") && err.contains("safetensors"), "{err}");
    // A missing repos_dir is found at once too.
    let bad = edit(&cfg, "repos_dir = \"repos\"", "repos_dir = \"nowhere\"");
    let err = fails(&["eval", "--config", s(&bad), "--tasks", s(&tasks), "--policy", "scripted"]);
    assert!(err.contains("repos_dir") && err.contains("nowhere"), "{err}");
}

/// `train` into `run` for many steps, interrupted with `signals` SIGINTs
/// once its first step is logged; returns the exit status and stderr.
fn interrupted_train(cfg: &Path, run: &Path, signals: usize) -> (Option<i32>, String) {
    let child = Command::new(fusegrpo_bin())
        .args(["train", "--config", s(cfg), "--out", s(run), "--max-steps", "100000", "--save-every", "1000"])
        .env("FUSEGRPO_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while read_lines(&run.join("metrics.jsonl")) < 1 {
        assert!(started.elapsed().as_secs() < 120, "no step logged in 120 s");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    for _ in 0..signals {
        Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn read_lines(path: &Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |t| t.lines().count())
}

#[test]
fn defect_4_interrupt_exits_130_and_says_so_on_plain_stderr() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = shop_world(tmp.path());
    let run = tmp.path().join("run");
    // stderr is a pipe here, as under nohup or Slurm: no progress bar draws.
    let (code, err) = interrupted_train(&cfg, &run, 1);
    assert_eq!(code, Some(130), "{err}");
    assert!(err.contains("interrupted: checkpoint") && err.contains("resume with --resume auto"), "{err}");
    let saved = read_lines(&run.join("metrics.jsonl"));
    assert!(run.join(format!("step_{saved:08}/DONE")).exists(), "the interrupted step's checkpoint: {err}");
    fusegrpo_ok(&["train", "--config", s(&cfg), "--out", s(&run), "--resume", "auto", "--max-steps", &(saved + 1).to_string()]);
    assert_eq!(read_lines(&run.join("metrics.jsonl")), saved + 1);
    // A second interrupt ends the process at once, naming the last complete
    // checkpoint (longer turns: a step outlasts the 20 ms between the two).
    let run2 = tmp.path().join("run2");
    let (code, err) = interrupted_train(&edit(&cfg, "max_turn_tokens = 16", "max_turn_tokens = 128"), &run2, 2);
    assert_eq!(code, Some(130), "{err}");
    assert!(err.contains("second interrupt: stopped at once"), "{err}");
}

#[test]
fn defect_5_config_holes_are_keyed_errors_at_start() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = shop_world(tmp.path());
    let run = tmp.path().join("run");
    for (from, to, key) in [
        ("temperature = 1.0", "temperature = nan", "sampling.temperature"),
        ("beta = 0.04", "beta = -1.0", "grpo.beta"),
        // Issue 54: one rule per setting, at load (0.5 passed the config
        // check and failed after the first step's rollouts).
        ("beta = 0.04", "beta = 0.04\nrollout_correction = \"tis\"\ntis_cap = 0.5", "grpo.tis_cap"),
        ("beta = 0.04", "beta = 0.04\nclip_low = 1.0", "grpo.clip_low"),
        ("max_turn_tokens = 16", "max_turn_tokens = 16\nmax_total_tokens = 10", "episode.max_total_tokens"),
    ] {
        let bad = edit(&cfg, from, to);
        let err = fails(&["train", "--config", s(&bad), "--out", s(&run)]);
        assert!(err.contains(&format!("config key `{key}`")), "{to}: {err}");
        assert!(!run.exists(), "{to}: nothing written");
    }
}

#[test]
fn defect_6_generate_past_the_context_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("model");
    fusegrpo_ok(&["init-tiny", "--out", s(&model), "--small-vocab", "1024", "--seed", "2"]);
    let input = tmp.path().join("in.jsonl");
    std::fs::write(&input, "{\"ids\": [5, 6, 7]}\n{\"ids\": [8]}\n").unwrap();
    let output = tmp.path().join("out.jsonl");
    let err = fails(&["generate", "--model", s(&model), "--input", s(&input), "--output", s(&output), "--max-new-tokens", "100000000"]);
    assert!(err.contains("max_position_embeddings") && err.contains("in.jsonl:1"), "{err}");
    assert!(!output.exists());
    // Within the context: the ordered rows, the streamed file replaced.
    fusegrpo_ok(&["generate", "--model", s(&model), "--input", s(&input), "--output", s(&output), "--max-new-tokens", "4"]);
    let rows = read_jsonl(&output);
    assert_eq!(rows.len(), 2);
    assert!(rows.iter().all(|r| r["ids"].as_array().unwrap().len() == 4 && r.get("row").is_none()));
    assert!(!tmp.path().join("out.jsonl.partial").exists());
}

#[test]
fn defect_7_reward_takes_inline_json_or_files() {
    let tmp = tempfile::tempdir().unwrap();
    let task = r#"{"instance_id":"a","repo":"x/y","base_commit":"c","problem_statement":"p","gold":{"files":["a.py"],"functions":["a.py:f"]}}"#;
    let episode = r#"{"turns":["a.py:f"]}"#;
    let inline: serde_json::Value = serde_json::from_str(&fusegrpo_ok(&["reward", "--task", task, "--episode", episode])).unwrap();
    assert_eq!(inline["f1"], 1.0);
    let (tf, ef) = (tmp.path().join("task.json"), tmp.path().join("episode.json"));
    std::fs::write(&tf, task).unwrap();
    std::fs::write(&ef, episode).unwrap();
    let from_files: serde_json::Value = serde_json::from_str(&fusegrpo_ok(&["reward", "--task", s(&tf), "--episode", s(&ef)])).unwrap();
    assert_eq!(from_files, inline);
    let err = fails(&["reward", "--task", "missing.json", "--episode", episode]);
    assert!(err.contains("--task: reading the file missing.json"), "{err}");
}

#[test]
fn defect_8_messages_name_what_is_wrong() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = shop_world(tmp.path());
    let run = tmp.path().join("run");
    // TOML type and syntax errors: file:line:column, and the key.
    let err = fails(&["train", "--config", s(&edit(&cfg, "temperature = 1.0", "temperature = \"hot\"")), "--out", s(&run)]);
    assert!(err.contains(":12:15: config key `sampling.temperature`: invalid type"), "{err}");
    let err = fails(&["train", "--config", s(&edit(&cfg, "[grpo]", "[grpo")), "--out", s(&run)]);
    assert!(err.contains(".toml:") && err.contains("invalid table header") && !err.contains("`line"), "{err}");
    // With RUST_BACKTRACE=1, an ordinary error prints no stack backtrace.
    let out = Command::new(fusegrpo_bin()).args(["train", "--config", "missing.toml"]).env("RUST_BACKTRACE", "1").output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("missing.toml") && !err.contains("Stack backtrace"), "{err}");
    // --gpu-memory too large is said so.
    let err = String::from_utf8_lossy(&fusegrpo(&["plan", "--config", s(&cfg), "--gpu-memory", "1e999GB"]).stderr).into_owned();
    assert!(err.contains("too large"), "{err}");
    fusegrpo_ok(&["train", "--config", s(&cfg), "--out", s(&run), "--max-steps", "2", "--save-every", "1"]);
    // --resume on a run folder: what it is and what to pass.
    let err = fails(&["train", "--config", s(&cfg), "--out", s(&run), "--resume", s(&run)]);
    assert!(err.contains("not a checkpoint") && err.contains("newest checkpoint is") && !err.contains("config.json: No such file"), "{err}");
    // A changed config lists the keys that changed.
    let err = fails(&["train", "--config", s(&edit(&cfg, "lr = 0.001", "lr = 0.002")), "--out", s(&run), "--resume", "auto", "--max-steps", "3"]);
    assert!(err.contains("optim.lr (0.001 -> 0.002)"), "{err}");
    // A model path changed on resume is refused even when changes are allowed.
    let other = tmp.path().join("other-model");
    fusegrpo_ok(&["init-tiny", "--out", s(&other), "--small-vocab", "1024", "--seed", "3"]);
    let moved = edit(&cfg, "path = \"model\"", "path = \"other-model\"");
    let err = fails(&["train", "--config", s(&moved), "--out", s(&run), "--resume", "auto", "--max-steps", "3", "--allow-config-change"]);
    assert!(err.contains("config key `model.path`") && err.contains("keeps its starting model"), "{err}");
    // A corrupt newest checkpoint names the complete one before it.
    let before = snapshot(&run);
    std::fs::write(run.join("step_00000002/state.json"), "garbage").unwrap();
    let err = fails(&["train", "--config", s(&cfg), "--out", s(&run), "--resume", "auto", "--max-steps", "3"]);
    assert!(err.contains("the complete checkpoint before it is") && err.contains("step_00000001"), "{err}");
    let mut after = snapshot(&run);
    after.insert("step_00000002/state.json".into(), before[Path::new("step_00000002/state.json")].clone());
    assert_eq!(after, before, "nothing else changed");
}
