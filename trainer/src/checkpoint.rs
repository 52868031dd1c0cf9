//! Training checkpoints: `<run>/step_00000100/` holding model.safetensors +
//! config.json (Hugging Face layout, loadable by transformers),
//! optimizer.safetensors, state.json (format version, step, RNG states, data
//! cursor, the run config and its hash) and DONE, written last.
//!
//! Saving streams tensor by tensor (host memory grows by one tensor, whatever
//! device the state lives on) and is atomic: everything is written into a temporary folder, synced,
//! then the folder is renamed into place; a crash mid-save leaves only a
//! temporary folder, which resume ignores and the next save removes.

use lm::config::ModelConfig;
use crate::error::{Error, Result};
use lm::weights::{save_checkpoint as save_model, ShardPolicy, TensorMap};
use candle_core::Device;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::path::{Path, PathBuf};

/// Bumped whenever state.json changes incompatibly.
pub const FORMAT_VERSION: u32 = 1;
pub const DONE_FILE: &str = "DONE";
pub const STATE_FILE: &str = "state.json";
pub use crate::optim::OPTIMIZER_FILE;
const TMP_PREFIX: &str = ".tmp-";

/// A ChaCha8 stream position, enough to continue it exactly.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RngState {
    pub seed: [u8; 32],
    pub stream: u64,
    /// Word position as a decimal string (u128 does not fit JSON numbers).
    pub word_pos: String,
}

impl RngState {
    pub fn capture(rng: &ChaCha8Rng) -> Self {
        RngState { seed: rng.get_seed(), stream: rng.get_stream(), word_pos: rng.get_word_pos().to_string() }
    }

    pub fn restore(&self) -> Result<ChaCha8Rng> {
        use rand::SeedableRng;
        let pos: u128 = self.word_pos.parse().map_err(|_| Error::invalid("state.json rng.word_pos", format!("`{}` is not an integer", self.word_pos)))?;
        let mut rng = ChaCha8Rng::from_seed(self.seed);
        rng.set_stream(self.stream);
        rng.set_word_pos(pos);
        Ok(rng)
    }
}

/// Where the task sampler is in its data.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataCursor {
    pub epoch: u64,
    /// Next index into the epoch's shuffled order.
    pub index: u64,
}

/// Everything besides tensors that a resumed run needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainState {
    pub format_version: u32,
    pub step: u64,
    /// Named RNG streams (sampling, task order, ...).
    pub rngs: std::collections::BTreeMap<String, RngState>,
    pub data: DataCursor,
    /// The run config as JSON, and its hash ([`config_hash`]).
    pub config: serde_json::Value,
    pub config_hash: String,
    /// Hash of the model architecture (config.json fields that shape weights).
    pub arch_hash: String,
}

/// FNV-1a 64 of a value's canonical JSON (keys sorted), as hex.
pub fn config_hash(value: &serde_json::Value) -> String {
    lm::fnv::json_hash(value)
}

/// `step_00000100`.
pub fn step_dir_name(step: u64) -> String {
    format!("step_{step:08}")
}

fn step_of(name: &str) -> Option<u64> {
    name.strip_prefix("step_").and_then(|s| s.parse().ok())
}

fn sync_file(path: &Path) -> Result<()> {
    File::open(path).and_then(|f| f.sync_all()).map_err(|e| Error::io(path, e))
}

/// What a checkpoint holds of the model.
pub enum Weights<'a> {
    /// Every weight: config.json and model.safetensors (a whole model).
    Model(&'a ModelConfig, &'a TensorMap),
    /// A LoRA run's adapter in PEFT's layout, with its base's name (for
    /// `base_model_name_or_path`) and identity; the base is not copied.
    Adapter { adapter: &'a lm::lora::Adapter, base_name: &'a str, base: &'a lm::lora::peft::BaseIdentity },
}

/// Save a checkpoint of a whole model atomically and keep the newest
/// `keep_last` (0 = all).
pub fn save(
    run_dir: &Path,
    model_cfg: &ModelConfig,
    model: &TensorMap,
    optimizer: &TensorMap,
    state: &TrainState,
    keep_last: usize,
) -> Result<PathBuf> {
    save_weights(run_dir, Weights::Model(model_cfg, model), optimizer, state, keep_last)
}

