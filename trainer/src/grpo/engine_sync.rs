//! GRPO's rollouts on a vLLM server (`[rollout] engine = "vllm"`): before a
//! step's rollouts the server gets that step's weights, and a probe checks
//! that it serves them, before and after the rollouts.
//!
//! A sync writes the weights being trained into a new folder (a whole
//! model: `config.json` and `model.safetensors` with the checkpoint's
//! names; a LoRA run: its adapter in PEFT's layout), has the server load it
//! ([`VllmEngine::reload_weights`] or [`VllmEngine::load_adapter`]) and
//! removes the folder before it. Then the server's log-probs of a fixed
//! probe must equal the trainer's under the same weights within
//! `[rollout.vllm] probe_tolerance` (mean |difference|): a server that did
//! not take the weights, or that was restarted with other ones during the
//! rollouts, fails the step, which a resume then redoes.

use crate::error::{Error, Result};
use lm::model::CausalLm;
use lm::weights::{ShardPolicy, TensorMap};
use rollout::engine::vllm::VllmEngine;
use std::path::PathBuf;
use std::time::Instant;

/// The weights a sync uploads.
pub enum Upload<'a> {
    /// Every weight of the model.
    Model(&'a lm::ModelConfig, &'a TensorMap),
    /// A LoRA run's adapter (the server serves its base).
    Adapter(&'a lm::lora::Adapter),
}

/// A vLLM server kept in step with a trainer's weights.
pub struct EngineSync {
    pub engine: VllmEngine,
    /// Where each sync's folder is written (readable by the server).
    dir: PathBuf,
    probe: Vec<u32>,
    tolerance: f64,
    base_seed: u64,
    /// The step whose weights the server has, the trainer's log-probs of the
    /// probe under them, and the folder they were loaded from.
    synced: Option<(u64, Vec<f32>, PathBuf)>,
}

/// What a sync found and took.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Synced {
    pub seconds: f64,
    /// Mean and max |difference| of the probe's log-probs, server against
    /// trainer, after the sync.
    pub probe_mean: f64,
    pub probe_max: f64,
    /// Mean |difference| of the server's probe log-probs before the sync
    /// against the trainer's (the weights it was to take): how far the
    /// server had to move, which `probe_mean` must be well under.
    pub probe_moved: f64,
}

impl EngineSync {
    /// `probe`: the token ids whose log-probs are compared (some tens);
    /// `base_seed`: each step's requests are seeded from it and the step.
    pub fn new(engine: VllmEngine, dir: PathBuf, probe: Vec<u32>, tolerance: f64, base_seed: u64) -> Self {
        EngineSync { engine, dir, probe, tolerance, base_seed, synced: None }
    }

    /// The step whose weights the server has (None before the first sync).
    pub fn synced_step(&self) -> Option<u64> {
        self.synced.as_ref().map(|s| s.0)
    }

    /// Seeds the requests of `step`'s rollouts (each step its own samples;
    /// the same on a resume of that step).
    pub fn seed_step(&mut self, step: u64) {
        self.seed_round(step, 0);
    }

    /// Seeds round `round` of `step`'s rollouts: round 0 as
    /// [`EngineSync::seed_step`], each further round of `zero_std_groups =
    /// "resample"` its own samples (a task drawn again samples afresh).
    pub fn seed_round(&mut self, step: u64, round: usize) {
        let seed = self.base_seed ^ step.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.engine.set_seed(seed ^ (round as u64).wrapping_mul(0xD1B5_4A32_D192_ED03));
    }

