//! Run configuration: raw TOML (unknown keys rejected, by name) -> a
//! validated [`RunConfig`]. Every section has defaults, so a preset only
//! states what differs. Training sections join this file with issue 5.

use crate::device::{DTypeKind, DeviceKind};
use crate::error::{Error, Result};
use crate::sampling::SamplerConfig;
use rollout::episode::EpisodeConfig;
use rollout::reward::RewardConfig;
use rollout::tools::ToolConfig;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The model a run starts from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSection {
    /// A folder (config.json + safetensors + tokenizer) or a hub id.
    pub path: String,
    /// Tokenizer folder (default: the model folder).
    #[serde(default)]
    pub tokenizer: Option<PathBuf>,
    /// A Jinja chat template that replaces the tokenizer's own (relative to
    /// the config file): e.g. `configs/chatml-tools.jinja` declares the tools
    /// and the `<tool_call>` format to a ChatML model whose template has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat_template: Option<PathBuf>,
    /// A LoRA adapter applied to the model (relative to the config file):
    /// PEFT's folder or a LoRA run's checkpoint. With `[lora]`, training
    /// starts from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adapter: Option<PathBuf>,
    #[serde(default)]
    pub dtype: DTypeKind,
    #[serde(default)]
    pub device: DeviceKind,
    /// The fused CUDA kernels on a GPU: `auto` (on once scripts/gpu-check
    /// has passed for this build), `on` or `off` (`crate::gpu_check`).
    #[serde(default, skip_serializing_if = "crate::gpu_check::CudaKernels::is_auto")]
    pub cuda_kernels: crate::gpu_check::CudaKernels,
}

/// Where tasks' repositories are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvSection {
    /// Folder of `<owner>__<name>[.git]` repositories.
    pub repos_dir: PathBuf,
    #[serde(default)]
    pub tools: ToolConfig,
}

/// Sampling of rollouts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SamplingSection {
    /// 0 = greedy.
    pub temperature: f64,
    pub top_p: f64,
    /// 0 = off.
    pub top_k: usize,
    pub seed: u64,
}

impl Default for SamplingSection {
    fn default() -> Self {
        SamplingSection { temperature: 1.0, top_p: 1.0, top_k: 0, seed: 0 }
    }
}

impl SamplingSection {
    pub fn sampler(&self) -> SamplerConfig {
        SamplerConfig { temperature: self.temperature, top_p: self.top_p, top_k: self.top_k }
    }
}

/// Shape of rollouts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RolloutSection {
    /// Episodes per task (G).
    pub group: usize,
    /// Bound on rows x (tokens + new tokens) in one generation batch.
    pub max_batch_tokens: usize,
    /// Bound on KV slots held at once (parked caches and the decoding
    /// batch's, left padding included); episodes whose parked cache does not
    /// fit are prefilled again at their next turn. At least 2 x
    /// `[episode] max_total_tokens`. Unset: unbounded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_kv_tokens: Option<usize>,
    /// Bound on tokens in one prefill forward (longer prefills are split).
    #[serde(skip_serializing_if = "is_default_prefill")]
    pub max_prefill_tokens: usize,
    /// What generates the model's turns: our own decoding (`builtin`) or a
    /// vLLM server (`vllm`, `[rollout.vllm]`).
    #[serde(skip_serializing_if = "is_builtin")]
    pub engine: Engine,
    /// The vLLM server when `engine = "vllm"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vllm: Option<VllmSection>,
}

/// `[rollout] engine`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    #[default]
    Builtin,
    Vllm,
}

fn is_builtin(e: &Engine) -> bool {
    *e == Engine::Builtin
}

/// `[rollout.vllm]`: where the vLLM server is and how to talk to it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct VllmSection {
    /// The server, `http://host:port`.
    pub url: String,
    /// The name vLLM serves the model (or the LoRA adapter) under.
    pub served_model: String,
    /// Requests in flight at most (vLLM batches them).
    pub max_concurrency: usize,
    /// Whole-request timeout, seconds.
    pub timeout_s: f64,
    /// Retries of a failed request (no connection, 408/429/5xx), with
    /// exponential backoff from 0.5 s up to 30 s.
    pub max_retries: u32,
    /// Largest mean |difference| between the engine's log-probs of a probe
    /// text and this config's model's, checked at start: the server must
    /// serve the same weights. f32 on both sides agrees to ~1e-5; bf16 on
    /// either side needs ~0.02.
    pub probe_tolerance: f64,
    /// When the server does not serve this config's model: false (the
    /// default) stops with an error; true loads it onto the server (the
    /// adapter under a name of its own, or the weights in place), as
    /// `pipeline` needs for its stages' models.
    pub load_model: bool,
}

