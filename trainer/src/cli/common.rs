//! Helpers shared by subcommands: model loading and JSONL input/output.

use anyhow::{Context, Result};
use candle_core::Device;
use std::io::{BufRead, Write};
use std::path::Path;
use trainer::device::{DTypeKind, DeviceKind};
use trainer::CausalLm;

/// Where and in which precision a model runs.
#[derive(clap::Args, Debug, Clone)]
pub struct RunOn {
    /// Device to run on.
    #[arg(long, value_enum, default_value_t = DeviceKind::Cpu)]
    pub device: DeviceKind,
    /// Weights/activations dtype (checkpoint weights are converted to it).
    #[arg(long, value_enum, default_value_t = DTypeKind::F32)]
    pub dtype: DTypeKind,
}

/// Copy `tokenizer.json` and `tokenizer_config.json` from `from` into `to`.
/// A missing file is an error naming it when `required` (init-tiny's
/// `--tokenizer`), and skipped otherwise (a checkpoint of a model saved
/// without one).
pub fn copy_tokenizer(from: &Path, to: &Path, required: bool) -> Result<()> {
    for f in ["tokenizer.json", "tokenizer_config.json"] {
        let src = from.join(f);
        if required || src.exists() {
            std::fs::copy(&src, to.join(f)).with_context(|| format!("copying {} into {}", src.display(), to.display()))?;
        }
    }
    Ok(())
}

/// Put `template`'s text in `dir/tokenizer_config.json` as its `chat_template`,
/// so a checkpoint trained with `[model] chat_template` carries it.
pub fn set_chat_template(dir: &Path, template: &Path) -> Result<()> {
    let path = dir.join("tokenizer_config.json");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut config: serde_json::Value = serde_json::from_str(&text).with_context(|| format!("{}: invalid JSON", path.display()))?;
    let src = std::fs::read_to_string(template).with_context(|| format!("reading the chat template {}", template.display()))?;
    config["chat_template"] = src.into();
    let tmp = dir.join("tokenizer_config.json.tmp");
    std::fs::write(&tmp, serde_json::to_string_pretty(&config)? + "\n").with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, &path).with_context(|| format!("writing {}", path.display()))
}

/// Load a model from a folder or hub id.
pub fn load_model(spec: &str, on: &RunOn) -> Result<(CausalLm, Device)> {
    let device = on.device.open()?;
    let dir = trainer::hub::resolve_model_dir(spec)?;
    let cfg = trainer::ModelConfig::from_file(&dir.join("config.json"))?;
    let t0 = std::time::Instant::now();
    let weights = trainer::weights::load_weights(&dir, &cfg, on.dtype.into(), &device)?;
    let model = CausalLm::new(&cfg, &weights)?;
    tracing::info!(model = %dir.display(), params = trainer::params::parameter_count(&cfg), secs = t0.elapsed().as_secs_f64(), "loaded");
    Ok((model, device))
}

/// Read `{"ids": [...]}` lines, each id below `vocab`, or `{"text": "..."}`
/// lines encoded with `tokenizer` (special tokens written in the text stay
/// whole; none added); errors name the file and line.
pub fn read_input_lines(path: &Path, vocab: usize, tokenizer: Option<&tokenizers::Tokenizer>) -> Result<Vec<Vec<u32>>> {
    let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut out = Vec::new();
    for (n, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.with_context(|| format!("{}:{}: reading", path.display(), n + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Row {
            ids: Option<Vec<u32>>,
            text: Option<String>,
        }
        let expected = if tokenizer.is_some() { "{\"ids\": [non-negative integers]} or {\"text\": \"...\"}" } else { "{\"ids\": [non-negative integers]}" };
        let where_ = || format!("{}:{}", path.display(), n + 1);
        let row: Row = serde_json::from_str(&line).with_context(|| format!("{}: expected {expected}", where_()))?;
        let ids = match (row.ids, row.text, tokenizer) {
            (Some(ids), None, _) => ids,
            (None, Some(text), Some(tok)) => tok
                .encode(text.as_str(), false)
                .map_err(|e| anyhow::anyhow!("{}: tokenizing the text: {e}", where_()))?
                .get_ids()
                .to_vec(),
            (None, Some(_), None) => anyhow::bail!("{}: a `text` line needs the model's tokenizer.json", where_()),
            _ => anyhow::bail!("{}: expected {expected}", where_()),
        };
        if let Some(bad) = ids.iter().find(|&&t| t as usize >= vocab) {
            anyhow::bail!("{}: token id {bad} is outside the vocabulary (size {vocab})", where_());
        }
        out.push(ids);
    }
    Ok(out)
}

/// The model folder's tokenizer.json, when it has one.
pub fn model_tokenizer(spec: &str) -> anyhow::Result<Option<tokenizers::Tokenizer>> {
    let path = trainer::hub::resolve_model_dir(spec)?.join("tokenizer.json");
    if !path.exists() {
        return Ok(None);
    }
    tokenizers::Tokenizer::from_file(&path).map(Some).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// Write one JSON value per line.
pub fn write_json_lines<T: serde::Serialize>(path: &Path, rows: &[T]) -> Result<()> {
    let file = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut w = std::io::BufWriter::new(file);
    for row in rows {
        serde_json::to_writer(&mut w, row)?;
        w.write_all(b"\n")?;
    }
    w.flush().with_context(|| format!("writing {}", path.display()))
}

/// The process's SIGINT/SIGTERM flag: the handler is installed once, on
/// first use, and every training loop of the process polls the same flag.
pub fn interrupt_flag() -> Result<std::sync::Arc<std::sync::atomic::AtomicBool>> {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, OnceLock};
    static FLAG: OnceLock<Arc<AtomicBool>> = OnceLock::new();
    if let Some(f) = FLAG.get() {
        return Ok(f.clone());
    }
    let flag = Arc::new(AtomicBool::new(false));
    let handler_flag = flag.clone();
    ctrlc::set_handler(move || handler_flag.store(true, Ordering::SeqCst)).context("installing the SIGINT/SIGTERM handler")?;
    Ok(FLAG.get_or_init(|| flag).clone())
}
