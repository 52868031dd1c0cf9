//! `fusegrpo train`: GRPO steps write metrics and checkpoints, and a run
//! killed after step 2 and resumed continues exactly as the uninterrupted one.

use e2e::{fusegrpo, fusegrpo_ok, read_jsonl, shop_world, without_timings};


#[test]
fn resumed_run_matches_the_uninterrupted_one() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = shop_world(tmp.path());
    // The random model never answers (every reward is 0) and the policy
    // starts equal to the reference, so the loss and its gradient are exactly
    // 0. Weight decay moves the weights in the first of two iterations per
    // step, after which the KL term has a gradient: every step updates the
    // weights and the optimizer's moments, which the resume must reproduce.
    let text = std::fs::read_to_string(&cfg).unwrap();
    let text = text.replace("[grpo]\nbeta = 0.04\n", "[grpo]\nbeta = 0.04\nnum_iterations = 2\n").replace("lr = 0.001\n", "lr = 0.001\nweight_decay = 0.1\n");
    std::fs::write(&cfg, text).unwrap();
    let cfg = cfg.to_str().unwrap();
    let (a, b) = (tmp.path().join("run_a"), tmp.path().join("run_b"));
    fusegrpo_ok(&["train", "--config", cfg, "--out", a.to_str().unwrap()]);
    // Run B stops after step 2, then resumes to step 4.
    fusegrpo_ok(&["train", "--config", cfg, "--out", b.to_str().unwrap(), "--max-steps", "2"]);
    fusegrpo_ok(&["train", "--config", cfg, "--out", b.to_str().unwrap(), "--resume", "auto"]);
    let (ma, mb) = (read_jsonl(&a.join("metrics.jsonl")), read_jsonl(&b.join("metrics.jsonl")));
    assert_eq!(ma.len(), 4);
    for key in ["reward", "answered", "loss", "kl", "grad_norm", "lr", "entropy", "clip_ratio/region_mean"] {
        assert!(ma[0].get(key).is_some(), "metric {key}");
    }
    // No `[reward] answer_bonus`: the advantages' rewards are R, not logged twice.
    assert!(ma[0].get("train_reward").is_none(), "{}", ma[0]);
    assert!(ma.iter().all(|m| m["grad_norm"].as_f64().unwrap() > 0.0));
    for key in ["padding_share", "skipped_zero_advantage_rows", "stop_context_full", "stop_max_tokens", "sampling/importance_sampling_ratio/mean"] {
        assert!(ma[0].get(key).is_some(), "metric {key}");
    }
    // The rollout sampled in f32 from the weights the update starts from:
    // its log-probs equal the trainer's up to float noise.
    for m in &ma {
        let drift = m["sampling/sampling_logp_difference/max"].as_f64().unwrap();
        assert!(drift < 1e-3, "rollout vs trainer log-probs differ by {drift}");
        assert_eq!(m["skipped_zero_advantage_rows"], 0, "beta > 0: no row is skipped");
    }
    assert_eq!(without_timings(ma), without_timings(mb), "metrics of the resumed run");
    let weights = |run: &std::path::Path| std::fs::read(run.join("step_00000004/model.safetensors")).unwrap();
    assert_eq!(weights(&a), weights(&b), "final weights are bit-identical");
    let opt = |run: &std::path::Path| std::fs::read(run.join("step_00000004/optimizer.safetensors")).unwrap();
    assert_eq!(opt(&a), opt(&b));
    // keep_last = 2: steps 2 and 4 remain; each is a loadable model folder.
    let mut steps: Vec<String> = std::fs::read_dir(&a).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).filter(|n| n.starts_with("step_")).collect();
    steps.sort();
    assert_eq!(steps, vec!["step_00000002", "step_00000004"]);
    for f in ["DONE", "state.json", "config.json", "tokenizer.json"] {
        assert!(a.join("step_00000004").join(f).exists(), "{f}");
    }
    // The trained model differs from the initial one and still scores.
    let init = std::fs::read(tmp.path().join("model/model.safetensors")).unwrap();
    assert_ne!(init, weights(&a));
}