impl Default for VllmSection {
    fn default() -> Self {
        VllmSection {
            url: "http://127.0.0.1:8000".into(),
            served_model: String::new(),
            max_concurrency: 64,
            timeout_s: 600.0,
            max_retries: 5,
            probe_tolerance: 1e-3,
            load_model: false,
        }
    }
}

/// Tokens per prefill forward unless set.
pub const DEFAULT_MAX_PREFILL_TOKENS: usize = 16_384;

fn is_default_prefill(n: &usize) -> bool {
    *n == DEFAULT_MAX_PREFILL_TOKENS
}

impl RolloutSection {
    pub fn limits(&self) -> crate::policy::RolloutLimits {
        crate::policy::RolloutLimits { max_batch_tokens: self.max_batch_tokens, max_kv_tokens: self.max_kv_tokens, max_prefill_tokens: self.max_prefill_tokens }
    }
}

impl Default for RolloutSection {
    fn default() -> Self {
        RolloutSection {
            group: 4,
            max_batch_tokens: 262_144,
            max_kv_tokens: None,
            max_prefill_tokens: DEFAULT_MAX_PREFILL_TOKENS,
            engine: Engine::Builtin,
            vllm: None,
        }
    }
}

/// A whole run's configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    /// Name of the run (checkpoints/<name> by default).
    pub name: String,
    pub model: ModelSection,
    pub env: EnvSection,
    #[serde(default)]
    pub episode: EpisodeConfig,
    #[serde(default)]
    pub reward: RewardConfig,
    #[serde(default)]
    pub sampling: SamplingSection,
    #[serde(default)]
    pub rollout: RolloutSection,
    #[serde(default)]
    pub train: crate::train::config::TrainSection,
    #[serde(default)]
    pub grpo: crate::train::config::GrpoSection,
    #[serde(default)]
    pub optim: crate::train::config::OptimSection,
    /// Supervised fine-tuning (`fusegrpo sft`, the pipeline's SFT stage).
    #[serde(default, skip_serializing_if = "crate::sft::config::SftSection::is_default")]
    pub sft: crate::sft::config::SftSection,
    /// The whole recipe (`fusegrpo pipeline`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pipeline: Option<crate::pipeline::PipelineSection>,
    /// Train a LoRA adapter instead of every weight (`train`, `sft`, `pipeline`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lora: Option<crate::lora::LoraSection>,
}

