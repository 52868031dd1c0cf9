//! `fusegrpo pipeline` end to end, shortened: the practice repository, a
//! tiny model, synth with the scripted teacher, filter, a few SFT and GRPO
//! steps, and the evaluation of base / sft / grpo on held-out tasks. A second
//! run skips every stage and reports the same numbers.

use e2e::{fusegrpo, fusegrpo_ok, read_jsonl};
use serde_json::Value;

const CONFIG: &str = r#"
name = "pipeline-test"
[model]
path = "model"
[env]
repos_dir = "repos"
[env.tools]
max_grep_matches = 4
max_read_lines = 8
max_output_bytes = 400
[episode]
max_turns = 3
max_turn_tokens = 24
max_total_tokens = 2400
[sampling]
seed = 1
[rollout]
group = 2
[train]
steps = 2
tasks_per_step = 2
micro_batch_rows = 4
save_every = 1
keep_last = 1
[optim]
lr = 1e-3
[sft]
epochs = 1
batch_rows = 4
micro_batch_rows = 4
lr = 1e-3
heldout_fraction = 0.2
eval_tasks = 1
[sft.filter]
min_f1 = 0.3
min_e = 0.0
min_calls_per_turn = 1
max_tokens = 2400
max_truncation_ratio = 0.5
[pipeline]
tasks = "tasks.jsonl"
heldout_tasks = 2
samples = 2
eval_group = 1
"#;

fn setup(dir: &std::path::Path) -> std::path::PathBuf {
    let d = |p: &str| dir.join(p).to_str().unwrap().to_string();
    fusegrpo_ok(&["practice-repo", "--out", &d("repos"), "--seed", "2", "--commits", "12"]);
    fusegrpo_ok(&["tasks", "from-history", "--repo", "practice/shop", "--repos-dir", &d("repos"), "--out", &d("tasks.jsonl"), "--max", "8"]);
    fusegrpo_ok(&[
        "init-tiny", "--out", &d("model"), "--small-vocab", "1024", "--hidden-size", "32", "--intermediate-size", "64",
        "--layers", "1", "--corpus-repo", "practice/shop", "--repos-dir", &d("repos"),
    ]);
    let cfg = dir.join("run.toml");
    std::fs::write(&cfg, CONFIG).unwrap();
    cfg
}

#[test]
fn pipeline_runs_every_stage_then_skips_them() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = setup(tmp.path());
    let run = tmp.path().join("run");
    let args = ["pipeline", "--config", cfg.to_str().unwrap(), "--out", run.to_str().unwrap()];
    let table = fusegrpo_ok(&args);
    for stage in ["base", "sft", "grpo"] {
        assert!(table.lines().any(|l| l.starts_with(stage)), "table lacks {stage}:\n{table}");
    }

    let report: Value = serde_json::from_str(&std::fs::read_to_string(run.join("report.json")).unwrap()).unwrap();
    for stage in ["base", "sft", "grpo"] {
        let s = &report["stages"][stage];
        for key in ["f1_file", "f1_func", "e", "reward", "turns", "calls_per_turn", "tokens", "seconds"] {
            assert!(s[key].is_number(), "report.stages.{stage}.{key} missing: {s}");
        }
        assert_eq!(s["episodes"], 2, "2 held-out tasks x eval_group 1");
    }
    // Filter counts add up, and name the rules.
    let f = &report["filter"];
    let dropped: u64 = f["dropped"].as_object().unwrap().values().map(|v| v.as_u64().unwrap()).sum();
    assert_eq!(f["total"].as_u64().unwrap(), 6 * 2, "6 training tasks x 2 samples");
    assert_eq!(f["kept"].as_u64().unwrap() + dropped, f["total"].as_u64().unwrap());
    assert!(f["kept"].as_u64().unwrap() > 0);

    // Each stage left its output: trajectories, SFT and GRPO metrics and checkpoints.
    assert_eq!(read_jsonl(&run.join("synth/trajectories.jsonl")).len(), 12);
    let sft = read_jsonl(&run.join("sft/metrics.jsonl"));
    assert!(!sft.is_empty() && sft.iter().all(|m| m["loss"].as_f64().unwrap().is_finite()));
    assert!(sft.last().unwrap()["heldout_loss"].is_number(), "held-out loss at the end of SFT");
    assert_eq!(read_jsonl(&run.join("grpo/metrics.jsonl")).len(), 2, "2 GRPO steps");
    let train: Vec<String> = read_jsonl(&run.join("tasks/train.jsonl")).iter().map(|t| t["instance_id"].to_string()).collect();
    let held: Vec<String> = read_jsonl(&run.join("tasks/heldout.jsonl")).iter().map(|t| t["instance_id"].to_string()).collect();
    assert!(held.iter().all(|h| !train.contains(h)), "held-out tasks never train");
    let grpo_state: Value = serde_json::from_str(&std::fs::read_to_string(run.join("grpo/step_00000002/state.json")).unwrap()).unwrap();
    assert!(grpo_state["config"]["model"]["path"].as_str().unwrap().contains("sft"), "GRPO starts from the SFT checkpoint");

    // Again: every stage is skipped, the same report comes back.
    let again = fusegrpo(&args);
    assert!(again.status.success(), "{}", String::from_utf8_lossy(&again.stderr));
    let err = String::from_utf8_lossy(&again.stderr);
    for stage in ["synth", "sft", "grpo"] {
        assert!(err.contains(&format!("== {stage}")) && err.contains("skipped"), "{stage} not skipped:\n{err}");
    }
    let report2: Value = serde_json::from_str(&std::fs::read_to_string(run.join("report.json")).unwrap()).unwrap();
    assert_eq!(report2["stages"], report["stages"]);
    seeds_compares_runs(tmp.path(), &run, &report);
}

