//! GRPO and SFT runs driven in-process through the library
//! (`trainer::run`), without the binary: a tiny random model with a small
//! BPE, a two-file repository and its two tasks; each run stopped after
//! 2 of 4 steps and resumed ends with the uninterrupted run's weights,
//! optimizer moments and metrics, bit for bit.

use rollout::chat::SmallChatFormat;
use rollout::tasks::Task;
use std::path::{Path, PathBuf};
use trainer::episodes::{jsonl, run_policy, TeacherOpts};
use trainer::run::{RunEnd, RunOptions};
use trainer::run_config::{PolicyChoice, RunConfig};
use lm::config::Architecture;
use crate::tiny::{write_tiny, TinySpec, TinyTokenizer};

/// A repository, its two tasks, a tiny random Qwen3 with a 1,024-id BPE,
/// and a run config (`run.toml`) in `dir`.
fn world(dir: &Path, extra: &str) -> (RunConfig, Vec<Task>) {
    world_in(dir, extra, SmallChatFormat::Qwen3, Architecture::Qwen3)
}

/// [`world`] with a model of `architecture` and a tokenizer in `format`.
fn world_in(dir: &Path, extra: &str, format: SmallChatFormat, architecture: Architecture) -> (RunConfig, Vec<Task>) {
    e2e::shop_repo(dir);
    let spec = TinySpec {
        tokenizer: TinyTokenizer::Small { ids: 1024, corpus: None, format },
        seed: 2,
        hidden_size: 64,
        intermediate_size: 128,
        layers: 2,
        heads: 4,
        kv_heads: 2,
        head_dim: 32,
        tied: true,
        shards: 1,
        architecture,
        llama3_rope: false,
    };
    write_tiny(&dir.join("model"), &spec).unwrap();

    let path = dir.join("run.toml");
    std::fs::write(
        &path,
        format!(
            "name = \"lib\"\n[model]\npath = \"model\"\n[env]\nrepos_dir = \"repos\"\n[episode]\nmax_turns = 3\nmax_turn_tokens = 16\n\
             [rollout]\ngroup = 2\n[sampling]\ntemperature = 1.0\nseed = 3\n\
             [train]\ntasks = \"tasks.jsonl\"\nsteps = 4\ntasks_per_step = 2\nmicro_batch_rows = 3\nsave_every = 2\nkeep_last = 4\nmask_truncated = false\n\
             [grpo]\nbeta = 0.04\nzero_std_groups = \"keep\"\n[optim]\nlr = 0.001\n{extra}"
        ),
    )
    .unwrap();
    let cfg = RunConfig::from_file(&path).unwrap();
    let tasks = rollout::tasks::load_tasks(&dir.join("tasks.jsonl")).unwrap();
    (cfg, tasks)
}

fn opts(resume: bool, max_steps: Option<u64>) -> RunOptions {
    RunOptions { resume: resume.then(|| "auto".to_string()), max_steps, ..Default::default() }
}

fn done(end: RunEnd) -> PathBuf {
    match end {
        RunEnd::Done(dir) => dir,
        RunEnd::Interrupted(dir) => panic!("interrupted at {}", dir.display()),
    }
}

/// The files of a checkpoint that hold numbers (weights, moments, state).
fn numbers(ckpt: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(ckpt)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors") || p.file_name().is_some_and(|n| n == "state.json"))
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap()))
        .collect();
    out.sort();
    assert!(out.iter().any(|(n, _)| n == "optimizer.safetensors"), "{}", ckpt.display());
    out
}

/// metrics.jsonl without its wall-clock fields.
fn metrics(run: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(run.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            v.as_object_mut().unwrap().retain(|k, _| {
                let timing = k.starts_with("seconds") || k.contains("per_second") || k == "elapsed";
                !timing && (!k.starts_with("off_policy/") || k == "off_policy/staleness")
            });
            v
        })
        .collect()
}

