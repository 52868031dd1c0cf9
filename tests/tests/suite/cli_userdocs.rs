//! What a user reads is true (issue 65 items 7, 11 and 12; issue 61's
//! cuDNN workspace in the planner): each preset's `plan` command runs as its
//! header writes it; `sft` names the task file's key; a run that learns
//! nothing says what to do; a resume needs no `--set` again; errors and
//! JSON say what was searched.

use e2e::{fusegrpo, fusegrpo_fails, fusegrpo_ok, git, read_jsonl, s, shop_world};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The `fusegrpo plan ...` commands in the opening comment of each config
/// in configs/, by file.
fn header_plan_commands() -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("configs")).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|x| x == "toml")).collect();
    files.sort();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        for line in text.lines().take_while(|l| l.starts_with('#')) {
            if let Some(cmd) = line.trim_start_matches('#').trim().strip_prefix("fusegrpo plan ") {
                out.push((f.file_name().unwrap().to_string_lossy().into_owned(), cmd.to_string()));
            }
        }
    }
    out
}

/// Issue 65 item 7: every 4B preset's header gives a `plan` command, and it
/// says "fits" run exactly as written, from the repository root, on a
/// machine where scripts/gpu-check never passed. Issue 61: where cuDNN may
/// run (the 80 GB presets) its workspace is a line of the plan; the 24 and
/// 40-48 GB presets name the fused kernel (none of their cards is Hopper).
#[test]
fn every_presets_header_plan_command_fits_as_written() {
    let commands = header_plan_commands();
    let files: Vec<&str> = commands.iter().map(|(f, _)| f.as_str()).collect();
    for preset in ["qwen3-4b-24gb-lora.toml", "qwen3-4b-48gb-lora.toml", "qwen3-4b-80gb-lora.toml", "qwen3-4b-8x80gb.toml", "qwen3-4b-fusesearch.toml"] {
        assert!(files.contains(&preset), "{preset} has no `fusegrpo plan` line in its header: {commands:?}");
    }
    let no_record = tempfile::tempdir().unwrap();
    for (file, cmd) in &commands {
        let out = Command::new(e2e::fusegrpo_bin())
            .arg("plan")
            .args(cmd.split_whitespace())
            .current_dir(root())
            .env("FUSEGRPO_LOG", "warn")
            .env_remove("FUSEGRPO_CUDA_KERNELS")
            .env_remove("FUSEGRPO_ATTENTION")
            .env("FUSEGRPO_CACHE", no_record.path())
            .output()
            .unwrap();
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        let verdict = stdout.lines().find(|l| l.starts_with("peak:")).unwrap_or_default();
        assert!(out.status.success() && verdict.contains(", fits in"), "{file}: fusegrpo plan {cmd}:\n{verdict}\n{stderr}");
        let cudnn = stdout.contains("cudnn_workspace");
        assert_eq!(cudnn, !file.contains("24gb") && !file.contains("48gb"), "{file}: the cuDNN workspace line:\n{stdout}");
        println!("{file}: {verdict}");
    }
}

/// Issue 65 item 12: an unknown revision is said in words, without
/// libgit2's class and code; `localize --json` records the repository and
/// the revision it searched.
#[test]
fn localize_names_an_unknown_revision_plainly_and_its_json_says_what_was_searched() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = shop_world(tmp.path());
    let repo = tmp.path().join("repos/acme__shop");
    let issue = tmp.path().join("issue.txt");
    std::fs::write(&issue, "`compute_tax` uses a flat rate; it must depend on the region.").unwrap();
    let base = ["localize", "--config", s(&cfg), "--policy", "scripted", "--repo", s(&repo), "--issue", s(&issue), "--json"];
    let err = fusegrpo_fails(&[&base[..], &["--rev", "v9.9-nope"][..]].concat());
    assert!(err.contains("'v9.9-nope' not found") && !err.contains("class=") && !err.contains("code="), "{err}");
    let head = git(&repo, &["rev-parse", "HEAD"]);
    let at_head: Value = serde_json::from_str(&fusegrpo_ok(&[&base[..], &["--rev", "HEAD"][..]].concat())).unwrap();
    assert_eq!(at_head["revision"], head.trim(), "{at_head}");
    assert_eq!(at_head["repository"], std::fs::canonicalize(&repo).unwrap().display().to_string());
    let tree: Value = serde_json::from_str(&fusegrpo_ok(&base)).unwrap();
    assert_eq!(tree["revision"], "worktree", "{tree}");
}

/// Issue 65 item 11: `sft` reads a task file for its held-out evaluation
/// only; a missing one is named by its key, with the way to go without it.
#[test]
fn sft_names_the_task_file_key_and_goes_without_it() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = shop_world(tmp.path());
    let data = tmp.path().join("no-trajectories.jsonl");
    let sft = |set: &str| fusegrpo_fails(&["sft", "--config", s(&cfg), "--data", s(&data), "--out", s(&tmp.path().join("sft")), "--set", set]);
    let err = sft("train.tasks=nope.jsonl");
    assert!(err.contains("`train.tasks`") && err.contains("sft.eval_tasks = 0"), "{err}");
    let err = sft("pipeline.tasks=nope.jsonl");
    assert!(err.contains("`pipeline.tasks`") && err.contains("nope.jsonl"), "{err}");
    // Without the evaluation the task file is not read: the next complaint is the data's.
    let err = fusegrpo_fails(&["sft", "--config", s(&cfg), "--data", s(&data), "--out", s(&tmp.path().join("sft")), "--set", "train.tasks=nope.jsonl", "--set", "sft.eval_tasks=0"]);
    assert!(!err.contains("nope.jsonl") && err.contains("no-trajectories.jsonl"), "{err}");
}

/// Issue 65 item 11: a model that never answers gets rewards that never
/// differ within a group; after a few such steps the run says what to do.
#[test]
fn train_says_what_to_do_after_steps_that_learn_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = shop_world(tmp.path());
    let out = fusegrpo(&["train", "--config", s(&cfg), "--out", s(&tmp.path().join("run"))]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let m = read_jsonl(&tmp.path().join("run/metrics.jsonl"));
    assert!(m.iter().take(3).all(|r| r["frac_reward_zero_std"].as_f64() == Some(1.0)), "the random model never answers: {m:?}");
    assert!(err.contains("3 steps in a row") && err.contains("answered in none") && err.contains("fusegrpo sft"), "{err}");
    assert_eq!(err.matches("steps in a row").count(), 1, "said once: {err}");
}

/// Issue 65 item 11: the run folder keeps the `--set` keys a run started
/// with; a resume with none continues it (and a changed one is refused as
/// any config change is).
#[test]
fn a_resume_without_set_continues_a_run_started_with_some() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = shop_world(tmp.path());
    let run = tmp.path().join("run");
    fusegrpo_ok(&["train", "--config", s(&cfg), "--out", s(&run), "--max-steps", "2", "--set", "optim.lr=0.002", "--set", "grpo.beta=0.02"]);
    let out = fusegrpo(&["train", "--config", s(&cfg), "--out", s(&run), "--resume", "auto", "--max-steps", "3"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("--set optim.lr=0.002") && err.contains("run_args.json"), "the resume says what it reused: {err}");
    assert_eq!(read_jsonl(&run.join("metrics.jsonl")).len(), 3);
    let err = fusegrpo_fails(&["train", "--config", s(&cfg), "--out", s(&run), "--resume", "auto", "--max-steps", "4", "--set", "optim.lr=0.003"]);
    assert!(err.contains("optim.lr") && err.contains("--allow-config-change"), "{err}");
}
