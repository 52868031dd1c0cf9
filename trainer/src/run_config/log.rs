//! `[log]`: where a training run's metrics go besides `<run>/metrics.jsonl`.

use serde::{Deserialize, Serialize};

/// `[log]`: the run's trackers. Not part of what a resume compares: it
/// may be turned on or off between the two runs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogSection {
    /// Every scalar of metrics.jsonl, per step, also to TensorBoard event
    /// files in `<run>/tensorboard` (`--tensorboard DIR` writes them there instead).
    #[serde(default)]
    pub tensorboard: bool,
    /// Also each task's reward (`tasks/<id>`, one tag per task) to
    /// TensorBoard; off, a run over 1,658 tasks would bury its curves under
    /// as many tags. metrics.jsonl keeps them either way.
    #[serde(default)]
    pub tensorboard_tasks: bool,
}

impl LogSection {
    pub fn is_default(&self) -> bool {
        self == &LogSection::default()
    }
}
