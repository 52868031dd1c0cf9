//! The FuseSearch recipe, as `fusegrpo pipeline` runs it:
//! split -> synth -> filter + sft -> grpo -> eval (base, sft, grpo on the
//! held-out tasks) -> `<run>/report.json`. Each stage leaves its output in
//! the run folder and is skipped when that output exists; SFT and GRPO resume
//! from their newest checkpoint, so an interrupted pipeline continues where
//! it stopped.
//!
//! Under `mpirun -n N` every rank runs the recipe: the stages that
//! parallelize share their work (teacher synthesis, the difficulty probe
//! and the evaluations by tasks, [`run_policy_resumable`]; SFT and GRPO as
//! `fusegrpo sft`/`train` do), and what writes the run folder's shared files
//! (task lists, markers, the report) runs on rank 0, the others waiting for
//! its result ([`on_rank0`]).

use trainer::episodes::jsonl::run_policy_resumable;
use trainer::episodes::{with_env, Endpoint, TeacherOpts};
use trainer::run_config::PolicyChoice;
use rollout::scaling::judge::EvidenceJudge;
use rollout::scaling::{ScalingConfig, ScalingRow};
use trainer::run::{RunEnd, RunOptions};
use anyhow::{Context, Result};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rollout::episode::summary::Summary;
use rollout::episode::Episode;
use rollout::tasks::Task;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;
use super::{stats, Report, StageReport, TaskSource};
use trainer::run_config::{PipelineSection, SynthSection};
use trainer::run_config::RunConfig;

/// The file a finished training stage leaves: `{"checkpoint": ".."}`.
const COMPLETE: &str = "complete.json";

