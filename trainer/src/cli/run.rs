//! What every training run (`train`'s GRPO, `sft`) shares: where it starts
//! (the config's model or a checkpoint to resume), the checks a resume must
//! pass, saving a checkpoint, and the metrics file.

use anyhow::{Context, Result};
use candle_core::{Device, Var};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use trainer::checkpoint::{self, DataCursor, RngState, TrainState, FORMAT_VERSION};
use trainer::dist::{self, zero::Sharding};
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
    /// Start over in a run folder that holds a run (`--overwrite`): its
    /// checkpoints after the starting step and its metrics lines go.
    pub overwrite: bool,
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

/// How `train` and `sft` start and stop (their shared flags).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct RunArgs {
    /// `auto` (newest complete checkpoint in the run folder, if any) or a checkpoint folder.
    #[arg(long)]
    pub resume: Option<String>,
    /// Stop after this many steps in total (default: the config's, train.steps or all of SFT's epochs).
    #[arg(long)]
    pub max_steps: Option<u64>,
    /// Save every N steps (default: the config's save_every).
    #[arg(long)]
    pub save_every: Option<u64>,
    /// Resume even if the run config changed since the checkpoint.
    #[arg(long)]
    pub allow_config_change: bool,
    /// Delete the run that --out holds (its checkpoints after the starting
    /// step, its metrics) and start over; without it such a folder is refused.
    #[arg(long)]
    pub overwrite: bool,
    #[command(flatten)]
    pub memory: MemoryArgs,
    /// Start from this model instead of the config's [model] path: a folder
    /// (e.g. a full-weight SFT run's checkpoint) or a hub id.
    #[arg(long)]
    pub model: Option<String>,
    /// Start from this LoRA adapter instead of the config's [model] adapter
    /// (e.g. a LoRA SFT run's checkpoint).
    #[arg(long)]
    pub adapter: Option<PathBuf>,
}

impl RunArgs {
    /// The config with `--model` and `--adapter` in place of its own.
    pub fn apply(&self, cfg: &mut RunConfig) {
        if let Some(m) = &self.model {
            cfg.model.path = m.clone();
        }
        if let Some(a) = &self.adapter {
            cfg.model.adapter = Some(a.clone());
        }
    }

