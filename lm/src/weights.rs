//! Hugging Face safetensors checkpoints: one `model.safetensors` or shards
//! listed by `model.safetensors.index.json`. Loading checks every expected
//! tensor (name, shape, dtype) and converts to the run's dtype; saving writes
//! the same names and layout with `{"format": "pt"}` metadata, so
//! transformers loads what we write.

use crate::config::ModelConfig;
use crate::error::{Error, Result};
use crate::params::parameter_shapes;
use candle_core::{DType, Device, Tensor};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

pub const SINGLE_FILE: &str = "model.safetensors";
pub const INDEX_FILE: &str = "model.safetensors.index.json";
/// The optimizer state's file in a training checkpoint folder: not weights
/// (a base model's identity leaves it out).
pub const OPTIMIZER_FILE: &str = "optimizer.safetensors";

/// Named tensors of a model, in the run's dtype and device.
pub type TensorMap = HashMap<String, Tensor>;

/// Which file holds each tensor.
struct Layout {
    files: Vec<PathBuf>,
    owner: HashMap<String, usize>,
}

fn read_layout(dir: &Path) -> Result<Layout> {
    let index = dir.join(INDEX_FILE);
    if index.exists() {
        let text = std::fs::read_to_string(&index).map_err(|e| Error::io(&index, e))?;
        let json: serde_json::Value = serde_json::from_str(&text)
            .map_err(|source| Error::Json { path: index.clone(), source })?;
        let map = json.get("weight_map").and_then(|m| m.as_object()).ok_or_else(|| {
            Error::Config { path: index.clone(), key: "weight_map".into(), message: "missing or not an object".into() }
        })?;
        let mut files: Vec<PathBuf> = Vec::new();
        let mut owner = HashMap::new();
        let mut shard_ids: BTreeMap<String, usize> = BTreeMap::new();
        for (name, shard) in map {
            let shard = shard.as_str().ok_or_else(|| Error::Config {
                path: index.clone(),
                key: format!("weight_map.{name}"),
                message: "expected a shard file name".into(),
            })?;
            let next = shard_ids.len();
            let id = *shard_ids.entry(shard.to_string()).or_insert(next);
            if id == files.len() {
                let path = dir.join(shard);
                if !path.exists() {
                    return Err(Error::MissingShard { dir: dir.into(), shard: shard.into() });
                }
                files.push(path);
            }
            owner.insert(name.clone(), id);
        }
        return Ok(Layout { files, owner });
    }
    let single = dir.join(SINGLE_FILE);
    if single.exists() {
        return Ok(Layout { files: vec![single], owner: HashMap::new() });
    }
    Err(Error::NoWeights { dir: dir.into() })
}

fn open_shards(files: &[PathBuf]) -> Result<Vec<candle_core::safetensors::MmapedSafetensors>> {
    files
        .iter()
        .map(|p| {
            // SAFETY: the file is mapped read-only; checkpoints are not
            // modified while a run reads them (saves go to a new folder).
            unsafe { candle_core::safetensors::MmapedSafetensors::new(p) }
                .map_err(|e| Error::Safetensors { path: p.clone(), message: e.to_string() })
        })
        .collect()
}

/// Load every parameter the config calls for, converted to `dtype`.
pub fn load_weights(dir: &Path, cfg: &ModelConfig, dtype: DType, device: &Device) -> Result<TensorMap> {
    let layout = read_layout(dir)?;
    let shards = open_shards(&layout.files)?;
    let mut out = HashMap::new();
    for (name, shape) in parameter_shapes(cfg) {
        let file_id = match layout.owner.get(&name) {
            Some(&id) => id,
            None if layout.owner.is_empty() => 0,
            None => return Err(Error::MissingTensor { dir: dir.into(), name }),
        };
        let path = &layout.files[file_id];
        let view = shards[file_id]
            .get(&name)
            .map_err(|_| Error::MissingTensor { dir: dir.into(), name: name.clone() })?;
        if view.shape() != shape.as_slice() {
            return Err(Error::TensorShape { path: path.clone(), name, found: view.shape().to_vec(), expected: shape });
        }
        use safetensors::Dtype as D;
        if !matches!(view.dtype(), D::BF16 | D::F16 | D::F32) {
            return Err(Error::TensorDtype { path: path.clone(), name, dtype: format!("{:?}", view.dtype()) });
        }
        let t = shards[file_id]
            .load(&name, device)
            .and_then(|t| t.to_dtype(dtype))
            .map_err(|e| Error::Safetensors { path: path.clone(), message: format!("tensor `{name}`: {e}") })?;
        out.insert(name, t);
    }
    Ok(out)
}

