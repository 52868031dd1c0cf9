//! `[pipeline]`: the recipe's stages (`fusegrpo pipeline`): the teacher,
//! the tasks, synthetic tasks, the difficulty filter, the learning-rate pilot.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Which policy writes the assistant turns: `"model"` (the config's
/// model), `"scripted"` (the scripted teacher), `"guided"` (the scripted
/// teacher guided by the search index, issue 62) or an OpenAI-compatible
/// chat-completions endpoint `"http(s)://host:port"`. The same string in a
/// config (`pipeline.teacher`) and on a command line (`--policy`,
/// `--teacher`, `--localizer`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum PolicyChoice {
    /// The config's model, sampled with the config's sampling settings.
    Model,
    /// The scripted teacher (no model).
    Scripted,
    /// The scripted teacher guided by the search index and `[search]`
    /// (with `[env.tools] search` on, it calls `search` itself).
    Guided,
    /// An OpenAI-compatible chat-completions endpoint (base URL).
    Http(String),
}

impl std::str::FromStr for PolicyChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "model" => Ok(PolicyChoice::Model),
            "scripted" => Ok(PolicyChoice::Scripted),
            "guided" => Ok(PolicyChoice::Guided),
            url if url.starts_with("http://") || url.starts_with("https://") => Ok(PolicyChoice::Http(url.into())),
            other => Err(format!("`{other}`: expected model, scripted, guided or an http(s):// URL")),
        }
    }
}

impl TryFrom<String> for PolicyChoice {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl From<PolicyChoice> for String {
    fn from(p: PolicyChoice) -> String {
        match p {
            PolicyChoice::Model => "model".into(),
            PolicyChoice::Scripted => "scripted".into(),
            PolicyChoice::Guided => "guided".into(),
            PolicyChoice::Http(url) => url,
        }
    }
}

/// Where the pipeline's tasks come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TasksFrom {
    /// The task file `pipeline.tasks` (else `train.tasks`).
    #[default]
    File,
    /// Synthetic tasks of one repository (`[pipeline.synth]`, as `fusegrpo
    /// tasks synth`), made once into `<run>/tasks/synth.jsonl`.
    Synth,
}

/// `[pipeline.synth]`: the synthetic tasks of `tasks_from = "synth"`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SynthSection {
    /// `owner/name` under `[env] repos_dir`.
    pub repo: Option<String>,
    /// The commit whose functions become tasks.
    pub commit: String,
    /// Tasks to make (all functions there are, when fewer).
    pub count: usize,
    /// Seed of the draw, the instructions and the phrasing.
    pub seed: u64,
    /// Who writes the issues (`pipeline.teacher_model` / `api_key_env` reach an HTTP one).
    pub teacher: PolicyChoice,
    /// Localize each issue with the scripted localizer and keep the recall.
    pub verify: bool,
    /// Drop verified tasks whose recall is below this (0: keep all).
    pub min_recall: f64,
}

impl Default for SynthSection {
    fn default() -> Self {
        SynthSection { repo: None, commit: "HEAD".into(), count: 32, seed: 0, teacher: PolicyChoice::Scripted, verify: false, min_recall: 0.0 }
    }
}

/// `[pipeline.difficulty]`: before GRPO, the SFT model samples `samples`
/// episodes on each of `tasks` training tasks (a seeded draw), and GRPO
/// trains only on the tasks whose rewards vary (a group with equal rewards
/// has no advantage to learn from).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DifficultySection {
    /// Training tasks to probe (0: no filter, GRPO draws from all).
    pub tasks: usize,
    /// Episodes per probed task (at `[sampling] temperature`).
    pub samples: usize,
}

impl Default for DifficultySection {
    fn default() -> Self {
        DifficultySection { tasks: 0, samples: 4 }
    }
}

/// `[pipeline.pilot]`: GRPO runs of `steps` steps from the SFT model, one
/// per learning rate of `lrs`, on the same tasks in the same order; the
/// long run takes the rate whose pilot had the highest mean training
/// reward (`[optim] lr` when `lrs` is empty).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PilotSection {
    /// Learning rates to try (none: no pilot).
    pub lrs: Vec<f64>,
    /// Steps of each pilot run.
    pub steps: u64,
    /// The long run continues the chosen pilot run (its checkpoints and
    /// metrics copied into `<run>/grpo`) up to `[train] steps`, instead of
    /// starting again from the SFT model: the pilot's steps are the long
    /// run's first steps. Only `train.steps` may differ between them.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub extend: bool,
}