    pub fn options(&self) -> RunOptions {
        RunOptions {
            resume: self.resume.clone(),
            max_steps: self.max_steps,
            save_every: self.save_every,
            allow_config_change: self.allow_config_change,
            overwrite: self.overwrite,
            memory: self.memory.check(),
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
    /// SIGINT/SIGTERM: this checkpoint was saved, `--resume auto` continues.
    Interrupted(PathBuf),
}

/// A training run's folder and starting point.
pub struct Run {
    pub dir: PathBuf,
    /// The checkpoint resumed from, if any.
    pub resume_dir: Option<PathBuf>,
    /// That checkpoint's state, read and checked once in [`Run::open`].
    resume_state: Option<TrainState>,
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
    /// A LoRA run's setting and its base's identity (its checkpoints hold
    /// the adapter, not the base).
    lora: Option<(trainer::lora::LoraConfig, trainer::lora::peft::BaseIdentity)>,
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
    let mut plan = trainer::plan::run::for_run(cfg, model, rayon::current_num_threads(), dist::current().world())?;
    let kinds: &[PhaseKind] = match stage {
        Stage::Grpo => &[PhaseKind::Rollout, PhaseKind::GrpoUpdate],
        Stage::Sft => &[PhaseKind::SftUpdate],
    };
    plan.phases.retain(|p| kinds.contains(&p.kind));
    tracing::info!(peak = %trainer::plan::bytes::format(plan.peak_bytes()), limit = %trainer::plan::bytes::format(limit), "memory plan");
    Ok(plan.check(limit, what)?)
}

/// What a run folder holds before a run starts in it.
struct Folder {
    /// The checkpoint `--resume` names (none for a fresh run).
    resume: Option<PathBuf>,
    /// The step the run starts from.
    start: u64,
    /// Step folders after `start`: another run's, or this one's future.
    newer: Vec<(u64, PathBuf)>,
    /// metrics.jsonl lines of the folder a fresh run (no `--resume`) would
    /// start in. With `--resume auto` and no checkpoint yet, the lines are of
    /// steps that will be redone: the run starts over them.
    logged: usize,
}

impl Folder {
    /// Where a run in `dir` starts (the checkpoint `opts.resume` names,
    /// checked to be one) and what of an earlier run `dir` holds.
    fn inspect(dir: &Path, opts: &RunOptions) -> Result<Folder> {
        let resume = match opts.resume.as_deref() {
            None => None,
            Some("auto") => checkpoint::latest(dir)?,
            Some(path) => Some(PathBuf::from(path)),
        };
        let start = match &resume {
            Some(ckpt) => checkpoint_step(ckpt, dir)?,
            None => 0,
        };
        let newer = checkpoint::checkpoints_after(dir, start)?;
        let logged = if opts.resume.is_none() { logged_steps(&dir.join("metrics.jsonl"))? } else { 0 };
        Ok(Folder { resume, start, newer, logged })
    }

    /// Whether starting here would overwrite something.
    fn would_overwrite(&self) -> bool {
        !self.newer.is_empty() || self.logged > 0
    }

    /// `checkpoint step 2`, `3 checkpoints, steps 1..3 and metrics.jsonl with 3 step(s)`.
    fn describe(&self) -> String {
        let checkpoints = match (self.newer.first(), self.newer.last()) {
            (Some((a, _)), Some((b, _))) if a == b => format!("checkpoint step {a}"),
            (Some((a, _)), Some((b, _))) => format!("{} checkpoints, steps {a}..{b}", self.newer.len()),
            _ => String::new(),
        };
        match (checkpoints.is_empty(), self.logged) {
            (_, 0) => checkpoints,
            (true, n) => format!("metrics.jsonl with {n} step(s)"),
            (false, n) => format!("{checkpoints} and metrics.jsonl with {n} step(s)"),
        }
    }

    /// The refusal of a start that would overwrite `dir`'s run.
    fn refusal(&self, dir: &Path) -> anyhow::Error {
        let what = self.describe();
        match &self.resume {
            None => anyhow::anyhow!(
                "{} already holds a run ({what}); nothing was changed. Pass --resume auto to continue it, --overwrite to delete it and start over, or another --out",
                dir.display()
            ),
            Some(ckpt) => anyhow::anyhow!(
                "resuming {} (step {}) would overwrite the newer {what} in {}; nothing was changed. Pass --resume auto to continue from the newest, or --overwrite to delete what comes after step {}",
                ckpt.display(),
                self.start,
                dir.display(),
                self.start
            ),
        }
    }
}

/// Refuses (changing nothing) a run that would overwrite what `dir` holds
/// of an earlier run, unless `opts.overwrite`: a fresh run in a folder with
/// checkpoints or metrics lines, a resume from a checkpoint older than the
/// folder's newest. Commands call it before they read anything at length.
pub fn check_folder(dir: &Path, opts: &RunOptions) -> Result<()> {
    let folder = Folder::inspect(dir, opts)?;
    if folder.would_overwrite() && !opts.overwrite {
        return Err(folder.refusal(dir));
    }
    Ok(())
}

/// Where a run in `dir` starts (none: fresh), after [`check_folder`]'s
/// refusal; with `opts.overwrite`, the checkpoints after the starting step
/// (and, for a fresh run, the metrics and rank logs) are removed first.
pub fn prepare_folder(dir: &Path, opts: &RunOptions) -> Result<Option<PathBuf>> {
    let folder = Folder::inspect(dir, opts)?;
    if !folder.would_overwrite() {
        return Ok(folder.resume);
    }
    if !opts.overwrite {
        return Err(folder.refusal(dir));
    }
    // With several ranks, rank 0 alone removes (the others saw the same folder).
    if dist::current().rank() != 0 {
        return Ok(folder.resume);
    }
    for (_, path) in &folder.newer {
        std::fs::remove_dir_all(path).with_context(|| format!("--overwrite: removing {}", path.display()))?;
    }
    if folder.resume.is_none() {
        for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
            let path = entry?.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            if name == "metrics.jsonl" || (name.starts_with("rank-") && name.ends_with(".jsonl")) {
                std::fs::remove_file(&path).with_context(|| format!("--overwrite: removing {}", path.display()))?;
            }
        }
    }
    eprintln!("--overwrite: removed the {} of {}", folder.describe(), dir.display());
    Ok(folder.resume)
}

impl RunEnd {
    /// The command's result: Ok when done; when interrupted, the error
    /// `main` prints on plain stderr and exits 130 with.
    pub fn into_result(self) -> Result<()> {
        match self {
            RunEnd::Done(_) => Ok(()),
            RunEnd::Interrupted(ckpt) => Err(super::common::Interrupted(format!("interrupted: checkpoint {} saved, resume with --resume auto", ckpt.display())).into()),
        }
    }
}

/// The step of the checkpoint `ckpt` (a `--resume` folder), or an error
/// that says what the folder is not, and for a broken one in `run_dir`, the
/// complete checkpoint before it.
fn checkpoint_step(ckpt: &Path, run_dir: &Path) -> Result<u64> {
    anyhow::ensure!(ckpt.is_dir(), "--resume {}: no such folder", ckpt.display());
    let has_state = ckpt.join(checkpoint::STATE_FILE).exists();
    if !has_state && !ckpt.join(checkpoint::DONE_FILE).exists() {
        let newest = checkpoint::latest(ckpt).ok().flatten();
        anyhow::bail!(
            "--resume {}: not a checkpoint (a run's step_NNNNNNNN folder, with state.json and DONE){}",
            ckpt.display(),
            match newest {
                Some(n) => format!("; it is a run folder whose newest checkpoint is {}: pass --resume auto with --out {}, or --resume {}", n.display(), ckpt.display(), n.display()),
                None => "; pass --resume auto to continue the run in --out".into(),
            }
        );
    }
    checkpoint::load_state(ckpt).map(|s| s.step).map_err(|e| broken_checkpoint(e.into(), ckpt, run_dir))
}

/// `err` about checkpoint `ckpt`, with the complete checkpoint of `run_dir`
/// before it named (where a resume can go instead).
fn broken_checkpoint(err: anyhow::Error, ckpt: &Path, run_dir: &Path) -> anyhow::Error {
    let mine = ckpt.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_prefix("step_")).and_then(|s| s.parse::<u64>().ok());
    let previous = checkpoint::complete_checkpoints(run_dir).ok().and_then(|all| all.into_iter().rev().find(|(s, _)| mine.is_some_and(|m| *s < m)));
    match previous {
        Some((_, prev)) => err.context(format!(
            "checkpoint {} cannot be resumed; the complete checkpoint before it is {}: pass --resume {} --overwrite to continue from there (the newer checkpoints are deleted)",
            ckpt.display(),
            prev.display(),
            prev.display()
        )),
        None => err.context(format!("checkpoint {} cannot be resumed, and no complete checkpoint comes before it in {}", ckpt.display(), run_dir.display())),
    }
}