#[test]
fn resume_refuses_a_changed_config_unless_allowed() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = shop_world(tmp.path());
    let run = tmp.path().join("run");
    fusegrpo_ok(&["train", "--config", cfg.to_str().unwrap(), "--out", run.to_str().unwrap(), "--max-steps", "2"]);
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, text.replace("lr = 0.001", "lr = 0.002")).unwrap();
    let out = fusegrpo(&["train", "--config", cfg.to_str().unwrap(), "--out", run.to_str().unwrap(), "--resume", "auto", "--max-steps", "3"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("--allow-config-change"), "{err}");
    fusegrpo_ok(&["train", "--config", cfg.to_str().unwrap(), "--out", run.to_str().unwrap(), "--resume", "auto", "--max-steps", "3", "--allow-config-change"]);
    assert_eq!(read_jsonl(&run.join("metrics.jsonl")).len(), 3);
}

#[test]
fn steps_where_drop_leaves_no_group_make_no_update() {
    // The random model's rewards are equal within its groups (all 0), and
    // `zero_std_groups = "drop"` removes such groups: a step with nothing
    // left logs zeros and keeps the weights instead of failing.
    let tmp = tempfile::tempdir().unwrap();
    let cfg = shop_world(tmp.path());
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, text.replace("[grpo]\n", "[grpo]\nzero_std_groups = \"drop\"\n")).unwrap();
    let run = tmp.path().join("run");
    fusegrpo_ok(&["train", "--config", cfg.to_str().unwrap(), "--out", run.to_str().unwrap()]);
    let m = read_jsonl(&run.join("metrics.jsonl"));
    assert_eq!(m.len(), 4);
    let empty: Vec<_> = m.iter().filter(|r| r["frac_reward_zero_std"].as_f64() == Some(1.0)).collect();
    assert!(!empty.is_empty(), "no step without a reward spread: {m:?}");
    for r in empty {
        assert_eq!((r["loss"].as_f64(), r["grad_norm"].as_f64()), (Some(0.0), Some(0.0)), "{r}");
    }
}

