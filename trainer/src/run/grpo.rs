//! A GRPO run: the trainer set up from the run's starting point (the KL
//! reference, the sampling streams, the task sampler's cursor on resume,
//! the vLLM engine when the config names it) and driven by [`drive`].

use super::drive::{drive, Schedule, Step, Steps};
use super::{Run, RunEnd, RunOptions, Stage};
use crate::checkpoint::{self, DataCursor, RngState};
use crate::run_config::RunConfig;
use crate::grpo::{sampler::TaskSampler, StepMetrics, Trainer};
use lm::weights::load_weights;
use crate::error::{Context, Result};
use rand::SeedableRng;
use rollout::episode::driver::Env;
use rollout::repo::SnapshotStore;
use rollout::tasks::Task;
use rollout::tools::ToolRunner;
use std::path::{Path, PathBuf};

/// GRPO on `tasks` into `run_dir` (checkpoints, metrics.jsonl).
pub fn grpo(cfg: &RunConfig, run_dir: &Path, tasks: &[Task], opts: &RunOptions) -> Result<RunEnd> {
    // The ranks were checked by the command ([`RunConfig::check_ranks`]).
    let (run, weights, adapter) = Run::open(cfg, run_dir, opts, cfg.train.keep_last, Stage::Grpo)?;
    // Read (and checked) before anything else of the resume.
    let pending = next_rollouts(run.resume_dir.as_deref(), cfg.rollout.off_policy)?;
    // The KL reference is always the run's starting model, also on resume
    // (a LoRA run's is its base, which `weights` already is).
    let reference = match (&run.resume_dir, cfg.reference()) {
        (Some(_), crate::grpo::Reference::Copy) => Some(load_weights(&run.base_dir, &run.model_cfg, cfg.model.dtype.into(), &run.device)?),
        _ => None,
    };
    let dist = crate::dist::current();
    let rng = super::rank_rng(cfg.sampling.seed, &*dist);
    let mut trainer = Trainer::new(cfg.clone(), &run.model_cfg, &weights, reference.as_ref(), adapter.as_ref(), rng)?;
    drop((weights, reference, adapter));
    crate::malloc::release_free_memory();
    let mut sampler = TaskSampler::new(cfg.sampling.seed, tasks.len(), DataCursor::default());
    if let Some(state) = run.resume(&mut trainer.optimizer, &trainer.sharding, &trainer.vars)? {
        trainer.step = state.step;
        trainer.sampling_rng = resumed_rng(&state, cfg.sampling.seed, &*dist)?;
        sampler.cursor = state.data;
        trainer.pending = pending;
    }

    let tok_dir = cfg.tokenizer_dir(&run.base_dir);
    let tok = cfg.chat_tokenizer(&run.base_dir).with_context(|| format!("tokenizer in {}", tok_dir.display()))?;
    if cfg.rollout.engine == crate::run_config::Engine::Vllm {
        trainer.engine = Some(crate::episodes::vllm::training_engine(cfg, &tok, run_dir)?);
    }
    if cfg.rollout.off_policy > 0 && cfg.rollout.engine == crate::run_config::Engine::Builtin && cfg.model.device == crate::device::DeviceKind::Cpu {
        tracing::warn!("[rollout] off_policy = 1 with the built-in engine on the CPU: the next step's decoding and the update share the cores (measured on 2 cores: 1.32x the on-policy wall time per step; BENCHMARKS.md, \"Off-policy rollouts\"); the overlap pays with a vLLM server");
    }
    let store = SnapshotStore::open(&cfg.env.repos_dir);
    let tools = ToolRunner::new(cfg.env.tools.clone()).with_search(cfg.search.clone(), rollout::search::IndexCache::shared());
    let env = Env { tokenizer: &tok, store: &store, tools: &tools, reward: &cfg.reward };
    let schedule = Schedule {
        total: opts.max_steps.unwrap_or(cfg.train.steps),
        save_every: opts.save_every.unwrap_or(cfg.train.save_every),
        max_nonfinite: cfg.train.max_nonfinite_steps,
        unit: "steps",
    };
    drive(&run, &mut GrpoSteps { trainer, sampler, env, tasks, flat_steps: 0 }, &schedule)
}

/// GRPO's steps: each samples the next tasks (and further ones under
/// `zero_std_groups = "resample"`), rolls out and updates.
struct GrpoSteps<'a> {
    trainer: Trainer,
    sampler: TaskSampler,
    env: Env<'a>,
    tasks: &'a [Task],
    /// Steps in a row where no group had a reward spread (nothing learned).
    flat_steps: u64,
}

/// After this many steps in a row with no group's rewards spread, the run
/// says what to do ([`flat_steps_advice`]).
pub const FLAT_STEPS_ADVICE_AFTER: u64 = 3;

/// What to do when `steps` steps in a row had no group with a reward
/// spread (`answered`: the last step's share of episodes that answered).
pub fn flat_steps_advice(steps: u64, answered: f64) -> String {
    let why = if answered == 0.0 {
        "the model answered in none of its episodes, so every reward is 0"
    } else {
        "each task's episodes all got the same reward"
    };
    format!(
        "{steps} steps in a row with no group whose rewards differ ({why}): GRPO learns only from differences within a group, so these steps trained nothing. \
         Start from a model that answers some of the time: fine-tune it on teacher trajectories first (`fusegrpo synth` then `fusegrpo sft`, or `fusegrpo pipeline`, \
         docs/recipe.md) and pass its checkpoint with --model; or sample more apart ([sampling] temperature, [rollout] group), or give the tasks partial credit"
    )
}

