//! A training run's lifecycle, shared by GRPO and SFT: where it starts (the
//! config's model or a checkpoint to resume, [`Run::open`]), the checks a
//! resume must pass, saving a checkpoint, the metrics file, and the one
//! loop that drives a stage's steps ([`drive::drive`]). [`grpo::grpo`] and
//! [`sft::sft`] are the two runs, as `fusegrpo train` and `sft` (and the
//! recipe's stages) start them.

pub mod drive;
pub mod folder;
pub mod grpo;
pub mod metrics;
pub mod sft;
pub mod tensorboard;

use crate::error::{Context, Result};
use candle_core::{Device, Var};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use crate::checkpoint::{self, DataCursor, RngState, TrainState, FORMAT_VERSION};
use crate::dist::{self, zero::Sharding};
use crate::optim::AdamW;
use crate::plan::PhaseKind;
use crate::run_config::RunConfig;
use lm::weights::{load_weights, TensorMap};
use crate::interrupt;
use lm::ModelConfig;
pub use folder::{check_folder, prepare_folder};
use folder::broken_checkpoint;
pub use metrics::MetricsFile;

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
    /// Write the metrics' scalars as TensorBoard event files into this
    /// folder (`--tensorboard`); none: `<run>/tensorboard` when the config
    /// says `[log] tensorboard = true`, else nowhere.
    pub tensorboard: Option<PathBuf>,
    /// Files (name, text) the command keeps in the run folder, written by
    /// rank 0 once the run has passed its checks and made the folder (the
    /// `--set` keys `train` and `sft` reapply on a resume).
    pub keep: Vec<(String, String)>,
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
    /// `base_model_name_or_path` of adapter checkpoints: the hub id, or the
    /// base folder's absolute path.
    base_name: String,
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
    lora: Option<(lm::lora::LoraConfig, lm::lora::peft::BaseIdentity)>,
    /// With several ranks, the hash of the parameters the last save compared.
    saved_hash: std::cell::Cell<Option<u64>>,
    /// Where the metrics' scalars also go as TensorBoard event files.
    tensorboard: Option<PathBuf>,
    /// `[log] tensorboard_tasks`: the per-task scalars go there too.
    tensorboard_tasks: bool,
}

/// The memory plan of `stage` against the device (or `--gpu-memory`),
/// before anything large is allocated: a clear error naming the setting to
/// lower instead of an out-of-memory failure deep inside a step.
fn check_memory(cfg: &RunConfig, model: &ModelConfig, device: &Device, check: MemoryCheck, stage: Stage) -> Result<()> {
    let (limit, what) = match check {
        MemoryCheck::Off => return Ok(()),
        MemoryCheck::Limit(b) => (b, "--gpu-memory"),
        MemoryCheck::Device => crate::plan::device_memory::available(device)?,
    };
    let mut plan = crate::plan::phases::for_run(cfg, model, rayon::current_num_threads(), dist::current().world())?;
    let kinds: &[PhaseKind] = match stage {
        Stage::Grpo => &[PhaseKind::Rollout, PhaseKind::GrpoUpdate],
        Stage::Sft => &[PhaseKind::SftUpdate],
    };
    plan.phases.retain(|p| kinds.contains(&p.kind));
    tracing::info!(peak = %crate::plan::bytes::format(plan.peak_bytes()), limit = %crate::plan::bytes::format(limit), "memory plan");
    plan.check(limit, what)
}

impl RunEnd {
    /// The command's result: Ok when done; when interrupted, the error
    /// `main` prints on plain stderr and exits 130 with.
    pub fn into_result(self) -> Result<()> {
        match self {
            RunEnd::Done(_) => Ok(()),
            RunEnd::Interrupted(ckpt) => Err(interrupt::Interrupted(format!("interrupted: checkpoint {} saved, resume with --resume auto", ckpt.display())).into()),
        }
    }
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
        Some(false) => crate::error::bail!(
            "{}: config key `model.path`: the run started from {old}, the config now names {}; a resumed run keeps its starting model (its weights and KL reference), even with --allow-config-change. Start a new run (another --out, or --overwrite without --resume) to train from {}",
            ckpt.join(checkpoint::STATE_FILE).display(),
            cfg.model.path,
            cfg.model.path
        ),
        None => {
            crate::progress::say(&format!("note: the run's starting model {old} no longer exists; taking [model] path = {} as the same model, moved", cfg.model.path));
            Ok(())
        }
    }
}