/// How many step lines `path` (a metrics.jsonl) holds; 0 when absent.
fn logged_steps(path: &Path) -> Result<usize> {
    if !path.exists() {
        return Ok(0);
    }
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(text.lines().filter(|l| !l.trim().is_empty()).count())
}

/// A model path changed on resume: refused when both folders exist and
/// differ (the run's weights and its KL reference come from the starting
/// model its checkpoints record); a moved model (the old path gone) is
/// taken with a note.
fn check_model_path(state: &TrainState, cfg: &RunConfig, ckpt: &Path) -> Result<()> {
    let Some(old) = state.config.get("model").and_then(|m| m.get("path")).and_then(|p| p.as_str()) else { return Ok(()) };
    if old == cfg.model.path {
        return Ok(());
    }
    let same = |a: &str, b: &str| match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => Some(a == b),
        (Err(_), _) => None,
        _ => Some(false),
    };
    match same(old, &cfg.model.path) {
        Some(true) => Ok(()),
        Some(false) => anyhow::bail!(
            "{}: config key `model.path`: the run started from {old}, the config now names {}; a resumed run keeps its starting model (its weights and KL reference), even with --allow-config-change. Start a new run (another --out, or --overwrite without --resume) to train from {}",
            ckpt.join(checkpoint::STATE_FILE).display(),
            cfg.model.path,
            cfg.model.path
        ),
        None => {
            eprintln!("note: the run's starting model {old} no longer exists; taking [model] path = {} as the same model, moved", cfg.model.path);
            Ok(())
        }
    }
}

