//! `[pipeline]` of a run config: the FuseSearch recipe as one command,
//! synth -> filter -> sft -> grpo -> eval (`fusegrpo pipeline`), and the
//! report it writes (`<run>/report.json`).

pub mod stages;
/// The statistics of the report (moved to [`crate::stats`], shared with the ranked evaluations).
pub use crate::stats;

use rollout::episode::summary::Summary;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use trainer::run_config::{PipelineSection, RunConfig, SynthSection, TasksFrom};
use std::path::Path;

/// Where `fusegrpo pipeline` gets its tasks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TaskSource<'a> {
    /// A task file.
    File(&'a Path),
    /// Synthetic tasks of a repository.
    Synth(&'a SynthSection),
}

/// What `fusegrpo pipeline` needs of a run config before it runs: the
/// `[pipeline]` section and a task file (`pipeline.tasks`, else
/// `train.tasks`), or `tasks_from = "synth"`. `path` is the config file,
/// named in the error.
pub fn pipeline_inputs<'a>(cfg: &'a RunConfig, path: &Path) -> trainer::error::Result<(&'a PipelineSection, TaskSource<'a>)> {
    let missing = |key: &str, message: &str| trainer::Error::Config { path: path.into(), key: key.into(), message: message.into() };
    let p = cfg.pipeline.as_ref().ok_or_else(|| missing("pipeline", "no [pipeline] section (fusegrpo pipeline needs one)"))?;
    if p.tasks_from == TasksFrom::Synth {
        return Ok((p, TaskSource::Synth(&p.synth)));
    }
    let tasks = p.tasks.as_deref().or(cfg.train.tasks.as_deref());
    let tasks = tasks.ok_or_else(|| missing("pipeline.tasks", "not set (nor train.tasks): the pipeline needs a task file"))?;
    Ok((p, TaskSource::File(tasks)))
}

/// One row of the report: the FuseSearch table's metrics on held-out tasks
/// (the episodes' means, their keys at the row's top level), and what only
/// the report has.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StageReport {
    #[serde(flatten)]
    pub summary: Summary,
    /// Share of tool calls that parsed and named a known tool with valid arguments.
    pub well_formed_calls: f64,
    /// 95% interval of the mean reward (bootstrap over held-out tasks).
    #[serde(default)]
    pub reward_ci95: Option<[f64; 2]>,
    /// With `eval_attempts`: the selected answers' row at N attempts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selected: Option<rollout::scaling::ScalingRow>,
}

/// `<run>/report.json`: `{"stages": {"base": .., "sft": .., "grpo": ..}, ..}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub stages: BTreeMap<String, StageReport>,
    /// The SFT filter's counts (kept / dropped by rule).
    pub filter: serde_json::Value,
    /// Wall time of each stage (seconds), measured by the invocation that ran
    /// it (a stage resumed after an interruption: that invocation's part);
    /// reruns keep the times of the stages they skip.
    pub stage_seconds: BTreeMap<String, f64>,
    pub train_tasks: usize,
    pub heldout_tasks: usize,
    /// Paired differences of held-out reward: `sft_vs_base`, `grpo_vs_sft`
    /// (and `grpo_vs_base`, `grpo_vs_teacher`).
    #[serde(default)]
    pub paired: BTreeMap<String, stats::Paired>,
    /// The difficulty filter: tasks probed, kept, the probe's mean reward.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub difficulty: Option<serde_json::Value>,
    /// The pilot: each learning rate's mean reward R after its first step, and the chosen one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pilot: Option<serde_json::Value>,
}