/// A TOML syntax or type error as `file:line:column: message`, naming the
/// key (its table and name, read off the source) when the line sets one.
fn toml_error(path: &Path, text: &str, e: &toml::de::Error) -> Error {
    let message = e.message().trim().to_string();
    let Some(span) = e.span() else { return Error::Invalid { what: path.display().to_string(), message } };
    let before = &text[..span.start.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    let what = format!("{}:{line}:{column}", path.display());
    let source_line = text.lines().nth(line - 1).unwrap_or_default();
    let table = text
        .lines()
        .take(line)
        .filter_map(|l| l.trim().strip_prefix('[').and_then(|l| l.split(']').next()).map(|t| t.trim_matches(['[', ' ']).to_string()))
        .last();
    let key = source_line.split_once('=').map(|(k, _)| k.trim().trim_matches('"')).filter(|k| !k.is_empty() && !k.starts_with('#'));
    let message = match (table, key) {
        (Some(t), Some(k)) => format!("config key `{t}.{k}`: {message}"),
        (None, Some(k)) => format!("config key `{k}`: {message}"),
        _ => message,
    };
    Error::Invalid { what, message }
}

/// `table` (read from `path`) on top of the config its `extends` names,
/// recursively; `seen` guards against a cycle.
fn extended(path: &Path, mut table: toml::Table, seen: &mut Vec<PathBuf>) -> Result<toml::Table> {
    let Some(base) = table.remove("extends") else { return Ok(table) };
    let key_err = |message: String| Error::Config { path: path.into(), key: "extends".into(), message };
    let name = base.as_str().ok_or_else(|| key_err("must be a file name (a string)".into()))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let base_path = dir.join(name);
    if base_path.parent().map(|p| p.canonicalize().ok()) != Some(dir.canonicalize().ok()) {
        return Err(key_err(format!("{name}: the extended config must be in the same folder (relative paths in it are taken from there)")));
    }
    let canonical = base_path.canonicalize().map_err(|e| Error::io(&base_path, e))?;
    if seen.contains(&canonical) {
        return Err(key_err(format!("{name}: a cycle of extends")));
    }
    seen.push(canonical);
    let text = std::fs::read_to_string(&base_path).map_err(|e| Error::io(&base_path, e))?;
    let parent: toml::Table = toml::from_str(&text).map_err(|e| toml_error(&base_path, &text, &e))?;
    let mut merged = extended(&base_path, parent, seen)?;
    merge(&mut merged, table);
    Ok(merged)
}

/// `over`'s keys into `into`: tables merge key by key, anything else replaces.
fn merge(into: &mut toml::Table, over: toml::Table) {
    for (k, v) in over {
        match (into.get_mut(&k), v) {
            (Some(toml::Value::Table(a)), toml::Value::Table(b)) => merge(a, b),
            (_, v) => {
                into.insert(k, v);
            }
        }
    }
}

impl RunConfig {
    /// Read, parse and validate a TOML file. Relative paths in it are taken
    /// relative to the file's folder.
    ///
    /// A top-level `extends = "other.toml"` (relative to the file) starts
    /// from that config: its tables are merged key by key, this file's
    /// values winning. Both files must sit in the same folder, so relative
    /// paths mean the same in both.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        let value: toml::Table = toml::from_str(&text).map_err(|e| toml_error(path, &text, &e))?;
        let mut cfg: RunConfig = if value.contains_key("extends") {
            let merged = extended(path, value, &mut vec![])?;
            toml::Value::Table(merged).try_into().map_err(|e: toml::de::Error| Error::Invalid { what: format!("{} (with what it extends)", path.display()), message: e.message().trim().to_string() })?
        } else {
            toml::from_str(&text).map_err(|e| toml_error(path, &text, &e))?
        };
        let base = path.parent().unwrap_or(Path::new("."));
        cfg.resolve_paths(base);
        cfg.validate(path)?;
        Ok(cfg)
    }

    fn resolve_paths(&mut self, base: &Path) {
        let fix = |p: &mut PathBuf| {
            if let Some(home) = home_relative(p) {
                *p = home;
            } else if p.is_relative() {
                *p = base.join(&*p);
            }
        };
        if let Some(home) = home_relative(Path::new(&self.model.path)) {
            self.model.path = home.to_string_lossy().into_owned();
        }
        fix(&mut self.env.repos_dir);
        if let Some(t) = self.model.tokenizer.as_mut() {
            fix(t);
        }
        if let Some(t) = self.model.chat_template.as_mut() {
            fix(t);
        }
        if let Some(t) = self.model.adapter.as_mut() {
            fix(t);
        }
        if let Some(t) = self.train.tasks.as_mut() {
            fix(t);
        }
        if let Some(t) = self.sft.data.as_mut() {
            fix(t);
        }
        if let Some(t) = self.pipeline.as_mut().and_then(|p| p.tasks.as_mut()) {
            fix(t);
        }
        if let Some(t) = self.pipeline.as_mut().and_then(|p| p.heldout.as_mut()) {
            fix(t);
        }
        let local = base.join(&self.model.path);
        if Path::new(&self.model.path).is_relative() && (local.exists() || self.model.path.starts_with('.')) {
            self.model.path = local.to_string_lossy().into_owned();
        }
    }

    /// Check values serde cannot: ranges and consistency. Errors name the key.
    pub fn validate(&self, path: &Path) -> Result<()> {
        let bad = |key: &str, message: String| Err(Error::Config { path: path.into(), key: key.into(), message });
        if self.rollout.group == 0 {
            return bad("rollout.group", "must be at least 1".into());
        }
        if !(self.sampling.top_p > 0.0 && self.sampling.top_p <= 1.0) {
            return bad("sampling.top_p", format!("must be in (0, 1], got {}", self.sampling.top_p));
        }
        if !(self.sampling.temperature >= 0.0 && self.sampling.temperature.is_finite()) {
            return bad("sampling.temperature", format!("must be a number >= 0 (0 = greedy), got {}", self.sampling.temperature));
        }
        if self.episode.max_turns == 0 || self.episode.max_turn_tokens == 0 {
            return bad("episode.max_turns / episode.max_turn_tokens", "must be at least 1".into());
        }
        if let Some(kv) = self.rollout.max_kv_tokens {
            let least = 2 * self.episode.max_total_tokens;
            if kv < least {
                return bad("rollout.max_kv_tokens", format!("{kv} cannot hold one episode: at least 2 x [episode] max_total_tokens = {least}"));
            }
        }
        if self.rollout.max_prefill_tokens == 0 {
            return bad("rollout.max_prefill_tokens", "must be at least 1".into());
        }
        match (self.rollout.engine, &self.rollout.vllm) {
            (Engine::Vllm, None) => {
                return bad("rollout.vllm", "engine = \"vllm\" needs a [rollout.vllm] section with url and served_model".into());
            }
            (Engine::Vllm, Some(v)) => {
                if v.served_model.trim().is_empty() {
                    return bad("rollout.vllm.served_model", "must name the model vLLM serves (its --served-model-name)".into());
                }
                if !(v.url.starts_with("http://") || v.url.starts_with("https://")) {
                    return bad("rollout.vllm.url", format!("must start with http:// or https://, got {:?}", v.url));
                }
                if v.max_concurrency == 0 {
                    return bad("rollout.vllm.max_concurrency", "must be at least 1".into());
                }
                if !(v.timeout_s > 0.0 && v.timeout_s.is_finite()) {
                    return bad("rollout.vllm.timeout_s", format!("must be > 0, got {}", v.timeout_s));
                }
                if !(v.probe_tolerance >= 0.0 && v.probe_tolerance.is_finite()) {
                    return bad("rollout.vllm.probe_tolerance", format!("must be a number >= 0, got {}", v.probe_tolerance));
                }
                if self.sampling.top_k != 0 {
                    return bad("sampling.top_k", "the vllm engine samples with temperature and top_p only: set top_k = 0".into());
                }
            }
            (Engine::Builtin, Some(_)) => {
                return bad("rollout.vllm", "is set but [rollout] engine is \"builtin\": set engine = \"vllm\" to use it".into());
            }
            (Engine::Builtin, None) => {}
        }
        if self.train.tasks_per_step == 0 {
            return bad("train.tasks_per_step", "must be at least 1".into());
        }
        for micro in [self.train.micro_batching(), self.sft.micro_batching()] {
            if let Err(Error::Invalid { what, message }) = micro {
                return bad(&what, message);
            }
        }
        let g = &self.grpo;
        if !(g.beta >= 0.0 && g.beta.is_finite()) {
            return bad("grpo.beta", format!("must be a number >= 0 (0 = no KL term), got {}", g.beta));
        }
        if !(0.0..1.0).contains(&g.clip_low) {
            return bad("grpo.clip_low", format!("must be in [0, 1), got {}", g.clip_low));
        }
        if !(g.clip_high >= 0.0 && g.clip_high.is_finite()) {
            return bad("grpo.clip_high", format!("must be a number >= 0, got {}", g.clip_high));
        }
        if !(g.tis_cap > 0.0 && g.tis_cap.is_finite()) {
            return bad("grpo.tis_cap", format!("must be a positive number, got {}", g.tis_cap));
        }
        let o = &self.optim;
        for (key, v) in [("optim.beta1", o.beta1), ("optim.beta2", o.beta2)] {
            if !(0.0..1.0).contains(&v) {
                return bad(key, format!("must be in [0, 1), got {v}"));
            }
        }
        if !(o.eps > 0.0 && o.eps.is_finite()) {
            return bad("optim.eps", format!("must be a positive number, got {}", o.eps));
        }
        for (key, v) in [("optim.weight_decay", o.weight_decay), ("optim.max_grad_norm", o.max_grad_norm)] {
            if !(v >= 0.0 && v.is_finite()) {
                return bad(key, format!("must be a number >= 0, got {v}"));
            }
        }
        if o.zero_stage > 1 {
            return bad("optim.zero_stage", format!("must be 0 (replicated) or 1 (optimizer state sharded over the ranks), got {}; ZeRO-2 and -3 are not implemented", o.zero_stage));
        }
        if self.episode.max_total_tokens == 0 {
            return bad("episode.max_total_tokens", "must be at least 1".into());
        }
        if self.grpo.num_iterations == 0 {
            return bad("grpo.num_iterations", "must be at least 1".into());
        }
        if !(self.optim.lr > 0.0 && self.optim.lr.is_finite()) {
            return bad("optim.lr", format!("must be a positive number, got {}", self.optim.lr));
        }
        if let Err(e) = self.optim.schedule.validate() {
            return bad("optim.schedule", e.to_string());
        }
        if self.sft.batch_rows == 0 {
            return bad("sft.batch_rows", "must be at least 1".into());
        }
        for (i, o) in self.sft.openings.iter().enumerate() {
            if o.turns == 0 || o.epochs == 0 || o.batch_rows == 0 {
                return bad("sft.openings", format!("phase {}: turns, epochs and batch_rows must be at least 1", i + 1));
            }
        }
        if !(self.sft.lr > 0.0 && self.sft.lr.is_finite()) {
            return bad("sft.lr", format!("must be a positive number, got {}", self.sft.lr));
        }
        if !(0.0..1.0).contains(&self.sft.heldout_fraction) {
            return bad("sft.heldout_fraction", format!("must be in [0, 1), got {}", self.sft.heldout_fraction));
        }
        if let Err(e) = self.sft.schedule.validate() {
            return bad("sft.schedule", e.to_string());
        }
        let f = &self.sft.filter;
        if f.min_calls_per_turn > f.max_calls_per_turn {
            return bad("sft.filter.min_calls_per_turn", format!("{} exceeds max_calls_per_turn {}", f.min_calls_per_turn, f.max_calls_per_turn));
        }
        if !(0.0..=1.0).contains(&f.max_truncation_ratio) {
            return bad("sft.filter.max_truncation_ratio", format!("must be in [0, 1], got {}", f.max_truncation_ratio));
        }
        if let Some(p) = &self.pipeline {
            if let Err((key, message)) = p.validate() {
                return bad(&format!("pipeline.{key}"), message);
            }
        }
        if let Some(l) = &self.lora {
            if let Err((key, message)) = l.validate() {
                return bad(&format!("lora.{key}"), message);
            }
        }
        if let Err(e) = self.reward.validate() {
            return bad(&format!("reward.{}", e.field), e.to_string());
        }
        Ok(())
    }

    /// This config with its model a training run's checkpoint `ckpt`: the
    /// checkpoint as `[model] path`, or for a LoRA run (whose checkpoints
    /// are adapters) as `[model] adapter` over the same base.
    pub fn with_trained(&self, ckpt: &Path) -> RunConfig {
        let mut out = self.clone();
        if self.lora.is_some() {
            out.model.adapter = Some(ckpt.to_path_buf());
        } else {
            out.model.path = ckpt.to_string_lossy().into_owned();
            out.model.adapter = None;
        }
        out
    }

    /// The validated `[lora]` setting, if the run trains an adapter.
    pub fn lora(&self) -> Option<crate::lora::LoraConfig> {
        self.lora.as_ref().map(|l| l.validate().expect("validated when the config was read"))
    }

    /// The tokenizer folder: explicit, else the model folder.
    pub fn tokenizer_dir(&self, model_dir: &Path) -> PathBuf {
        self.model.tokenizer.clone().unwrap_or_else(|| model_dir.to_path_buf())
    }

    /// The run's chat tokenizer: [`RunConfig::tokenizer_dir`]'s, with
    /// `[model] chat_template` in place of its own template when given.
    pub fn chat_tokenizer(&self, model_dir: &Path) -> std::result::Result<rollout::chat::ChatTokenizer, rollout::chat::ChatError> {
        rollout::chat::ChatTokenizer::from_dir_with_template(self.tokenizer_dir(model_dir), self.model.chat_template.as_deref())
    }
}

/// `~/rest` as `$HOME/rest` (a config's paths may name the user's caches,
/// e.g. `~/.cache/fusegrpo/smollm2-135m-instruct`); `None` otherwise or
/// without `HOME`.
fn home_relative(p: &Path) -> Option<PathBuf> {
    let rest = p.to_str()?.strip_prefix("~/")?;
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty())?;
    Some(PathBuf::from(home).join(rest))
}