/// The recipe of `cfg` (read from `config`, whose name its errors give)
/// into `run_dir`: each stage skipped when its output exists, SFT and GRPO
/// resumed from their newest checkpoint; `<run>/report.json` at the end,
/// returned (the caller prints its [`table`]). `skip_bad` drops the tasks that cannot run instead of
/// refusing the file. `tensorboard` (`--tensorboard DIR`): each training
/// stage's event files go to `DIR/<stage>` (`sft`, `grpo`, `pilot/lr-<lr>`).
pub fn run(cfg: &RunConfig, config: &Path, run_dir: &Path, skip_bad: bool, tensorboard: Option<&Path>) -> Result<Report> {
    let stage_opts = |stage: &Path| RunOptions { resume: Some("auto".into()), tensorboard: tensorboard.map(|d| d.join(stage)), ..Default::default() };
    let world = trainer::dist::current().world();
    // Before any work: the ranks share each stage's work evenly.
    cfg.check_ranks(trainer::run_config::Job::Pipeline, world)?;
    let cfg = cfg.clone();
    let (p, source) = super::pipeline_inputs(&cfg, config)?;
    trainer::run::grpo::check_vllm_pipeline(&cfg)?;
    let run_dir = run_dir.to_path_buf();
    let tasks_path = match source {
        TaskSource::File(path) => path.to_path_buf(),
        TaskSource::Synth(s) => on_rank0(|| synth_tasks(&cfg, p, s, &run_dir))?,
    };
    let p = p.clone();
    let all = trainer::episodes::checked_tasks(&tasks_path, &cfg, skip_bad)
        .with_context(|| format!("the task file of {} (pipeline.tasks)", config.display()))?;
    let (train, heldout) = match &p.heldout {
        Some(path) => {
            let held = trainer::episodes::checked_tasks(path, &cfg, skip_bad)
                .with_context(|| format!("the held-out task file of {} (pipeline.heldout)", config.display()))?;
            let ids: std::collections::BTreeSet<&str> = held.iter().map(|t| t.instance_id.as_str()).collect();
            if let Some(t) = all.iter().find(|t| ids.contains(t.instance_id.as_str())) {
                anyhow::bail!("task '{}' is both in {} and in the held-out file {}", t.instance_id, tasks_path.display(), path.display());
            }
            (all, held)
        }
        None => split_tasks(&all, &p)?,
    };
    // Read by every rank before rank 0 writes anything.
    let mut seconds = previous_stage_seconds(&run_dir.join("report.json"));
    let ranks = if world > 1 { format!(", {world} ranks") } else { String::new() };
    say(&format!("pipeline: {} training tasks, {} held out, run folder {}{ranks}", train.len(), heldout.len(), run_dir.display()));
    on_rank0(|| {
        trainer::files::write_json_lines(&ensure_dir(&run_dir.join("tasks"))?.join("train.jsonl"), &train)?;
        Ok(trainer::files::write_json_lines(&run_dir.join("tasks/heldout.jsonl"), &heldout)?)
    })?;

    let traj = run_dir.join("synth/trajectories.jsonl");
    if traj.exists() {
        say(&format!("== synth: {} exists, skipped", traj.display()));
    } else {
        let t0 = Instant::now();
        let (teacher, opts) = teacher_of(&p, cfg.sampling.seed);
        let tasks = draw(&train, p.synth_tasks, p.split_seed);
        say(&format!("== synth: {} teacher episodes on each of {} training tasks", p.samples, tasks.len()));
        let episodes = run_policy_resumable(&cfg, &tasks, &teacher, p.samples, &opts, p.chunk_tasks, &traj)?;
        say(&format!("{}\n{}", Summary::HEADER, Summary::of(&episodes).row("teacher")));
        seconds.insert("synth".to_string(), t0.elapsed().as_secs_f64());
    }

    let sft_ckpt = stage(&run_dir.join("sft"), "sft", &mut seconds, |dir| {
        Ok(trainer::run::sft::sft(&cfg, &traj, dir, &train, &stage_opts(Path::new("sft")))?)
    })?;

    let mut grpo_cfg = cfg.with_trained(&sft_ckpt);
    let (grpo_tasks, difficulty) = difficulty_filter(&grpo_cfg, &p, &train, &run_dir, &mut seconds)?;
    let pilot = pilot(&grpo_cfg, &p, &grpo_tasks, &run_dir, &mut seconds, &stage_opts)?;
    if let Some(lr) = pilot.as_ref().and_then(|v| v["chosen_lr"].as_f64()) {
        grpo_cfg.optim.lr = lr;
    }
    // The chosen pilot run's folder (named as `pilot` names it).
    let extend = (p.pilot.extend && pilot.is_some()).then(|| run_dir.join("pilot").join(format!("lr-{:e}", grpo_cfg.optim.lr)));
    let longer = on_rank0(|| reopen_if_longer(&run_dir.join("grpo"), "grpo", grpo_cfg.train.steps))?;
    let grpo_ckpt = stage(&run_dir.join("grpo"), "grpo", &mut seconds, |dir| {
        let mut opts = stage_opts(Path::new("grpo"));
        if let Some(pilot_dir) = &extend {
            opts.allow_config_change = on_rank0(|| extend_pilot(&grpo_cfg, p.pilot.steps, pilot_dir, dir))?;
        } else if longer {
            opts.allow_config_change = steps_only_change(&grpo_cfg, dir, "grpo: a longer run")?;
        }
        Ok(trainer::run::grpo::grpo(&grpo_cfg, dir, &grpo_tasks, &opts)?)
    })?;

    let mut report = Report {
        stages: BTreeMap::new(),
        filter: serde_json::from_str(&std::fs::read_to_string(run_dir.join("sft/filter.json")).unwrap_or_else(|_| "null".into()))?,
        stage_seconds: seconds,
        train_tasks: train.len(),
        heldout_tasks: heldout.len(),
        paired: BTreeMap::new(),
        difficulty,
        pilot,
    };
    let mut per_task = BTreeMap::new();
    let mut models = vec![("base", cfg.clone(), PolicyChoice::Model), ("sft", cfg.with_trained(&sft_ckpt), PolicyChoice::Model)];
    if p.eval_teacher {
        // The scripted teacher the trajectories came from (guided or not);
        // an HTTP teacher is not run again here.
        let teacher = if p.teacher == PolicyChoice::Guided { PolicyChoice::Guided } else { PolicyChoice::Scripted };
        models.insert(1, ("teacher", cfg.clone(), teacher));
    }
    models.push(("grpo", cfg.with_trained(&grpo_ckpt), PolicyChoice::Model));
    for (name, model, policy) in models {
        let t0 = Instant::now();
        say(&format!("== eval {name}: {} held-out tasks", heldout.len()));
        let out = run_dir.join("eval").join(format!("{name}.jsonl"));
        let made_from = match name {
            "sft" => Some(sft_ckpt.as_path()),
            "grpo" => Some(grpo_ckpt.as_path()),
            _ => None,
        };
        on_rank0(|| set_aside_if_stale(&out, made_from))?;
        let read_back = out.exists();
        let episodes = evaluate(&model, &p, &heldout, &policy, &out)?;
        let rewards = stats::task_rewards(&episodes);
        let row = StageReport {
            summary: Summary::of(&episodes),
            well_formed_calls: well_formed_calls(&episodes),
            reward_ci95: Some(stats::mean_ci95(&rewards.values().copied().collect::<Vec<_>>())),
            selected: selected(&cfg, &p, &heldout, &episodes)?,
        };
        report.stages.insert(name.to_string(), row);
        per_task.insert(name, rewards);
        if !read_back {
            report.stage_seconds.insert(format!("eval_{name}"), t0.elapsed().as_secs_f64());
        }
    }
    for (later, earlier) in [("sft", "base"), ("grpo", "sft"), ("grpo", "base"), ("grpo", "teacher")] {
        if !per_task.contains_key(earlier) {
            continue;
        }
        report.paired.insert(format!("{later}_vs_{earlier}"), stats::paired(&per_task[earlier], &per_task[later]));
    }
    on_rank0(|| {
        std::fs::write(run_dir.join("report.json"), serde_json::to_string_pretty(&report)?)?;
        Ok(())
    })?;
    Ok(report)
}

