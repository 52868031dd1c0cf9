//! Adapters on disk in PEFT's layout, so PEFT, TRL and vLLM read ours and we
//! read theirs: `adapter_config.json` and `adapter_model.safetensors`
//! (tensors under PEFT's names, [`super::tensor_name`]). Beside them,
//! `fusegrpo_base.json` records the base model's identity (its architecture
//! hash and its weight files' names and sizes), so an adapter of ours never
//! loads silently onto another base; PEFT ignores the file.

use super::{Adapter, LoraConfig, Target};
use crate::config::ModelConfig;
use crate::error::{Error, Result};
use candle_core::{DType, Device, Tensor};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::path::Path;

pub const CONFIG_FILE: &str = "adapter_config.json";
pub const WEIGHTS_FILE: &str = "adapter_model.safetensors";
pub const BASE_FILE: &str = "fusegrpo_base.json";

/// Whether `dir` holds an adapter (PEFT's config file).
pub fn is_adapter_dir(dir: &Path) -> bool {
    dir.join(CONFIG_FILE).is_file()
}

/// The identity of a base model: what an adapter records and checks.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BaseIdentity {
    /// [`ModelConfig::arch_hash`] of its config.json.
    pub arch_hash: String,
    /// Its weight files (`*.safetensors`): name, size in bytes, and a
    /// fingerprint of their contents ([`fingerprint`]).
    pub weights: Vec<(String, u64, String)>,
    /// Where it was (for messages): an absolute path.
    pub path: String,
    /// Its `model_type` (`qwen3`, `llama`, ...), for messages; empty in
    /// files written before it was recorded (the hash covers it).
    #[serde(default)]
    pub model_type: String,
}

impl BaseIdentity {
    /// Of the model in `dir` (config `cfg`).
    pub fn of(dir: &Path, cfg: &ModelConfig) -> Result<BaseIdentity> {
        let mut weights = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
            let path = entry.map_err(|e| Error::io(dir, e))?.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
            if name.ends_with(".safetensors") && name != WEIGHTS_FILE && name != crate::weights::OPTIMIZER_FILE {
                let bytes = std::fs::metadata(&path).map_err(|e| Error::io(&path, e))?.len();
                weights.push((name, bytes, fingerprint(&path)?));
            }
        }
        weights.sort();
        let path = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf()).display().to_string();
        Ok(BaseIdentity { arch_hash: cfg.arch_hash(), weights, path, model_type: cfg.architecture.model_type().to_string() })
    }
}

/// FNV-1a 64 over a file's header (its first 1 MiB) and 64 chunks of 64 KiB
/// spread evenly through it: a fine-tune of the same architecture (same
/// names and sizes, other numbers) differs in every chunk, and an 8 GB base
/// costs 5 MiB of reads, not a full hash.
pub fn fingerprint(path: &Path) -> Result<String> {
    use std::io::{Read, Seek, SeekFrom};
    const HEAD: u64 = 1 << 20;
    const CHUNK: u64 = 64 << 10;
    const CHUNKS: u64 = 64;
    let mut file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
    let mut h = crate::fnv::Fnv1a::default();
    let mut buf = vec![0u8; HEAD as usize];
    let mut read_at = |offset: u64, n: u64, buf: &mut Vec<u8>| -> Result<usize> {
        file.seek(SeekFrom::Start(offset)).map_err(|e| Error::io(path, e))?;
        let n = n.min(len.saturating_sub(offset)) as usize;
        buf.resize(n, 0);
        file.read_exact(&mut buf[..n]).map_err(|e| Error::io(path, e))?;
        Ok(n)
    };
    let n = read_at(0, HEAD, &mut buf)?;
    h.eat(&buf[..n]);
    if len > HEAD {
        let step = (len - HEAD) / CHUNKS;
        for i in 0..CHUNKS {
            let n = read_at(HEAD + i * step, CHUNK, &mut buf)?;
            h.eat(&buf[..n]);
        }
    }
    Ok(h.hex())
}