/// How to lay out saved weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardPolicy {
    /// Everything in `model.safetensors`.
    Single,
    /// Exactly this many shards plus an index, as the hub lays out large models.
    Count(usize),
    /// Shards of at most this many bytes (a tensor is never split).
    MaxBytes(usize),
}

/// Write `config.json` and the weights to `dir` (created if needed).
pub fn save_checkpoint(dir: &Path, cfg: &ModelConfig, tensors: &TensorMap, policy: ShardPolicy) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let cfg_path = dir.join("config.json");
    let mut raw = cfg.to_raw();
    let dtype = tensors.values().next().map(|t| t.dtype()).unwrap_or(DType::F32);
    raw.insert("torch_dtype".into(), dtype_name(dtype).into());
    let text = serde_json::to_string_pretty(&raw).expect("config serializes");
    std::fs::write(&cfg_path, text + "\n").map_err(|e| Error::io(&cfg_path, e))?;
    save_weights(dir, cfg, tensors, policy)
}

/// Write the weights only (single file or shards + index).
pub fn save_weights(dir: &Path, cfg: &ModelConfig, tensors: &TensorMap, policy: ShardPolicy) -> Result<()> {
    let names: Vec<(String, usize)> = parameter_shapes(cfg)
        .into_iter()
        .map(|(name, _)| {
            let t = tensors.get(&name).ok_or_else(|| Error::MissingTensor { dir: dir.into(), name: name.clone() })?;
            Ok((name, t.elem_count() * t.dtype().size_in_bytes()))
        })
        .collect::<Result<_>>()?;
    let groups = plan_shards(&names, policy);
    if groups.len() == 1 && policy == ShardPolicy::Single {
        return write_file(&dir.join(SINGLE_FILE), &groups[0], tensors);
    }
    let n = groups.len();
    let mut weight_map = serde_json::Map::new();
    for (k, group) in groups.iter().enumerate() {
        let file = format!("model-{:05}-of-{:05}.safetensors", k + 1, n);
        write_file(&dir.join(&file), group, tensors)?;
        for name in group {
            weight_map.insert(name.clone(), file.clone().into());
        }
    }
    let total: usize = names.iter().map(|(_, b)| b).sum();
    let index = serde_json::json!({"metadata": {"total_size": total}, "weight_map": weight_map});
    let path = dir.join(INDEX_FILE);
    std::fs::write(&path, serde_json::to_string_pretty(&index).expect("index serializes") + "\n")
        .map_err(|e| Error::io(&path, e))
}

/// Split tensor names (with byte sizes) into shard groups, in order.
fn plan_shards(names: &[(String, usize)], policy: ShardPolicy) -> Vec<Vec<String>> {
    let max_bytes = match policy {
        ShardPolicy::Single => usize::MAX,
        ShardPolicy::MaxBytes(b) => b.max(1),
        ShardPolicy::Count(n) => {
            let total: usize = names.iter().map(|(_, b)| b).sum();
            total.div_ceil(n.max(1)).max(1)
        }
    };
    let mut groups: Vec<Vec<String>> = vec![Vec::new()];
    let mut used = 0usize;
    for (name, bytes) in names {
        if !groups.last().expect("non-empty").is_empty() && used + bytes > max_bytes {
            groups.push(Vec::new());
            used = 0;
        }
        groups.last_mut().expect("non-empty").push(name.clone());
        used += bytes;
    }
    if let ShardPolicy::Count(n) = policy {
        while groups.len() > n.max(1) {
            let tail = groups.pop().expect("more than one group");
            groups.last_mut().expect("non-empty").extend(tail);
        }
        // Greedy packing can leave fewer groups than asked; split the largest.
        while groups.len() < n && groups.iter().any(|g| g.len() > 1) {
            let i = (0..groups.len()).max_by_key(|&i| groups[i].len()).expect("non-empty");
            let half = groups[i].len() / 2;
            let tail = groups[i].split_off(half);
            groups.insert(i + 1, tail);
        }
    }
    groups
}

/// One safetensors file of `names`, streamed tensor by tensor
/// ([`crate::safetensors_stream`]): host memory grows by one tensor at most.
fn write_file(path: &Path, names: &[String], tensors: &TensorMap) -> Result<()> {
    let data: Vec<(String, &Tensor)> = names.iter().map(|n| (n.clone(), &tensors[n])).collect();
    let metadata: HashMap<String, String> = [("format".to_string(), "pt".to_string())].into();
    crate::safetensors_stream::write(path, &data, Some(&metadata))
}

/// The transformers spelling of a dtype.
pub fn dtype_name(dtype: DType) -> &'static str {
    match dtype {
        DType::BF16 => "bfloat16",
        DType::F16 => "float16",
        DType::F64 => "float64",
        _ => "float32",
    }
}

