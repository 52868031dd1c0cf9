//! `--set section.key=value`: checked as a config file's keys are (each
//! kind of error names the `--set` and its key, and nothing is written),
//! and a value set so is the run's: in its checkpoints' saved config, which
//! a resume compares.

use e2e::{fusegrpo, fusegrpo_ok, shop_world};

/// `fusegrpo args` fails, writing no run folder; its stderr.
fn refused(args: &[&str], run: &std::path::Path) -> String {
    let out = fusegrpo(args);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
    assert!(!run.exists(), "{args:?} wrote {}", run.display());
    err
}

#[test]
fn each_kind_of_bad_set_is_refused_naming_its_key() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = shop_world(tmp.path());
    let (cfg, run) = (cfg.to_str().unwrap(), tmp.path().join("run"));
    let train = |set: &str| refused(&["train", "--config", cfg, "--out", run.to_str().unwrap(), "--set", "train.steps=1", "--set", set], &run);
    let cases = [
        ("grpo.betaa=0.1", "--set grpo.betaa=0.1: config key `grpo.betaa`: unknown field `betaa`, expected one of"),
        ("nosuch.key=1", "--set nosuch.key=1: config key `nosuch.key`: unknown field `nosuch`"),
        ("grpo.beta=abc", "--set grpo.beta=abc: config key `grpo.beta`: invalid type: string \"abc\", expected f64"),
        ("train.steps=1.5", "--set train.steps=1.5: config key `train.steps`: invalid type: floating point `1.5`, expected u64"),
        ("grpo.beta=-1", "--set grpo.beta=-1: config key `grpo.beta`: must be a number >= 0 (0 = no KL term), got -1"),
        ("grpo.aggregation=\"per_word\"", "--set grpo.aggregation=\"per_word\": config key `grpo.aggregation`: unknown variant `per_word`"),
        ("name.x=1", "--set name.x=1: config key `name.x`: `name` is a string, not a section"),
    ];
    for (set, message) in cases {
        let err = train(set);
        assert!(err.contains(message), "--set {set}:\n{err}");
    }
    // Not KEY=VALUE: the argument parser's error (status 2).
    let out = fusegrpo(&["train", "--config", cfg, "--set", "grpo.beta"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.code() == Some(2) && err.contains("expected section.key=value"), "{err}");
    // Every command that reads --config takes it.
    let out = fusegrpo(&["plan", "--config", cfg, "--set", "grpo.betaa=1"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("config key `grpo.betaa`"), "plan: {}", String::from_utf8_lossy(&out.stderr));
    for cmd in ["train", "sft", "pipeline", "rollout", "synth", "dist-check", "plan", "localize", "mcp"] {
        let help = fusegrpo_ok(&[cmd, "--help"]);
        assert!(help.contains("--set <SECTION.KEY=VALUE>"), "{cmd} --help:\n{help}");
    }
}

#[test]
fn a_set_value_is_saved_with_the_run_and_a_resume_compares_it() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = shop_world(tmp.path());
    let (cfg, run) = (cfg.to_str().unwrap(), tmp.path().join("run"));
    // A bare string (not TOML) and a quoted one are both strings.
    let sets = ["--set", "grpo.beta=0.02", "--set", "name=bare-name", "--set", "model.path=\"model\""];
    let args = |extra: &[&'static str]| -> Vec<String> {
        ["train", "--config", cfg, "--out", run.to_str().unwrap()].iter().chain(extra).map(|s| s.to_string()).collect()
    };
    let with = |extra: &[&'static str]| [&sets[..], extra].concat();
    fusegrpo_ok(&args(&with(&["--max-steps", "2"])).iter().map(String::as_str).collect::<Vec<_>>());
    let state: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(run.join("step_00000002/state.json")).unwrap()).unwrap();
    assert_eq!(state["config"]["grpo"]["beta"], 0.02);
    assert_eq!(state["config"]["name"], "bare-name");
    // Another value than the run's: refused, naming the key.
    let out = fusegrpo(&args(&["--resume", "auto", "--max-steps", "3", "--set", "grpo.beta=0.04"]).iter().map(String::as_str).collect::<Vec<_>>());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("grpo.beta (0.02 -> 0.04)"), "{err}");
    // Without the --set the run's own are applied again (kept in run_args.json); with them, the same.
    fusegrpo_ok(&args(&["--resume", "auto", "--max-steps", "3"]).iter().map(String::as_str).collect::<Vec<_>>());
    assert!(run.join("step_00000003/DONE").exists());
    fusegrpo_ok(&args(&with(&["--resume", "auto", "--max-steps", "4"])).iter().map(String::as_str).collect::<Vec<_>>());
    assert!(run.join("step_00000004/DONE").exists());
}

/// A command's flag that sets a config key is an override of it, checked
/// with the config: `--group 0` and `--set rollout.group=0` (and
/// `--temperature` and `sampling.temperature`) give the same keyed error,
/// each naming what gave it, and nothing is written.
#[test]
fn a_flag_and_its_set_give_the_same_keyed_error() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = shop_world(tmp.path());
    let (cfg, tasks, out) = (cfg.to_str().unwrap(), tmp.path().join("tasks.jsonl"), tmp.path().join("episodes.jsonl"));
    let cases = [
        (["--group", "0"], "--group 0", "rollout.group=0", "config key `rollout.group`: must be at least 1"),
        (["--group", "2000"], "--group 2000", "rollout.group=2000", "config key `rollout.group`: must be at most 1024, got 2000"),
        (["--temperature=-1", "--max-tasks=1"], "--temperature -1", "sampling.temperature=-1", "config key `sampling.temperature`: must be a number >= 0 (0 = greedy), got -1"),
    ];
    for cmd in ["eval", "rollout"] {
        for (flag, given, set, message) in &cases {
            let base = [cmd, "--config", cfg, "--tasks", tasks.to_str().unwrap(), "--policy", "scripted", "--out", out.to_str().unwrap()];
            let by_flag = refused(&[&base[..], &flag[..]].concat(), &out);
            let by_set = refused(&[&base[..], &["--set", set]].concat(), &out);
            assert!(by_flag.contains(&format!("{given}: {message}")), "{cmd} {flag:?}:\n{by_flag}");
            assert!(by_set.contains(&format!("--set {set}: {message}")), "{cmd} --set {set}:\n{by_set}");
        }
    }
    // dist-check's --group is the same override.
    let by_flag = refused(&["dist-check", "--config", cfg, "--group", "0"], &out);
    let by_set = refused(&["dist-check", "--config", cfg, "--set", "rollout.group=0"], &out);
    assert!(by_flag.contains("--group 0: config key `rollout.group`: must be at least 1"), "{by_flag}");
    assert!(by_set.contains("--set rollout.group=0: config key `rollout.group`: must be at least 1"), "{by_set}");
}