fn config_err(path: &Path, key: &str, message: impl Into<String>) -> Error {
    Error::Config { path: path.to_path_buf(), key: key.into(), message: message.into() }
}

/// Writes `adapter` into `dir` (created): PEFT's two files, and the base's
/// identity. `base_name` goes into `base_model_name_or_path`.
pub fn save(dir: &Path, adapter: &Adapter, base_name: &str, base: Option<&BaseIdentity>) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let c = &adapter.cfg;
    let alpha: Value = if c.alpha.fract() == 0.0 && c.alpha.abs() < 1e15 { json!(c.alpha as i64) } else { json!(c.alpha) };
    let config = json!({
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base_name,
        "r": c.r,
        "lora_alpha": alpha,
        "lora_dropout": 0.0,
        "target_modules": adapter.target_names(),
        "use_rslora": c.use_rslora,
        "bias": "none",
        "fan_in_fan_out": false,
        "init_lora_weights": true,
        "inference_mode": true,
        "modules_to_save": null,
        "use_dora": false,
    });
    let path = dir.join(CONFIG_FILE);
    std::fs::write(&path, serde_json::to_string_pretty(&config).expect("serializes") + "\n").map_err(|e| Error::io(&path, e))?;
    let mut tensors: Vec<(String, Tensor)> = adapter.tensors.iter().map(|(k, t)| Ok((k.clone(), t.to_dtype(DType::F32)?))).collect::<Result<_>>()?;
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    let refs: Vec<(String, &Tensor)> = tensors.iter().map(|(k, t)| (k.clone(), t)).collect();
    crate::safetensors_stream::write(&dir.join(WEIGHTS_FILE), &refs, None)?;
    if let Some(base) = base {
        let path = dir.join(BASE_FILE);
        std::fs::write(&path, serde_json::to_string_pretty(base).expect("serializes") + "\n").map_err(|e| Error::io(&path, e))?;
    }
    Ok(())
}

/// Copies the adapter in `src` (PEFT's folder, or a LoRA run's checkpoint)
/// into `dst` with its weights in `dtype`: PEFT's two files and the base's
/// identity, nothing else (no optimizer state). Written into a temporary
/// sibling and renamed once complete; `dst` must not exist or be empty.
/// Returns the weights file's size in bytes.
pub fn export(src: &Path, dst: &Path, dtype: DType) -> Result<u64> {
    let adapter = read_checked(src)?;
    if let Some((base, model)) = recorded_base(src)? {
        adapter.check(&model, &src.join(WEIGHTS_FILE).display().to_string())?;
        tracing::debug!("export-adapter: checked against its base {}", base.display());
    }
    let loaded: Vec<(String, Tensor)> = adapter.tensors.into_iter().collect();
    if dst.exists() && std::fs::read_dir(dst).map_err(|e| Error::io(dst, e))?.next().is_some() {
        return Err(Error::invalid(dst.display().to_string(), "is not empty: nothing was written (choose a new folder)"));
    }
    let name = dst.file_name().and_then(|n| n.to_str()).unwrap_or("adapter");
    let tmp = dst.with_file_name(format!(".{name}.partial"));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(|e| Error::io(&tmp, e))?;
    }
    std::fs::create_dir_all(&tmp).map_err(|e| Error::io(&tmp, e))?;
    // A failure midway (a full disk) leaves no partial folder.
    let written = write_export(src, &tmp, dst, loaded, dtype);
    if written.is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    written?;
    let bytes = std::fs::metadata(dst.join(WEIGHTS_FILE)).map_err(|e| Error::io(dst.join(WEIGHTS_FILE), e))?.len();
    Ok(bytes)
}