#[test]
fn grpo_through_the_library_resumes_bitwise() {
    let tmp = tempfile::tempdir().unwrap();
    let (cfg, tasks) = world(tmp.path(), "");
    let straight = tmp.path().join("straight");
    let last = done(trainer::run::grpo::grpo(&cfg, &straight, &tasks, &opts(false, None)).unwrap());
    assert!(last.ends_with("step_00000004"), "{}", last.display());
    let m = metrics(&straight);
    assert_eq!(m.len(), 4);
    assert!(m.iter().all(|r| r["loss"].as_f64().is_some_and(f64::is_finite)), "{m:?}");
    assert!(m.iter().any(|r| r["grad_norm"].as_f64().unwrap() > 0.0), "the policy was updated: {m:?}");

    let split = tmp.path().join("split");
    let half = done(trainer::run::grpo::grpo(&cfg, &split, &tasks, &opts(false, Some(2))).unwrap());
    assert!(half.ends_with("step_00000002"));
    // A second fresh start in the same folder is refused, changing nothing.
    let e = trainer::run::grpo::grpo(&cfg, &split, &tasks, &opts(false, None)).unwrap_err().to_string();
    assert!(e.contains("already holds a run") && e.contains("--resume auto"), "{e}");
    let resumed = done(trainer::run::grpo::grpo(&cfg, &split, &tasks, &opts(true, None)).unwrap());
    assert!(resumed.ends_with("step_00000004"));
    assert_eq!(numbers(&last), numbers(&resumed), "weights, moments and state after the resume");
    assert_eq!(m, metrics(&split));
}

