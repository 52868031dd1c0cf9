//! `fusegrpo train`: GRPO with checkpoints, exact resume, a metrics line
//! per step in `<run>/metrics.jsonl` and a progress bar.

use super::run::{Run, RunEnd, RunOptions};
use anyhow::{Context, Result};
use rand::SeedableRng;
use rollout::episode::driver::Env;
use rollout::repo::SnapshotStore;
use rollout::tools::ToolRunner;
use std::path::{Path, PathBuf};
use trainer::checkpoint::{self, DataCursor, RngState};
use trainer::run_config::RunConfig;
use trainer::trainers::grpo::{sampler::TaskSampler, Trainer};
use trainer::weights::load_weights;

#[derive(clap::Args)]
pub struct Args {
    /// Run configuration (TOML; see configs/).
    #[arg(long)]
    pub config: PathBuf,
    /// Run folder (default: checkpoints/<run name>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub run: super::run::RunArgs,
    #[command(flatten)]
    pub tasks_check: super::common::TaskCheckArgs,
}

pub fn run(args: Args) -> Result<()> {
    let mut cfg = RunConfig::from_file(&args.config)?;
    args.run.apply(&mut cfg);
    let world = trainer::dist::current().world();
    anyhow::ensure!(
        cfg.train.tasks_per_step % world == 0,
        "[train] tasks_per_step = {} is not a multiple of the {world} ranks: each rank rolls out an equal share of a step's tasks, so some would idle a group's rollout every step; set it to {} or {}",
        cfg.train.tasks_per_step,
        (cfg.train.tasks_per_step / world).max(1) * world,
        (cfg.train.tasks_per_step / world + 1) * world
    );
    let run_dir = args.out.clone().unwrap_or_else(|| PathBuf::from("checkpoints").join(&cfg.name));
    let tasks_path = cfg.train.tasks.clone().context("train.tasks is not set in the config")?;
    let opts = args.run.options();
    // Refusals first, before anything is read at length or written.
    super::run::check_folder(&run_dir, &opts)?;
    let tasks = super::common::checked_tasks(&tasks_path, &cfg, args.tasks_check.skip_bad_tasks)?;
    train(&cfg, &run_dir, &tasks, &opts)?.into_result()
}