/// `tasks_from = "synth"`: `<run>/tasks/synth.jsonl`, made once (as
/// `fusegrpo tasks synth`) and skipped when it exists.
fn synth_tasks(cfg: &RunConfig, p: &PipelineSection, s: &SynthSection, run_dir: &Path) -> Result<PathBuf> {
    let out = run_dir.join("tasks/synth.jsonl");
    if out.exists() {
        trainer::progress::say(&format!("== tasks: {} exists, skipped", out.display()));
        return Ok(out);
    }
    let repo = s.repo.as_deref().context("pipeline.synth.repo is not set")?;
    trainer::progress::say(&format!("== tasks: {} synthetic tasks of {repo} at {}", s.count, s.commit));
    let teacher = s.teacher.clone();
    let http = crate::synth_tasks::HttpOpts { endpoint: Endpoint::of_pipeline(p), ..Default::default() };
    let job = crate::synth_tasks::SynthRun {
        repos_dir: &cfg.env.repos_dir,
        repo,
        commit: &s.commit,
        teacher: &teacher,
        localizer: s.verify.then_some(&PolicyChoice::Scripted),
        http: &http,
        config: rollout::synth::SynthConfig { count: s.count, seed: s.seed, min_recall: s.min_recall, ..Default::default() },
    };
    crate::synth_tasks::make_tasks_to(&job, &out)?;
    Ok(out)
}

/// `work` on rank 0 alone (what writes the run folder's shared files),
/// every rank then getting its result; one process runs it as it is. The
/// others wait for rank 0 in the gather; when `work` fails there, rank 0's
/// error ends every rank (`dist::launch`).
fn on_rank0<T: serde::Serialize + serde::de::DeserializeOwned>(work: impl FnOnce() -> Result<T>) -> Result<T> {
    let dist = trainer::dist::current();
    if dist.world() == 1 {
        return work();
    }
    // A list, not an Option: `Some(())` would travel as JSON null, read back as None.
    let mine = if dist.rank() == 0 { vec![work()?] } else { Vec::new() };
    let all = trainer::dist::gather_json(&*dist, &mine)?;
    all.into_iter().next().and_then(|r0| r0.into_iter().next()).context("rank 0 sent no result")
}

/// A line on stderr from rank 0 (one process: every line); ranks share the
/// launcher's stderr, and the stages' lines are the same on each.
fn say(line: &str) {
    if trainer::dist::current().rank() == 0 {
        trainer::progress::say(line);
    }
}