/// `[rollout] off_policy = 1`: step t+1's rollouts are made during step
/// t's update, from the weights before it, and a checkpoint keeps them.
/// Weight decay moves the weights every step, so a stale policy shows:
/// - staleness 0 at step 1 (its rollouts are made first, as on-policy),
///   1 after; the drift of the rollout log-probs from the trainer's is at
///   rounding level at step 1 and far above it after;
/// - the rollouts step 2's checkpoint keeps (for step 3) have the log-probs
///   of step 1's weights, not step 2's;
/// - the update and the next rollouts overlap in time (`off_policy/...`);
/// - a run stopped after 2 of 4 steps and resumed ends bit for bit as the
///   straight run, and writes the same metrics.
#[test]
fn grpo_off_policy_trains_on_the_previous_weights_rollouts_and_resumes_bitwise() {
    let tmp = tempfile::tempdir().unwrap();
    let extra = "weight_decay = 1.0\nlr = 0.01\n";
    let (cfg, tasks) = world(tmp.path(), "");
    let text = std::fs::read_to_string(tmp.path().join("run.toml")).unwrap();
    let text = text.replace("[optim]\nlr = 0.001\n", &format!("[optim]\n{extra}")).replace("[rollout]\n", "[rollout]\noff_policy = 1\n").replace("[grpo]\n", "[grpo]\nrollout_correction = \"tis\"\n");
    std::fs::write(tmp.path().join("run.toml"), &text).unwrap();
    let cfg = RunConfig::from_file(&tmp.path().join("run.toml")).unwrap_or_else(|e| panic!("{e}: {text} (was {cfg:?})"));
    assert_eq!(cfg.rollout.off_policy, 1);
    let mut cfg = cfg;
    cfg.train.save_every = 1;
    let straight = tmp.path().join("straight");
    let last = done(trainer::run::grpo::grpo(&cfg, &straight, &tasks, &opts(false, None)).unwrap());
    let raw: Vec<serde_json::Value> =
        std::fs::read_to_string(straight.join("metrics.jsonl")).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(raw.len(), 4);
    let staleness: Vec<u64> = raw.iter().map(|r| r["off_policy/staleness"].as_u64().unwrap()).collect();
    assert_eq!(staleness, [0, 1, 1, 1]);
    let drift: Vec<f64> = raw.iter().map(|r| r["sampling/sampling_logp_difference/mean"].as_f64().unwrap()).collect();
    assert!(drift[0] < 1e-5, "step 1 trains on its own weights' rollouts: {drift:?}");
    assert!(drift[1..].iter().all(|&d| d > 100.0 * drift[0].max(1e-7)), "later steps on the previous weights': {drift:?}");
    for r in &raw[..3] {
        let at = |k: &str| r[k].as_f64().unwrap_or_else(|| panic!("{k}: {r}"));
        assert!(at("off_policy/rollout_start") < at("off_policy/update_end") && at("off_policy/update_start") < at("off_policy/rollout_end"), "{r}");
        assert!(at("off_policy/overlap_seconds") > 0.0 && at("seconds_step") < at("seconds_rollout") + at("seconds_update") + 1e-3, "{r}");
    }
    assert!(raw[3].get("off_policy/rollout_start").is_none(), "the last step makes none ahead: {}", raw[3]);
    assert!(!last.join(trainer::run::grpo::NEXT_ROLLOUTS).exists(), "nor keeps any");

    // Step 2's checkpoint keeps step 3's rollouts, sampled by step 1's weights.
    let kept: trainer::grpo::collect::Rollouts =
        serde_json::from_slice(&std::fs::read(straight.join("step_00000002").join(trainer::run::grpo::NEXT_ROLLOUTS)).unwrap()).unwrap();
    assert_eq!(kept.policy_step, 1);
    let far = |step: &str| -> f32 {
        let dir = straight.join(step);
        let model_cfg = lm::ModelConfig::from_file(&dir.join("config.json")).unwrap();
        let device = candle_core::Device::Cpu;
        let weights = lm::weights::load_weights(&dir, &model_cfg, candle_core::DType::F32, &device).unwrap();
        let model = lm::model::CausalLm::new(&model_cfg, &weights).unwrap();
        let rows: Vec<usize> = (0..kept.episodes.len()).collect();
        let batch = trainer::grpo::batch::build_batch(&kept.episodes, &rows, &vec![0.0; rows.len()], false, &device).unwrap();
        let micro = trainer::packing::MicroBatching::Rows(1);
        let ours = trainer::backward::detached_logprobs(&model, &batch.tokens, &batch.mask, 1.0, micro).unwrap();
        let diff = ((ours - batch.rollout_logprobs.unwrap()).unwrap().abs().unwrap() * &batch.mask).unwrap();
        diff.flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap()
    };
    let (sampler, updated) = (far("step_00000001"), far("step_00000002"));
    assert!(sampler < 1e-4 && updated > 100.0 * sampler.max(1e-6), "|rollout - model| max: step 1's weights {sampler}, step 2's {updated}");

    let split = tmp.path().join("split");
    done(trainer::run::grpo::grpo(&cfg, &split, &tasks, &opts(false, Some(2))).unwrap());
    let kept_file = split.join("step_00000002").join(trainer::run::grpo::NEXT_ROLLOUTS);
    assert!(kept_file.exists(), "a stop before the config's last step keeps the rollouts made ahead");
    // A corrupt copy of them is refused, naming the file, and nothing is lost.
    let good = std::fs::read(&kept_file).unwrap();
    std::fs::write(&kept_file, &good[..good.len() / 2]).unwrap();
    let e = format!("{:#}", trainer::run::grpo::grpo(&cfg, &split, &tasks, &opts(true, None)).unwrap_err());
    assert!(e.contains("next_rollouts.json") && e.contains("corrupt"), "{e}");
    std::fs::write(&kept_file, &good).unwrap();
    let resumed = done(trainer::run::grpo::grpo(&cfg, &split, &tasks, &opts(true, None)).unwrap());
    assert_eq!(numbers(&last), numbers(&resumed), "weights, moments and state after the resume");
    assert_eq!(metrics(&straight), metrics(&split));
}