/// GRPO on `tasks` into `run_dir` (checkpoints, metrics.jsonl).
pub fn train(cfg: &RunConfig, run_dir: &Path, tasks: &[rollout::tasks::Task], args: &RunOptions) -> Result<RunEnd> {
    let (run, weights, adapter) = Run::open(cfg, run_dir, args, cfg.train.keep_last, super::run::Stage::Grpo)?;
    // The KL reference is always the run's starting model, also on resume
    // (a LoRA run's is its base, which `weights` already is).
    let reference = match (&run.resume_dir, cfg.grpo.beta > 0.0, cfg.lora.is_some()) {
        (Some(_), true, false) => Some(load_weights(&run.base_dir, &run.model_cfg, cfg.model.dtype.into(), &run.device)?),
        _ => None,
    };
    let dist = trainer::dist::current();
    let rng = super::run::rank_rng(cfg.sampling.seed, &*dist);
    let mut trainer = Trainer::new(cfg.clone(), &run.model_cfg, &weights, reference.as_ref(), adapter.as_ref(), rng)?;
    drop((weights, reference, adapter));
    trainer::malloc::release_free_memory();
    let mut sampler = TaskSampler::new(cfg.sampling.seed, tasks.len(), DataCursor::default());
    if let Some(state) = run.resume(&mut trainer.optimizer, &trainer.sharding, &trainer.vars)? {
        trainer.step = state.step;
        trainer.sampling_rng = resumed_rng(&state, cfg.sampling.seed, &*dist)?;
        sampler.cursor = state.data;
    }

    let tok_dir = cfg.tokenizer_dir(&run.base_dir);
    let tok = cfg.chat_tokenizer(&run.base_dir).with_context(|| format!("tokenizer in {}", tok_dir.display()))?;
    if cfg.rollout.engine == trainer::run_config::Engine::Vllm {
        anyhow::ensure!(
            dist.world() == 1,
            "[rollout] engine = \"vllm\" with {} ranks: GRPO on a vLLM server runs as one process so far (the server does the batching); run without mpirun/srun",
            dist.world()
        );
        trainer.engine = Some(super::rollout::vllm_training_engine(cfg, &tok, run_dir)?);
    }
    let store = SnapshotStore::open(&cfg.env.repos_dir);
    let tools = ToolRunner::new(cfg.env.tools.clone());
    let env = Env { tokenizer: &tok, store: &store, tools: &tools, reward: &cfg.reward };
    let mut metrics = run.metrics(trainer.step)?;
    let mut rank_log = run.rank_log(trainer.step)?;
    let stop = super::common::interrupt_flag()?;
    let total = args.max_steps.unwrap_or(cfg.train.steps);
    let save_every = args.save_every.unwrap_or(cfg.train.save_every).max(1);
    let bar = super::rollout::progress_bar(total, "steps");
    if dist.rank() > 0 {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    bar.set_position(trainer.step);
    let save = |trainer: &Trainer, cursor: DataCursor| {
        let rngs = [("sampling".to_string(), RngState::capture(&trainer.sampling_rng))].into();
        run.save(trainer.step, rngs, cursor, &trained(&trainer.vars), &trainer.optimizer, &trainer.sharding)
    };
    let mut nonfinite_in_a_row = 0;
    while trainer.step < total {
        let batch: Vec<_> = sampler.next(cfg.train.tasks_per_step).into_iter().map(|i| tasks[i].clone()).collect();
        let m = trainer.step(&env, &batch)?;
        metrics.write(&m)?;
        bar.set_position(trainer.step);
        bar.set_message(format!("reward {:.3} f1_file {:.3} e {:.3} loss {:.4}", m.reward, m.f1_file, m.e, m.loss));
        nonfinite_in_a_row = if m.skipped { nonfinite_in_a_row + 1 } else { 0 };
        if nonfinite_in_a_row >= cfg.train.max_nonfinite_steps.max(1) {
            let dir = save(&trainer, sampler.cursor)?;
            anyhow::bail!(
                "{nonfinite_in_a_row} steps in a row had a NaN/inf loss or gradient (train.max_nonfinite_steps); saved {} and stopped",
                dir.display()
            );
        }
        let interrupted = trainer::dist::any(&*dist, stop.load(std::sync::atomic::Ordering::SeqCst))?;
        let mut saved = None;
        if trainer.step % save_every == 0 || trainer.step == total || interrupted {
            let dir = save(&trainer, sampler.cursor)?;
            bar.println(format!("saved {}", dir.display()));
            saved = Some(dir);
        }
        if let Some(log) = &mut rank_log {
            let mine: Vec<&str> = batch[trainer::dist::share(&*dist, batch.len())].iter().map(|t| t.instance_id.as_str()).collect();
            let line = serde_json::json!({"step": m.step, "rank": dist.rank(), "ranks": dist.world(), "pid": std::process::id(),
                                          "tasks": mine, "episodes": m.rolled_out, "params_hash": run.take_saved_hash()});
            log.write(&line)?;
        }
        if let (true, Some(dir)) = (interrupted, saved) {
            bar.abandon();
            return Ok(RunEnd::Interrupted(dir));
        }
    }
    bar.finish();
    let last = match checkpoint::latest(run_dir)? {
        Some(dir) => dir,
        None => save(&trainer, sampler.cursor)?,
    };
    Ok(RunEnd::Done(last))
}

/// This rank's sampling stream from a checkpoint: its own when the
/// checkpoint was written by as many ranks (exact resume); else, with a
/// note, a stream derived from the seed, the step and the rank (the run
/// continues, not bit for bit as it would have).
fn resumed_rng(state: &checkpoint::TrainState, seed: u64, dist: &dyn trainer::dist::Collective) -> Result<rand_chacha::ChaCha8Rng> {
    let written = super::run::ranks_in_state(state, "sampling");
    if written != dist.world() && dist.rank() == 0 {
        eprintln!(
            "resuming a checkpoint of {written} rank(s) with {} rank(s): the data order continues, the sampling streams of the ranks without one are derived afresh (not bitwise the run it would have been)",
            dist.world()
        );
    }
    match state.rngs.get(&super::run::rank_key("sampling", dist.rank())) {
        Some(rng) => Ok(rng.restore()?),
        None if dist.rank() == 0 => anyhow::bail!("state.json has no `sampling` RNG"),
        None => {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ state.step.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            rng.set_stream(dist.rank() as u64);
            Ok(rng)
        }
    }
}

/// What a run trains, by name: its `Var`s' tensors (every weight, or a LoRA
/// run's adapter), as a checkpoint saves them.
pub fn trained(vars: &std::collections::BTreeMap<String, candle_core::Var>) -> trainer::weights::TensorMap {
    vars.iter().map(|(k, v)| (k.clone(), v.as_tensor().clone())).collect()
}

/// `pipeline` rolls out from several models (the SFT model probes and is
/// evaluated, the base is evaluated, GRPO trains): on a vLLM server each
/// stage loads its own, which `[rollout.vllm] load_model = true` allows.
pub fn check_vllm_pipeline(cfg: &RunConfig) -> Result<()> {
    if let (trainer::run_config::Engine::Vllm, Some(v)) = (cfg.rollout.engine, &cfg.rollout.vllm) {
        anyhow::ensure!(
            v.load_model,
            "[rollout] engine = \"vllm\" in `pipeline`: its stages roll out from several models (base, SFT, GRPO), which each load onto the server; set [rollout.vllm] load_model = true"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `pipeline` on vLLM needs `load_model` (its stages' models each load
    /// onto the server); the builtin engine needs nothing.
    #[test]
    fn pipeline_on_vllm_needs_load_model() {
        let base = "name = \"t\"\n[model]\npath = \"m\"\n[env]\nrepos_dir = \"r\"\n";
        let cfg = |extra: &str| -> RunConfig { toml::from_str(&format!("{base}{extra}")).unwrap() };
        check_vllm_pipeline(&cfg("")).unwrap();
        let vllm = "[rollout]\nengine = \"vllm\"\n[rollout.vllm]\nurl = \"http://h:1\"\nserved_model = \"p\"\n";
        let e = check_vllm_pipeline(&cfg(vllm)).unwrap_err().to_string();
        assert!(e.contains("load_model = true"), "{e}");
        check_vllm_pipeline(&cfg(&format!("{vllm}load_model = true\n"))).unwrap();
    }
}