/// Start `fusegrpo train` in the background.
fn spawn_train(cfg: &str, out: &std::path::Path, extra: &[&str]) -> std::process::Child {
    std::process::Command::new(e2e::fusegrpo_bin())
        .args(["train", "--config", cfg, "--out", out.to_str().unwrap()])
        .args(extra)
        .env("FUSEGRPO_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

fn wait_for(path: &std::path::Path) {
    let t0 = std::time::Instant::now();
    while !path.exists() {
        assert!(t0.elapsed().as_secs() < 600, "timed out waiting for {}", path.display());
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn kill_9_or_sigterm_then_resume_matches_the_straight_run() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = shop_world(tmp.path());
    let cfg = cfg.to_str().unwrap();
    let straight = tmp.path().join("straight");
    fusegrpo_ok(&["train", "--config", cfg, "--out", straight.to_str().unwrap()]);
    let final_weights = std::fs::read(straight.join("step_00000004/model.safetensors")).unwrap();
    let final_metrics = without_timings(read_jsonl(&straight.join("metrics.jsonl")));

    // kill -9 once step 2 is safely on disk (step 3 may be half written).
    let killed = tmp.path().join("killed");
    let mut child = spawn_train(cfg, &killed, &["--save-every", "1"]);
    wait_for(&killed.join("step_00000002/DONE"));
    child.kill().unwrap();
    child.wait().unwrap();
    fusegrpo_ok(&["train", "--config", cfg, "--out", killed.to_str().unwrap(), "--resume", "auto"]);
    assert_eq!(std::fs::read(killed.join("step_00000004/model.safetensors")).unwrap(), final_weights);
    assert_eq!(without_timings(read_jsonl(&killed.join("metrics.jsonl"))), final_metrics);

    // SIGTERM: the run saves where it is and exits with 130, as on SIGINT
    // (docs/troubleshooting.md).
    let termed = tmp.path().join("termed");
    let child = spawn_train(cfg, &termed, &["--save-every", "100"]);
    wait_for(&termed.join("metrics.jsonl"));
    while read_jsonl(&termed.join("metrics.jsonl")).is_empty() {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let status = std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", String::from_utf8_lossy(&out.stderr));
    let saved = trainer_steps(&termed);
    assert_eq!(saved.len(), 1, "one checkpoint saved on SIGTERM: {saved:?}");
    fusegrpo_ok(&["train", "--config", cfg, "--out", termed.to_str().unwrap(), "--resume", "auto"]);
    assert_eq!(std::fs::read(termed.join("step_00000004/model.safetensors")).unwrap(), final_weights);
    assert_eq!(without_timings(read_jsonl(&termed.join("metrics.jsonl"))), final_metrics);
}

fn trainer_steps(run: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(run)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("step_"))
        .collect();
    v.sort();
    v
}

#[test]
fn corrupt_checkpoints_are_refused_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = shop_world(tmp.path());
    let cfg = cfg.to_str().unwrap();
    let run = tmp.path().join("run");
    fusegrpo_ok(&["train", "--config", cfg, "--out", run.to_str().unwrap(), "--max-steps", "2"]);
    let ckpt = run.join("step_00000002");
    let resume = || {
        let out = fusegrpo(&["train", "--config", cfg, "--out", run.to_str().unwrap(), "--resume", "auto", "--max-steps", "3"]);
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    // Edited state.json.
    let state = std::fs::read_to_string(ckpt.join("state.json")).unwrap();
    std::fs::write(ckpt.join("state.json"), state.replace("\"format_version\": 1", "\"format_version\": 99")).unwrap();
    let err = resume();
    assert!(err.contains("state.json") && err.contains("format_version"), "{err}");
    std::fs::write(ckpt.join("state.json"), "{ not json").unwrap();
    assert!(resume().contains("state.json"));
    std::fs::write(ckpt.join("state.json"), &state).unwrap();
    // Truncated weights.
    let w = std::fs::read(ckpt.join("model.safetensors")).unwrap();
    std::fs::write(ckpt.join("model.safetensors"), &w[..w.len() / 2]).unwrap();
    let err = resume();
    assert!(err.contains("model.safetensors"), "{err}");
}

/// `plan` prints the phases and their sum; `train` refuses a run whose plan
/// does not fit the memory it is given, naming the phase and a setting to
/// lower, before writing anything; a budget that binds is reported in
/// the KV part.
#[test]
fn the_memory_plan_is_printed_and_checked_before_training() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = shop_world(tmp.path());
    let cfg_s = cfg.to_str().unwrap();
    let plan: serde_json::Value = serde_json::from_str(fusegrpo_ok(&["plan", "--config", cfg_s, "--json", "--gpu-memory", "64GiB"]).trim()).unwrap();
    let peak = plan["peak_bytes"].as_u64().unwrap();
    assert_eq!(plan["fits"], true);
    for phase in ["rollout", "grpo_update", "sft_update"] {
        let parts = plan["parts"][phase].as_object().unwrap_or_else(|| panic!("phase {phase}: {plan}"));
        let sum: u64 = parts.values().map(|v| v.as_u64().unwrap()).sum();
        assert!(sum <= peak && parts.contains_key("weights"), "{phase}: {parts:?}");
    }
    assert!(plan["parts"]["rollout"]["kv_cache"].as_u64().unwrap() > 0);
    let table = fusegrpo_ok(&["plan", "--config", cfg_s]);
    assert!(table.contains("rollout (cpu):") && table.contains("peak:"), "{table}");
    // The device size reads in both unit families; a run that does not
    // fit exits 1 naming what to lower; a bare number is refused.
    let fits = fusegrpo_ok(&["plan", "--config", cfg_s, "--gpu-memory", "64GB"]);
    assert!(fits.contains("fits in 64 GB (59.60 GiB)"), "{fits}");
    let small = fusegrpo(&["plan", "--config", cfg_s, "--gpu-memory", "1MiB"]);
    assert_eq!(small.status.code(), Some(1), "{small:?}");
    assert!(String::from_utf8_lossy(&small.stdout).contains("does NOT fit in 1.05 MB (1.00 MiB)"));
    assert!(String::from_utf8_lossy(&small.stderr).contains("lower ["));
    let bare = fusegrpo(&["plan", "--config", cfg_s, "--gpu-memory", "80"]);
    assert_eq!(bare.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bare.stderr).contains("80GB (80 x 10^9 bytes) or 80GiB"));

    let run = tmp.path().join("run");
    let out = fusegrpo(&["train", "--config", cfg_s, "--out", run.to_str().unwrap(), "--gpu-memory", "1MiB"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("memory plan") && err.contains("--gpu-memory") && err.contains("lower [") && err.contains("phase needs"), "{err}");
    assert!(!run.exists(), "nothing written when the plan does not fit");

    // A KV budget replaces the unbounded estimate.
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, text.replace("[rollout]\n", "[rollout]\nmax_kv_tokens = 100000\n")).unwrap();
    let bounded: serde_json::Value = serde_json::from_str(fusegrpo_ok(&["plan", "--config", cfg_s, "--json"]).trim()).unwrap();
    assert!(bounded["fits"].is_null());
    let slot = bounded["parts"]["rollout"]["kv_cache"].as_u64().unwrap() / 100_000;
    assert!(slot > 0 && bounded["parts"]["rollout"]["kv_cache"].as_u64().unwrap() == slot * 100_000);
    // Too small for one episode: refused naming the key.
    std::fs::write(&cfg, text.replace("[rollout]\n", "[rollout]\nmax_kv_tokens = 10\n")).unwrap();
    let out = fusegrpo(&["plan", "--config", cfg_s]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("rollout.max_kv_tokens"), "{err}");
}

/// A binary built without MPI that a launcher starts as one of several
/// ranks stops at once, saying how to build one that can (every rank would
/// otherwise run the whole job over the same files). Runs against the plain
/// build (`scripts/test.sh`); `scripts/test-mpi.sh` runs only `mpi::`.
#[test]
fn several_ranks_without_mpi_are_refused() {
    let out = std::process::Command::new(e2e::fusegrpo_bin())
        .args(["practice-repo", "--out", "unused"])
        .env("OMPI_COMM_WORLD_SIZE", "2")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("one of 2 ranks") && err.contains("--features mpi"), "{err}");
    assert!(!std::path::Path::new("unused").exists());
}