/// [`export`]'s writing: the tensors in `dtype` and PEFT's files into
/// `tmp`, renamed to `dst`.
fn write_export(src: &Path, tmp: &Path, dst: &Path, loaded: Vec<(String, Tensor)>, dtype: DType) -> Result<()> {
    let mut tensors: Vec<(String, Tensor)> = loaded.into_iter().map(|(k, t)| Ok((k, t.to_dtype(dtype)?))).collect::<Result<_>>()?;
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    let refs: Vec<(String, &Tensor)> = tensors.iter().map(|(k, t)| (k.clone(), t)).collect();
    crate::safetensors_stream::write(&tmp.join(WEIGHTS_FILE), &refs, None)?;
    for file in [CONFIG_FILE, BASE_FILE] {
        if src.join(file).is_file() {
            std::fs::copy(src.join(file), tmp.join(file)).map_err(|e| Error::io(src.join(file), e))?;
        }
    }
    if dst.exists() {
        std::fs::remove_dir(dst).map_err(|e| Error::io(dst, e))?;
    }
    std::fs::rename(tmp, dst).map_err(|e| Error::io(dst, e))
}

/// The adapter in `dir` on the CPU as stored, checked against its own
/// config ([`Adapter::check_structure`]): what can be checked with no base.
/// A model folder given in its place is said to be one.
pub fn read_checked(dir: &Path) -> Result<Adapter> {
    if !is_adapter_dir(dir) {
        let what = if dir.join("config.json").is_file() {
            "is a model folder (it has config.json), not an adapter"
        } else if dir.is_dir() {
            "holds no adapter_config.json: it is not an adapter"
        } else {
            "does not exist"
        };
        return Err(Error::invalid(dir.display().to_string(), format!("{what}; an adapter is PEFT's folder (adapter_config.json, adapter_model.safetensors) or a LoRA run's checkpoint")));
    }
    let cfg = read_config(dir)?;
    let path = dir.join(WEIGHTS_FILE);
    if !path.is_file() {
        return Err(Error::io(&path, std::io::Error::new(std::io::ErrorKind::NotFound, "the adapter's weights are missing")));
    }
    let loaded = candle_core::safetensors::load(&path, &Device::Cpu).map_err(|e| Error::Safetensors { path: path.clone(), message: e.to_string() })?;
    let tensors: crate::weights::TensorMap = loaded.into_iter().map(|(k, t)| (k.replace(".default.weight", ".weight"), t)).collect();
    let what = path.display().to_string();
    // In name order, so the tensor named is the same every run.
    let mut sorted: Vec<(&String, &Tensor)> = tensors.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    for (name, t) in &sorted {
        if !t.dtype().is_float() {
            return Err(Error::invalid(&what, format!("tensor `{name}` is {:?}: LoRA weights are floating point (F32, F16, BF16)", t.dtype())));
        }
    }
    super::check_finite(&what, sorted.into_iter())?;
    let adapter = Adapter { cfg, tensors };
    adapter.check_structure(&what)?;
    Ok(adapter)
}

/// The base that `base_model_name_or_path` of the adapter in `dir` names,
/// with its config, when it is a model folder on this machine (an absolute
/// path, as our adapters record, or one relative to the current folder);
/// `None` for a hub id or a folder that is not here.
fn recorded_base(dir: &Path) -> Result<Option<(std::path::PathBuf, ModelConfig)>> {
    let Ok(name) = base_model_name(dir) else { return Ok(None) };
    let base = Path::new(&name);
    if !base.join("config.json").is_file() {
        return Ok(None);
    }
    Ok(Some((base.to_path_buf(), ModelConfig::from_file(&base.join("config.json"))?)))
}

