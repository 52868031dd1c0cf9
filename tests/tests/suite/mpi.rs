//! Data parallelism under `mpirun -n 2 --oversubscribe`. Each test is
//! `#[ignore]`d in the plain test run, which has neither OpenMPI nor an MPI
//! build: `scripts/test-mpi.sh` installs OpenMPI, builds `fusegrpo` with
//! `--features mpi` and runs them with `--ignored` from the same test binary
//! (nothing is compiled again): the ranks' gradients and updates
//! against one process's, a 3-step GRPO run on the demo's inputs, kill -9 of
//! a rank and an exact resume, a raising rank, resuming across world sizes,
//! and SFT split across ranks.

use e2e::{fusegrpo_bin, fusegrpo_ok, read_jsonl, without_timings};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// `mpirun -n <ranks> fusegrpo <args>` (one thread per rank: the two ranks
/// share this machine's cores).
fn mpirun(ranks: usize, args: &[&str]) -> Command {
    let mut cmd = Command::new("mpirun");
    cmd.args(["-n", &ranks.to_string(), "--oversubscribe", "-x", "RAYON_NUM_THREADS=1", "-x", "FUSEGRPO_LOG=warn"])
        .arg(fusegrpo_bin())
        .args(args)
        // CI runs as root; OpenMPI refuses root unless told.
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    cmd
}