/// `zero_std_groups = "resample"` draws further tasks within a step (the
/// random model's groups never have a reward spread, so each step draws
/// its bound, `max_resample_draws`); kill -9 after step 2 and `--resume
/// auto` draw the same tasks: the same metrics and checkpoint state (task
/// cursor, sampling stream) as the straight run, bit for bit.
#[test]
fn resample_then_kill_9_and_resume_matches_the_straight_run() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = shop_world(tmp.path());
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, text.replace("[grpo]\n", "[grpo]\nzero_std_groups = \"resample\"\nmax_resample_draws = 2\n")).unwrap();
    let cfg = cfg.to_str().unwrap();
    let straight = tmp.path().join("straight");
    fusegrpo_ok(&["train", "--config", cfg, "--out", straight.to_str().unwrap()]);
    let metrics = without_timings(read_jsonl(&straight.join("metrics.jsonl")));
    assert_eq!(metrics.len(), 4);
    for m in &metrics {
        assert_eq!((m["resample/groups_drawn"].as_u64(), m["resample/groups_kept"].as_u64(), m["num_gen_batches"].as_u64()), (Some(4), Some(0), Some(2)), "{m}");
    }
    let killed = tmp.path().join("killed");
    let mut child = spawn_train(cfg, &killed, &["--save-every", "1"]);
    wait_for(&killed.join("step_00000002/DONE"));
    child.kill().unwrap();
    child.wait().unwrap();
    fusegrpo_ok(&["train", "--config", cfg, "--out", killed.to_str().unwrap(), "--resume", "auto"]);
    assert_eq!(without_timings(read_jsonl(&killed.join("metrics.jsonl"))), metrics);
    for f in ["model.safetensors", "optimizer.safetensors"] {
        let read = |run: &std::path::Path| std::fs::read(run.join("step_00000004").join(f)).unwrap();
        assert_eq!(read(&straight), read(&killed), "{f}");
    }
    let state = |run: &std::path::Path| -> serde_json::Value { serde_json::from_slice(&std::fs::read(run.join("step_00000004/state.json")).unwrap()).unwrap() };
    let (a, b) = (state(&straight), state(&killed));
    assert_eq!((&a["data"], &a["rngs"]), (&b["data"], &b["rngs"]), "task cursor and sampling stream");
    assert_eq!(a["data"]["epoch"], 8, "4 tasks a step from 2 tasks: 8 epochs in 4 steps: {}", a["data"]);
}