/// Reads the LoRA setting of `dir/adapter_config.json`, refusing what we do
/// not implement (DoRA, biases, modules_to_save, per-module ranks, ...)
/// with the key named.
pub fn read_config(dir: &Path) -> Result<LoraConfig> {
    let path = dir.join(CONFIG_FILE);
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
    let raw: Value = serde_json::from_str(&text).map_err(|source| Error::Json { path: path.clone(), source })?;
    let get = |k: &str| raw.get(k).filter(|v| !v.is_null());
    match get("peft_type").and_then(Value::as_str) {
        Some("LORA") => {}
        other => return Err(config_err(&path, "peft_type", format!("{other:?}: only LORA adapters are supported"))),
    }
    let refuse_true = |k: &str, what: &str| match get(k) {
        Some(Value::Bool(true)) => Err(config_err(&path, k, format!("true: {what} is not supported"))),
        _ => Ok(()),
    };
    refuse_true("use_dora", "DoRA")?;
    refuse_true("fan_in_fan_out", "a transposed (Conv1D) base layer")?;
    refuse_true("lora_bias", "a LoRA bias")?;
    refuse_true("use_qalora", "QA-LoRA")?;
    match get("bias").and_then(Value::as_str) {
        None | Some("none") => {}
        Some(b) => return Err(config_err(&path, "bias", format!("`{b}` is not supported: only \"none\""))),
    }
    let non_empty = |k: &str| match get(k) {
        None => false,
        Some(Value::Object(m)) => !m.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(_) => true,
    };
    for (k, what) in [
        ("modules_to_save", "training whole modules beside the adapter"),
        ("rank_pattern", "per-module ranks"),
        ("alpha_pattern", "per-module alphas"),
        ("layers_to_transform", "adapting only some layers"),
        ("target_parameters", "adapting parameters directly"),
        ("trainable_token_indices", "trainable token embeddings"),
        ("layer_replication", "layer replication"),
    ] {
        if non_empty(k) {
            return Err(config_err(&path, k, format!("{} is set: {what} is not supported", get(k).expect("present"))));
        }
    }
    let r = get("r").and_then(Value::as_u64).filter(|&r| r > 0).ok_or_else(|| config_err(&path, "r", format!("expected a positive integer, found {:?}", get("r"))))? as usize;
    let alpha = get("lora_alpha").and_then(Value::as_f64).filter(|a| *a > 0.0).ok_or_else(|| config_err(&path, "lora_alpha", "expected a positive number"))?;
    let use_rslora = get("use_rslora").and_then(Value::as_bool).unwrap_or(false);
    let names: Vec<String> = match get("target_modules") {
        Some(Value::Array(a)) => a.iter().map(|v| v.as_str().map(String::from).ok_or_else(|| config_err(&path, "target_modules", format!("{v} is not a module name")))).collect::<Result<_>>()?,
        Some(Value::String(s)) => match Target::from_name(s) {
            Some(_) => vec![s.clone()],
            None => return Err(config_err(&path, "target_modules", format!("the pattern `{s}` is not supported: list the module names"))),
        },
        other => return Err(config_err(&path, "target_modules", format!("expected a list of module names, found {other:?}"))),
    };
    let mut targets = BTreeSet::new();
    for n in &names {
        let t = Target::from_name(n).ok_or_else(|| config_err(&path, "target_modules", format!("`{n}` is not a projection of these models (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj)")))?;
        targets.insert(t);
    }
    if targets.is_empty() {
        return Err(config_err(&path, "target_modules", "lists no module"));
    }
    let cfg = LoraConfig { r, alpha, use_rslora, targets, init_seed: 0, merge_for_rollouts: true };
    // The scale multiplies f32 weights: one beyond f32's range makes every adapted weight infinite.
    if !(cfg.scale() as f32).is_finite() || !alpha.is_finite() {
        return Err(config_err(&path, "lora_alpha", format!("{alpha:e}: the scale {:e} (alpha / r) is beyond f32's range, every adapted weight would be infinite", cfg.scale())));
    }
    Ok(cfg)
}

