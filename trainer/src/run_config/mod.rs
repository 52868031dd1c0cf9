//! Run configuration: raw TOML (unknown keys rejected, by name) -> a
//! validated [`RunConfig`]. Every section has defaults, so a preset only
//! states what differs. One file per section; an algorithm's own sections
//! live in its folder (`[train]` and `[grpo]` in `grpo::config`, `[sft]` in
//! `sft::config`, `[optim]` in `optim::config`), re-exported here. Nothing
//! here depends on the code that runs a config: the trainers take their own
//! settings ([`crate::grpo::TrainerConfig`], [`crate::sft::TrainerConfig`]),
//! which a `RunConfig` converts into.

mod bounds;
mod env;
mod localize;
mod log;
mod lora;
mod model;
mod overrides;
mod pipeline;
mod ranks;
mod rollout;
mod sampling;

pub use bounds::{check_flag, MAX_COUNT, MAX_EPISODES_PER_STEP, MAX_GROUP, MAX_POOL_TOKENS, MAX_STEPS, MAX_TOKENS};
pub use env::EnvSection;
pub use localize::LocalizeSection;
pub use log::LogSection;
pub use lora::LoraSection;
pub use model::{default_workspace_mib, ModelSection};
pub use overrides::Override;
pub use ranks::Job;
pub use pipeline::{DifficultySection, PilotSection, PipelineSection, PolicyChoice, SynthSection, TasksFrom};
pub use rollout::{Engine, RolloutSection, VllmSection, DEFAULT_MAX_PREFILL_TOKENS};
pub use sampling::SamplingSection;
// The algorithms' own sections live with them (and [optim] with AdamW).
pub use crate::grpo::config::{GrpoSection, TrainSection};
pub use crate::optim::config::OptimSection;
pub use crate::sft::config::{OpeningPhase, SftSection};

use crate::error::{Error, Result};
use crate::grpo::advantages::ZeroStdGroups;
use ::rollout::episode::EpisodeConfig;
use ::rollout::reward::RewardConfig;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// A whole run's configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    /// Name of the run (`checkpoints/<name>` by default).
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
    pub train: TrainSection,
    #[serde(default)]
    pub grpo: GrpoSection,
    #[serde(default)]
    pub optim: OptimSection,
    /// Supervised fine-tuning (`fusegrpo sft`, the pipeline's SFT stage).
    #[serde(default, skip_serializing_if = "SftSection::is_default")]
    pub sft: SftSection,
    /// The whole recipe (`fusegrpo pipeline`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pipeline: Option<PipelineSection>,
    /// Train a LoRA adapter instead of every weight (`train`, `sft`, `pipeline`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lora: Option<LoraSection>,
    /// Trackers besides metrics.jsonl (TensorBoard).
    #[serde(default, skip_serializing_if = "LogSection::is_default")]
    pub log: LogSection,
    /// `fusegrpo localize` and `fusegrpo mcp` on a user's issue.
    #[serde(default, skip_serializing_if = "LocalizeSection::is_default")]
    pub localize: LocalizeSection,
    /// The index search (`--policy search`, `combined`): every signal's weight.
    #[serde(default, skip_serializing_if = "::rollout::search::SearchConfig::is_default")]
    pub search: ::rollout::search::SearchConfig,
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
    let canonical = base_path.canonicalize().map_err(|e| key_err(format!("{name}: cannot read {}: {e}", base_path.display())))?;
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

