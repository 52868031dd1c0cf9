//! `[pipeline]` of a run config: the FuseSearch recipe as one command,
//! synth -> filter -> sft -> grpo -> eval (`fusegrpo pipeline`), and the
//! report it writes (`<run>/report.json`).

pub mod stats;

use rollout::episode::summary::Summary;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use crate::run_config::RunConfig;
use std::path::{Path, PathBuf};

/// Who writes the SFT trajectories.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Teacher {
    /// The scripted teacher, varied per episode (no model).
    Scripted,
    /// An OpenAI-compatible chat-completions endpoint (base URL).
    Http(String),
}

impl TryFrom<String> for Teacher {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        match s.as_str() {
            "scripted" => Ok(Teacher::Scripted),
            url if url.starts_with("http://") || url.starts_with("https://") => Ok(Teacher::Http(s)),
            other => Err(format!("teacher `{other}`: expected `scripted` or an http(s):// URL")),
        }
    }
}

impl From<Teacher> for String {
    fn from(t: Teacher) -> String {
        match t {
            Teacher::Scripted => "scripted".into(),
            Teacher::Http(url) => url,
        }
    }
}

/// The recipe's data and evaluation settings (SFT and GRPO come from
/// `[sft]` and `[train]`/`[grpo]`/`[optim]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PipelineSection {
    /// All tasks (JSONL), relative to the config file; split into training
    /// and held-out tasks.
    pub tasks: Option<PathBuf>,
    /// Tasks held out from synth, SFT and GRPO, for the evaluation table.
    pub heldout_tasks: usize,
    /// Seed of the split.
    pub split_seed: u64,
    pub teacher: Teacher,
    /// Model name sent to an HTTP teacher.
    pub teacher_model: String,
    /// Environment variable holding an HTTP teacher's API key.
    pub api_key_env: Option<String>,
    /// Requests per second to an HTTP teacher at most.
    pub requests_per_second: Option<f64>,
    /// Teacher episodes per training task (K).
    pub samples: usize,
    /// Episodes per held-out task in each evaluation.
    pub eval_group: usize,
    /// Sampling temperature of the evaluations (0 = greedy).
    pub eval_temperature: f64,
}

impl Default for PipelineSection {
    fn default() -> Self {
        PipelineSection {
            tasks: None,
            heldout_tasks: 8,
            split_seed: 0,
            teacher: Teacher::Scripted,
            teacher_model: "teacher".into(),
            api_key_env: None,
            requests_per_second: None,
            samples: 4,
            eval_group: 4,
            eval_temperature: 1.0,
        }
    }
}

impl PipelineSection {
    /// Range checks; the error names the key (below `pipeline.`).
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        if self.samples == 0 {
            return Err(("samples", "must be at least 1".into()));
        }
        if self.eval_group == 0 {
            return Err(("eval_group", "must be at least 1".into()));
        }
        if self.heldout_tasks == 0 {
            return Err(("heldout_tasks", "must be at least 1 (the report is measured on held-out tasks)".into()));
        }
        if !(self.eval_temperature >= 0.0 && self.eval_temperature.is_finite()) {
            return Err(("eval_temperature", format!("must be >= 0, got {}", self.eval_temperature)));
        }
        Ok(())
    }
}

/// What `fusegrpo pipeline` needs of a run config before it runs: the
/// `[pipeline]` section and a task file (`pipeline.tasks`, else
/// `train.tasks`). `path` is the config file, named in the error.
pub fn pipeline_inputs<'a>(cfg: &'a RunConfig, path: &Path) -> crate::error::Result<(&'a PipelineSection, &'a Path)> {
    let missing = |key: &str, message: &str| crate::Error::Config { path: path.into(), key: key.into(), message: message.into() };
    let p = cfg.pipeline.as_ref().ok_or_else(|| missing("pipeline", "no [pipeline] section (fusegrpo pipeline needs one)"))?;
    let tasks = p.tasks.as_deref().or(cfg.train.tasks.as_deref());
    let tasks = tasks.ok_or_else(|| missing("pipeline.tasks", "not set (nor train.tasks): the pipeline needs a task file"))?;
    Ok((p, tasks))
}

/// One row of the report: the FuseSearch table's metrics on held-out tasks.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StageReport {
    pub f1_file: f64,
    pub f1_func: f64,
    pub e: f64,
    pub reward: f64,
    pub turns: f64,
    pub calls_per_turn: f64,
    pub tokens: f64,
    /// Mean wall time per episode.
    pub seconds: f64,
    /// Share of episodes that answered.
    pub answered: f64,
    /// Share of tool calls that parsed and named a known tool with valid arguments.
    pub well_formed_calls: f64,
    pub episodes: usize,
    /// 95% interval of the mean reward (bootstrap over held-out tasks).
    #[serde(default)]
    pub reward_ci95: Option<[f64; 2]>,
}

impl StageReport {
    pub fn of(summary: &Summary, well_formed_calls: f64) -> StageReport {
        StageReport {
            f1_file: summary.f1_file,
            f1_func: summary.f1_func,
            e: summary.e,
            reward: summary.reward,
            turns: summary.turns,
            calls_per_turn: summary.calls_per_turn,
            tokens: summary.tokens,
            seconds: summary.seconds,
            answered: summary.answered,
            well_formed_calls,
            episodes: summary.episodes,
            reward_ci95: None,
        }
    }
}

/// `<run>/report.json`: `{"stages": {"base": .., "sft": .., "grpo": ..}, ..}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub stages: BTreeMap<String, StageReport>,
    /// The SFT filter's counts (kept / dropped by rule).
    pub filter: serde_json::Value,
    /// Wall time of each stage that ran in this invocation (seconds).
    pub stage_seconds: BTreeMap<String, f64>,
    pub train_tasks: usize,
    pub heldout_tasks: usize,
    /// Paired differences of held-out reward: `sft_vs_base`, `grpo_vs_sft`
    /// (and `grpo_vs_base`).
    #[serde(default)]
    pub paired: BTreeMap<String, stats::Paired>,
}