/// `zero_std_groups = "resample"`: the random model never answers, so no
/// group has a reward spread and every step draws `max_resample_draws`
/// further tasks (3 with 2 a step, in rounds of 2 and 1), keeps none and
/// makes no update. The draws move the task sampler's cursor, which the
/// checkpoint carries: a run stopped after 2 steps and resumed draws the
/// same tasks and ends with the same state, bit for bit.
#[test]
fn grpo_resample_draws_up_to_its_bound_and_resumes_bitwise() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut cfg, tasks) = world(tmp.path(), "");
    cfg.grpo.zero_std_groups = trainer::grpo::ZeroStdGroups::Resample;
    cfg.grpo.max_resample_draws = Some(3);
    let straight = tmp.path().join("straight");
    let last = done(trainer::run::grpo::grpo(&cfg, &straight, &tasks, &opts(false, None)).unwrap());
    let m = metrics(&straight);
    assert_eq!(m.len(), 4);
    for r in &m {
        let refill = [&r["resample/groups_drawn"], &r["resample/groups_kept"], &r["num_gen_batches"]].map(|v| v.as_u64());
        assert_eq!(refill, [Some(5), Some(0), Some(3)], "groups drawn and kept, rounds: {r}");
        assert_eq!(r["frac_reward_zero_std"], 1.0, "{r}");
        assert_eq!(r["grad_norm"], 0.0, "no group kept, no update: {r}");
    }
    // 5 tasks a step from 2: the cursor is at epoch 10 after 4 steps.
    let state: serde_json::Value = serde_json::from_slice(&std::fs::read(last.join("state.json")).unwrap()).unwrap();
    assert_eq!(state["data"]["epoch"], 10, "{}", state["data"]);

    let split = tmp.path().join("split");
    done(trainer::run::grpo::grpo(&cfg, &split, &tasks, &opts(false, Some(2))).unwrap());
    let resumed = done(trainer::run::grpo::grpo(&cfg, &split, &tasks, &opts(true, None)).unwrap());
    assert_eq!(numbers(&last), numbers(&resumed), "weights, moments and state after the resume");
    assert_eq!(m, metrics(&split));
}

#[test]
fn sft_through_the_library_resumes_bitwise() {
    let tmp = tempfile::tempdir().unwrap();
    let sft = "[sft]\nepochs = 2\nbatch_rows = 2\nlr = 0.01\nsave_every = 1\nkeep_last = 4\nheldout_fraction = 0.0\n\
               [sft.filter]\nmin_f1 = 0\nmin_e = 0\nmin_calls_per_turn = 0\nmax_tokens = 8192\nmax_truncation_ratio = 1.0\nmax_per_task = 4\n";
    let (cfg, tasks) = world(tmp.path(), sft);
    // The scripted teacher's trajectories, 4 per task, varied per episode.
    let teacher = TeacherOpts { vary_scripted: Some(1), ..Default::default() };
    let trajectories = run_policy(&cfg, &tasks, &PolicyChoice::Scripted, 4, &teacher).unwrap();
    assert_eq!(trajectories.len(), 8);
    let data = tmp.path().join("traj.jsonl");
    jsonl::write_episodes(&data, &trajectories).unwrap();

    let straight = tmp.path().join("straight");
    let last = done(trainer::run::sft::sft(&cfg, &data, &straight, &tasks, &opts(false, None)).unwrap());
    let m = metrics(&straight);
    assert_eq!(m.len(), 8, "8 trajectories, batches of 2, 2 epochs");
    assert!(last.ends_with("step_00000008"), "{}", last.display());
    assert!(m.iter().all(|r| r["loss"].as_f64().is_some_and(f64::is_finite)), "{m:?}");
    assert!(m[7]["loss"].as_f64().unwrap() < m[0]["loss"].as_f64().unwrap(), "the loss falls: {m:?}");
    assert!(straight.join("filter.json").exists());

    let split = tmp.path().join("split");
    done(trainer::run::sft::sft(&cfg, &data, &split, &tasks, &opts(false, Some(3))).unwrap());
    let resumed = done(trainer::run::sft::sft(&cfg, &data, &split, &tasks, &opts(true, None)).unwrap());
    assert!(resumed.ends_with("step_00000008"));
    assert_eq!(numbers(&last), numbers(&resumed), "weights, moments and state after the resume");
    assert_eq!(m, metrics(&split));
}