/// Save a checkpoint (a whole model or an adapter) atomically and keep the
/// newest `keep_last` (0 = all).
pub fn save_weights(run_dir: &Path, weights: Weights<'_>, optimizer: &TensorMap, state: &TrainState, keep_last: usize) -> Result<PathBuf> {
    let tmp = begin(run_dir, state.step)?;
    write_optimizer(&tmp, OPTIMIZER_FILE, optimizer)?;
    finish(run_dir, &tmp, weights, state, keep_last)
}

/// `optimizer-00002-of-00003.safetensors`: rank 1's optimizer state in a
/// ZeRO-1 run over 3 ranks (numbered from 1, as the hub numbers shards).
pub fn optimizer_shard_name(rank: usize, world: usize) -> String {
    format!("optimizer-{:05}-of-{:05}.safetensors", rank + 1, world)
}

/// The first step of a save: the temporary folder for step `step` (an
/// interrupted save's folder removed first). Each rank of a ZeRO-1 run
/// then writes its optimizer shard into it ([`write_optimizer`]) and rank 0
/// completes it ([`finish`]).
pub fn begin(run_dir: &Path, step: u64) -> Result<PathBuf> {
    std::fs::create_dir_all(run_dir).map_err(|e| Error::io(run_dir, e))?;
    remove_stale_temporaries(run_dir)?;
    let tmp = run_dir.join(format!("{TMP_PREFIX}{}-{}", step_dir_name(step), std::process::id()));
    std::fs::create_dir_all(&tmp).map_err(|e| Error::io(&tmp, e))?;
    Ok(tmp)
}

/// Writes optimizer tensors as `file` in a save's temporary folder, sorted
/// by name (the same state gives the same bytes), and syncs it.
pub fn write_optimizer(tmp: &Path, file: &str, optimizer: &TensorMap) -> Result<()> {
    let path = tmp.join(file);
    let mut opt: Vec<(String, &candle_core::Tensor)> = optimizer.iter().map(|(k, t)| (k.clone(), t)).collect();
    opt.sort_by(|a, b| a.0.cmp(&b.0));
    lm::safetensors_stream::write(&path, &opt, None)?;
    sync_file(&path)
}

/// The last step of a save: the model (or adapter) and state.json into the
/// temporary folder, every file synced, DONE, the rename into place, and
/// the newest `keep_last` kept.
pub fn finish(run_dir: &Path, tmp: &Path, weights: Weights<'_>, state: &TrainState, keep_last: usize) -> Result<PathBuf> {
    let final_dir = run_dir.join(step_dir_name(state.step));
    match weights {
        Weights::Model(model_cfg, model) => save_model(tmp, model_cfg, model, ShardPolicy::Single)?,
        Weights::Adapter { adapter, base_name, base } => lm::lora::peft::save(tmp, adapter, base_name, Some(base))?,
    }
    let state_path = tmp.join(STATE_FILE);
    let text = serde_json::to_string_pretty(state).expect("state serializes");
    std::fs::write(&state_path, text).map_err(|e| Error::io(&state_path, e))?;
    for entry in std::fs::read_dir(tmp).map_err(|e| Error::io(tmp, e))? {
        sync_file(&entry.map_err(|e| Error::io(tmp, e))?.path())?;
    }
    let done = tmp.join(DONE_FILE);
    std::fs::write(&done, b"").map_err(|e| Error::io(&done, e))?;
    sync_file(&done)?;
    if final_dir.exists() {
        std::fs::remove_dir_all(&final_dir).map_err(|e| Error::io(&final_dir, e))?;
    }
    std::fs::rename(tmp, &final_dir).map_err(|e| Error::io(&final_dir, e))?;
    sync_file(run_dir)?;
    prune(run_dir, keep_last, state.step)?;
    Ok(final_dir)
}

fn remove_stale_temporaries(run_dir: &Path) -> Result<()> {
    for entry in std::fs::read_dir(run_dir).map_err(|e| Error::io(run_dir, e))? {
        let path = entry.map_err(|e| Error::io(run_dir, e))?.path();
        if path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(TMP_PREFIX)) {
            tracing::warn!(path = %path.display(), "removing an interrupted checkpoint save");
            std::fs::remove_dir_all(&path).map_err(|e| Error::io(&path, e))?;
        }
    }
    Ok(())
}