    /// Uploads `step`'s weights and checks the probe against `ours` (the
    /// model the rollouts would otherwise decode with: the same weights).
    pub fn sync(&mut self, step: u64, upload: Upload<'_>, ours: &CausalLm) -> Result<Synced> {
        let t0 = Instant::now();
        let folder = self.dir.join(format!("step_{step:08}"));
        if folder.exists() {
            std::fs::remove_dir_all(&folder).map_err(|e| Error::io(&folder, e))?;
        }
        let vllm = |e: rollout::engine::vllm::VllmError| Error::invalid("rollout engine", e.to_string());
        if self.synced.is_none() && matches!(upload, Upload::Model(..)) {
            // A run killed during a sync left the server paused.
            self.engine.resume().map_err(vllm)?;
        }
        let before = self.engine.prompt_logprobs(&self.probe).map_err(vllm)?;
        match upload {
            Upload::Model(cfg, tensors) => {
                lm::weights::save_checkpoint(&folder, cfg, tensors, ShardPolicy::Single)?;
                if cfg.tie_word_embeddings {
                    // The server serves the model untied (`fusegrpo engine
                    // vllm` does): its head is reloaded by this name.
                    let embeddings = tensors.get("model.embed_tokens.weight").ok_or_else(|| Error::invalid("rollout engine", "no model.embed_tokens.weight to sync"))?;
                    lm::weights::write_untied_head(&folder, embeddings)?;
                }
                self.engine.reload_weights(&folder).map_err(|e| {
                    Error::invalid("rollout engine", format!("{e} (the server must serve a model of this run's architecture: start it on the run's [model] path)"))
                })?;
            }
            Upload::Adapter(adapter) => {
                lm::lora::peft::save(&folder, adapter, "fusegrpo-policy", None)?;
                // Named after the run's folder and the step: unique on a
                // server that several runs (a pipeline's) have used.
                use std::hash::{Hash, Hasher};
                let mut h = std::collections::hash_map::DefaultHasher::new();
                self.dir.hash(&mut h);
                let name = format!("fusegrpo-{:08x}-step-{step}", h.finish() as u32);
                self.engine.load_adapter(&name, &folder).map_err(vllm)?;
            }
        }
        let ours = self.trainer_logprobs(ours)?;
        let (probe_mean, probe_max) = self.compare(&ours)?;
        let probe_moved = mean_max_abs_diff(&ours, &before).0;
        if let Some((_, _, old)) = self.synced.replace((step, ours, folder.clone())) {
            if old != folder {
                if let Err(e) = std::fs::remove_dir_all(&old) {
                    tracing::warn!(folder = %old.display(), error = %e, "could not remove the previous sync's folder");
                }
            }
        }
        Ok(Synced { seconds: t0.elapsed().as_secs_f64(), probe_mean, probe_max, probe_moved })
    }

    /// Before the first sync of a LoRA run: the server (no adapter) serves
    /// `base`, the run's base model, which the adapters are loaded onto.
    pub fn check_base(&self, base: &CausalLm) -> Result<(f64, f64)> {
        let ours = self.trainer_logprobs(base)?;
        self.within_tolerance(&ours, "serves another model than this LoRA run's base: the log-probs", "Serve the base model ([model] path) with --enable-lora (`fusegrpo engine vllm --model <[model] path> --adapter-rank R`)")
    }

    /// The server still serves the synced weights (after the rollouts: a
    /// server restarted meanwhile would serve its own).
    pub fn check(&self) -> Result<(f64, f64)> {
        let (_, ours, _) = self.synced.as_ref().ok_or_else(|| Error::invalid("rollout engine", "checked before the first weight sync"))?;
        self.compare(ours)
    }

    fn compare(&self, ours: &[f32]) -> Result<(f64, f64)> {
        self.within_tolerance(
            ours,
            "does not serve the weights being trained: the log-probs",
            "Was the server restarted or did it load other weights? Resume the run: the step is redone and the weights synced again. (A model that ties its embeddings must be served untied for whole-model sync, as `fusegrpo engine vllm` does: vLLM's in-place reload keeps a tied head's old weights)",
        )
    }

    /// The probe's log-probs under `model` (the first token's left out).
    fn trainer_logprobs(&self, model: &CausalLm) -> Result<Vec<f32>> {
        Ok(lm::logprobs::score_sequence(model, &self.probe)?.into_iter().skip(1).map(|l| l.unwrap_or(f32::NAN)).collect())
    }

    /// The server's probe log-probs against `ours`: mean and max |diff|, or
    /// an error saying what `problem` is and `fix` when the mean exceeds the
    /// tolerance.
    fn within_tolerance(&self, ours: &[f32], problem: &str, fix: &str) -> Result<(f64, f64)> {
        let theirs = self.engine.prompt_logprobs(&self.probe).map_err(|e| Error::invalid("rollout engine", e.to_string()))?;
        let (mean, max) = mean_max_abs_diff(ours, &theirs);
        if !(mean <= self.tolerance) {
            return Err(Error::invalid(
                "rollout engine",
                format!(
                    "vllm engine at {} {problem} of a {}-token probe differ from the trainer's by {mean:.4} on average (max {max:.4}; [rollout.vllm] probe_tolerance = {}). {fix}",
                    self.engine.base(),
                    self.probe.len(),
                    self.tolerance
                ),
            ));
        }
        Ok((mean, max))
    }
}

/// Mean and max |a - b| over pairs (NaN counts as infinitely far).
pub fn mean_max_abs_diff(a: &[f32], b: &[f32]) -> (f64, f64) {
    if a.len() != b.len() || a.is_empty() {
        return (f64::INFINITY, f64::INFINITY);
    }
    let diffs: Vec<f64> = a.iter().zip(b).map(|(x, y)| (*x as f64 - *y as f64).abs()).map(|d| if d.is_nan() { f64::INFINITY } else { d }).collect();
    (diffs.iter().sum::<f64>() / diffs.len() as f64, diffs.iter().copied().fold(0.0, f64::max))
}