impl Run {
    /// Resolves where the run starts (`opts.resume`, [`prepare_folder`])
    /// and loads those weights: a whole model's, or for a LoRA run the
    /// base's (`[model] path`, also on resume) with the adapter to start
    /// from (the checkpoint's, `[model] adapter`, or none: a new one).
    pub fn open(cfg: &RunConfig, dir: &Path, opts: &RunOptions, keep_last: usize, stage: Stage) -> Result<(Run, TensorMap, Option<lm::lora::Adapter>)> {
        let cfg_json = serde_json::to_value(cfg)?;
        let cfg_hash = checkpoint::config_hash(&cfg_json);
        let resume_dir = prepare_folder(dir, opts)?;
        let resume_state = match &resume_dir {
            Some(ckpt) => {
                Some(checkpoint::load_state(ckpt).map_err(|e| broken_checkpoint(e, ckpt, dir))?)
            }
            None => None,
        };
        let base_dir = lm::hub::resolve_model_dir(&cfg.model.path)?;
        // What an adapter checkpoint records as its base: the hub id, or the
        // folder's absolute path (the config's relative one would name
        // another folder, or none, from wherever the checkpoint is used).
        let base_name = if lm::hub::is_hub_id(&cfg.model.path) {
            cfg.model.path.clone()
        } else {
            std::fs::canonicalize(&base_dir).unwrap_or_else(|_| base_dir.clone()).to_string_lossy().into_owned()
        };
        let lora = cfg.lora();
        crate::error::ensure!(
            lora.is_some() || cfg.model.adapter.is_none(),
            "[model] adapter = {}: training from an adapter needs a [lora] section (or merge it first: fusegrpo merge-adapter)",
            cfg.model.adapter.as_deref().unwrap_or(Path::new("")).display()
        );
        // A LoRA run's checkpoints hold the adapter: the base always comes from [model] path.
        let model_dir = match (&resume_dir, &lora) {
            (Some(ckpt), None) => ckpt.clone(),
            _ => base_dir.clone(),
        };
        let mut model_cfg = ModelConfig::from_file(&model_dir.join("config.json"))?;
        // How attention runs on CUDA ([model] attention): carried with the model.
        model_cfg.attention = cfg.model.placement().attention;
        // The checkpoint against this run's model and config, before anything large loads.
        if let (Some(ckpt), Some(state)) = (&resume_dir, &resume_state) {
            checkpoint::check_compatible(ckpt, state, &model_cfg.arch_hash(), &cfg_json, opts.allow_config_change)?;
            check_model_path(state, cfg, ckpt)?;
        }
        let device = crate::device::open_with_kernels(cfg.model.device, cfg.model.cuda_kernels)?;
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
                Some(lm::lora::peft::load(ckpt, &model_cfg, Some(&base_dir), f32, &device).map_err(|e| broken_checkpoint(e.into(), ckpt, dir))?)
            }
            (Some(_), None, Some(start)) => Some(lm::lora::peft::load(start, &model_cfg, Some(&base_dir), f32, &device).with_context(|| format!("[model] adapter {}", start.display()))?),
            (Some(_), None, None) => None,
        };
        let lora = match lora {
            Some(l) => Some((l, lm::lora::peft::BaseIdentity::of(&base_dir, &model_cfg)?)),
            None => None,
        };
        let tensorboard = opts.tensorboard.clone().or_else(|| cfg.log.tensorboard.then(|| dir.join("tensorboard")));
        // Made now: a folder that cannot be is refused before any step.
        if let (Some(tb), 0) = (&tensorboard, dist::current().rank()) {
            let what = if opts.tensorboard.is_some() { "--tensorboard" } else { "[log] tensorboard = true" };
            std::fs::create_dir_all(tb).with_context(|| format!("{what}: cannot make the folder {} for the event files", tb.display()))?;
        }
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        if dist::current().rank() == 0 {
            for (name, text) in &opts.keep {
                let path = dir.join(name);
                std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
            }
        }
        interrupt::set_run_dir(dir);
        let tok_dir = cfg.tokenizer_dir(&base_dir);
        let chat_template = cfg.model.chat_template.clone();
        let run = Run { dir: dir.to_path_buf(), resume_dir, resume_state, base_dir, base_name, model_cfg, device, cfg_json, cfg_hash, tok_dir, chat_template, keep_last, lora, saved_hash: Default::default(), tensorboard, tensorboard_tasks: cfg.log.tensorboard_tasks };
        Ok((run, weights, adapter))
    }

    /// On resume: the checkpoint's state (checked in [`Run::open`]), with
    /// its optimizer moments and masters restored (under ZeRO-1 this rank's
    /// shard of them, from whichever files hold it).
    pub fn resume(&self, optimizer: &mut AdamW, sharding: &Sharding, vars: &BTreeMap<String, Var>) -> Result<Option<TrainState>> {
        let (Some(dir), Some(state)) = (&self.resume_dir, self.resume_state.clone()) else { return Ok(None) };
        checkpoint::OptimizerFile::open(dir, &self.device).and_then(|file| optimizer.import_from(&file))
            .map_err(|e| broken_checkpoint(e, dir, &self.dir))?;
        optimizer.sync_params_from_masters(vars)?;
        sharding.gather_parameters(&*dist::current(), vars)?;
        if dist::current().rank() == 0 {
            crate::progress::say(&format!("resumed from {} at step {}", dir.display(), state.step));
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
    /// shard into rank 0's temporary folder. `extra` files (name, bytes)
    /// go into the checkpoint beside them (rank 0's).
    pub fn save(&self, step: u64, rngs: BTreeMap<String, RngState>, data: DataCursor, model: &TensorMap, optimizer: &AdamW, sharding: &Sharding, extra: &[(&str, Vec<u8>)]) -> Result<PathBuf> {
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
        for (name, bytes) in extra {
            let path = tmp.join(name);
            std::fs::write(&path, bytes).with_context(|| format!("writing {}", path.display()))?;
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
                let adapter = lm::lora::Adapter { cfg: cfg.clone(), tensors: model.clone() };
                checkpoint::finish(&self.dir, tmp, checkpoint::Weights::Adapter { adapter: &adapter, base_name: &self.base_name, base }, &state, self.keep_last)?
            }
        };
        crate::files::copy_tokenizer(&self.tok_dir, &dir, false)?;
        if let Some(template) = &self.chat_template {
            crate::files::set_chat_template(&dir, template)?;
        }
        Ok(dir)
    }

    /// `<run>/metrics.jsonl` for appending, without the lines of steps after
    /// `step` (they belong to steps that will be redone), and with its
    /// TensorBoard event file when asked. Rank 0 writes it; other ranks get
    /// a file that writes nothing.
    pub fn metrics(&self, step: u64) -> Result<MetricsFile> {
        if dist::current().rank() != 0 {
            return Ok(MetricsFile::none(self.dir.join("metrics.jsonl")));
        }
        Ok(MetricsFile::append(&self.dir.join("metrics.jsonl"), step)?.with_tensorboard(self.tensorboard.clone(), self.tensorboard_tasks))
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