/// Complete checkpoints (with DONE), oldest first.
pub fn complete_checkpoints(run_dir: &Path) -> Result<Vec<(u64, PathBuf)>> {
    if !run_dir.exists() {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for entry in std::fs::read_dir(run_dir).map_err(|e| Error::io(run_dir, e))? {
        let path = entry.map_err(|e| Error::io(run_dir, e))?.path();
        let step = path.file_name().and_then(|n| n.to_str()).and_then(step_of);
        if let Some(step) = step {
            if path.join(DONE_FILE).exists() {
                out.push((step, path));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// The newest complete checkpoint, if any.
pub fn latest(run_dir: &Path) -> Result<Option<PathBuf>> {
    Ok(complete_checkpoints(run_dir)?.pop().map(|(_, p)| p))
}

/// Keeps the newest `keep_last` of the checkpoints up to `written` (the one
/// just saved, always kept). Checkpoints after `written` are not this run's
/// past: they are left alone (a run folder never holds them unless the user
/// resumed from an older checkpoint with `--overwrite`, which removed them).
fn prune(run_dir: &Path, keep_last: usize, written: u64) -> Result<()> {
    if keep_last == 0 {
        return Ok(());
    }
    let older: Vec<(u64, PathBuf)> = complete_checkpoints(run_dir)?.into_iter().filter(|(s, _)| *s < written).collect();
    for (_, path) in older.iter().take((older.len() + 1).saturating_sub(keep_last)) {
        std::fs::remove_dir_all(path).map_err(|e| Error::io(path, e))?;
    }
    Ok(())
}

/// The step folders of `run_dir` (complete or not) after `step`, oldest first.
pub fn checkpoints_after(run_dir: &Path, step: u64) -> Result<Vec<(u64, PathBuf)>> {
    if !run_dir.is_dir() {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for entry in std::fs::read_dir(run_dir).map_err(|e| Error::io(run_dir, e))? {
        let path = entry.map_err(|e| Error::io(run_dir, e))?.path();
        if let Some(s) = path.file_name().and_then(|n| n.to_str()).and_then(step_of) {
            if s > step && path.is_dir() {
                out.push((s, path));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Read state.json of a checkpoint; refuses an incomplete checkpoint or
/// another format version.
pub fn load_state(dir: &Path) -> Result<TrainState> {
    if !dir.join(DONE_FILE).exists() {
        return Err(Error::invalid(dir.display().to_string(), "incomplete checkpoint (no DONE file): the save was interrupted"));
    }
    let path = dir.join(STATE_FILE);
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
    let state: TrainState = serde_json::from_str(&text).map_err(|source| Error::Json { path: path.clone(), source })?;
    if state.format_version != FORMAT_VERSION {
        return Err(Error::Config {
            path,
            key: "format_version".into(),
            message: format!("{} is not supported (this build reads {FORMAT_VERSION})", state.format_version),
        });
    }
    Ok(state)
}

/// Check a checkpoint against the run about to resume from it: the same
/// architecture, and the same run config (`config`, as JSON) unless
/// `allow_config_change`; a changed config names the keys that changed.
pub fn check_compatible(dir: &Path, state: &TrainState, arch: &str, config: &serde_json::Value, allow_config_change: bool) -> Result<()> {
    let path = dir.join(STATE_FILE);
    if state.arch_hash != arch {
        return Err(Error::Config { path, key: "arch_hash".into(), message: "the checkpoint's model architecture differs from the config's model".into() });
    }
    let hash = config_hash(config);
    // `[pipeline]` (the recipe's data, probe, pilot and evaluation settings)
    // does not enter a training run, nor does `[log]`: changes there do not
    // block a resume.
    let changed = changed_keys(&state.config, config);
    let relevant = changed.is_empty() || changed.iter().any(|k| !is_recipe_key(k) && !is_log_key(k));
    if state.config_hash != hash && relevant && !allow_config_change {
        let listed = if changed.is_empty() { format!("hash {} != {hash}", state.config_hash) } else { changed.join(", ") };
        return Err(Error::Config {
            path,
            key: "config_hash".into(),
            message: format!("the run config changed since this checkpoint: {listed}; pass --allow-config-change to resume anyway"),
        });
    }
    Ok(())
}

/// Whether a key of [`changed_keys`] lies in `[pipeline]` (or is it).
pub fn is_recipe_key(changed: &str) -> bool {
    changed.starts_with("pipeline.") || changed.starts_with("pipeline (")
}

/// Whether a key of [`changed_keys`] lies in `[log]` (or is it): where the
/// metrics go does not change the run.
pub fn is_log_key(changed: &str) -> bool {
    changed.starts_with("log.") || changed.starts_with("log (")
}

/// The dotted keys whose values differ between two configs (as JSON), each
/// as `key (old -> new)`, `missing` for a side without the key.
pub fn changed_keys(old: &serde_json::Value, new: &serde_json::Value) -> Vec<String> {
    fn walk(prefix: &str, old: Option<&serde_json::Value>, new: Option<&serde_json::Value>, out: &mut Vec<String>) {
        use serde_json::Value;
        match (old, new) {
            (Some(Value::Object(a)), Some(Value::Object(b))) => {
                let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
                for k in keys {
                    let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                    walk(&key, a.get(k), b.get(k), out);
                }
            }
            (a, b) if a != b => {
                let show = |v: Option<&Value>| v.map_or("missing".to_string(), |v| v.to_string());
                out.push(format!("{prefix} ({} -> {})", show(a), show(b)));
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk("", Some(old), Some(new), &mut out);
    out
}

/// A checkpoint's optimizer state, read tensor by tensor onto `device`
/// ([`crate::optim::AdamW::import_from`]): optimizer.safetensors, or a
/// ZeRO-1 run's shards (`optimizer-0000k-of-0000n.safetensors`, every one of
/// them) read as one state. A rank takes the tensors of the parameters it
/// owns, whatever the number of ranks that wrote them.
pub struct OptimizerFile {
    readers: Vec<lm::safetensors_stream::Reader>,
    /// Tensor name -> the reader holding it.
    index: std::collections::BTreeMap<String, usize>,
    device: Device,
}

impl OptimizerFile {
    pub fn open(dir: &Path, device: &Device) -> Result<Self> {
        let files = optimizer_files(dir)?;
        let mut readers = Vec::new();
        let mut index = std::collections::BTreeMap::new();
        for (i, path) in files.iter().enumerate() {
            let r = lm::safetensors_stream::Reader::open(path)?;
            for name in r.names() {
                // Every shard carries the step count; the first one's is kept.
                if let Some(first) = index.insert(name.clone(), i) {
                    if name != "step" {
                        return Err(Error::Safetensors { path: path.clone(), message: format!("tensor {name} is also in {}", files[first].display()) });
                    }
                    index.insert(name, first);
                }
            }
            readers.push(r);
        }
        Ok(OptimizerFile { readers, index, device: device.clone() })
    }
}

/// optimizer.safetensors, or every shard of a ZeRO-1 run's state (an error
/// naming the first one missing).
fn optimizer_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let whole = dir.join(OPTIMIZER_FILE);
    if whole.is_file() {
        return Ok(vec![whole]);
    }
    let mut world = None;
    for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let name = entry.map_err(|e| Error::io(dir, e))?.file_name().to_string_lossy().into_owned();
        let n = name.strip_prefix("optimizer-").and_then(|r| r.strip_suffix(".safetensors")).and_then(|r| r.split_once("-of-")).and_then(|(_, n)| n.parse::<usize>().ok());
        if let Some(n) = n {
            if world.is_some_and(|w| w != n) {
                return Err(Error::invalid(dir.display().to_string(), format!("optimizer shards of two world sizes ({} and {n}): a checkpoint holds one run's", world.unwrap_or(0))));
            }
            world = Some(n);
        }
    }
    let Some(world) = world else {
        // The plain file's name in the error, as before shards existed.
        return Ok(vec![whole]);
    };
    (0..world)
        .map(|r| {
            let path = dir.join(optimizer_shard_name(r, world));
            if path.is_file() { Ok(path) } else { Err(Error::io(&path, std::io::Error::new(std::io::ErrorKind::NotFound, format!("optimizer shard {} of {world} is missing", r + 1)))) }
        })
        .collect()
}

impl crate::optim::adamw::SavedState for OptimizerFile {
    fn keys(&self) -> Vec<String> {
        self.index.keys().cloned().collect()
    }

    fn shape(&self, key: &str) -> Option<Vec<usize>> {
        self.index.get(key).and_then(|&i| self.readers[i].shape(key)).map(<[usize]>::to_vec)
    }

    fn load(&self, key: &str) -> Result<candle_core::Tensor> {
        let i = *self.index.get(key).ok_or_else(|| Error::OptimizerState { name: key.to_string(), message: "is missing from the optimizer state".into() })?;
        Ok(self.readers[i].load(key, &self.device)?)
    }
}

/// Load optimizer.safetensors of a checkpoint.
pub fn load_optimizer(dir: &Path, device: &Device) -> Result<TensorMap> {
    let path = dir.join(OPTIMIZER_FILE);
    candle_core::safetensors::load(&path, device).map_err(|e| Error::Safetensors { path, message: e.to_string() })
}
