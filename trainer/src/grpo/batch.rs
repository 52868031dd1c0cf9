//! Episodes -> the right-padded tensors of one GRPO optimizer batch.

use crate::error::Result;
use crate::grpo::{BatchTotals, GrpoBatch, OldLogprobs};
use candle_core::{Device, Tensor};
use rollout::episode::{Episode, StopReason};

/// Whether an episode was cut short (its tokens do not end a turn normally).
pub fn is_truncated(e: &Episode) -> bool {
    matches!(e.stop_reason(), Some(StopReason::MaxTokens | StopReason::ContextFull))
}

/// Rows `kept` of `episodes` with their advantages and the log-probs they
/// were sampled with; policy tokens of truncated episodes are masked out
/// when `mask_truncated`.
pub fn build_batch(episodes: &[Episode], kept: &[usize], advantages: &[f32], mask_truncated: bool, device: &Device) -> Result<GrpoBatch> {
    let width = kept.iter().map(|&i| episodes[i].tokens.len()).max().unwrap_or(1);
    let mut tokens = Vec::with_capacity(kept.len() * width);
    let mut mask = Vec::with_capacity(kept.len() * width);
    let mut rollout = Vec::with_capacity(kept.len() * width);
    for &i in kept {
        let e = &episodes[i];
        let on = !(mask_truncated && is_truncated(e));
        tokens.extend(e.tokens.iter().copied().chain(std::iter::repeat(0)).take(width));
        mask.extend(e.loss_mask.iter().map(|&m| if on && m == 1 { 1f32 } else { 0.0 }).chain(std::iter::repeat(0.0)).take(width));
        rollout.extend(e.logprobs.iter().copied().chain(std::iter::repeat(0.0)).take(width));
    }
    Ok(GrpoBatch {
        tokens: Tensor::from_vec(tokens, (kept.len(), width), device)?,
        mask: Tensor::from_vec(mask, (kept.len(), width), device)?,
        advantages: Tensor::from_vec(advantages.to_vec(), kept.len(), device)?,
        old_logprobs: OldLogprobs::Current,
        ref_logprobs: None,
        rollout_logprobs: Some(Tensor::from_vec(rollout, (kept.len(), width), device)?),
    })
}

/// The totals of the batch of rows `kept` (rows and policy tokens, masked as
/// [`build_batch`] masks them), without building it: what every rank's share
/// is normalized by under data parallelism.
pub fn totals(episodes: &[Episode], kept: &[usize], mask_truncated: bool) -> BatchTotals {
    let tokens = kept
        .iter()
        .map(|&i| &episodes[i])
        .filter(|e| !(mask_truncated && is_truncated(e)))
        .map(|e| e.loss_mask.iter().filter(|&&m| m == 1).count() as f64)
        .sum();
    BatchTotals { rows: kept.len(), tokens }
}