fn ensure_dir(dir: &Path) -> Result<&Path> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// Held-out tasks: a seeded draw of `heldout_tasks`; the rest train.
fn split_tasks(all: &[Task], p: &PipelineSection) -> Result<(Vec<Task>, Vec<Task>)> {
    anyhow::ensure!(
        all.len() > p.heldout_tasks,
        "pipeline.heldout_tasks is {} but the task file has only {} tasks (some must remain to train on)",
        p.heldout_tasks,
        all.len()
    );
    let mut idx: Vec<usize> = (0..all.len()).collect();
    idx.shuffle(&mut rand_chacha::ChaCha8Rng::seed_from_u64(p.split_seed));
    let mut held: Vec<usize> = idx[..p.heldout_tasks].to_vec();
    held.sort();
    let train = (0..all.len()).filter(|i| !held.contains(i)).map(|i| all[i].clone()).collect();
    Ok((train, held.into_iter().map(|i| all[i].clone()).collect()))
}

fn teacher_of(p: &PipelineSection, seed: u64) -> (PolicyChoice, TeacherOpts) {
    (p.teacher.clone(), TeacherOpts { http: Endpoint::of_pipeline(p), vary_scripted: Some(seed) })
}

/// The checkpoint that `<dir>/complete.json` names: `None` without a
/// marker, `Some(Ok)` when it is complete (holds `DONE`), `Some(Err)` when it
/// is not (a stage to run again).
fn finished_checkpoint(dir: &Path) -> Result<Option<std::result::Result<PathBuf, PathBuf>>> {
    let marker = dir.join(COMPLETE);
    let Ok(text) = std::fs::read_to_string(&marker) else { return Ok(None) };
    let v: serde_json::Value = serde_json::from_str(&text).with_context(|| format!("{}: not JSON", marker.display()))?;
    let ckpt = PathBuf::from(v["checkpoint"].as_str().with_context(|| format!("{}: no `checkpoint`", marker.display()))?);
    Ok(Some(if ckpt.join("DONE").exists() { Ok(ckpt) } else { Err(ckpt) }))
}

/// A training stage: skipped when `<dir>/complete.json` names its
/// checkpoint; otherwise run (resuming) and marked complete. `None` when it
/// was interrupted (a checkpoint is saved; rerun the pipeline to continue).
fn stage(dir: &Path, name: &str, seconds: &mut BTreeMap<String, f64>, run: impl FnOnce(&Path) -> Result<RunEnd>) -> Result<PathBuf> {
    let marker = dir.join(COMPLETE);
    match finished_checkpoint(dir)? {
        Some(Ok(ckpt)) => {
            say(&format!("== {name}: done ({}), skipped", ckpt.display()));
            return Ok(ckpt);
        }
        Some(Err(ckpt)) => say(&format!("== {name}: {} names {}, which is not a complete checkpoint; running the stage again", marker.display(), ckpt.display())),
        None => {}
    }
    say(&format!("== {name}"));
    let t0 = Instant::now();
    match run(dir).with_context(|| format!("pipeline stage {name}"))? {
        RunEnd::Done(ckpt) => {
            // Every rank has finished the stage (and read the marker's absence) first.
            on_rank0(|| Ok(std::fs::write(&marker, serde_json::json!({ "checkpoint": ckpt }).to_string())?))?;
            seconds.insert(name.to_string(), t0.elapsed().as_secs_f64());
            Ok(ckpt)
        }
        RunEnd::Interrupted(ckpt) => Err(trainer::interrupt::Interrupted(format!(
            "pipeline interrupted during {name}: checkpoint {} saved; run the same command again to continue",
            ckpt.display()
        ))
        .into()),
    }
}

/// Episodes of `policy` (`cfg`'s model, or the teacher) on the held-out
/// tasks, resumable (read back when `out` exists).
fn evaluate(cfg: &RunConfig, p: &PipelineSection, heldout: &[Task], policy: &PolicyChoice, out: &Path) -> Result<Vec<Episode>> {
    let mut eval_cfg = cfg.clone();
    eval_cfg.sampling.temperature = p.eval_temperature;
    let group = if p.eval_attempts > 0 { p.eval_attempts } else { p.eval_group };
    Ok(run_policy_resumable(&eval_cfg, heldout, policy, group, &TeacherOpts::default(), p.chunk_tasks, out)?)
}