/// A type error in a config with `extends`: the merged table has no
/// positions, so each file of the chain is read alone to find the one
/// that sets the bad value (`file:line:column` and its key, as without
/// `extends`); else the merged error, naming the chain.
fn extends_error(path: &Path, chain: &[PathBuf], merged: toml::de::Error) -> Error {
    for file in std::iter::once(path).chain(chain.iter().map(PathBuf::as_path)) {
        let Ok(text) = std::fs::read_to_string(file) else { continue };
        if let Err(e) = toml::from_str::<RunConfig>(&without_extends(&text)) {
            // A file alone may lack what the other files give.
            if !e.message().starts_with("missing field") {
                let mut err = toml_error(file, &text, &e);
                if file != path {
                    if let Error::Invalid { what, .. } = &mut err {
                        what.push_str(&format!(" (extended by {})", path.display()));
                    }
                }
                return err;
            }
        }
    }
    let files: Vec<String> = chain.iter().map(|p| p.display().to_string()).collect();
    Error::Invalid { what: format!("{} (with what it extends: {})", path.display(), files.join(", ")), message: merged.message().trim().to_string() }
}

/// `text` with its top-level `extends` line commented out (lines and
/// columns unchanged), so the file parses alone.
fn without_extends(text: &str) -> String {
    let mut top = true;
    let lines: Vec<String> = text
        .lines()
        .map(|l| {
            top &= !l.trim_start().starts_with('[');
            if top && l.trim_start().starts_with("extends") { format!("#{l}") } else { l.to_string() }
        })
        .collect();
    lines.join("\n")
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

impl From<RunConfig> for crate::grpo::TrainerConfig {
    fn from(cfg: RunConfig) -> Self {
        cfg.grpo_trainer()
    }
}

impl From<&RunConfig> for crate::sft::TrainerConfig {
    fn from(cfg: &RunConfig) -> Self {
        cfg.sft_trainer()
    }
}

impl RunConfig {
    /// The GRPO loss this config trains with: `[grpo]`'s clip range, beta,
    /// aggregation, rollout correction and importance-sampling level, the sampling temperature (1 when
    /// greedy), the episode's policy-token budget, `[train] recompute`.
    pub fn loss_config(&self) -> crate::grpo::GrpoLossConfig {
        let g = &self.grpo;
        crate::grpo::GrpoLossConfig {
            clip: crate::grpo::ClipRange { low: g.clip_low, high: g.clip_high },
            beta: g.beta,
            temperature: if self.sampling.temperature > 0.0 { self.sampling.temperature } else { 1.0 },
            aggregation: g.aggregation,
            max_completion_length: self.episode.policy_token_budget(),
            entropy: crate::backward::EntropyMetric::Compute,
            recompute: self.train.recompute,
            rollout_correction: g.rollout_correction,
            tis_cap: g.tis_cap,
            importance_sampling: g.importance_sampling,
            skip_zero_advantage: true,
            fold_linear_loss: true,
        }
    }

    /// The GRPO trainer's settings: `[grpo]`, `[train]`, `[optim]`, the
    /// loss ([`RunConfig::loss_config`]) and what it takes of `[rollout]`,
    /// `[sampling]`, `[episode]`, `[reward]` and `[lora]`.
    pub fn grpo_trainer(&self) -> crate::grpo::TrainerConfig {
        crate::grpo::TrainerConfig {
            update: self.grpo.update(),
            train: self.train.clone(),
            optim: self.optim.clone(),
            loss: self.loss_config(),
            reference: self.reference(),
            group: self.rollout.group,
            limits: self.rollout.limits(),
            sampler: self.sampling.sampler(),
            episode: self.episode.clone(),
            reward: self.reward.clone(),
            lora: self.lora(),
            off_policy: self.rollout.off_policy,
        }
    }

    /// The KL reference of this config's GRPO: none at `[grpo] beta = 0`,
    /// else the base under a LoRA adapter or a frozen copy of the starting
    /// weights; the one place this is decided.
    pub fn reference(&self) -> crate::grpo::Reference {
        crate::grpo::Reference::of(self.grpo.beta, self.lora.is_some())
    }

    /// The SFT trainer's settings: `[sft]`, `[optim]` and `[lora]`'s.
    pub fn sft_trainer(&self) -> crate::sft::TrainerConfig {
        crate::sft::TrainerConfig { sft: self.sft.clone(), optim: self.optim.clone(), lora: self.lora() }
    }

    /// Read, parse and validate a TOML file. Relative paths in it are taken
    /// relative to the file's folder.
    ///
    /// A top-level `extends = "other.toml"` (relative to the file) starts
    /// from that config: its tables are merged key by key, this file's
    /// values winning. Both files must sit in the same folder, so relative
    /// paths mean the same in both.
    pub fn from_file(path: &Path) -> Result<Self> {
        Self::from_file_with(path, &[])
    }

    /// [`RunConfig::from_file`] with `--set` overrides on top of the file
    /// (and what it extends), in order ([`Override`]), then a command's
    /// flags ([`Override::flag`]): checked as the file's keys are, errors
    /// naming the `--set` or flag and its key. A path a flag gives is taken
    /// as given (from the working directory), not from the file's folder.
    pub fn from_file_with(path: &Path, overrides: &[Override]) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        let value: toml::Table = toml::from_str(&text).map_err(|e| toml_error(path, &text, &e))?;
        let mut cfg: RunConfig = if !overrides.is_empty() {
            overrides::parse(path, &text, value, overrides)?
        } else if value.contains_key("extends") {
            let mut chain = vec![];
            let merged = extended(path, value, &mut chain)?;
            toml::Value::Table(merged).try_into().map_err(|e: toml::de::Error| extends_error(path, &chain, e))?
        } else {
            toml::from_str(&text).map_err(|e| toml_error(path, &text, &e))?
        };
        // FUSEGRPO_ATTENTION (read once by main) overrides [model] attention,
        // here, so that the config hash records what runs.
        cfg.model.attention = cfg.model.attention.with_env();
        let base = path.parent().unwrap_or(Path::new("."));
        cfg.resolve_paths(base, &overrides::flag_keys(overrides));
        cfg.validate(path).map_err(|e| overrides::blame(e, overrides))?;
        Ok(cfg)
    }

    /// Relative paths from `base` (the config's folder), `~/` from `$HOME`;
    /// the keys of `as_given` (set by a flag) stay as they are.
    fn resolve_paths(&mut self, base: &Path, as_given: &[&str]) {
        let fix = |key: &str, p: &mut PathBuf| {
            if as_given.contains(&key) {
                return;
            }
            if let Some(home) = home_relative(p) {
                *p = home;
            } else if p.is_relative() {
                *p = base.join(&*p);
            }
        };
        fix("env.repos_dir", &mut self.env.repos_dir);
        if let Some(t) = self.model.tokenizer.as_mut() {
            fix("model.tokenizer", t);
        }
        if let Some(t) = self.model.chat_template.as_mut() {
            fix("model.chat_template", t);
        }
        if let Some(t) = self.model.adapter.as_mut() {
            fix("model.adapter", t);
        }
        if let Some(t) = self.train.tasks.as_mut() {
            fix("train.tasks", t);
        }
        if let Some(t) = self.sft.data.as_mut() {
            fix("sft.data", t);
        }
        if let Some(t) = self.pipeline.as_mut().and_then(|p| p.tasks.as_mut()) {
            fix("pipeline.tasks", t);
        }
        if let Some(t) = self.pipeline.as_mut().and_then(|p| p.heldout.as_mut()) {
            fix("pipeline.heldout", t);
        }
        if as_given.contains(&"model.path") {
            return;
        }
        if let Some(home) = home_relative(Path::new(&self.model.path)) {
            self.model.path = home.to_string_lossy().into_owned();
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
        if let Err((key, message)) = self.check_counts() {
            return bad(&key, message);
        }
        if let Err((key, message)) = self.env.tools.validate() {
            return bad(&format!("env.tools.{key}"), message);
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
        if self.rollout.max_live_episodes == Some(0) {
            return bad("rollout.max_live_episodes", "must be at least 1 (unset: every episode at once)".into());
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
        match self.rollout.off_policy {
            0 => {}
            1 if self.grpo.rollout_correction.is_none() => {
                return bad(
                    "grpo.rollout_correction",
                    "[rollout] off_policy = 1 trains on rollouts of the previous step's weights: set rollout_correction = \"tis\" (truncated importance weights, trainer / rollout policy) to correct the staleness".into(),
                );
            }
            1 => {}
            n => return bad("rollout.off_policy", format!("must be 0 (on-policy) or 1 (one step off-policy), got {n}; more steps of lag are not implemented")),
        }
        for micro in [self.train.micro_batching(), self.sft.micro_batching()] {
            if let Err(Error::Invalid { what, message }) = micro {
                return bad(&what, message);
            }
        }
        // The loss's settings: their one rule is the loss's own.
        if let Err((key, message)) = self.loss_config().validate() {
            return bad(key, message);
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
        if let Err((key, message)) = self.check_resample() {
            return bad(key, message);
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
        if let Err((key, message)) = self.search.validate() {
            return bad(&format!("search.{key}"), message);
        }
        if let Err((key, message)) = self.localize.validate() {
            return bad(&format!("localize.{key}"), message);
        }
        if let Err(e) = self.reward.validate() {
            return bad(&format!("reward.{}", e.field), e.to_string());
        }
        Ok(())
    }

    /// Every count setting at most its bound ([`bounds`]): `(key, message)`
    /// of the first above it.
    fn check_counts(&self) -> std::result::Result<(), (String, String)> {
        use bounds::*;
        let n = |v: usize| v as u64;
        let (r, t, e, s) = (&self.rollout, &self.train, &self.episode, &self.sft);
        let mut counts: Vec<(String, u64, u64)> = vec![
            ("rollout.group".into(), n(r.group), MAX_GROUP),
            ("rollout.max_batch_tokens".into(), n(r.max_batch_tokens), MAX_POOL_TOKENS),
            ("rollout.max_kv_tokens".into(), n(r.max_kv_tokens.unwrap_or(0)), MAX_POOL_TOKENS),
            ("rollout.max_prefill_tokens".into(), n(r.max_prefill_tokens), MAX_POOL_TOKENS),
            ("rollout.max_live_episodes".into(), n(r.max_live_episodes.unwrap_or(0)), MAX_EPISODES_PER_STEP),
            ("sampling.top_k".into(), n(self.sampling.top_k), MAX_TOKENS),
            ("episode.max_turns".into(), n(e.max_turns), MAX_COUNT),
            ("episode.max_turn_tokens".into(), n(e.max_turn_tokens), MAX_TOKENS),
            ("episode.max_total_tokens".into(), n(e.max_total_tokens), MAX_TOKENS),
            ("train.steps".into(), t.steps, MAX_STEPS),
            ("train.tasks_per_step".into(), n(t.tasks_per_step), MAX_COUNT),
            ("train.micro_batch_rows".into(), n(t.micro_batch_rows), MAX_COUNT),
            ("train.micro_batch_tokens".into(), n(t.micro_batch_tokens.unwrap_or(0)), MAX_POOL_TOKENS),
            ("train.keep_last".into(), n(t.keep_last), MAX_COUNT),
            ("grpo.num_iterations".into(), n(self.grpo.num_iterations), MAX_COUNT),
            ("grpo.max_resample_draws".into(), n(self.grpo.max_resample_draws.unwrap_or(0)), MAX_COUNT),
            ("sft.epochs".into(), s.epochs, MAX_COUNT),
            ("sft.batch_rows".into(), n(s.batch_rows), MAX_COUNT),
            ("sft.micro_batch_rows".into(), n(s.micro_batch_rows), MAX_COUNT),
            ("sft.micro_batch_tokens".into(), n(s.micro_batch_tokens.unwrap_or(0)), MAX_POOL_TOKENS),
            ("sft.eval_tasks".into(), n(s.eval_tasks), MAX_COUNT),
            ("sft.keep_last".into(), n(s.keep_last), MAX_COUNT),
            ("localize.max_issue_tokens".into(), n(self.localize.max_issue_tokens.unwrap_or(0)), MAX_TOKENS),
        ];
        for (i, o) in s.openings.iter().enumerate() {
            for (name, v) in [("turns", n(o.turns)), ("epochs", o.epochs), ("batch_rows", n(o.batch_rows))] {
                bounds::at_most(v, MAX_COUNT).map_err(|m| ("sft.openings".to_string(), format!("phase {}: {name} {m}", i + 1)))?;
            }
        }
        if let Some(v) = &r.vllm {
            counts.push(("rollout.vllm.max_concurrency".into(), n(v.max_concurrency), MAX_COUNT));
            counts.push(("rollout.vllm.max_retries".into(), u64::from(v.max_retries), MAX_COUNT));
        }
        if let Some(p) = &self.pipeline {
            for (name, v, max) in [
                ("samples", n(p.samples), MAX_GROUP),
                ("eval_group", n(p.eval_group), MAX_GROUP),
                ("eval_attempts", n(p.eval_attempts), MAX_GROUP),
                ("chunk_tasks", n(p.chunk_tasks), MAX_COUNT),
                ("heldout_tasks", n(p.heldout_tasks), MAX_COUNT),
                ("synth_tasks", n(p.synth_tasks), MAX_COUNT),
                ("difficulty.tasks", n(p.difficulty.tasks), MAX_COUNT),
                ("difficulty.samples", n(p.difficulty.samples), MAX_GROUP),
                ("pilot.steps", p.pilot.steps, MAX_STEPS),
                ("synth.count", n(p.synth.count), MAX_COUNT),
            ] {
                counts.push((format!("pipeline.{name}"), v, max));
            }
        }
        if let Some(l) = &self.lora {
            counts.push(("lora.r".into(), n(l.r), MAX_TOKENS));
        }
        for (key, value, max) in counts {
            bounds::at_most(value, max).map_err(|m| (key, m))?;
        }
        let per_step = n(r.group).saturating_mul(n(t.tasks_per_step));
        bounds::at_most(per_step, MAX_EPISODES_PER_STEP)
            .map_err(|_| ("rollout.group / train.tasks_per_step".to_string(), format!("{} x {} = {per_step} episodes per step: must be at most {MAX_EPISODES_PER_STEP}", r.group, t.tasks_per_step)))
    }

    /// `[grpo] max_resample_draws`: at least 1, and only with
    /// `zero_std_groups = "resample"`, which it bounds.
    fn check_resample(&self) -> std::result::Result<(), (&'static str, String)> {
        let g = &self.grpo;
        match (g.zero_std_groups, g.max_resample_draws) {
            (ZeroStdGroups::Resample, Some(0)) => {
                Err(("grpo.max_resample_draws", "must be at least 1 (drawing no further task is zero_std_groups = \"drop\")".into()))
            }
            (ZeroStdGroups::Keep | ZeroStdGroups::Drop, Some(_)) => Err((
                "grpo.max_resample_draws",
                format!("is set but zero_std_groups is {}: it bounds the draws of zero_std_groups = \"resample\"", serde_json::to_value(g.zero_std_groups).unwrap_or_default()),
            )),
            _ => Ok(()),
        }
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

    /// The `[lora]` setting, if the run trains an adapter: the section as
    /// the model crate takes it ([`LoraSection::config`]).
    pub fn lora(&self) -> Option<lm::lora::LoraConfig> {
        self.lora.as_ref().map(LoraSection::config)
    }

    /// The tokenizer folder: explicit, else the model folder.
    pub fn tokenizer_dir(&self, model_dir: &Path) -> PathBuf {
        self.model.tokenizer.clone().unwrap_or_else(|| model_dir.to_path_buf())
    }

    /// The run's chat tokenizer: [`RunConfig::tokenizer_dir`]'s, with
    /// `[model] chat_template` in place of its own template when given.
    pub fn chat_tokenizer(&self, model_dir: &Path) -> std::result::Result<::rollout::chat::ChatTokenizer, ::rollout::chat::ChatError> {
        ::rollout::chat::ChatTokenizer::from_dir_with_template(self.tokenizer_dir(model_dir), self.model.chat_template.as_deref())
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
