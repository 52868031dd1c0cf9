//! What every training run (`train`'s GRPO, `sft`) shares: where it starts
//! (the config's model or a checkpoint to resume), the checks a resume must
//! pass, saving a checkpoint, and the metrics file.

use anyhow::{Context, Result};
use candle_core::{Device, Var};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use trainer::checkpoint::{self, DataCursor, RngState, TrainState, FORMAT_VERSION};
use trainer::dist;
use trainer::optim::AdamW;
use trainer::plan::PhaseKind;
use trainer::run_config::RunConfig;
use trainer::weights::{load_weights, TensorMap};
use trainer::ModelConfig;

/// How a training run (GRPO or SFT) starts and stops.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// `auto` or a checkpoint folder.
    pub resume: Option<String>,
    pub max_steps: Option<u64>,
    pub save_every: Option<u64>,
    pub allow_config_change: bool,
    /// The memory plan's check before the weights are loaded.
    pub memory: MemoryCheck,
}

/// What the run's memory plan is checked against at start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum MemoryCheck {
    /// The device's free memory (the host's available memory on the CPU).
    #[default]
    Device,
    /// This many bytes (`--gpu-memory`).
    Limit(u64),
    /// No check (`--no-memory-check`).
    Off,
}

impl MemoryCheck {
    /// From `--gpu-memory` and `--no-memory-check`.
    pub fn from_args(limit: Option<u64>, off: bool) -> Self {
        match (off, limit) {
            (true, _) => MemoryCheck::Off,
            (false, Some(b)) => MemoryCheck::Limit(b),
            (false, None) => MemoryCheck::Device,
        }
    }
}

/// `--gpu-memory` and `--no-memory-check` of `train` and `sft`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct MemoryArgs {
    /// Check the memory plan against this much device memory (e.g. 141GB)
    /// instead of the device's free memory.
    #[arg(long, value_parser = trainer::plan::bytes::parse)]
    pub gpu_memory: Option<u64>,
    /// Skip the memory plan's check at start.
    #[arg(long)]
    pub no_memory_check: bool,
}

impl MemoryArgs {
    pub fn check(&self) -> MemoryCheck {
        MemoryCheck::from_args(self.gpu_memory, self.no_memory_check)
    }
}

/// The run stage whose memory phases are checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Grpo,
    Sft,
}

/// How a training run ended.
#[derive(Debug, Clone, PartialEq)]
pub enum RunEnd {
    /// All steps done; the newest checkpoint.
    Done(PathBuf),
    /// SIGINT/SIGTERM: a checkpoint was saved, `--resume auto` continues.
    Interrupted,
}

/// A training run's folder and starting point.
pub struct Run {
    pub dir: PathBuf,
    /// The checkpoint resumed from, if any.
    pub resume_dir: Option<PathBuf>,
    /// The config's model (the starting point of a fresh run).
    pub base_dir: PathBuf,
    pub model_cfg: ModelConfig,
    pub device: Device,
    cfg_json: serde_json::Value,
    cfg_hash: String,
    tok_dir: PathBuf,
    /// `[model] chat_template`, written into each checkpoint's tokenizer_config.json.
    chat_template: Option<PathBuf>,
    keep_last: usize,
    /// With several ranks, the hash of the parameters the last save compared.
    saved_hash: std::cell::Cell<Option<u64>>,
}

/// The memory plan of `stage` against the device (or `--gpu-memory`),
/// before anything large is allocated: a clear error naming the setting to
/// lower instead of an out-of-memory failure deep inside a step.
fn check_memory(cfg: &RunConfig, model: &ModelConfig, device: &Device, check: MemoryCheck, stage: Stage) -> Result<()> {
    let (limit, what) = match check {
        MemoryCheck::Off => return Ok(()),
        MemoryCheck::Limit(b) => (b, "--gpu-memory"),
        MemoryCheck::Device => trainer::plan::device_memory::available(device)?,
    };
    let mut plan = trainer::plan::run::for_run(cfg, model, rayon::current_num_threads())?;
    let kinds: &[PhaseKind] = match stage {
        Stage::Grpo => &[PhaseKind::Rollout, PhaseKind::GrpoUpdate],
        Stage::Sft => &[PhaseKind::SftUpdate],
    };
    plan.phases.retain(|p| kinds.contains(&p.kind));
    tracing::info!(peak = %trainer::plan::bytes::format(plan.peak_bytes()), limit = %trainer::plan::bytes::format(limit), "memory plan");
    Ok(plan.check(limit, what)?)
}