impl Steps for GrpoSteps<'_> {
    type Metrics = StepMetrics;

    fn done(&self) -> u64 {
        self.trainer.step
    }

    fn step(&mut self, _last: bool) -> Result<Option<Step<StepMetrics>>> {
        let (sampler, tasks) = (&mut self.sampler, self.tasks);
        // The step's tasks, and further ones (`zero_std_groups =
        // "resample"`), come from the sampler, so the checkpointed cursor
        // counts them (and the next step's, drawn ahead under `off_policy`).
        let mut draw = |k: usize| -> Vec<Task> { sampler.next(k).into_iter().map(|i| tasks[i].clone()).collect() };
        let m = self.trainer.step(&self.env, &mut draw)?;
        self.flat_steps = if m.frac_reward_zero_std >= 1.0 { self.flat_steps + 1 } else { 0 };
        if self.flat_steps == FLAT_STEPS_ADVICE_AFTER && self.trainer.dist.rank() == 0 {
            tracing::warn!("{}", flat_steps_advice(self.flat_steps, m.answered));
        }
        let mut share = serde_json::Map::new();
        share.insert("tasks".into(), serde_json::json!(m.rolled_tasks));
        share.insert("episodes".into(), m.rolled_out.into());
        let message = format!("reward {:.3} f1_file {:.3} e {:.3} loss {:.4}", m.reward, m.f1_file, m.e, m.loss);
        Ok(Some(Step { skipped: m.skipped, message, share, metrics: m }))
    }

    fn save(&self, run: &Run) -> Result<PathBuf> {
        let t = &self.trainer;
        let rngs = [("sampling".to_string(), RngState::capture(&t.sampling_rng))].into();
        // Rollouts made ahead (`off_policy`) came from weights the update
        // has replaced: they are kept so a resume trains on the same.
        let ahead = t.pending.as_ref().map(|r| -> Result<_> { Ok((NEXT_ROLLOUTS, serde_json::to_vec(r)?)) }).transpose()?;
        run.save(t.step, rngs, self.sampler.cursor, &trained(&t.vars), &t.optimizer, &t.sharding, ahead.as_slice())
    }
}

/// The file of a checkpoint that holds the next step's rollouts, made
/// ahead under `[rollout] off_policy`.
pub const NEXT_ROLLOUTS: &str = "next_rollouts.json";

/// The next step's rollouts a checkpoint kept (`off_policy`), if it has
/// them and the run is off-policy; a checkpoint without them (an on-policy
/// run's, or the one before the config's last step) makes them afresh.
fn next_rollouts(checkpoint: Option<&Path>, off_policy: u32) -> Result<Option<crate::grpo::collect::Rollouts>> {
    let Some(path) = checkpoint.map(|c| c.join(NEXT_ROLLOUTS)) else { return Ok(None) };
    if !path.exists() {
        return Ok(None);
    }
    if off_policy == 0 {
        tracing::warn!(path = %path.display(), "the checkpoint holds rollouts made ahead (off_policy = 1), this run is on-policy: they are not used");
        return Ok(None);
    }
    let text = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    let rollouts = serde_json::from_slice(&text).with_context(|| format!("{}: not the rollouts a checkpoint keeps (corrupt or from another version); delete the checkpoint folder to resume from the one before it", path.display()))?;
    Ok(Some(rollouts))
}

/// This rank's sampling stream from a checkpoint: its own when the
/// checkpoint was written by as many ranks (exact resume); else, with a
/// note, a stream derived from the seed, the step and the rank (the run
/// continues, not bit for bit as it would have).
fn resumed_rng(state: &checkpoint::TrainState, seed: u64, dist: &dyn crate::dist::Collective) -> Result<rand_chacha::ChaCha8Rng> {
    let written = super::ranks_in_state(state, "sampling");
    if written != dist.world() && dist.rank() == 0 {
        crate::progress::say(&format!(
            "resuming a checkpoint of {written} rank(s) with {} rank(s): the data order continues, the sampling streams of the ranks without one are derived afresh (not bitwise the run it would have been)",
            dist.world()
        ));
    }
    match state.rngs.get(&super::rank_key("sampling", dist.rank())) {
        Some(rng) => Ok(rng.restore()?),
        None if dist.rank() == 0 => crate::error::bail!("state.json has no `sampling` RNG"),
        None => {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ state.step.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            rng.set_stream(dist.rank() as u64);
            Ok(rng)
        }
    }
}

/// What a run trains, by name: its `Var`s' tensors (every weight, or a LoRA
/// run's adapter), as a checkpoint saves them.
pub fn trained(vars: &std::collections::BTreeMap<String, candle_core::Var>) -> lm::weights::TensorMap {
    vars.iter().map(|(k, v)| (k.clone(), v.as_tensor().clone())).collect()
}

/// `pipeline` rolls out from several models (the SFT model probes and is
/// evaluated, the base is evaluated, GRPO trains): on a vLLM server each
/// stage loads its own, which `[rollout.vllm] load_model = true` allows.
pub fn check_vllm_pipeline(cfg: &RunConfig) -> Result<()> {
    if let (crate::run_config::Engine::Vllm, Some(v)) = (cfg.rollout.engine, &cfg.rollout.vllm) {
        crate::error::ensure!(
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