/// A seeded draw of `n` of `tasks` in their file order (all when `n` is 0 or
/// at least their number).
fn draw(tasks: &[Task], n: usize, seed: u64) -> Vec<Task> {
    if n == 0 || n >= tasks.len() {
        return tasks.to_vec();
    }
    let mut idx: Vec<usize> = (0..tasks.len()).collect();
    idx.shuffle(&mut rand_chacha::ChaCha8Rng::seed_from_u64(seed));
    let mut picked = idx[..n].to_vec();
    picked.sort();
    picked.into_iter().map(|i| tasks[i].clone()).collect()
}

/// `[pipeline.difficulty]`: the tasks GRPO trains on, and the filter's
/// figures. The probe's episodes are `<run>/difficulty/episodes.jsonl`.
/// The probe's wall time goes into `seconds` as `difficulty` when it ran now.
fn difficulty_filter(cfg: &RunConfig, p: &PipelineSection, train: &[Task], run_dir: &Path, seconds: &mut BTreeMap<String, f64>) -> Result<(Vec<Task>, Option<serde_json::Value>)> {
    let d = &p.difficulty;
    if d.tasks == 0 {
        return Ok((train.to_vec(), None));
    }
    let probe = draw(train, d.tasks, p.split_seed.wrapping_add(1));
    say(&format!("== difficulty: {} episodes of the SFT model on each of {} training tasks", d.samples, probe.len()));
    let t0 = Instant::now();
    let out = run_dir.join("difficulty/episodes.jsonl");
    let read_back = out.exists();
    let episodes = run_policy_resumable(cfg, &probe, &PolicyChoice::Model, d.samples, &TeacherOpts::default(), p.chunk_tasks, &out)?;
    if !read_back {
        seconds.insert("difficulty".to_string(), t0.elapsed().as_secs_f64());
    }
    let mut rewards: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for e in &episodes {
        rewards.entry(e.task_id.as_str()).or_default().push(e.training_reward(&cfg.reward));
    }
    let varies = |r: &[f64]| r.iter().any(|x| (x - r[0]).abs() > 1e-9);
    let kept: Vec<Task> = probe.iter().filter(|t| rewards.get(t.instance_id.as_str()).is_some_and(|r| varies(r))).cloned().collect();
    let all_zero = rewards.values().filter(|r| r.iter().all(|x| *x == 0.0)).count();
    let summary = Summary::of(&episodes);
    let (mean, answered) = (summary.reward, summary.answered);
    say(&format!("difficulty: {} of {} tasks have a reward spread ({} all zero); mean reward {mean:.3}, {:.0}% answered", kept.len(), probe.len(), all_zero, 100.0 * answered));
    anyhow::ensure!(!kept.is_empty(), "difficulty: no probed task has a reward spread: GRPO would have nothing to learn from");
    on_rank0(|| Ok(trainer::files::write_json_lines(&run_dir.join("tasks/grpo.jsonl"), &kept)?))?;
    let figures = serde_json::json!({"probed": probe.len(), "samples": d.samples, "kept": kept.len(), "all_zero": all_zero,
                                     "mean_reward": mean, "answered": answered});
    Ok((kept, Some(figures)))
}