impl Run {
    /// Resolves where the run starts (`opts.resume`) and loads those weights.
    pub fn open(cfg: &RunConfig, dir: &Path, opts: &RunOptions, keep_last: usize, stage: Stage) -> Result<(Run, TensorMap)> {
        let cfg_json = serde_json::to_value(cfg)?;
        let cfg_hash = checkpoint::config_hash(&cfg_json);
        let resume_dir = match opts.resume.as_deref() {
            None => None,
            Some("auto") => checkpoint::latest(dir)?,
            Some(path) => Some(PathBuf::from(path)),
        };
        let base_dir = trainer::hub::resolve_model_dir(&cfg.model.path)?;
        let model_dir = resume_dir.clone().unwrap_or_else(|| base_dir.clone());
        let model_cfg = ModelConfig::from_file(&model_dir.join("config.json"))?;
        let device = cfg.model.device.open()?;
        check_memory(cfg, &model_cfg, &device, opts.memory, stage)?;
        let weights = load_weights(&model_dir, &model_cfg, cfg.model.dtype.into(), &device)?;
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let tok_dir = cfg.tokenizer_dir(&base_dir);
        let chat_template = cfg.model.chat_template.clone();
        let run = Run { dir: dir.to_path_buf(), resume_dir, base_dir, model_cfg, device, cfg_json, cfg_hash, tok_dir, chat_template, keep_last, saved_hash: Default::default() };
        Ok((run, weights))
    }

    /// On resume: the checkpoint's state, checked against this run's model
    /// and config, with its optimizer moments and masters restored.
    pub fn resume(&self, opts: &RunOptions, optimizer: &mut AdamW, vars: &BTreeMap<String, Var>) -> Result<Option<TrainState>> {
        let Some(dir) = &self.resume_dir else { return Ok(None) };
        let state = checkpoint::load_state(dir)?;
        checkpoint::check_compatible(dir, &state, &checkpoint::arch_hash(&self.model_cfg), &self.cfg_hash, opts.allow_config_change)?;
        optimizer.import_from(&checkpoint::OptimizerFile::open(dir, &self.device)?)?;
        optimizer.sync_params_from_masters(vars)?;
        if dist::current().rank() == 0 {
            dist::say(&format!("resumed from {} at step {}", dir.display(), state.step));
        }
        Ok(Some(state))
    }

    /// Saves step `step` atomically (with the tokenizer, so the folder is a
    /// complete model) and keeps the newest `keep_last`. With several ranks
    /// every rank calls it: their parameters must be rank 0's bit for bit,
    /// their RNG streams go into the state (rank r's under `<name>.rank<r>`),
    /// and rank 0 alone writes.
    pub fn save(&self, step: u64, rngs: BTreeMap<String, RngState>, data: DataCursor, model: &TensorMap, optimizer: &AdamW) -> Result<PathBuf> {
        let dist = dist::current();
        self.saved_hash.set(dist::reduce::check_same_parameters(&*dist, model, step)?);
        let rngs = gather_rngs(&*dist, rngs)?;
        if dist.rank() != 0 {
            dist.barrier()?;
            return Ok(self.dir.join(checkpoint::step_dir_name(step)));
        }
        let dir = self.write(step, rngs, data, model, optimizer)?;
        dist.barrier()?;
        Ok(dir)
    }

    fn write(&self, step: u64, rngs: BTreeMap<String, RngState>, data: DataCursor, model: &TensorMap, optimizer: &AdamW) -> Result<PathBuf> {
        let state = TrainState {
            format_version: FORMAT_VERSION,
            step,
            rngs,
            data,
            config: self.cfg_json.clone(),
            config_hash: self.cfg_hash.clone(),
            arch_hash: checkpoint::arch_hash(&self.model_cfg),
        };
        let opt = optimizer.export_state()?.into_iter().collect();
        let dir = checkpoint::save(&self.dir, &self.model_cfg, model, &opt, &state, self.keep_last)?;
        super::common::copy_tokenizer(&self.tok_dir, &dir, false)?;
        if let Some(template) = &self.chat_template {
            super::common::set_chat_template(&dir, template)?;
        }
        Ok(dir)
    }