impl Run {
    /// Resolves where the run starts (`opts.resume`, [`prepare_folder`])
    /// and loads those weights: a whole model's, or for a LoRA run the
    /// base's (`[model] path`, also on resume) with the adapter to start
    /// from (the checkpoint's, `[model] adapter`, or none: a new one).
    pub fn open(cfg: &RunConfig, dir: &Path, opts: &RunOptions, keep_last: usize, stage: Stage) -> Result<(Run, TensorMap, Option<trainer::lora::Adapter>)> {
        let cfg_json = serde_json::to_value(cfg)?;
        let cfg_hash = checkpoint::config_hash(&cfg_json);
        let resume_dir = prepare_folder(dir, opts)?;
        let resume_state = match &resume_dir {
            Some(ckpt) => {
                Some(checkpoint::load_state(ckpt).map_err(|e| broken_checkpoint(e.into(), ckpt, dir))?)
            }
            None => None,
        };
        let base_dir = trainer::hub::resolve_model_dir(&cfg.model.path)?;
        let lora = cfg.lora();
        anyhow::ensure!(
            lora.is_some() || cfg.model.adapter.is_none(),
            "[model] adapter = {}: training from an adapter needs a [lora] section (or merge it first: fusegrpo merge-adapter)",
            cfg.model.adapter.as_deref().unwrap_or(Path::new("")).display()
        );
        // A LoRA run's checkpoints hold the adapter: the base always comes from [model] path.
        let model_dir = match (&resume_dir, &lora) {
            (Some(ckpt), None) => ckpt.clone(),
            _ => base_dir.clone(),
        };
        let model_cfg = ModelConfig::from_file(&model_dir.join("config.json"))?;
        // The checkpoint against this run's model and config, before anything large loads.
        if let (Some(ckpt), Some(state)) = (&resume_dir, &resume_state) {
            checkpoint::check_compatible(ckpt, state, &model_cfg.arch_hash(), &cfg_json, opts.allow_config_change)?;
            check_model_path(state, cfg, ckpt)?;
        }
        let device = trainer::device::open_with_kernels(cfg.model.device, cfg.model.cuda_kernels)?;
        check_memory(cfg, &model_cfg, &device, opts.memory, stage)?;
        let dtype: candle_core::DType = cfg.model.dtype.into();
        let weights = match (&resume_dir, &lora) {
            (Some(ckpt), None) => load_weights(&model_dir, &model_cfg, dtype, &device).map_err(|e| broken_checkpoint(e.into(), ckpt, dir))?,
            _ => load_weights(&model_dir, &model_cfg, dtype, &device)?,
        };
        // The adapter is kept in f32 (its AdamW moments too), whatever the base's dtype.
        let f32 = candle_core::DType::F32;
        let adapter = match (&lora, &resume_dir, &cfg.model.adapter) {
            (None, _, _) => None,
            (Some(_), Some(ckpt), _) => {
                Some(trainer::lora::peft::load(ckpt, &model_cfg, Some(&base_dir), f32, &device).map_err(|e| broken_checkpoint(e.into(), ckpt, dir))?)
            }
            (Some(_), None, Some(start)) => Some(trainer::lora::peft::load(start, &model_cfg, Some(&base_dir), f32, &device).with_context(|| format!("[model] adapter {}", start.display()))?),
            (Some(_), None, None) => None,
        };
        let lora = match lora {
            Some(l) => Some((l, trainer::lora::peft::BaseIdentity::of(&base_dir, &model_cfg)?)),
            None => None,
        };
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        super::common::set_interrupt_run_dir(dir);
        let tok_dir = cfg.tokenizer_dir(&base_dir);
        let chat_template = cfg.model.chat_template.clone();
        let run = Run { dir: dir.to_path_buf(), resume_dir, resume_state, base_dir, model_cfg, device, cfg_json, cfg_hash, tok_dir, chat_template, keep_last, lora, saved_hash: Default::default() };
        Ok((run, weights, adapter))
    }

    /// On resume: the checkpoint's state (checked in [`Run::open`]), with
    /// its optimizer moments and masters restored (under ZeRO-1 this rank's
    /// shard of them, from whichever files hold it).
    pub fn resume(&self, optimizer: &mut AdamW, sharding: &Sharding, vars: &BTreeMap<String, Var>) -> Result<Option<TrainState>> {
        let (Some(dir), Some(state)) = (&self.resume_dir, self.resume_state.clone()) else { return Ok(None) };
        checkpoint::OptimizerFile::open(dir, &self.device)
            .map_err(anyhow::Error::from)
            .and_then(|file| Ok(optimizer.import_from(&file)?))
            .map_err(|e| broken_checkpoint(e, dir, &self.dir))?;
        optimizer.sync_params_from_masters(vars)?;
        sharding.gather_parameters(&*dist::current(), vars)?;
        if dist::current().rank() == 0 {
            dist::say(&format!("resumed from {} at step {}", dir.display(), state.step));
        }
        Ok(Some(state))
    }