/// `fusegrpo seeds`: a run's paired differences are its report's, and the
/// same run given twice pools to the same interval (a held-out task is one
/// cluster, so a copy adds no evidence); a folder that is not a run is named.
fn seeds_compares_runs(dir: &std::path::Path, run: &std::path::Path, report: &Value) {
    let json = dir.join("pooled.json");
    let r = run.to_str().unwrap();
    let out = fusegrpo_ok(&["seeds", r, r, "--json", json.to_str().unwrap()]);
    let pooled: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    for pair in ["sft_vs_base", "grpo_vs_sft", "grpo_vs_base"] {
        let (one, both) = (&report["paired"][pair], &pooled[pair]);
        assert_eq!(both["mean"], one["mean"], "{pair}");
        assert_eq!(both["ci95"], one["ci95"], "{pair}");
        assert_eq!(both["tasks"], 2, "{pair}: 2 held-out tasks");
        assert_eq!(both["units"], 4, "{pair}: 2 tasks x 2 runs");
    }
    assert!(out.lines().filter(|l| l.starts_with("| run | base |")).count() == 2, "{out}");
    assert!(out.contains("| all 2 runs, pooled | 2 tasks, 4 pairs |"), "{out}");
    assert!(out.contains("held-out tasks for its 95% interval"), "{out}");
    let bad = fusegrpo(&["seeds", r, dir.join("repos").to_str().unwrap()]);
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("report.json") && err.contains("repos"), "{err}");
}

/// Two scripted-teacher episodes for each of the first `tasks` tasks, in `dir/traj.jsonl`.
fn synth(dir: &std::path::Path, cfg: &std::path::Path, tasks: usize) -> std::path::PathBuf {
    let traj = dir.join("traj.jsonl");
    let (c, t, n) = (cfg.to_str().unwrap(), dir.join("tasks.jsonl"), tasks.to_string());
    fusegrpo_ok(&["synth", "--config", c, "--tasks", t.to_str().unwrap(), "--samples", "2", "--out", traj.to_str().unwrap(), "--max-tasks", &n]);
    traj
}