fn mpirun_ok(ranks: usize, args: &[&str]) -> Output {
    let out = mpirun(ranks, args).output().expect("spawn mpirun (is OpenMPI installed? scripts/test-mpi.sh)");
    assert!(out.status.success(), "mpirun -n {ranks} fusegrpo {args:?} failed:\n{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    out
}

/// The demo's inputs (the practice repository, its tasks from history, the
/// demo's tiny random Qwen3) and a GRPO config for 3 steps of 4 tasks x 4
/// episodes, saving every step. The random model never answers, so the
/// weights move by weight decay and the KL term (beta > 0, two iterations
/// per step), as in the single-process resume test.
fn demo_world(dir: &Path) -> PathBuf {
    let (repos, tasks, model) = (dir.join("repos"), dir.join("tasks.jsonl"), dir.join("model"));
    fusegrpo_ok(&["practice-repo", "--out", repos.to_str().unwrap(), "--seed", "0"]);
    fusegrpo_ok(&["tasks", "from-history", "--repo", "practice/shop", "--repos-dir", repos.to_str().unwrap(), "--out", tasks.to_str().unwrap()]);
    fusegrpo_ok(&[
        "init-tiny", "--out", model.to_str().unwrap(), "--small-vocab", "4096", "--seed", "0", "--hidden-size", "128", "--intermediate-size", "384",
        "--layers", "4", "--heads", "4", "--kv-heads", "2", "--head-dim", "32", "--corpus-repo", "practice/shop", "--repos-dir", repos.to_str().unwrap(),
    ]);
    let cfg = dir.join("run.toml");
    std::fs::write(
        &cfg,
        "name = \"mpi\"\n[model]\npath = \"model\"\n[env]\nrepos_dir = \"repos\"\n\
         [env.tools]\nmax_grep_matches = 6\nmax_read_lines = 14\nmax_output_bytes = 700\nmax_line_chars = 80\n\
         [episode]\nmax_turns = 3\nmax_turn_tokens = 48\nmax_total_tokens = 2048\n\
         [sampling]\ntemperature = 0.7\nseed = 0\n[rollout]\ngroup = 4\n\
         [train]\ntasks = \"tasks.jsonl\"\nsteps = 3\ntasks_per_step = 4\nmicro_batch_rows = 2\nsave_every = 1\nkeep_last = 5\nmask_truncated = false\n\
         [grpo]\nbeta = 0.04\nnum_iterations = 2\naggregation = \"dapo\"\nzero_std_groups = \"keep\"\n\
         [optim]\nlr = 1e-4\nweight_decay = 0.1\nmax_grad_norm = 1.0\n\
         [sft]\nepochs = 1\nbatch_rows = 4\nmicro_batch_rows = 2\nlr = 1e-3\nheldout_fraction = 0.2\neval_every = 2\neval_tasks = 0\nsave_every = 2\n",
    )
    .unwrap();
    cfg
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The lines of a JSONL file that may not exist yet, or be mid-write.
fn read_jsonl_or_empty(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).map(|t| t.lines().filter(|l| l.ends_with('}')).map(String::from).collect()).unwrap_or_default()
}

fn file(run: &Path, step: u64, name: &str) -> Vec<u8> {
    std::fs::read(run.join(format!("step_{step:08}")).join(name)).unwrap()
}


#[test]
#[ignore = "needs mpirun and fusegrpo built with --features mpi: scripts/test-mpi.sh"]
fn two_and_three_ranks_match_one_process_for_every_aggregation_sft_and_zero1() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = demo_world(tmp.path());
    // The scripted teacher's varied trajectories: rewards spread within groups.
    let eps = tmp.path().join("eps.jsonl");
    fusegrpo_ok(&["synth", "--config", s(&cfg), "--tasks", s(&tmp.path().join("tasks.jsonl")), "--samples", "4", "--max-tasks", "3", "--out", s(&eps)]);
    for ranks in [2, 3] {
        let cases = tmp.path().join(format!("cases-{ranks}.json"));
        let out = mpirun_ok(ranks, &["dist-check", "--config", s(&cfg), "--episodes", s(&eps), "--group", "4", "--out", s(&cases)]);
        println!("{}", String::from_utf8_lossy(&out.stdout));
        let err = String::from_utf8_lossy(&out.stderr);
        if ranks == 2 {
            assert!(err.contains("rank 0 of 2: groups 0..2 of 3") && err.contains("rank 1 of 2: groups 2..3 of 3"), "{err}");
        }
        let cases: Vec<serde_json::Value> = serde_json::from_str(&std::fs::read_to_string(&cases).unwrap()).unwrap();
        let names: Vec<&str> = cases.iter().map(|c| c["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["grpo", "bnpo", "dr_grpo", "dapo", "gspo", "sft", "grpo_zero1", "sft_zero1"]);
        for c in &cases {
            assert!(c["grad_norm"].as_f64().unwrap() > 0.0, "a case with no gradient proves nothing: {c}");
            assert!(c["grad_rel"].as_f64().unwrap() <= 1e-6, "{ranks} ranks: {c}");
            assert!(c["update_rel"].as_f64().unwrap() <= 1e-6, "{ranks} ranks: {c}");
        }
    }
}

#[test]
#[ignore = "needs mpirun and fusegrpo built with --features mpi: scripts/test-mpi.sh"]
fn grpo_on_two_ranks_shares_groups_survives_kill_9_and_resumes_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = demo_world(tmp.path());
    // Off-policy rollouts run as one process so far: refused before any step.
    let refused = tmp.path().join("off-policy");
    let out = mpirun(2, &["train", "--config", s(&cfg), "--out", s(&refused), "--set", "rollout.off_policy=1", "--set", "grpo.rollout_correction=tis"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("off-policy rollouts run as one process so far"), "{err}");
    assert!(!refused.exists(), "nothing written");
    let straight = tmp.path().join("straight");
    mpirun_ok(2, &["train", "--config", s(&cfg), "--out", s(&straight)]);

    // Rank 0 wrote the metrics; each rank logged its share of every step.
    let metrics = read_jsonl(&straight.join("metrics.jsonl"));
    assert_eq!(metrics.len(), 3);
    assert!(metrics.iter().all(|m| m["ranks"] == 2 && m["grad_norm"].as_f64().unwrap() > 0.0), "{metrics:?}");
    let (r0, r1) = (read_jsonl(&straight.join("rank-0.jsonl")), read_jsonl(&straight.join("rank-1.jsonl")));
    assert_eq!((r0.len(), r1.len()), (3, 3));
    for (a, b) in r0.iter().zip(&r1) {
        let (ta, tb) = (a["tasks"].as_array().unwrap(), b["tasks"].as_array().unwrap());
        assert_eq!((ta.len(), tb.len()), (2, 2), "4 tasks a step, 2 groups a rank: {a} {b}");
        assert!(ta.iter().all(|t| !tb.contains(t)), "a group rolled out twice: {a} {b}");
        assert_eq!((a["episodes"].as_u64(), b["episodes"].as_u64()), (Some(8), Some(8)), "2 groups of 4 episodes each");
        // Every step saved: both ranks compared their parameters, bit for bit.
        assert!(a["params_hash"].is_string() && a["params_hash"] == b["params_hash"], "{a} {b}");
    }
    assert_ne!(r0[0]["params_hash"], r0[2]["params_hash"], "the weights moved");

    // kill -9 of rank 1 mid-run: the job ends soon, naming it.
    let killed = tmp.path().join("killed");
    let job = mpirun(2, &["train", "--config", s(&cfg), "--out", s(&killed)]).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let log = killed.join("rank-1.jsonl");
    let t0 = Instant::now();
    while !log.exists() || read_jsonl(&log).is_empty() {
        assert!(t0.elapsed() < Duration::from_secs(300), "rank 1 never finished a step");
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = read_jsonl(&log)[0]["pid"].as_u64().unwrap();
    assert!(Command::new("kill").args(["-9", &pid.to_string()]).status().unwrap().success());
    let killed_at = Instant::now();
    let out = job.wait_with_output().unwrap();
    let ended = killed_at.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    println!("kill -9 of rank 1 (pid {pid}): job ended after {:.1} s, exit {:?}", ended.as_secs_f64(), out.status.code());
    assert!(ended < Duration::from_secs(60), "the job took {ended:?} to end");
    assert!(!out.status.success());
    assert!(err.contains("rank 1"), "the failing rank is named: {err}");

    // --resume auto under mpirun reaches step 3 with the straight run's bits.
    mpirun_ok(2, &["train", "--config", s(&cfg), "--out", s(&killed), "--resume", "auto"]);
    for name in ["model.safetensors", "optimizer.safetensors"] {
        assert!(file(&killed, 3, name) == file(&straight, 3, name), "{name} of the resumed run differs");
    }
    assert_eq!(without_timings(read_jsonl(&killed.join("metrics.jsonl"))), without_timings(metrics));
}

#[test]
#[ignore = "needs mpirun and fusegrpo built with --features mpi: scripts/test-mpi.sh"]
fn a_rank_that_raises_ends_the_job_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = demo_world(tmp.path());
    // The task file is checked at start (a bad row never reaches a rank), so
    // the failure comes mid-run: once step 1 is done the repositories move
    // away, and whichever rank first loads a new commit fails while the
    // other waits in a collective.
    let run = tmp.path().join("run");
    let t0 = Instant::now();
    let job = mpirun(2, &["train", "--config", s(&cfg), "--out", s(&run), "--max-steps", "50"]).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    while read_jsonl_or_empty(&run.join("metrics.jsonl")).is_empty() {
        assert!(t0.elapsed() < Duration::from_secs(300), "no step done");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::fs::rename(tmp.path().join("repos"), tmp.path().join("repos-moved")).unwrap();
    let moved = Instant::now();
    let out = job.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    println!("raising rank: job ended {:.1} s after the repositories moved", moved.elapsed().as_secs_f64());
    assert!(!out.status.success());
    assert!(moved.elapsed() < Duration::from_secs(60));
    assert!(err.contains(" of 2: error: ") && err.contains("not found"), "{err}");
    let done = read_jsonl(&run.join("metrics.jsonl")).len();
    assert!(done < 50, "the run stopped early");
    assert!(!run.join(format!("step_{:08}", done + 1)).exists(), "no checkpoint from the failed step");
}

#[test]
#[ignore = "needs mpirun and fusegrpo built with --features mpi: scripts/test-mpi.sh"]
fn only_the_data_parallel_commands_run_as_several_ranks() {
    let tmp = tempfile::tempdir().unwrap();
    let repos = tmp.path().join("repos");
    let out = mpirun(2, &["practice-repo", "--out", s(&repos)]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("only `train`, `sft`, `pipeline` and `dist-check` run data-parallel"), "{err}");
    assert!(!repos.exists());
    // One rank under mpirun is one process.
    mpirun_ok(1, &["practice-repo", "--out", s(&repos)]);
    assert!(repos.join("practice__shop").exists());
}

#[test]
#[ignore = "needs mpirun and fusegrpo built with --features mpi: scripts/test-mpi.sh"]
fn checkpoints_resume_across_world_sizes_and_sft_splits_rows() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = demo_world(tmp.path());
    // 2 ranks -> 1 process.
    let a = tmp.path().join("a");
    mpirun_ok(2, &["train", "--config", s(&cfg), "--out", s(&a), "--max-steps", "2"]);
    let out = fusegrpo_resume(&cfg, &a);
    assert!(out.contains("checkpoint of 2 rank(s) with 1 rank(s)"), "{out}");
    assert_eq!(read_jsonl(&a.join("metrics.jsonl")).len(), 3);
    assert!(a.join("step_00000003/DONE").exists());
    // 1 process -> 2 ranks.
    let b = tmp.path().join("b");
    fusegrpo_ok(&["train", "--config", s(&cfg), "--out", s(&b), "--max-steps", "2"]);
    let out = mpirun_ok(2, &["train", "--config", s(&cfg), "--out", s(&b), "--resume", "auto"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("checkpoint of 1 rank(s) with 2 rank(s)"));
    assert!(b.join("step_00000003/DONE").exists());
    assert_eq!(read_jsonl(&b.join("rank-1.jsonl")).len(), 1, "rank 1 ran step 3 only");

    // SFT: each rank trains on its share of every batch's rows.
    let eps = tmp.path().join("eps.jsonl");
    fusegrpo_ok(&["synth", "--config", s(&cfg), "--tasks", s(&tmp.path().join("tasks.jsonl")), "--samples", "2", "--max-tasks", "10", "--out", s(&eps)]);
    let sft = tmp.path().join("sft");
    mpirun_ok(2, &["sft", "--config", s(&cfg), "--data", s(&eps), "--out", s(&sft)]);
    let m = read_jsonl(&sft.join("metrics.jsonl"));
    assert!(!m.is_empty() && m.iter().all(|r| r["loss"].as_f64().unwrap().is_finite()));
    assert!(m.iter().any(|r| r["heldout_loss"].is_number()));
    let (r0, r1) = (read_jsonl(&sft.join("rank-0.jsonl")), read_jsonl(&sft.join("rank-1.jsonl")));
    assert_eq!(r0.len(), m.len());
    for (x, y) in r0.iter().zip(&r1) {
        let (rx, ry) = (x["rows"].as_array().unwrap(), y["rows"].as_array().unwrap());
        assert!(!rx.is_empty() && rx.len() >= ry.len() && rx.iter().all(|r| !ry.contains(r)), "rank 0 takes the larger share, no row twice: {x} {y}");
    }
    assert!(r1.iter().filter(|y| !y["rows"].as_array().unwrap().is_empty()).count() >= 1, "rank 1 trained on rows: {r1:?}");
    let saved: Vec<_> = r0.iter().zip(&r1).filter(|(x, _)| x["params_hash"].is_string()).collect();
    assert!(!saved.is_empty() && saved.iter().all(|(x, y)| x["params_hash"] == y["params_hash"]));
}

/// `fusegrpo train --resume auto` as one process; its stderr.
fn fusegrpo_resume(cfg: &Path, run: &Path) -> String {
    let out = Command::new(fusegrpo_bin()).args(["train", "--config", s(cfg), "--out", s(run), "--resume", "auto"]).env("FUSEGRPO_LOG", "warn").output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    err
}

#[test]
#[ignore = "needs mpirun and fusegrpo built with --features mpi: scripts/test-mpi.sh"]
fn a_lora_grpo_run_on_two_ranks_resumes_bitwise_after_kill_9() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = demo_world(tmp.path());
    let lora = "[lora]\nr = 4\nalpha = 8\ninit_seed = 2\n";
    let text = std::fs::read_to_string(&cfg).unwrap().replace("[sft]\n", "[sft.filter]\nmin_f1 = 0\nmin_e = 0\nmin_calls_per_turn = 0\nmax_tokens = 8192\nmax_truncation_ratio = 1.0\n[sft]\n");
    let sft_cfg = tmp.path().join("sft.toml");
    std::fs::write(&sft_cfg, format!("{text}{lora}")).unwrap();
    // The start adapter: SFT with LoRA on the scripted teacher's episodes, split over 2 ranks.
    let eps = tmp.path().join("eps.jsonl");
    fusegrpo_ok(&["synth", "--config", s(&cfg), "--tasks", s(&tmp.path().join("tasks.jsonl")), "--samples", "2", "--max-tasks", "8", "--out", s(&eps)]);
    let sft = tmp.path().join("sft");
    mpirun_ok(2, &["sft", "--config", s(&sft_cfg), "--data", s(&eps), "--out", s(&sft), "--max-steps", "2"]);
    let start = sft.join("step_00000002");
    assert!(start.join("adapter_model.safetensors").exists());
    // GRPO from it: the KL against the base moves the adapter every step.
    let grpo_cfg = tmp.path().join("grpo.toml");
    let with_start = text.replacen("path = \"model\"\n", &format!("path = \"model\"\nadapter = \"{}\"\n", s(&start)), 1);
    std::fs::write(&grpo_cfg, format!("{with_start}{lora}")).unwrap();
    let straight = tmp.path().join("straight");
    mpirun_ok(2, &["train", "--config", s(&grpo_cfg), "--out", s(&straight)]);
    let metrics = read_jsonl(&straight.join("metrics.jsonl"));
    assert!(metrics.iter().all(|m| m["grad_norm"].as_f64().unwrap() > 0.0), "{metrics:?}");
    let killed = tmp.path().join("killed");
    let mut job = mpirun(2, &["train", "--config", s(&grpo_cfg), "--out", s(&killed)]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let t0 = Instant::now();
    while !killed.join("step_00000001/DONE").exists() {
        assert!(t0.elapsed() < Duration::from_secs(300), "no checkpoint");
        std::thread::sleep(Duration::from_millis(10));
    }
    job.kill().unwrap();
    job.wait().unwrap();
    mpirun_ok(2, &["train", "--config", s(&grpo_cfg), "--out", s(&killed), "--resume", "auto"]);
    for name in ["adapter_model.safetensors", "optimizer.safetensors"] {
        assert!(file(&killed, 3, name) == file(&straight, 3, name), "{name} of the resumed 2-rank LoRA run differs");
    }
    assert_eq!(without_timings(read_jsonl(&killed.join("metrics.jsonl"))), without_timings(metrics));
}

/// A safetensors file's tensors as raw bytes by name.
fn tensor_bytes(path: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let n = u64::from_le_bytes(b[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&b[8..8 + n]).unwrap();
    header
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| *k != "__metadata__")
        .map(|(k, v)| {
            let (s, e) = (v["data_offsets"][0].as_u64().unwrap() as usize, v["data_offsets"][1].as_u64().unwrap() as usize);
            (k.clone(), b[8 + n + s..8 + n + e].to_vec())
        })
        .collect()
}

/// A ZeRO-1 checkpoint's optimizer shards: each exists, no tensor is in two
/// of them (but `step`), and together they are the whole state.
fn zero_state(run: &Path, step: u64, world: usize) -> std::collections::BTreeMap<String, Vec<u8>> {
    let dir = run.join(format!("step_{step:08}"));
    assert!(!dir.join("optimizer.safetensors").exists(), "a ZeRO-1 checkpoint has shards only");
    let mut all = std::collections::BTreeMap::new();
    for r in 1..=world {
        let shard = tensor_bytes(&dir.join(format!("optimizer-{r:05}-of-{world:05}.safetensors")));
        assert!(shard.len() > 1, "shard {r} of {world} holds no parameter's state");
        for (k, v) in shard {
            if let Some(old) = all.insert(k.clone(), v.clone()) {
                assert!(k == "step" && old == v, "{k} is in two shards");
            }
        }
    }
    all
}

#[test]
#[ignore = "needs mpirun and fusegrpo built with --features mpi: scripts/test-mpi.sh"]
fn zero1_is_the_replicated_update_bit_for_bit_resumes_after_kill_9_and_reshards_from_2_ranks_onto_3() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = demo_world(tmp.path());
    // 6 tasks a step: a multiple of 2 and of 3 ranks (anything else is refused, below).
    let six = std::fs::read_to_string(&cfg).unwrap().replace("tasks_per_step = 4", "tasks_per_step = 6");
    let four = cfg.clone();
    let cfg = tmp.path().join("six.toml");
    std::fs::write(&cfg, &six).unwrap();
    let zero_cfg = tmp.path().join("zero.toml");
    std::fs::write(&zero_cfg, six.replace("[optim]\n", "[optim]\nzero_stage = 1\n")).unwrap();
    let out = mpirun(3, &["train", "--config", s(&four), "--out", s(&tmp.path().join("refused"))]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("tasks_per_step = 4 is not a multiple of the 3 ranks") && err.contains("set it to 3 or 6"), "{err}");
    let run = |ranks: usize, cfg: &Path, out: &Path, extra: &[&str]| {
        let mut args = vec!["train", "--config", s(cfg), "--out", s(out)];
        args.extend_from_slice(extra);
        mpirun_ok(ranks, &args);
    };

    // 2 ranks, 3 GRPO steps: the same weights every step, the same optimizer state in two shards.
    let (rep, zero) = (tmp.path().join("rep2"), tmp.path().join("zero2"));
    run(2, &cfg, &rep, &[]);
    run(2, &zero_cfg, &zero, &[]);
    for step in 1..=3 {
        assert!(file(&zero, step, "model.safetensors") == file(&rep, step, "model.safetensors"), "step {step}: ZeRO-1 weights differ from the replicated run's");
        assert_eq!(zero_state(&zero, step, 2), tensor_bytes(&rep.join(format!("step_{step:08}/optimizer.safetensors"))), "step {step}: the shards together are not the replicated state");
    }
    let metrics = read_jsonl(&zero.join("metrics.jsonl"));
    assert_eq!(without_timings(metrics.clone()), without_timings(read_jsonl(&rep.join("metrics.jsonl"))), "the same losses and norms");

    // kill -9 of rank 1 after its first step; --resume auto reaches the straight run's bits.
    let killed = tmp.path().join("killed");
    let job = mpirun(2, &["train", "--config", s(&zero_cfg), "--out", s(&killed)]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let log = killed.join("rank-1.jsonl");
    let t0 = Instant::now();
    while read_jsonl_or_empty(&log).is_empty() {
        assert!(t0.elapsed() < Duration::from_secs(300), "rank 1 never finished a step");
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = read_jsonl(&log)[0]["pid"].as_u64().unwrap();
    assert!(Command::new("kill").args(["-9", &pid.to_string()]).status().unwrap().success());
    let out = job.wait_with_output().unwrap();
    assert!(!out.status.success());
    run(2, &zero_cfg, &killed, &["--resume", "auto"]);
    for name in ["model.safetensors", "optimizer-00001-of-00002.safetensors", "optimizer-00002-of-00002.safetensors"] {
        assert!(file(&killed, 3, name) == file(&zero, 3, name), "{name} of the resumed ZeRO-1 run differs");
    }
    assert_eq!(without_timings(read_jsonl(&killed.join("metrics.jsonl"))), without_timings(metrics));

    // 2 ranks -> 3: the state re-shards on load; step 3 is the replicated 2 -> 3 run's, bit for bit.
    let (z23, r23) = (tmp.path().join("z23"), tmp.path().join("r23"));
    run(2, &zero_cfg, &z23, &["--max-steps", "2"]);
    run(2, &cfg, &r23, &["--max-steps", "2"]);
    run(3, &zero_cfg, &z23, &["--resume", "auto"]);
    run(3, &cfg, &r23, &["--resume", "auto"]);
    assert!(file(&z23, 3, "model.safetensors") == file(&r23, 3, "model.safetensors"), "ZeRO-1 resumed onto 3 ranks differs from the replicated run");
    assert_eq!(zero_state(&z23, 3, 3), tensor_bytes(&r23.join("step_00000003/optimizer.safetensors")));

    // SFT on 3 ranks: the same weights as the replicated run.
    let eps = tmp.path().join("eps.jsonl");
    fusegrpo_ok(&["synth", "--config", s(&cfg), "--tasks", s(&tmp.path().join("tasks.jsonl")), "--samples", "2", "--max-tasks", "10", "--out", s(&eps)]);
    let (zs, rs) = (tmp.path().join("sft-zero"), tmp.path().join("sft-rep"));
    mpirun_ok(3, &["sft", "--config", s(&zero_cfg), "--data", s(&eps), "--out", s(&zs), "--max-steps", "2"]);
    mpirun_ok(3, &["sft", "--config", s(&cfg), "--data", s(&eps), "--out", s(&rs), "--max-steps", "2"]);
    assert!(file(&zs, 2, "model.safetensors") == file(&rs, 2, "model.safetensors"), "ZeRO-1 SFT on 3 ranks differs from the replicated run");
    assert_eq!(zero_state(&zs, 2, 3), tensor_bytes(&rs.join("step_00000002/optimizer.safetensors")));

    // The multi-GPU chain: GRPO from the SFT checkpoint with --model, the config unedited.
    let grpo = tmp.path().join("grpo-from-sft");
    let start = zs.join("step_00000002");
    mpirun_ok(3, &["train", "--config", s(&zero_cfg), "--model", s(&start), "--out", s(&grpo), "--max-steps", "1"]);
    let state: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(grpo.join("step_00000001/state.json")).unwrap()).unwrap();
    assert!(state["config"]["model"]["path"].as_str().unwrap().ends_with("step_00000002"), "{}", state["config"]["model"]);
}

/// A short recipe on the practice repository (tiny model): synth with the
/// varied scripted teacher in chunks of 2 tasks, SFT, 2 GRPO steps, and
/// sampled evaluations (2 episodes a task, temperature 0.7) of base,
/// teacher, SFT and GRPO on 4 held-out tasks, also in chunks of 2.
fn pipeline_world(dir: &Path) -> PathBuf {
    let d = |p: &str| dir.join(p).to_str().unwrap().to_string();
    fusegrpo_ok(&["practice-repo", "--out", &d("repos"), "--seed", "2", "--commits", "12"]);
    fusegrpo_ok(&["tasks", "from-history", "--repo", "practice/shop", "--repos-dir", &d("repos"), "--out", &d("tasks.jsonl"), "--max", "10"]);
    fusegrpo_ok(&[
        "init-tiny", "--out", &d("model"), "--small-vocab", "1024", "--hidden-size", "32", "--intermediate-size", "64",
        "--layers", "1", "--corpus-repo", "practice/shop", "--repos-dir", &d("repos"),
    ]);
    let cfg = dir.join("run.toml");
    std::fs::write(
        &cfg,
        "name = \"mpi-pipeline\"\n[model]\npath = \"model\"\n[env]\nrepos_dir = \"repos\"\n\
         [env.tools]\nmax_grep_matches = 4\nmax_read_lines = 8\nmax_output_bytes = 400\n\
         [episode]\nmax_turns = 3\nmax_turn_tokens = 24\nmax_total_tokens = 2400\n\
         [sampling]\ntemperature = 0.7\nseed = 1\n[rollout]\ngroup = 2\n\
         [train]\nsteps = 2\ntasks_per_step = 2\nmicro_batch_rows = 4\nsave_every = 1\nkeep_last = 2\n\
         [optim]\nlr = 1e-3\n\
         [sft]\nepochs = 1\nbatch_rows = 4\nmicro_batch_rows = 2\nlr = 1e-3\nheldout_fraction = 0.2\neval_tasks = 0\nsave_every = 1\nkeep_last = 2\n\
         [sft.filter]\nmin_f1 = 0.3\nmin_e = 0.0\nmin_calls_per_turn = 1\nmax_tokens = 2400\nmax_truncation_ratio = 0.5\n\
         [pipeline]\ntasks = \"tasks.jsonl\"\nheldout_tasks = 4\nsamples = 2\neval_group = 2\neval_temperature = 0.7\neval_teacher = true\nchunk_tasks = 2\n",
    )
    .unwrap();
    cfg
}

/// An episode file's lines without their wall times (`seconds`, and
/// `seconds`/`tools_seconds` of each turn).
fn episodes_without_timings(path: &Path) -> Vec<serde_json::Value> {
    fn strip(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(m) => {
                m.retain(|k, _| !k.contains("seconds"));
                m.values_mut().for_each(strip);
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let mut rows = read_jsonl(path);
    rows.iter_mut().for_each(strip);
    rows
}

/// A report's stage rows without their wall times.
fn stages_without_timings(run: &Path) -> serde_json::Value {
    let mut report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(run.join("report.json")).unwrap()).unwrap();
    let stages = report["stages"].as_object_mut().unwrap();
    for row in stages.values_mut() {
        row.as_object_mut().unwrap().remove("seconds");
    }
    serde_json::json!({ "stages": stages, "paired": report["paired"], "filter": report["filter"] })
}

#[test]
#[ignore = "needs mpirun and fusegrpo built with --features mpi: scripts/test-mpi.sh"]
fn pipeline_on_two_ranks_plays_one_process_episodes_and_resumes_after_kill_9() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = pipeline_world(tmp.path());
    let (one, two, killed) = (tmp.path().join("one"), tmp.path().join("two"), tmp.path().join("killed"));
    mpirun_ok(1, &["pipeline", "--config", s(&cfg), "--out", s(&one)]);
    let out = mpirun_ok(2, &["pipeline", "--config", s(&cfg), "--out", s(&two)]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert_eq!(table.matches("report: ").count(), 1, "rank 0 alone prints the table:\n{table}");

    // What does not depend on training plays the same episodes, token for
    // token: the teacher's trajectories (each rank's share keyed as in the
    // whole chunk) and the sampled evaluations of the base model and the teacher.
    // The model's log-probs come from other batches (a task's episodes
    // decode beside other tasks'), so their last bit may differ.
    for file in ["synth/trajectories.jsonl", "eval/base.jsonl", "eval/teacher.jsonl"] {
        let (mut a, mut b) = (episodes_without_timings(&one.join(file)), episodes_without_timings(&two.join(file)));
        assert!(!a.is_empty() && a.len() == b.len(), "{file}: {} vs {} episodes", a.len(), b.len());
        for (x, y) in a.iter_mut().zip(b.iter_mut()) {
            let (lx, ly) = (x.as_object_mut().unwrap().remove("logprobs").unwrap(), y.as_object_mut().unwrap().remove("logprobs").unwrap());
            for (p, q) in lx.as_array().unwrap().iter().zip(ly.as_array().unwrap()) {
                let (p, q) = (p.as_f64().unwrap(), q.as_f64().unwrap());
                assert!((p - q).abs() <= 1e-5, "{file}: log-prob {p} vs {q}");
            }
        }
        assert!(a == b, "{file}: 2 ranks played other episodes than 1 process");
    }
    let (r1, r2) = (stages_without_timings(&one), stages_without_timings(&two));
    for stage in ["base", "teacher"] {
        assert_eq!(r1["stages"][stage], r2["stages"][stage], "report row {stage}");
    }
    assert_eq!(r1["filter"], r2["filter"], "the same trajectories pass the filter");
    // SFT sums the ranks' gradients in another order (dist-check: within
    // ~1e-7), and GRPO's rollouts draw from each rank's own stream: their
    // rows are reported, not equal to one process's.
    let (s1, s2) = (read_jsonl(&one.join("sft/metrics.jsonl")), read_jsonl(&two.join("sft/metrics.jsonl")));
    assert_eq!(s1.len(), s2.len());
    for (a, b) in s1.iter().zip(&s2) {
        let (la, lb) = (a["loss"].as_f64().unwrap(), b["loss"].as_f64().unwrap());
        assert!((la - lb).abs() <= 1e-4 * la.abs().max(1.0), "SFT loss {la} (1 process) vs {lb} (2 ranks)");
    }
    for stage in ["sft", "grpo"] {
        assert_eq!(r2["stages"][stage]["episodes"], 8, "4 held-out tasks x 2");
    }

    // kill -9 of a rank once GRPO has saved its first step; the rerun
    // continues and reports what the uninterrupted 2-rank run did.
    let job = mpirun(2, &["pipeline", "--config", s(&cfg), "--out", s(&killed)]).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let log = killed.join("grpo/rank-1.jsonl");
    let t0 = Instant::now();
    while !log.exists() || read_jsonl_or_empty(&log).is_empty() {
        assert!(t0.elapsed() < Duration::from_secs(600), "rank 1 never finished a GRPO step");
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid: serde_json::Value = serde_json::from_str(&read_jsonl_or_empty(&log)[0]).unwrap();
    let pid = pid["pid"].as_u64().unwrap();
    assert!(Command::new("kill").args(["-9", &pid.to_string()]).status().unwrap().success());
    let out = job.wait_with_output().unwrap();
    assert!(!out.status.success(), "the killed job failed");
    assert!(!killed.join("report.json").exists());
    let again = mpirun_ok(2, &["pipeline", "--config", s(&cfg), "--out", s(&killed)]);
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(err.contains("== synth: ") && err.contains("exists, skipped") && err.contains("== sft: done"), "done stages skipped:\n{err}");
    assert_eq!(stages_without_timings(&killed), r2, "the resumed pipeline's report");
    for name in ["model.safetensors", "optimizer.safetensors"] {
        assert!(file(&killed.join("grpo"), 2, name) == file(&two.join("grpo"), 2, name), "GRPO {name} of the resumed pipeline differs");
    }
}

/// The pipeline's GRPO stage shares a step's tasks among the ranks as
/// `train` does: `tasks_per_step` not a multiple of the ranks is refused
/// before any work (no run folder, no teacher episode), naming the key.
#[test]
#[ignore = "needs mpirun and fusegrpo built with --features mpi: scripts/test-mpi.sh"]
fn pipeline_on_two_ranks_refuses_tasks_per_step_not_a_multiple_before_any_work() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = pipeline_world(tmp.path());
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, text.replace("tasks_per_step = 2", "tasks_per_step = 3")).unwrap();
    let run = tmp.path().join("run");
    let out = mpirun(2, &["pipeline", "--config", s(&cfg), "--out", s(&run)]).output().expect("spawn mpirun (is OpenMPI installed? scripts/test-mpi.sh)");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("config key `train.tasks_per_step`") && err.contains("tasks_per_step = 3 is not a multiple of the 2 ranks") && err.contains("set it to 2 or 4"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(!run.exists(), "the refused pipeline made {}", run.display());
}