/// SFT stops, saving first, after `train.max_nonfinite_steps` skipped
/// (NaN/inf) steps in a row, as GRPO does: the one loop both run.
#[test]
fn sft_stops_after_nonfinite_steps_in_a_row() {
    let tmp = tempfile::tempdir().unwrap();
    // A learning rate that blows the weights up at the first update.
    let sft = "[sft]\nepochs = 2\nbatch_rows = 2\nlr = 1e30\nsave_every = 100\nheldout_fraction = 0.0\n\
               [sft.filter]\nmin_f1 = 0\nmin_e = 0\nmin_calls_per_turn = 0\nmax_tokens = 8192\nmax_truncation_ratio = 1.0\nmax_per_task = 4\n";
    let (mut cfg, tasks) = world(tmp.path(), sft);
    cfg.train.max_nonfinite_steps = 2;
    let teacher = TeacherOpts { vary_scripted: Some(1), ..Default::default() };
    let data = tmp.path().join("traj.jsonl");
    jsonl::write_episodes(&data, &run_policy(&cfg, &tasks, &PolicyChoice::Scripted, 4, &teacher).unwrap()).unwrap();
    let run = tmp.path().join("run");
    let e = trainer::run::sft::sft(&cfg, &data, &run, &tasks, &opts(false, None)).unwrap_err().to_string();
    assert!(e.contains("2 steps in a row had a NaN/inf loss or gradient") && e.contains("saved"), "{e}");
    let m = metrics(&run);
    assert!(m.len() >= 3 && m.len() < 8, "stopped early: {m:?}");
    assert!(m[m.len() - 2..].iter().all(|r| r["skipped"] == true), "{m:?}");
    let saved = trainer::checkpoint::latest(&run).unwrap().expect("a checkpoint saved at the stop");
    assert!(saved.ends_with(format!("step_{:08}", m.len())), "{}", saved.display());
}

/// A Llama with Llama 3's chat format (header tokens, `<|eot_id|>`,
/// `configs/llama3-tools.jinja`) goes through the recipe's stages: the
/// scripted teacher's trajectories close each turn with `<|eot_id|>`, SFT
/// learns from them, GRPO samples and updates.
#[test]
fn a_llama3_chat_format_runs_sft_and_grpo() {
    let tmp = tempfile::tempdir().unwrap();
    let sft = "[sft]\nepochs = 1\nbatch_rows = 2\nlr = 0.01\nheldout_fraction = 0.0\n\
               [sft.filter]\nmin_f1 = 0\nmin_e = 0\nmin_calls_per_turn = 0\nmax_tokens = 8192\nmax_truncation_ratio = 1.0\nmax_per_task = 4\n";
    let (mut cfg, tasks) = world_in(tmp.path(), sft, SmallChatFormat::Llama3, Architecture::Llama);
    let tok = rollout::chat::ChatTokenizer::from_dir(tmp.path().join("model")).unwrap();
    let id = |t: &str| tok.token_id(t).unwrap();
    let teacher = TeacherOpts { vary_scripted: Some(1), ..Default::default() };
    let trajectories = run_policy(&cfg, &tasks, &PolicyChoice::Scripted, 2, &teacher).unwrap();
    for ep in &trajectories {
        assert_eq!(ep.tokens[0], id("<|begin_of_text|>"));
        // Each policy turn ends at <|eot_id|>, the end of turn the template writes.
        let ends: Vec<u32> = (0..ep.tokens.len())
            .filter(|&i| ep.loss_mask[i] == 1 && ep.loss_mask.get(i + 1).copied().unwrap_or(0) == 0)
            .map(|i| ep.tokens[i])
            .collect();
        assert_eq!(ends, vec![id("<|eot_id|>"); ep.turns.len()], "{:?}", ep.turns);
    }
    let data = tmp.path().join("traj.jsonl");
    jsonl::write_episodes(&data, &trajectories).unwrap();
    done(trainer::run::sft::sft(&cfg, &data, &tmp.path().join("sft"), &tasks, &opts(false, None)).unwrap());
    let m = metrics(&tmp.path().join("sft"));
    assert_eq!(m.len(), 2, "4 trajectories in batches of 2");
    assert!(m.iter().all(|r| r["loss"].as_f64().is_some_and(f64::is_finite)), "{m:?}");

    cfg.train.steps = 1;
    let grpo = tmp.path().join("grpo");
    done(trainer::run::grpo::grpo(&cfg, &grpo, &tasks, &opts(false, None)).unwrap());
    let m = metrics(&grpo);
    assert!(m.len() == 1 && m[0]["loss"].as_f64().is_some_and(f64::is_finite), "{m:?}");
}