/// `[pipeline.pilot]`: a GRPO run per learning rate into
/// `<run>/pilot/lr-<lr>` (resumable stages), and the rate whose run had the
/// highest mean reward R (the rollouts' R, not `train_reward`) after its first step.
fn pilot(cfg: &RunConfig, p: &PipelineSection, tasks: &[Task], run_dir: &Path, seconds: &mut BTreeMap<String, f64>, opts: &dyn Fn(&Path) -> RunOptions) -> Result<Option<serde_json::Value>> {
    if p.pilot.lrs.is_empty() {
        return Ok(None);
    }
    let mut means = serde_json::Map::new();
    let mut best: Option<(f64, f64)> = None;
    for &lr in &p.pilot.lrs {
        let mut c = cfg.clone();
        c.optim.lr = lr;
        c.train.steps = p.pilot.steps;
        let name = format!("lr-{lr:e}");
        let dir = run_dir.join("pilot").join(&name);
        stage(&dir, &format!("pilot {name}"), seconds, |dir| {
            Ok(trainer::run::grpo::grpo(&c, dir, tasks, &opts(&Path::new("pilot").join(&name)))?)
        })?;
        let rewards = metric_column(&dir.join("metrics.jsonl"), "reward")?;
        // Step 1 rolls out before any update: the same for every rate.
        let after_first = if rewards.len() > 1 { &rewards[1..] } else { &rewards[..] };
        let mean = after_first.iter().sum::<f64>() / after_first.len().max(1) as f64;
        say(&format!("pilot {name}: mean reward R {mean:.4} (R of the rollouts, without the answer term) over steps 2-{}", rewards.len()));
        means.insert(format!("{lr:e}"), serde_json::json!({"mean_reward": mean, "rewards": rewards}));
        if best.is_none_or(|(_, m)| mean > m) {
            best = Some((lr, mean));
        }
    }
    let (lr, _) = best.expect("at least one pilot");
    say(&format!("pilot: the long run takes lr {lr:e}"));
    Ok(Some(serde_json::json!({"steps": p.pilot.steps, "runs": means, "chosen_lr": lr})))
}

/// `stage_seconds` of an earlier `report.json` of this run (empty when there
/// is none or it cannot be read: the times are figures, not state).
fn previous_stage_seconds(report: &Path) -> BTreeMap<String, f64> {
    std::fs::read_to_string(report)
        .ok()
        .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
        .and_then(|v| serde_json::from_value(v["stage_seconds"].clone()).ok())
        .unwrap_or_default()
}

/// A finished training stage in `dir` whose checkpoint is below `steps`
/// (`[train] steps` was raised since): its completion marker is removed so
/// the stage resumes from that checkpoint up to `steps`. Returns whether it
/// was reopened.
fn reopen_if_longer(dir: &Path, name: &str, steps: u64) -> Result<bool> {
    let Some(Ok(ckpt)) = finished_checkpoint(dir)? else { return Ok(false) };
    let marker = dir.join(COMPLETE);
    let done = trainer::checkpoint::load_state(&ckpt)?.step;
    if done >= steps {
        return Ok(false);
    }
    say(&format!("== {name}: finished at step {done} ({}); [train] steps is now {steps}: continuing from it", ckpt.display()));
    std::fs::remove_file(&marker).with_context(|| format!("removing {}", marker.display()))?;
    Ok(true)
}

/// Whether resuming the newest checkpoint in `dir` with `cfg` must accept a
/// changed config: only `train.steps` (and `[pipeline]`, which no training
/// run reads, and `[log]`) may differ; anything else is refused, naming the keys.
fn steps_only_change(cfg: &RunConfig, dir: &Path, what: &str) -> Result<bool> {
    let Some(latest) = trainer::checkpoint::latest(dir)? else { return Ok(false) };
    let state = trainer::checkpoint::load_state(&latest)?;
    let changed = trainer::checkpoint::changed_keys(&state.config, &serde_json::to_value(cfg)?);
    let others: Vec<&String> = changed.iter().filter(|k| !k.starts_with("train.steps ") && !trainer::checkpoint::is_recipe_key(k) && !trainer::checkpoint::is_log_key(k)).collect();
    anyhow::ensure!(
        others.is_empty(),
        "{what}: {} was made with another config than the long run's (besides train.steps): {}; restore the config, or remove {} to train from the start",
        latest.display(),
        others.iter().map(|k| k.as_str()).collect::<Vec<_>>().join(", "),
        dir.display()
    );
    Ok(!changed.is_empty())
}

