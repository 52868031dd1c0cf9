//! Where a model lives: a local folder, or a Hugging Face hub id resolved
//! through `hf-hub` (its cache layout under `HF_HOME`/`HF_HUB_CACHE`; with
//! `HF_HUB_OFFLINE=1` only the cache is consulted, nothing is downloaded).

use crate::error::{Error, Result};
use crate::weights::{INDEX_FILE, SINGLE_FILE};
use std::path::{Path, PathBuf};

/// Files a model folder may hold besides the weights.
const SIDE_FILES: [&str; 4] = ["config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json"];

/// Resolve `spec` (a folder, or a hub id such as `Qwen/Qwen3-4B`) to a local
/// folder holding config.json and the weights.
pub fn resolve_model_dir(spec: &str) -> Result<PathBuf> {
    let path = Path::new(spec);
    if path.is_dir() {
        return Ok(path.to_path_buf());
    }
    if !is_hub_id(spec) {
        return Err(Error::Hub { id: spec.into(), message: "not a folder, and not a hub id of the form owner/name".into() });
    }
    let offline = std::env::var("HF_HUB_OFFLINE").is_ok_and(|v| !v.is_empty() && v != "0");
    if offline { from_cache(spec) } else { download(spec) }
}

/// Whether `spec` reads as a hub id (`owner/name`, not a path that exists,
/// not starting with `.` or `/`).
pub fn is_hub_id(spec: &str) -> bool {
    !(Path::new(spec).exists() || spec.starts_with('.') || spec.starts_with('/') || spec.matches('/').count() != 1)
}

fn hub_error(id: &str, message: impl Into<String>) -> Error {
    Error::Hub { id: id.into(), message: message.into() }
}

/// The hub cache: `HF_HUB_CACHE`, else `HF_HOME/hub`, else ~/.cache/huggingface/hub.
fn hub_cache() -> hf_hub::Cache {
    match std::env::var("HF_HUB_CACHE") {
        Ok(p) if !p.is_empty() => hf_hub::Cache::new(p.into()),
        _ => hf_hub::Cache::from_env(),
    }
}

fn from_cache(id: &str) -> Result<PathBuf> {
    let cache = hub_cache();
    let repo = cache.model(id.to_string());
    let config = repo.get("config.json").ok_or_else(|| {
        hub_error(id, format!("HF_HUB_OFFLINE is set and config.json is not in the cache at {}", cache.path().display()))
    })?;
    let dir = config.parent().expect("a file has a parent").to_path_buf();
    if repo.get(SINGLE_FILE).is_none() && repo.get(INDEX_FILE).is_none() {
        return Err(hub_error(id, "HF_HUB_OFFLINE is set and the cache holds no weights for it"));
    }
    Ok(dir)
}

fn download(id: &str) -> Result<PathBuf> {
    let api = hf_hub::api::sync::ApiBuilder::from_cache(hub_cache())
        .build()
        .map_err(|e| hub_error(id, e.to_string()))?;
    let repo = api.model(id.to_string());
    let config = repo.get("config.json").map_err(|e| hub_error(id, format!("config.json: {e}")))?;
    for f in SIDE_FILES.iter().skip(1) {
        let _ = repo.get(f); // optional files
    }
    match repo.get(INDEX_FILE) {
        Ok(index) => {
            let text = std::fs::read_to_string(&index).map_err(|e| Error::io(&index, e))?;
            let json: serde_json::Value =
                serde_json::from_str(&text).map_err(|source| Error::Json { path: index.clone(), source })?;
            let mut shards: Vec<&str> = json["weight_map"]
                .as_object()
                .map(|m| m.values().filter_map(|v| v.as_str()).collect())
                .unwrap_or_default();
            shards.sort();
            shards.dedup();
            for shard in shards {
                repo.get(shard).map_err(|e| hub_error(id, format!("{shard}: {e}")))?;
            }
        }
        Err(_) => {
            repo.get(SINGLE_FILE).map_err(|e| hub_error(id, format!("{SINGLE_FILE}: {e}")))?;
        }
    }
    Ok(config.parent().expect("a file has a parent").to_path_buf())
}