/// The file [`write_untied_head`] writes.
pub const UNTIED_HEAD_FILE: &str = "lm_head.safetensors";

/// One tensor of a model folder by name (single file or shards), as stored.
pub fn load_tensor(dir: &Path, name: &str) -> Result<Tensor> {
    let layout = read_layout(dir)?;
    let id = layout.owner.get(name).copied().unwrap_or(0);
    let shards = open_shards(&layout.files)?;
    shards[id].load(name, &Device::Cpu).map_err(|_| Error::MissingTensor { dir: dir.into(), name: name.into() })
}

/// For a model whose LM head is its input embeddings (`tie_word_embeddings`):
/// `dir/lm_head.safetensors` with `lm_head.weight` = `embeddings`, and, if
/// `dir` has a shard index, the index naming it. A loader that treats the
/// head as a weight of its own (vLLM serving the model untied, whose
/// in-place weight reloads keep a tied head's old tensor) then finds it.
pub fn write_untied_head(dir: &Path, embeddings: &Tensor) -> Result<()> {
    let path = dir.join(UNTIED_HEAD_FILE);
    let map: HashMap<String, Tensor> = [("lm_head.weight".to_string(), embeddings.clone())].into();
    candle_core::safetensors::save(&map, &path).map_err(|e| Error::Safetensors { path: path.clone(), message: e.to_string() })?;
    let index = dir.join(INDEX_FILE);
    if index.exists() {
        let text = std::fs::read_to_string(&index).map_err(|e| Error::io(&index, e))?;
        let mut json: serde_json::Value = serde_json::from_str(&text).map_err(|source| Error::Json { path: index.clone(), source })?;
        let map = json.get_mut("weight_map").and_then(|m| m.as_object_mut()).ok_or_else(|| Error::Config {
            path: index.clone(),
            key: "weight_map".into(),
            message: "missing or not an object".into(),
        })?;
        map.insert("lm_head.weight".into(), UNTIED_HEAD_FILE.into());
        let text = serde_json::to_string_pretty(&json).expect("index serializes");
        // The index may be a link into another folder: replace the link, not its target.
        let _ = std::fs::remove_file(&index);
        std::fs::write(&index, text).map_err(|e| Error::io(&index, e))?;
    }
    Ok(())
}

/// For a model folder whose config ties the embeddings and the LM head: a
/// folder under `root` (named after the model folder and a hash of its
/// path, made afresh) of links to its files, its config.json with
/// `tie_word_embeddings = false`, and the head as a weight of its own
/// ([`write_untied_head`]). vLLM's in-place weight reload leaves a tied
/// head with its old tensor; an untied head is reloaded by name. None for
/// an untied model or a folder without config.json.
pub fn untied_view(model_dir: &Path, root: &Path) -> Result<Option<PathBuf>> {
    let cfg_path = model_dir.join("config.json");
    if !cfg_path.exists() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(&cfg_path).map_err(|e| Error::io(&cfg_path, e))?;
    let mut cfg: serde_json::Value = serde_json::from_str(&text).map_err(|source| Error::Json { path: cfg_path.clone(), source })?;
    if cfg.get("tie_word_embeddings").and_then(serde_json::Value::as_bool) != Some(true) {
        return Ok(None);
    }
    use std::hash::{Hash, Hasher};
    let source = std::fs::canonicalize(model_dir).map_err(|e| Error::io(model_dir, e))?;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    source.hash(&mut h);
    let name = source.file_name().map_or("model".into(), |n| n.to_string_lossy().into_owned());
    let view = root.join(format!("{name}-{:016x}", h.finish()));
    if view.exists() {
        std::fs::remove_dir_all(&view).map_err(|e| Error::io(&view, e))?;
    }
    std::fs::create_dir_all(&view).map_err(|e| Error::io(&view, e))?;
    for entry in std::fs::read_dir(&source).map_err(|e| Error::io(&source, e))? {
        let entry = entry.map_err(|e| Error::io(&source, e))?;
        let file = entry.file_name();
        if file == "config.json" || file == UNTIED_HEAD_FILE {
            continue;
        }
        let link = view.join(&file);
        std::os::unix::fs::symlink(entry.path(), &link).map_err(|e| Error::io(&link, e))?;
    }
    cfg["tie_word_embeddings"] = false.into();
    let out = view.join("config.json");
    std::fs::write(&out, serde_json::to_string_pretty(&cfg).expect("config serializes")).map_err(|e| Error::io(&out, e))?;
    let embeddings = load_tensor(&source, "model.embed_tokens.weight")?;
    write_untied_head(&view, &embeddings)?;
    Ok(Some(view))
}