/// Held-out episodes record the checkpoint they were made with
/// (`<out>.source.json`). When `made_from` (None: the base model or the
/// teacher) is another, the old episodes are kept beside, named after their
/// checkpoint (`grpo.step_00000060.jsonl`), and the model is evaluated
/// again. Episodes without a record (older runs) are taken as this
/// checkpoint's.
fn set_aside_if_stale(out: &Path, made_from: Option<&Path>) -> Result<()> {
    let source = PathBuf::from(format!("{}.source.json", out.display()));
    let now = serde_json::json!({ "checkpoint": made_from });
    let chunks = PathBuf::from(format!("{}.chunks", out.display()));
    if source.exists() {
        let text = std::fs::read_to_string(&source).with_context(|| format!("reading {}", source.display()))?;
        let was: serde_json::Value = serde_json::from_str(&text).with_context(|| format!("{}: not JSON", source.display()))?;
        if was != now {
            let tag = was["checkpoint"].as_str().and_then(|c| Path::new(c).file_name()).and_then(|n| n.to_str()).unwrap_or("previous").to_string();
            let stem = out.file_stem().and_then(|n| n.to_str()).unwrap_or("eval");
            for (from, ext) in [(out.to_path_buf(), "jsonl"), (chunks.clone(), "jsonl.chunks"), (source.clone(), "jsonl.source.json")] {
                if from.exists() {
                    let to = out.with_file_name(format!("{stem}.{tag}.{ext}"));
                    anyhow::ensure!(!to.exists(), "{} exists: the episodes of {} would overwrite it", to.display(), from.display());
                    std::fs::rename(&from, &to).with_context(|| format!("moving {} to {}", from.display(), to.display()))?;
                }
            }
            say(&format!("eval: {} was made with {}; kept as {stem}.{tag}.jsonl, evaluating {} again", out.display(), was["checkpoint"], now["checkpoint"]));
        }
    }
    if !source.exists() {
        if let Some(dir) = source.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        std::fs::write(&source, now.to_string()).with_context(|| format!("writing {}", source.display()))?;
    }
    Ok(())
}

/// `[pipeline.pilot] extend`: the long run's folder starts as a copy of
/// the chosen pilot run's (its checkpoints and metrics, not its completion
/// marker), so the long run resumes at the pilot's last step. Returns
/// whether resuming must accept a changed config: true while the latest
/// checkpoint in `dir` is the pilot's, whose config differs from the long
/// run's in `train.steps` alone (or `[pipeline]`, which no training run
/// reads; anything else is refused).
fn extend_pilot(cfg: &RunConfig, pilot_steps: u64, pilot_dir: &Path, dir: &Path) -> Result<bool> {
    anyhow::ensure!(
        cfg.train.steps > pilot_steps,
        "[pipeline.pilot] extend: the long run's [train] steps ({}) must be more than the pilot's steps ({pilot_steps})",
        cfg.train.steps
    );
    if trainer::checkpoint::latest(dir)?.is_none() {
        let from = trainer::checkpoint::latest(pilot_dir)?
            .with_context(|| format!("[pipeline.pilot] extend: the chosen pilot run {} has no checkpoint", pilot_dir.display()))?;
        say(&format!("== grpo: continuing the chosen pilot run from {} up to step {}", from.display(), cfg.train.steps));
        copy_run(pilot_dir, dir)?;
    }
    trainer::checkpoint::latest(dir)?.context("no checkpoint after copying the pilot run")?;
    steps_only_change(cfg, dir, "[pipeline.pilot] extend")
}

/// Copies a run folder's files (recursively), leaving out its completion
/// marker; files are written under a temporary name and renamed, and
/// checkpoint folders last, so an interrupted copy leaves no checkpoint
/// that looks complete without its files.
fn copy_run(from: &Path, to: &Path) -> Result<()> {
    fn copy_dir(from: &Path, to: &Path, top: bool) -> Result<()> {
        std::fs::create_dir_all(to).with_context(|| format!("creating {}", to.display()))?;
        let mut entries: Vec<_> = std::fs::read_dir(from)
            .with_context(|| format!("reading {}", from.display()))?
            .collect::<std::io::Result<Vec<_>>>()?;
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let name = e.file_name();
            if top && name == COMPLETE {
                continue;
            }
            let (src, dst) = (e.path(), to.join(&name));
            if e.file_type()?.is_dir() {
                let tmp = to.join(format!(".{}.copy", name.to_string_lossy()));
                let _ = std::fs::remove_dir_all(&tmp);
                copy_dir(&src, &tmp, false)?;
                if dst.exists() {
                    std::fs::remove_dir_all(&dst).with_context(|| format!("removing {}", dst.display()))?;
                }
                std::fs::rename(&tmp, &dst).with_context(|| format!("renaming {} to {}", tmp.display(), dst.display()))?;
            } else {
                std::fs::copy(&src, &dst).with_context(|| format!("copying {} to {}", src.display(), dst.display()))?;
            }
        }
        Ok(())
    }
    copy_dir(from, to, true)
}

