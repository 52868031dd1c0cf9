//! `[sft]` of a run config: the data, the filter, batches, optimizer
//! schedule and the held-out split of supervised fine-tuning.

use lm::model::recompute::Recompute;
use crate::packing::MicroBatching;
use crate::optim::schedule::LrSchedule;
use rollout::episode::filter::FilterConfig;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Supervised fine-tuning on filtered teacher trajectories.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SftSection {
    /// Teacher trajectories (`fusegrpo synth` output), relative to the config file.
    pub data: Option<PathBuf>,
    /// Passes over the kept training trajectories.
    pub epochs: u64,
    /// Sequences per optimizer step (length-bucketed).
    pub batch_rows: usize,
    /// Sequences per forward/backward (gradient accumulation).
    pub micro_batch_rows: usize,
    /// Packed micro-batches instead: tokens per forward/backward, several
    /// sequences end to end in one row, no padding. Replaces `micro_batch_rows`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub micro_batch_tokens: Option<usize>,
    /// Peak learning rate (betas, eps, weight decay and clipping come from `[optim]`).
    pub lr: f64,
    pub schedule: LrSchedule,
    /// Share of tasks whose trajectories are held out for evaluation.
    pub heldout_fraction: f64,
    /// Held-out loss every N steps (and at the end); 0 = only at the end.
    pub eval_every: u64,
    /// Held-out tasks rolled out with the model at the end of SFT (episode metrics); 0 = none.
    pub eval_tasks: usize,
    /// Save a checkpoint every N steps (and at the end).
    pub save_every: u64,
    /// Keep the newest K checkpoints (0 = all).
    pub keep_last: usize,
    /// Seed of the held-out split and the batch order.
    pub seed: u64,
    #[serde(skip_serializing_if = "Recompute::is_off")]
    pub recompute: Recompute,
    pub filter: FilterConfig,
    /// Curriculum before whole trajectories: phases of SFT on the openings
    /// of the teacher's answered trajectories (issue + first `turns`
    /// assistant turns, no system prompt), in order; each starts from the
    /// previous phase's weights, the whole-trajectory SFT from the last.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub openings: Vec<OpeningPhase>,
}

/// One curriculum phase of `[[sft.openings]]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpeningPhase {
    /// Assistant turns kept from the start of each trajectory.
    pub turns: usize,
    /// Passes over the openings.
    pub epochs: u64,
    /// Openings per optimizer step (also per forward/backward).
    pub batch_rows: usize,
}

impl Default for SftSection {
    fn default() -> Self {
        SftSection {
            data: None,
            epochs: 3,
            batch_rows: 8,
            micro_batch_rows: 4,
            micro_batch_tokens: None,
            lr: 1e-5,
            schedule: LrSchedule::Constant,
            heldout_fraction: 0.1,
            eval_every: 0,
            eval_tasks: 8,
            save_every: 100,
            keep_last: 2,
            seed: 0,
            recompute: Recompute::Off,
            filter: FilterConfig::default(),
            openings: Vec::new(),
        }
    }
}

impl SftSection {
    /// How each optimizer batch is cut (`micro_batch_tokens` wins).
    pub fn micro_batching(&self) -> crate::error::Result<MicroBatching> {
        MicroBatching::from_settings("sft", self.micro_batch_rows, self.micro_batch_tokens)
    }

    /// True when the section is all defaults (kept out of the config hash,
    /// so GRPO-only configs hash as they did before SFT existed).
    pub fn is_default(&self) -> bool {
        *self == SftSection::default()
    }
}