/// `[rollout] off_policy = 1` through the binary: kill -9 once step 2's
/// checkpoint is written (step 3 is then updating while step 4's rollouts
/// are being made) and `--resume auto` end with the straight run's metrics,
/// weights, optimizer and state, bit for bit: step 2's checkpoint kept the
/// rollouts it had made ahead for step 3.
#[test]
fn off_policy_then_kill_9_and_resume_matches_the_straight_run() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = shop_world(tmp.path());
    let text = std::fs::read_to_string(&cfg).unwrap();
    let text = text.replace("[rollout]\n", "[rollout]\noff_policy = 1\n").replace("[grpo]\n", "[grpo]\nrollout_correction = \"tis\"\n");
    std::fs::write(&cfg, text.replace("[optim]\n", "[optim]\nweight_decay = 1.0\n")).unwrap();
    let cfg = cfg.to_str().unwrap();
    let straight = tmp.path().join("straight");
    fusegrpo_ok(&["train", "--config", cfg, "--out", straight.to_str().unwrap()]);
    let metrics = without_timings(read_jsonl(&straight.join("metrics.jsonl")));
    assert_eq!(metrics.iter().map(|m| m["off_policy/staleness"].as_u64().unwrap()).collect::<Vec<_>>(), [0, 1, 1, 1], "{metrics:?}");
    let killed = tmp.path().join("killed");
    let mut child = spawn_train(cfg, &killed, &["--save-every", "1"]);
    wait_for(&killed.join("step_00000002/DONE"));
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(killed.join("step_00000002/next_rollouts.json").exists());
    fusegrpo_ok(&["train", "--config", cfg, "--out", killed.to_str().unwrap(), "--resume", "auto"]);
    assert_eq!(without_timings(read_jsonl(&killed.join("metrics.jsonl"))), metrics);
    for f in ["model.safetensors", "optimizer.safetensors"] {
        let read = |run: &std::path::Path| std::fs::read(run.join("step_00000004").join(f)).unwrap();
        assert_eq!(read(&straight), read(&killed), "{f}");
    }
    let state = |run: &std::path::Path| -> serde_json::Value { serde_json::from_slice(&std::fs::read(run.join("step_00000004/state.json")).unwrap()).unwrap() };
    let (a, b) = (state(&straight), state(&killed));
    assert_eq!((&a["data"], &a["rngs"]), (&b["data"], &b["rngs"]), "task cursor and sampling stream");
}