/// The recipe's data and evaluation settings (SFT and GRPO come from
/// `[sft]` and `[train]`/`[grpo]`/`[optim]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PipelineSection {
    /// All tasks (JSONL), relative to the config file; split into training
    /// and held-out tasks.
    pub tasks: Option<PathBuf>,
    /// Where the tasks come from (default: the task file).
    pub tasks_from: TasksFrom,
    /// The synthetic tasks when `tasks_from = "synth"`.
    pub synth: SynthSection,
    /// Tasks held out from synth, SFT and GRPO, for the evaluation table
    /// (a seeded draw from `tasks`; not used with `heldout`).
    pub heldout_tasks: usize,
    /// A file of held-out tasks (e.g. other repositories', `fusegrpo tasks
    /// split`), relative to the config file: then every task of `tasks`
    /// trains and the evaluation runs on all of these.
    pub heldout: Option<PathBuf>,
    /// Teacher trajectories on a seeded draw of this many training tasks
    /// (0: all of them).
    pub synth_tasks: usize,
    /// Also evaluate the teacher (stage `teacher`) on the held-out tasks.
    pub eval_teacher: bool,
    /// Episodes run (and saved) together in the long rollouts: the teacher's,
    /// the difficulty probe's and the evaluations' (tasks per chunk).
    pub chunk_tasks: usize,
    pub difficulty: DifficultySection,
    pub pilot: PilotSection,
    /// Seed of the split.
    pub split_seed: u64,
    pub teacher: PolicyChoice,
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
    /// Test-time scaling of the evaluations: N attempts per held-out task
    /// (in place of `eval_group`), and each stage's report gains `selected`,
    /// the `eval_select` row at N (0: off).
    pub eval_attempts: usize,
    /// The selector of `eval_attempts` (tournaments with the evidence judge).
    pub eval_select: rollout::scaling::Selector,
}

impl Default for PipelineSection {
    fn default() -> Self {
        PipelineSection {
            tasks: None,
            tasks_from: TasksFrom::File,
            synth: SynthSection::default(),
            heldout_tasks: 8,
            heldout: None,
            synth_tasks: 0,
            eval_teacher: false,
            chunk_tasks: 32,
            difficulty: DifficultySection::default(),
            pilot: PilotSection::default(),
            split_seed: 0,
            teacher: PolicyChoice::Scripted,
            teacher_model: "teacher".into(),
            api_key_env: None,
            requests_per_second: None,
            samples: 4,
            eval_group: 4,
            eval_temperature: 1.0,
            eval_attempts: 0,
            eval_select: rollout::scaling::Selector::Vote,
        }
    }
}

impl PipelineSection {
    /// Range checks; the error names the key (below `pipeline.`).
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        for (key, teacher) in [("teacher", &self.teacher), ("synth.teacher", &self.synth.teacher)] {
            if *teacher == PolicyChoice::Model {
                return Err((key, "\"model\" cannot teach itself: expected \"scripted\", \"guided\" or an http(s):// URL".into()));
            }
        }
        if self.synth.teacher == PolicyChoice::Guided {
            return Err(("synth.teacher", "\"guided\" localizes but writes no issues: expected \"scripted\" or an http(s):// URL".into()));
        }
        if self.samples == 0 {
            return Err(("samples", "must be at least 1".into()));
        }
        if self.eval_group == 0 {
            return Err(("eval_group", "must be at least 1".into()));
        }
        if self.chunk_tasks == 0 {
            return Err(("chunk_tasks", "must be at least 1".into()));
        }
        if self.difficulty.tasks > 0 && self.difficulty.samples < 2 {
            return Err(("difficulty.samples", "must be at least 2 (a spread needs two rewards)".into()));
        }
        if let Some(lr) = self.pilot.lrs.iter().find(|lr| !(**lr > 0.0 && lr.is_finite())) {
            return Err(("pilot.lrs", format!("learning rates must be > 0, got {lr}")));
        }
        if !self.pilot.lrs.is_empty() && self.pilot.steps == 0 {
            return Err(("pilot.steps", "must be at least 1 when pilot.lrs is set".into()));
        }
        if self.heldout_tasks == 0 && self.heldout.is_none() {
            return Err(("heldout_tasks", "must be at least 1 (the report is measured on held-out tasks)".into()));
        }
        if !(self.eval_temperature >= 0.0 && self.eval_temperature.is_finite()) {
            return Err(("eval_temperature", format!("must be >= 0, got {}", self.eval_temperature)));
        }
        if self.tasks_from == TasksFrom::Synth {
            let s = &self.synth;
            if s.repo.is_none() {
                return Err(("synth.repo", "not set: tasks_from = \"synth\" needs the repository (owner/name under [env] repos_dir)".into()));
            }
            if s.count == 0 {
                return Err(("synth.count", "must be at least 1".into()));
            }
            if !(0.0..=1.0).contains(&s.min_recall) || (s.min_recall > 0.0 && !s.verify) {
                return Err(("synth.min_recall", format!("must be in [0, 1] and needs verify = true, got {}", s.min_recall)));
            }
        }
        Ok(())
    }
}