#[test]
fn sft_reports_a_filter_that_keeps_nothing_and_pipeline_needs_its_section() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = setup(tmp.path());
    let traj = synth(tmp.path(), &cfg, 3);
    let c = cfg.to_str().unwrap();
    let rows = read_jsonl(&traj);
    assert_eq!(rows.len(), 6);
    assert!(rows.iter().all(|r| r["score"]["f1"].is_number() && r["calls_per_turn"].is_number()));
    // The scripted teacher varies across samples of a task.
    assert!(rows.chunks(2).any(|g| g[0]["turns"][0]["text"] != g[1]["turns"][0]["text"]), "samples differ");

    let strict = std::fs::read_to_string(&cfg).unwrap().replace("min_f1 = 0.3", "min_f1 = 1.5");
    let strict_cfg = tmp.path().join("strict.toml");
    std::fs::write(&strict_cfg, strict).unwrap();
    let out = fusegrpo(&["sft", "--config", strict_cfg.to_str().unwrap(), "--data", traj.to_str().unwrap(), "--out", tmp.path().join("s").to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no trajectory passed the filter") && err.contains("low_f1"), "{err}");

    let bad = tmp.path().join("bad.jsonl");
    std::fs::write(&bad, "{\"task_id\": 3}\n").unwrap();
    let out = fusegrpo(&["sft", "--config", c, "--data", bad.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad.jsonl:1"), "{}", String::from_utf8_lossy(&out.stderr));

    let no_pipeline = std::fs::read_to_string(&cfg).unwrap().split("[pipeline]").next().unwrap().to_string();
    let np = tmp.path().join("np.toml");
    std::fs::write(&np, no_pipeline).unwrap();
    let out = fusegrpo(&["pipeline", "--config", np.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("no [pipeline] section"), "{}", String::from_utf8_lossy(&out.stderr));
}

/// `[[sft.openings]]`: a phase of SFT on the trajectories' openings (no
/// system prompt, the first assistant turn only) runs before the
/// whole-trajectory SFT, which starts from its weights; a rerun with
/// `--resume auto` finds both done and trains nothing more.
#[test]
fn sft_runs_the_openings_curriculum_first_and_starts_from_it() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = setup(tmp.path());
    let traj = synth(tmp.path(), &cfg, 4);
    let text = std::fs::read_to_string(&cfg).unwrap().replace("[pipeline]", "[[sft.openings]]\nturns = 1\nepochs = 2\nbatch_rows = 2\n\n[pipeline]");
    let ccfg = tmp.path().join("curriculum.toml");
    std::fs::write(&ccfg, text).unwrap();
    let out = tmp.path().join("s");
    let args = ["sft", "--config", ccfg.to_str().unwrap(), "--data", traj.to_str().unwrap(), "--out", out.to_str().unwrap(), "--resume", "auto"];
    let first = fusegrpo(&args);
    let log = String::from_utf8_lossy(&first.stderr);
    assert!(first.status.success() && log.contains("openings of 1 turn(s)"), "{log}");

    let phase = read_jsonl(&out.join("opening-1/metrics.jsonl"));
    let whole = read_jsonl(&out.join("metrics.jsonl"));
    assert!(!phase.is_empty() && !whole.is_empty());
    // Openings are a fraction of a whole trajectory (the system prompt alone is longer).
    let per_row = |m: &Value| m["tokens"].as_f64().unwrap() / m["policy_tokens"].as_f64().unwrap().max(1.0);
    assert!(per_row(&phase[0]) < per_row(&whole[0]), "opening rows carry fewer prompt tokens per policy token");
    let states: Vec<Value> = ["opening-1", ""]
        .iter()
        .map(|d| {
            let ckpt = std::fs::read_dir(out.join(d)).unwrap().map(|e| e.unwrap().path()).find(|p| p.join("state.json").exists()).unwrap();
            serde_json::from_str(&std::fs::read_to_string(ckpt.join("state.json")).unwrap()).unwrap()
        })
        .collect();
    assert_eq!(states[0]["config"]["sft"]["epochs"], 2);
    assert!(states[1]["config"]["model"]["path"].as_str().unwrap().contains("opening-1"), "whole-trajectory SFT starts from the phase");

    let again = fusegrpo(&args);
    assert!(again.status.success(), "{}", String::from_utf8_lossy(&again.stderr));
    assert_eq!(read_jsonl(&out.join("opening-1/metrics.jsonl")).len(), phase.len());
    assert_eq!(read_jsonl(&out.join("metrics.jsonl")).len(), whole.len());

    let bad = std::fs::read_to_string(&ccfg).unwrap().replace("turns = 1", "turns = 0");
    std::fs::write(&ccfg, bad).unwrap();
    let err = fusegrpo(&args);
    assert!(String::from_utf8_lossy(&err.stderr).contains("sft.openings"), "{}", String::from_utf8_lossy(&err.stderr));
}

/// `[pipeline] tasks_from = "synth"`: the pipeline makes synthetic tasks of
/// the practice repository (`<run>/tasks/synth.jsonl`, no task file), then
/// runs every stage on them and reports as with a task file; a rerun skips
/// the task synthesis too.
#[test]
fn pipeline_runs_on_synthetic_tasks() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = setup(tmp.path());
    let text = std::fs::read_to_string(&cfg).unwrap().replace("tasks = \"tasks.jsonl\"\nheldout_tasks", "tasks_from = \"synth\"\nheldout_tasks")
        + "eval_attempts = 3\neval_select = \"vote\"\n"
        + "[pipeline.synth]\nrepo = \"practice/shop\"\ncount = 8\nseed = 3\nverify = true\n";
    assert!(text.contains("tasks_from"), "the config changed under the test");
    let synth_cfg = tmp.path().join("synth.toml");
    std::fs::write(&synth_cfg, text).unwrap();
    let run = tmp.path().join("run");
    let args = ["pipeline", "--config", synth_cfg.to_str().unwrap(), "--out", run.to_str().unwrap()];
    let table = fusegrpo_ok(&args);
    assert!(table.lines().any(|l| l.starts_with("grpo")), "{table}");
    let tasks = read_jsonl(&run.join("tasks/synth.jsonl"));
    assert_eq!(tasks.len(), 8);
    assert!(tasks.iter().all(|t| t["synth"]["recall"].is_number() && t["gold"]["functions"].as_array().unwrap().len() == 1));
    assert_eq!(read_jsonl(&run.join("tasks/train.jsonl")).len() + read_jsonl(&run.join("tasks/heldout.jsonl")).len(), 8);
    let report: Value = serde_json::from_str(&std::fs::read_to_string(run.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["heldout_tasks"], 2);
    // eval_attempts = 3: 3 attempts per held-out task, and each stage's vote over them.
    for stage in ["base", "sft", "grpo"] {
        let s = &report["stages"][stage];
        assert_eq!(s["episodes"], 6, "{stage}: 2 held-out tasks x 3 attempts");
        let sel = &s["selected"];
        assert_eq!((sel["selector"].as_str(), sel["attempts"].as_u64(), sel["tasks"].as_u64()), (Some("vote"), Some(3), Some(2)), "{stage}: {sel}");
        assert!(sel["f1_file"].as_f64().unwrap() >= 0.0 && sel["tokens"].as_f64().unwrap() > 0.0);
        assert!(table.contains(&format!("{stage:<8} vote of 3 attempts")), "{table}");
    }
    let again = fusegrpo(&args);
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(again.status.success() && err.contains("== tasks:") && err.contains("skipped"), "{err}");

    let no_repo = std::fs::read_to_string(&synth_cfg).unwrap().replace("repo = \"practice/shop\"\n", "");
    std::fs::write(&synth_cfg, no_repo).unwrap();
    let out = fusegrpo(&args);
    assert!(String::from_utf8_lossy(&out.stderr).contains("pipeline.synth.repo"), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn pipeline_with_lora_chains_the_sft_adapter_into_grpo_and_evaluates_adapters() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = setup(tmp.path());
    std::fs::write(&cfg, format!("{CONFIG}[lora]\nr = 4\nalpha = 8\n")).unwrap();
    let run = tmp.path().join("run");
    let table = fusegrpo_ok(&["pipeline", "--config", cfg.to_str().unwrap(), "--out", run.to_str().unwrap()]);
    for stage in ["base", "sft", "grpo"] {
        assert!(table.lines().any(|l| l.starts_with(stage)), "table lacks {stage}:\n{table}");
    }
    let sft_ckpt = run.join("sft").join(
        std::fs::read_dir(run.join("sft")).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).find(|n| n.starts_with("step_")).unwrap(),
    );
    for dir in [sft_ckpt.clone(), run.join("grpo/step_00000002")] {
        assert!(dir.join("adapter_model.safetensors").exists() && !dir.join("model.safetensors").exists(), "{} is an adapter checkpoint", dir.display());
    }
    // GRPO trained the SFT adapter over the unchanged base.
    let state: Value = serde_json::from_str(&std::fs::read_to_string(run.join("grpo/step_00000002/state.json")).unwrap()).unwrap();
    assert_eq!(state["config"]["model"]["adapter"].as_str().unwrap(), sft_ckpt.to_str().unwrap());
    assert!(state["config"]["model"]["path"].as_str().unwrap().ends_with("model"));
    let report: Value = serde_json::from_str(&std::fs::read_to_string(run.join("report.json")).unwrap()).unwrap();
    for stage in ["base", "sft", "grpo"] {
        assert_eq!(report["stages"][stage]["episodes"], 2, "{stage}");
    }
}