/// Loads the adapter in `dir` for a base model `model` (whose folder is
/// `base_dir`, when known, to check the identity our adapters record),
/// onto `device` in `dtype`. Shapes, names and the recorded base identity
/// are checked; nothing is half-loaded.
pub fn load(dir: &Path, model: &ModelConfig, base_dir: Option<&Path>, dtype: DType, device: &Device) -> Result<Adapter> {
    let stored = read_checked(dir)?;
    check_base(dir, model, base_dir)?;
    let path = dir.join(WEIGHTS_FILE);
    let tensors = stored.tensors.into_iter().map(|(k, t)| Ok((k, t.to_dtype(dtype)?.to_device(device)?))).collect::<Result<_>>()?;
    let adapter = Adapter { cfg: stored.cfg, tensors };
    adapter.check(model, &path.display().to_string())?;
    Ok(adapter)
}

/// The recorded base identity against the model about to take the adapter.
fn check_base(dir: &Path, model: &ModelConfig, base_dir: Option<&Path>) -> Result<()> {
    let path = dir.join(BASE_FILE);
    if !path.is_file() {
        return check_named_base(dir, model);
    }
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
    let recorded: BaseIdentity = serde_json::from_str(&text).map_err(|source| Error::Json { path: path.clone(), source })?;
    let arch = model.arch_hash();
    if recorded.arch_hash != arch {
        let of = |t: &str| if t.is_empty() { String::new() } else { format!(" ({t})") };
        return Err(config_err(
            &path,
            "arch_hash",
            format!("the adapter was trained on {}{}, a base of another architecture than this model's{}", recorded.path, of(&recorded.model_type), of(model.architecture.model_type())),
        ));
    }
    if let Some(base_dir) = base_dir {
        let here = BaseIdentity::of(base_dir, model)?;
        if here.weights != recorded.weights {
            return Err(config_err(
                &path,
                "weights",
                format!(
                    "the adapter was trained on {} ({:?}); {} has other weights ({:?}): pass the base it was trained on",
                    recorded.path, recorded.weights, base_dir.display(), here.weights
                ),
            ));
        }
    }
    Ok(())
}

/// Without [`BASE_FILE`]: the base `base_model_name_or_path` names, when it
/// is a folder here, must have this model's architecture. An absolute path
/// (what our adapters record) that disagrees is refused; a relative one
/// (resolved from the current folder, as PEFT does) or a base that cannot
/// be found is a warning: nothing then says which base it was trained on.
fn check_named_base(dir: &Path, model: &ModelConfig) -> Result<()> {
    let config = dir.join(CONFIG_FILE);
    let name = base_model_name(dir).unwrap_or_default();
    match recorded_base(dir)? {
        Some((base, named)) if named.arch_hash() != model.arch_hash() => {
            let message = format!(
                "base_model_name_or_path `{name}` is a {} model of other shapes or architecture than the base given ({}), and no {BASE_FILE} says otherwise: pass the base it was trained on",
                named.architecture.model_type(),
                model.architecture.model_type()
            );
            if base.is_absolute() {
                return Err(config_err(&config, "base_model_name_or_path", message));
            }
            tracing::warn!("{}: {message}", config.display());
        }
        Some(_) => {}
        None if crate::hub::is_hub_id(&name) => {}
        None => tracing::warn!(
            "{}: no {BASE_FILE}, and base_model_name_or_path `{name}` is not a model folder here: which base the adapter was trained on cannot be checked (its tensors fit this model's shapes)",
            config.display()
        ),
    }
    Ok(())
}

/// `base_model_name_or_path` of the adapter in `dir`.
pub fn base_model_name(dir: &Path) -> Result<String> {
    let path = dir.join(CONFIG_FILE);
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
    let raw: Value = serde_json::from_str(&text).map_err(|source| Error::Json { path: path.clone(), source })?;
    raw.get("base_model_name_or_path")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .ok_or_else(|| config_err(&path, "base_model_name_or_path", "missing: pass the base model with --model and this folder with --adapter"))
}
