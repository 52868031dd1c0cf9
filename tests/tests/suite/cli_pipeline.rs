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
    // The rerun ran nothing, so it keeps the times the first run measured.
    for key in ["synth", "sft", "grpo", "eval_base", "eval_sft", "eval_grpo"] {
        assert!(report["stage_seconds"][key].as_f64().is_some_and(|s| s > 0.0), "stage_seconds.{key}: {}", report["stage_seconds"]);
    }
    assert_eq!(report2["stage_seconds"], report["stage_seconds"], "a rerun that skips every stage keeps their times");
    seeds_compares_runs(tmp.path(), &run, &report);
    compare_pairs_episode_files(tmp.path(), &run, &report);
}

/// `fusegrpo compare`: two evaluations' paired difference is the report's;
/// a task raised by a known amount moves the mean by it over the tasks and
/// counts as better; files without a common task, or with a bad line, are
/// refused by name.
fn compare_pairs_episode_files(dir: &std::path::Path, run: &std::path::Path, report: &Value) {
    let (sft, grpo) = (run.join("eval/sft.jsonl"), run.join("eval/grpo.jsonl"));
    let json = dir.join("compare.json");
    let out = fusegrpo_ok(&["compare", sft.to_str().unwrap(), grpo.to_str().unwrap(), "--json", json.to_str().unwrap()]);
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["paired"][0]["reward"], report["paired"]["grpo_vs_sft"], "{out}");
    assert_eq!(v["files"][1]["summary"]["reward"], report["stages"]["grpo"]["reward"]);
    assert_eq!(v["files"][1]["reward_ci95"], report["stages"]["grpo"]["reward_ci95"]);

    let mut rows = read_jsonl(&sft);
    let first = rows[0]["task_id"].clone();
    let tasks = rows.iter().map(|r| r["task_id"].to_string()).collect::<std::collections::BTreeSet<_>>().len();
    assert_eq!(tasks, 2);
    for r in rows.iter_mut().filter(|r| r["task_id"] == first) {
        let reward = r["score"]["reward"].as_f64().expect("scored episode");
        r["score"]["reward"] = serde_json::json!(reward + 0.5);
        let f1_func = r["score"]["f1_func"].as_f64().expect("scored episode");
        r["score"]["f1_func"] = serde_json::json!(f1_func + 0.2);
    }
    let raised = dir.join("raised.jsonl");
    std::fs::write(&raised, rows.iter().map(|r| r.to_string() + "\n").collect::<String>()).unwrap();
    let out = fusegrpo_ok(&["compare", sft.to_str().unwrap(), raised.to_str().unwrap(), "--json", json.to_str().unwrap()]);
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let p = &v["paired"][0];
    assert!((p["reward"]["mean"].as_f64().unwrap() - 0.25).abs() < 1e-12, "{p}");
    assert_eq!((p["better"].as_u64(), p["worse"].as_u64(), p["tasks"].as_u64()), (Some(1), Some(0), Some(2)), "{p}");
    assert_eq!(p["f1_file"]["mean"], 0.0);
    assert!((p["f1_func"]["mean"].as_f64().unwrap() - 0.1).abs() < 1e-12, "{p}");
    assert!(out.contains("| 1 / 0 / 1 |"), "{out}");

    for r in rows.iter_mut() {
        r["task_id"] = serde_json::json!(format!("other-{}", r["task_id"].as_str().unwrap()));
    }
    let other = dir.join("other.jsonl");
    std::fs::write(&other, rows.iter().map(|r| r.to_string() + "\n").collect::<String>()).unwrap();
    let bad = fusegrpo(&["compare", sft.to_str().unwrap(), other.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(!bad.status.success() && err.contains("no task in common") && err.contains("other.jsonl"), "{err}");
    let broken = dir.join("broken.jsonl");
    std::fs::write(&broken, "{\"task_id\": 1}\n").unwrap();
    let bad = fusegrpo(&["compare", sft.to_str().unwrap(), broken.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(!bad.status.success() && err.contains("broken.jsonl:1"), "{err}");
}

/// `scripts/curve_gain.py --baseline`: each step read as its tasks' R minus
/// their mean R in the difficulty probe, computed here from the files.
fn curve_against_the_probe(run: &std::path::Path, probe: &[Value]) {
    let metrics = run.join("pilot/lr-1e-3/metrics.jsonl");
    let base = |id: &str| {
        let r: Vec<f64> = probe.iter().filter(|e| e["task_id"] == id).map(|e| e["score"]["reward"].as_f64().unwrap()).collect();
        r.iter().sum::<f64>() / r.len() as f64
    };
    let adjusted: Vec<f64> = read_jsonl(&metrics)
        .iter()
        .map(|m| {
            let tasks = m["tasks"].as_object().unwrap();
            tasks.iter().map(|(id, v)| v.as_f64().unwrap() - base(id)).sum::<f64>() / tasks.len() as f64
        })
        .collect();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/curve_gain.py");
    let out = std::process::Command::new("python3")
        .arg(&script)
        .args([metrics.to_str().unwrap(), "--window", "1", "--json", "--baseline", run.join("difficulty/episodes.jsonl").to_str().unwrap()])
        .output()
        .expect("python3 runs scripts/curve_gain.py");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["key"], "reward - baseline");
    assert!((v["gain"].as_f64().unwrap() - (adjusted[1] - adjusted[0])).abs() < 1e-12, "{v} vs {adjusted:?}");
    // Without the probe's episodes of a step's task, it says which.
    let empty = run.join("empty-probe.jsonl");
    std::fs::write(&empty, "").unwrap();
    let bad = std::process::Command::new("python3").arg(&script).args([metrics.to_str().unwrap(), "--window", "1", "--baseline", empty.to_str().unwrap()]).output().unwrap();
    assert!(!bad.status.success() && String::from_utf8_lossy(&bad.stderr).contains("no episode of"), "{}", String::from_utf8_lossy(&bad.stderr));
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

/// Writes the first `held` tasks of `dir/tasks.jsonl` to `dir/heldout.jsonl`
/// and leaves the rest in `dir/tasks.jsonl`; returns the held-out ids.
fn hold_out_file(dir: &std::path::Path, held: usize) -> Vec<String> {
    let text = std::fs::read_to_string(dir.join("tasks.jsonl")).unwrap();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(lines.len() > held + 4, "{} tasks", lines.len());
    std::fs::write(dir.join("heldout.jsonl"), lines[..held].join("\n") + "\n").unwrap();
    std::fs::write(dir.join("tasks.jsonl"), lines[held..].join("\n") + "\n").unwrap();
    lines[..held].iter().map(|l| serde_json::from_str::<Value>(l).unwrap()["instance_id"].as_str().unwrap().to_string()).collect()
}

/// `[pipeline] heldout = FILE` (all of `tasks` trains), `eval_teacher`
/// (a `teacher` row and `grpo_vs_teacher`), `chunk_tasks`,
/// `[pipeline.difficulty]` (GRPO trains on the probed tasks whose rewards
/// vary) and `[pipeline.pilot]` (a short GRPO run per learning rate; the
/// long run takes the best one). A task in both files is an error, and so is
/// a probe where no task's rewards vary.
#[test]
fn pipeline_with_heldout_file_teacher_row_difficulty_filter_and_lr_pilot() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = setup(tmp.path());
    let held_ids = hold_out_file(tmp.path(), 2);
    let weak = CONFIG.replace("heldout_tasks = 2\n", "heldout = \"heldout.jsonl\"\neval_teacher = true\nchunk_tasks = 1\n")
        + "[pipeline.difficulty]\ntasks = 4\nsamples = 2\n[pipeline.pilot]\nlrs = [1e-3, 1e-4]\nsteps = 2\n";
    assert!(weak.contains("heldout = \"heldout.jsonl\"") && !weak.contains("heldout_tasks"), "the config changed under the test");

    // A held-out task that is also a training task is refused before anything runs.
    let overlap = tmp.path().join("overlap.toml");
    std::fs::write(&overlap, weak.replace("heldout = \"heldout.jsonl\"", "heldout = \"tasks.jsonl\"")).unwrap();
    let out = fusegrpo(&["pipeline", "--config", overlap.to_str().unwrap(), "--out", tmp.path().join("o").to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("is both in") && err.contains("tasks.jsonl"), "{err}");
    assert!(!err.contains("== synth"), "refused before synth: {err}");

    // With CONFIG's one SFT epoch and 24-token turns the tiny model never
    // answers: every probed reward is 0, and the pipeline says GRPO would
    // have nothing to learn from.
    std::fs::write(&cfg, &weak).unwrap();
    let out = fusegrpo(&["pipeline", "--config", cfg.to_str().unwrap(), "--out", tmp.path().join("weak").to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("no probed task has a reward spread"), "{err}");
    assert!(err.contains("0 of 4 tasks have a reward spread"), "{err}");

    // SFT long enough for the tiny model to replay the teacher on its
    // training tasks, turns long enough to hold a teacher turn, and T = 0.8:
    // some probed tasks get both rewarded and unrewarded episodes (2 of 4
    // with sampling seeds 1, 2 and 3 when this test was written).
    let text = weak
        .replace("epochs = 1\n", "epochs = 60\n")
        .replace("lr = 1e-3\nheldout_fraction = 0.2", "lr = 1e-2\nheldout_fraction = 0.0")
        .replace("max_turns = 3\nmax_turn_tokens = 24", "max_turns = 4\nmax_turn_tokens = 256")
        .replace("[sampling]\nseed = 1\n", "[sampling]\nseed = 1\ntemperature = 0.8\n")
        .replace("tasks = 4\nsamples = 2\n", "tasks = 4\nsamples = 4\n");
    for key in ["epochs = 60", "heldout_fraction = 0.0", "max_turn_tokens = 256", "temperature = 0.8", "samples = 4"] {
        assert!(text.contains(key), "the config changed under the test: {key}");
    }
    std::fs::write(&cfg, &text).unwrap();
    let run = tmp.path().join("run");
    let tb = tmp.path().join("tb");
    let args = ["pipeline", "--config", cfg.to_str().unwrap(), "--out", run.to_str().unwrap(), "--tensorboard", tb.to_str().unwrap()];
    let out = fusegrpo(&args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    // `--tensorboard TB`: each training stage's event files in TB/<stage>.
    for stage in ["sft", "pilot/lr-1e-3", "pilot/lr-1e-4", "grpo"] {
        assert_eq!(crate::cli_tensorboard::scalars(&tb.join(stage)), crate::cli_tensorboard::expected(&run.join(stage)), "{stage}");
    }
    let table = String::from_utf8_lossy(&out.stdout);
    for stage in ["base", "teacher", "sft", "grpo"] {
        assert!(table.lines().any(|l| l.starts_with(stage)), "table lacks {stage}:\n{table}");
    }

    let report: Value = serde_json::from_str(&std::fs::read_to_string(run.join("report.json")).unwrap()).unwrap();
    assert_eq!((report["train_tasks"].as_u64(), report["heldout_tasks"].as_u64()), (Some(6), Some(2)), "all of tasks.jsonl trains");
    let held: Vec<String> = read_jsonl(&run.join("tasks/heldout.jsonl")).iter().map(|t| t["instance_id"].as_str().unwrap().to_string()).collect();
    assert_eq!(held, held_ids, "the held-out file's tasks, in its order");
    for stage in ["base", "teacher", "sft", "grpo"] {
        assert_eq!(report["stages"][stage]["episodes"], 2, "{stage}: 2 held-out tasks x eval_group 1");
        assert!(run.join(format!("eval/{stage}.jsonl")).exists() && !run.join(format!("eval/{stage}.jsonl.chunks")).exists(), "{stage}");
    }
    assert!(report["stages"]["teacher"]["reward"].as_f64().unwrap() > 0.0, "the scripted teacher finds gold: {}", report["stages"]["teacher"]);
    for pair in ["sft_vs_base", "grpo_vs_sft", "grpo_vs_base", "grpo_vs_teacher"] {
        assert!(report["paired"][pair]["mean"].is_number(), "paired.{pair}: {}", report["paired"]);
    }
    assert_eq!(report["filter"]["total"].as_u64(), Some(6 * 2), "synth on all 6 training tasks x 2 samples");

    // The difficulty probe: 4 tasks x 4 samples; GRPO trains on the kept ones.
    let d = &report["difficulty"];
    assert_eq!((d["probed"].as_u64(), d["samples"].as_u64()), (Some(4), Some(4)), "{d}");
    let kept = d["kept"].as_u64().unwrap() as usize;
    assert!((1..=4).contains(&kept), "{d}");
    let probe = read_jsonl(&run.join("difficulty/episodes.jsonl"));
    assert_eq!(probe.len(), 16);
    let grpo_tasks = read_jsonl(&run.join("tasks/grpo.jsonl"));
    assert_eq!(grpo_tasks.len(), kept);
    let train: Vec<Value> = read_jsonl(&run.join("tasks/train.jsonl"));
    for t in &grpo_tasks {
        assert!(train.contains(t), "GRPO's tasks are training tasks");
        let rewards: Vec<f64> = probe.iter().filter(|e| e["task_id"] == t["instance_id"]).map(|e| e["score"]["reward"].as_f64().unwrap()).collect();
        assert_eq!(rewards.len(), 4);
        assert!(rewards.iter().any(|r| *r != rewards[0]), "a kept task's rewards vary: {rewards:?}");
    }

    // The pilot: one 2-step GRPO run per learning rate, judged on the
    // reward after its first update; the long run takes the chosen one.
    let pilot = &report["pilot"];
    let chosen = pilot["chosen_lr"].as_f64().unwrap();
    assert!(chosen == 1e-3 || chosen == 1e-4, "{pilot}");
    for lr in ["1e-3", "1e-4"] {
        let metrics = read_jsonl(&run.join(format!("pilot/lr-{lr}/metrics.jsonl")));
        assert_eq!(metrics.len(), 2, "pilot lr {lr}: 2 steps");
        assert!(run.join(format!("pilot/lr-{lr}/step_00000002/DONE")).exists(), "pilot lr {lr}: its checkpoint");
        assert_eq!(pilot["runs"][lr]["mean_reward"].as_f64(), metrics[1]["reward"].as_f64(), "step 2's reward alone: {pilot}");
        // Each step names its 2 tasks (GRPO's) with their mean R, whose
        // mean is the step's reward.
        for m in &metrics {
            let tasks = m["tasks"].as_object().unwrap_or_else(|| panic!("step {} has no tasks: {m}", m["step"]));
            assert_eq!(tasks.len(), 2, "{m}");
            assert!(tasks.keys().all(|id| grpo_tasks.iter().any(|t| t["instance_id"] == id.as_str())), "{m}");
            let mean = tasks.values().map(|v| v.as_f64().unwrap()).sum::<f64>() / 2.0;
            assert!((mean - m["reward"].as_f64().unwrap()).abs() < 1e-12, "{m}");
        }
    }
    let pilot_rewards: Vec<f64> = ["1e-3", "1e-4"].iter().flat_map(|lr| read_jsonl(&run.join(format!("pilot/lr-{lr}/metrics.jsonl")))).flat_map(|m| m["tasks"].as_object().unwrap().values().map(|v| v.as_f64().unwrap()).collect::<Vec<_>>()).collect();
    assert!(pilot_rewards.iter().any(|r| *r > 0.0), "some task is rewarded in the pilot, so the means are not all trivially 0: {pilot_rewards:?}");
    curve_against_the_probe(&run, &probe);
    let best = ["1e-3", "1e-4"].iter().map(|lr| pilot["runs"][lr]["mean_reward"].as_f64().unwrap()).fold(f64::MIN, f64::max);
    let chosen_key = if chosen == 1e-3 { "1e-3" } else { "1e-4" };
    assert_eq!(pilot["runs"][chosen_key]["mean_reward"].as_f64().unwrap(), best, "the best pilot's lr: {pilot}");
    let state: Value = serde_json::from_str(&std::fs::read_to_string(run.join("grpo/step_00000002/state.json")).unwrap()).unwrap();
    assert_eq!(state["config"]["optim"]["lr"].as_f64(), Some(chosen), "the long GRPO run trains at the chosen lr");

    // `extend = true`: the long run (now 3 steps) continues the chosen
    // pilot run instead of starting over: its first 2 metrics lines are the
    // pilot's, its 3rd is new, and the pilot's folder is left as it was. A
    // config that differs from the pilot's in more than train.steps is
    // refused, naming the key.
    std::fs::remove_dir_all(run.join("grpo")).unwrap();
    std::fs::remove_file(run.join("eval/grpo.jsonl")).unwrap();
    let pilot_dir = run.join(format!("pilot/lr-{chosen_key}"));
    let pilot_metrics = std::fs::read_to_string(pilot_dir.join("metrics.jsonl")).unwrap();
    let longer = text.replace("[train]\nsteps = 2\n", "[train]\nsteps = 3\n").replace("steps = 2\n", "steps = 2\nextend = true\n");
    assert!(longer.contains("[train]\nsteps = 3\n") && longer.contains("[pipeline.pilot]\nlrs = [1e-3, 1e-4]\nsteps = 2\nextend = true\n"), "{longer}");
    std::fs::write(&cfg, longer.replace("[optim]\nlr = 1e-3\n", "[optim]\nlr = 1e-3\nmax_grad_norm = 0.5\n")).unwrap();
    let out = fusegrpo(&args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("optim.max_grad_norm") && err.contains("another config than the long run's"), "{err}");
    assert!(err.contains("continuing the chosen pilot run from"), "copied before the check: {err}");
    std::fs::write(&cfg, &longer).unwrap();
    let out = fusegrpo(&args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let long = std::fs::read_to_string(run.join("grpo/metrics.jsonl")).unwrap();
    assert_eq!(long.lines().count(), 3, "{long}");
    assert!(long.starts_with(&pilot_metrics), "the pilot's 2 steps first:\n{long}\nvs\n{pilot_metrics}");
    assert!(run.join("grpo/step_00000003/DONE").exists());
    assert_eq!(std::fs::read_to_string(pilot_dir.join("metrics.jsonl")).unwrap(), pilot_metrics, "the pilot's run is untouched");
    assert!(!pilot_dir.join("step_00000003").exists());
    let state: Value = serde_json::from_str(&std::fs::read_to_string(run.join("grpo/step_00000003/state.json")).unwrap()).unwrap();
    assert_eq!((state["config"]["train"]["steps"].as_u64(), state["config"]["optim"]["lr"].as_f64()), (Some(3), Some(chosen)));

    // A finished run, [train] steps raised to 4: GRPO continues from its
    // step 3 (not skipped, not restarted), and GRPO's held-out episodes,
    // made with step 3, are kept aside and made again with step 4; SFT's
    // and the base's are read back.
    let eval3 = std::fs::read_to_string(run.join("eval/grpo.jsonl")).unwrap();
    let sft_eval = std::fs::read_to_string(run.join("eval/sft.jsonl")).unwrap();
    std::fs::write(&cfg, longer.replace("[train]\nsteps = 3\n", "[train]\nsteps = 4\n")).unwrap();
    let out = fusegrpo(&args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("finished at step 3") && err.contains("continuing from it"), "{err}");
    let longest = std::fs::read_to_string(run.join("grpo/metrics.jsonl")).unwrap();
    assert_eq!(longest.lines().count(), 4, "{longest}");
    assert!(longest.starts_with(&long), "steps 1-3 kept:\n{longest}");
    assert!(run.join("grpo/step_00000004/DONE").exists());
    let complete = std::fs::read_to_string(run.join("grpo/complete.json")).unwrap();
    assert!(complete.contains("step_00000004"), "{complete}");
    assert_eq!(std::fs::read_to_string(run.join("eval/grpo.step_00000003.jsonl")).unwrap(), eval3, "step 3's episodes kept");
    let source = std::fs::read_to_string(run.join("eval/grpo.jsonl.source.json")).unwrap();
    assert!(source.contains("step_00000004"), "{source}");
    assert_eq!(std::fs::read_to_string(run.join("eval/sft.jsonl")).unwrap(), sft_eval, "SFT's episodes read back");
    let report: Value = serde_json::from_str(&std::fs::read_to_string(run.join("report.json")).unwrap()).unwrap();
    assert!(report["paired"]["grpo_vs_sft"]["tasks"].as_u64().unwrap() > 0, "{report}");
    // A rerun with nothing changed evaluates nothing again.
    let out = fusegrpo(&args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && !err.contains("kept as") && !err.contains("continuing from it"), "{err}");
}

/// Long rollouts go in chunks to `<out>.chunks`: a rerun keeps the whole
/// chunks (not rolled out again), drops a torn last line, rolls out the
/// rest, and leaves only `<out>`; chunks of another task list are an error
/// naming the file.
#[test]
fn pipeline_evaluation_resumes_from_whole_chunks() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = setup(tmp.path());
    std::fs::write(&cfg, CONFIG.replace("heldout_tasks = 2\n", "heldout_tasks = 2\nchunk_tasks = 1\n")).unwrap();
    let run = tmp.path().join("run");
    let args = ["pipeline", "--config", cfg.to_str().unwrap(), "--out", run.to_str().unwrap()];
    let first_run = fusegrpo(&args);
    let err = String::from_utf8_lossy(&first_run.stderr);
    assert!(first_run.status.success(), "{err}");
    // Progress counts over the chunks (one task each), not chunk by chunk.
    assert!(err.contains("2/2 episodes, 2 of them in"), "{err}");
    let eval = run.join("eval/grpo.jsonl");
    let chunks = run.join("eval/grpo.jsonl.chunks");
    let text = std::fs::read_to_string(&eval).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "2 held-out tasks x eval_group 1");
    assert!(!chunks.exists());

    // Chunks of another task list: the second task's episode first.
    std::fs::remove_file(&eval).unwrap();
    std::fs::write(&chunks, format!("{}\n", lines[1])).unwrap();
    let out = fusegrpo(&args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("grpo.jsonl.chunks") && err.contains("the task list changed"), "{err}");

    // The first episode (marked, so a rollout would not reproduce it) and half of the second.
    let mut first: Value = serde_json::from_str(lines[0]).unwrap();
    first["seconds"] = json_number(12345.5);
    let cut = (0..=lines[1].len() / 2).rev().find(|i| lines[1].is_char_boundary(*i)).unwrap();
    std::fs::write(&chunks, format!("{first}\n{}", &lines[1][..cut])).unwrap();
    let again = fusegrpo(&args);
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(again.status.success(), "{err}");
    assert!(err.contains("1 of 2 episodes done before"), "{err}");
    assert!(err.contains("2/2 episodes, 1 of them in"), "the resumed run's pace is its own: {err}");
    let rows = read_jsonl(&eval);
    assert_eq!(rows.len(), 2, "every held-out episode once");
    assert_eq!(rows[0]["seconds"].as_f64(), Some(12345.5), "the whole chunk was kept, not rolled out again");
    let second: Value = serde_json::from_str(lines[1]).unwrap();
    assert_eq!(rows[1]["task_id"], second["task_id"]);
    assert!(rows[1]["score"]["reward"].is_number(), "{}", rows[1]["score"]);
    assert!(!chunks.exists(), "the partial file is removed once the rollout is whole");
    let report: Value = serde_json::from_str(&std::fs::read_to_string(run.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["stages"]["grpo"]["episodes"], 2);
}

fn json_number(x: f64) -> Value {
    serde_json::Number::from_f64(x).map(Value::Number).unwrap()
}