    /// Saves step `step` atomically (with the tokenizer, so the folder is a
    /// complete model, or for a LoRA run a complete adapter) and keeps the
    /// newest `keep_last`. `model` is what the run trains (its `Var`s: every
    /// weight, or the adapter's tensors). With several ranks
    /// every rank calls it: their parameters must be rank 0's bit for bit,
    /// their RNG streams go into the state (rank r's under `<name>.rank<r>`),
    /// and rank 0 writes; under ZeRO-1 every rank first writes its optimizer
    /// shard into rank 0's temporary folder.
    pub fn save(&self, step: u64, rngs: BTreeMap<String, RngState>, data: DataCursor, model: &TensorMap, optimizer: &AdamW, sharding: &Sharding) -> Result<PathBuf> {
        let dist = dist::current();
        self.saved_hash.set(dist::reduce::check_same_parameters(&*dist, model, step)?);
        let rngs = gather_rngs(&*dist, rngs)?;
        let root = dist.rank() == 0;
        let tmp = if root { Some(checkpoint::begin(&self.dir, step)?) } else { None };
        let own_file = sharding.optimizer_file(dist.rank());
        if let Some(file) = &own_file {
            // Rank 0's temporary folder, handed to every rank.
            let mine = tmp.as_ref().map(|p| p.to_string_lossy().into_owned().into_bytes()).unwrap_or_default();
            let shared = PathBuf::from(String::from_utf8_lossy(&dist.all_gather_bytes(&mine)?[0]).into_owned());
            checkpoint::write_optimizer(&shared, file, &optimizer.export_state()?.into_iter().collect())?;
            dist.barrier()?;
        }
        let Some(tmp) = tmp else {
            dist.barrier()?;
            return Ok(self.dir.join(checkpoint::step_dir_name(step)));
        };
        if own_file.is_none() {
            checkpoint::write_optimizer(&tmp, checkpoint::OPTIMIZER_FILE, &optimizer.export_state()?.into_iter().collect())?;
        }
        let dir = self.write(&tmp, step, rngs, data, model)?;
        dist.barrier()?;
        Ok(dir)
    }

    /// Completes the save in `tmp` (its optimizer file(s) written).
    fn write(&self, tmp: &Path, step: u64, rngs: BTreeMap<String, RngState>, data: DataCursor, model: &TensorMap) -> Result<PathBuf> {
        let state = TrainState {
            format_version: FORMAT_VERSION,
            step,
            rngs,
            data,
            config: self.cfg_json.clone(),
            config_hash: self.cfg_hash.clone(),
            arch_hash: self.model_cfg.arch_hash(),
        };
        let dir = match &self.lora {
            None => checkpoint::finish(&self.dir, tmp, checkpoint::Weights::Model(&self.model_cfg, model), &state, self.keep_last)?,
            Some((cfg, base)) => {
                let adapter = trainer::lora::Adapter { cfg: cfg.clone(), tensors: model.clone() };
                let base_name = self.base_dir.to_string_lossy();
                checkpoint::finish(&self.dir, tmp, checkpoint::Weights::Adapter { adapter: &adapter, base_name: &base_name, base }, &state, self.keep_last)?
            }
        };
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
            return Ok(MetricsFile::none(self.dir.join("metrics.jsonl")));
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
/// as written; a file of `None` writes nothing. The lines of steps after
/// the run's starting step (steps that will be redone) are dropped at the
/// first write, not before: a run that fails at start-up leaves the file
/// as it was.
pub struct MetricsFile {
    file: Option<std::fs::File>,
    path: PathBuf,
    /// The starting step, until the first write has truncated the file.
    pending: Option<u64>,
}

impl MetricsFile {
    /// `path` for appending from step `step` on.
    fn append(path: &Path, step: u64) -> Result<MetricsFile> {
        Ok(MetricsFile { file: None, path: path.to_path_buf(), pending: Some(step) })
    }

    /// A file that writes nothing (ranks other than 0).
    fn none(path: PathBuf) -> MetricsFile {
        MetricsFile { file: None, path, pending: None }
    }

    pub fn write<T: serde::Serialize>(&mut self, row: &T) -> Result<()> {
        if let Some(step) = self.pending.take() {
            truncate_metrics(&self.path, step)?;
            let file = std::fs::OpenOptions::new().create(true).append(true).open(&self.path).with_context(|| format!("opening {}", self.path.display()))?;
            self.file = Some(file);
        }
        let Some(file) = &mut self.file else { return Ok(()) };
        writeln!(file, "{}", serde_json::to_string(row)?).and_then(|_| file.flush()).with_context(|| format!("writing {}", self.path.display()))
    }
}

/// Keep only the metrics lines of steps `1..=step` (atomically).
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
    if kept == text {
        return Ok(());
    }
    super::common::write_atomic(path, kept.as_bytes())
}