/// One field of every line of a metrics file.
fn metric_column(path: &Path, key: &str) -> Result<Vec<f64>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(i, l)| {
            let v: serde_json::Value = serde_json::from_str(l).with_context(|| format!("{}:{}: not JSON", path.display(), i + 1))?;
            v[key].as_f64().with_context(|| format!("{}:{}: no number `{key}`", path.display(), i + 1))
        })
        .collect()
}

/// `eval_attempts`: the `eval_select` row at N over a stage's episodes
/// (N per held-out task), tournaments judged by the evidence judge.
fn selected(cfg: &RunConfig, p: &PipelineSection, heldout: &[Task], episodes: &[Episode]) -> Result<Option<ScalingRow>> {
    if p.eval_attempts == 0 {
        return Ok(None);
    }
    let sc = ScalingConfig::from_episodes(p.eval_attempts, p.eval_select, cfg.sampling.seed);
    let summaries = rollout::scaling::summarize(episodes, sc.attempts);
    let selections = with_env(cfg, |env| Ok::<_, anyhow::Error>(rollout::scaling::select(episodes, &summaries, heldout, env, &sc, &mut EvidenceJudge)?))?;
    Ok(rollout::scaling::table(&selections, &sc).into_iter().find(|r| r.attempts == p.eval_attempts))
}

/// Share of tool calls that parsed and ran without a tool error.
fn well_formed_calls(episodes: &[Episode]) -> f64 {
    let calls: Vec<_> = episodes.iter().flat_map(|e| e.turns.iter().flat_map(|t| t.calls.iter())).collect();
    if calls.is_empty() {
        return 0.0;
    }
    calls.iter().filter(|c| c.name.is_some() && !c.error).count() as f64 / calls.len() as f64
}

/// The FuseSearch table of the report, one row per stage.
pub fn table(r: &Report) -> String {
    let mut out = String::from(
        "stage    f1_file f1_func      e  reward  reward_95%_ci   turns calls/turn  tokens seconds answered well_formed\n",
    );
    for name in ["base", "teacher", "sft", "grpo"] {
        if let Some(row) = r.stages.get(name) {
            let ci = row.reward_ci95.map(|[lo, hi]| format!("[{lo:.3}, {hi:.3}]")).unwrap_or_default();
            let s = &row.summary;
            out += &format!(
                "{name:<8} {:>7.3} {:>7.3} {:>6.3} {:>7.3} {ci:>15} {:>6.2} {:>10.2} {:>7.0} {:>7.2} {:>8.2} {:>11.2}\n",
                s.f1_file, s.f1_func, s.e, s.reward, s.turns, s.calls_per_turn, s.tokens, s.seconds, s.answered, row.well_formed_calls
            );
        }
    }
    for name in ["base", "sft", "grpo"] {
        if let Some(sel) = r.stages.get(name).and_then(|s| s.selected) {
            out += &format!(
                "{name:<8} {} of {} attempts: f1_file {:.3}, f1_func {:.3}, reward {:.3}, {:.0} tokens per task\n",
                sel.label(),
                sel.attempts,
                sel.f1_file,
                sel.f1_func,
                sel.reward,
                sel.tokens
            );
        }
    }
    for (name, p) in &r.paired {
        out += &format!("{name:<12} reward difference {:+.3}, 95% CI [{:+.3}, {:+.3}] over {} tasks\n", p.mean, p.ci95[0], p.ci95[1], p.tasks);
    }
    out
}