    /// `<run>/metrics.jsonl` for appending, without the lines of steps after
    /// `step` (they belong to steps that will be redone). Rank 0 writes it;
    /// other ranks get a file that writes nothing.
    pub fn metrics(&self, step: u64) -> Result<MetricsFile> {
        if dist::current().rank() != 0 {
            return Ok(MetricsFile { file: None, path: self.dir.join("metrics.jsonl") });
        }
        MetricsFile::append(&self.dir.join("metrics.jsonl"), step)
    }

    /// The parameter hash the last [`Run::save`] compared across ranks (as
    /// hex; none with one process), taken: a step that saved nothing has none.
    pub fn take_saved_hash(&self) -> Option<String> {
        self.saved_hash.take().map(|h| format!("{h:016x}"))
    }

    /// With several ranks, `<run>/rank-<r>.jsonl`: what this rank did each
    /// step (its share of the work, its pid, the parameter hash at a
    /// checkpoint). None with one process.
    pub fn rank_log(&self, step: u64) -> Result<Option<MetricsFile>> {
        let dist = dist::current();
        if dist.world() == 1 {
            return Ok(None);
        }
        Ok(Some(MetricsFile::append(&self.dir.join(format!("rank-{}.jsonl", dist.rank())), step)?))
    }
}

/// The sampling stream of this rank, as a fresh run starts it: the seed's
/// stream 0 on rank 0 (as with one process), stream r on rank r.
pub fn rank_rng(seed: u64, dist: &dyn dist::Collective) -> rand_chacha::ChaCha8Rng {
    use rand::SeedableRng;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    if dist.rank() > 0 {
        rng.set_stream(dist.rank() as u64);
    }
    rng
}

/// The name rank r's RNG `name` has in a checkpoint: `name` on rank 0, `name.rank<r>` else.
pub fn rank_key(name: &str, rank: usize) -> String {
    if rank == 0 { name.to_string() } else { format!("{name}.rank{rank}") }
}

/// Every rank's RNG streams in one map ([`rank_key`] names).
fn gather_rngs(dist: &dyn dist::Collective, rngs: BTreeMap<String, RngState>) -> Result<BTreeMap<String, RngState>> {
    if dist.world() == 1 {
        return Ok(rngs);
    }
    let all = dist::gather_json(dist, &rngs)?;
    Ok(all.into_iter().enumerate().flat_map(|(r, m)| m.into_iter().map(move |(k, v)| (rank_key(&k, r), v))).collect())
}

/// How many ranks wrote a checkpoint's RNG `name` streams (1 + the
/// `name.rank<r>` keys).
pub fn ranks_in_state(state: &TrainState, name: &str) -> usize {
    1 + state.rngs.keys().filter(|k| k.starts_with(&format!("{name}.rank"))).count()
}

/// A run's metrics.jsonl (or a rank's log): one JSON line per step, flushed
/// as written; a file of `None` writes nothing.
pub struct MetricsFile {
    file: Option<std::fs::File>,
    path: PathBuf,
}

impl MetricsFile {
    /// `path` for appending, without the lines of steps after `step`.
    fn append(path: &Path, step: u64) -> Result<MetricsFile> {
        truncate_metrics(path, step)?;
        let file = std::fs::OpenOptions::new().create(true).append(true).open(path).with_context(|| format!("opening {}", path.display()))?;
        Ok(MetricsFile { file: Some(file), path: path.to_path_buf() })
    }

    pub fn write<T: serde::Serialize>(&mut self, row: &T) -> Result<()> {
        let Some(file) = &mut self.file else { return Ok(()) };
        writeln!(file, "{}", serde_json::to_string(row)?).and_then(|_| file.flush()).with_context(|| format!("writing {}", self.path.display()))
    }
}

/// Keep only the metrics lines of steps `1..=step`.
pub fn truncate_metrics(path: &Path, step: u64) -> Result<()> {
    if !path.exists() {
        return Ok(());
    }
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let kept: String = text
        .lines()
        .filter(|l| serde_json::from_str::<serde_json::Value>(l).ok().and_then(|v| v["step"].as_u64()).is_some_and(|s| s <= step))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(path, kept).with_context(|| format!("writing {}", path.display()))
}
