//! Group-relative advantages, as TRL's `GRPOTrainer` computes them
//! (`_generate_and_score_completions`, TRL 1.16.0, `multi_objective_aggregation
//! = "sum_then_normalize"`): pure functions on reward slices.
//!
//! Rewards come grouped: `rewards[g * group_size .. (g + 1) * group_size]` are
//! the `group_size` episodes of task `g`.

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};

/// TRL's epsilon in `A = (R - mean) / (std + 1e-4)` (hard-coded there).
pub const TRL_ADVANTAGE_EPS: f64 = 1e-4;

/// A group's std is "zero" when it is within this of 0: TRL tests
/// `torch.isclose(std, 0)`, i.e. `|std| <= atol = 1e-8`.
pub const ZERO_STD_ATOL: f64 = 1e-8;

/// How the centred rewards are scaled (TRL's `scale_rewards`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AdvantageScaling {
    /// GRPO: `A = (R - mean_group) / (std_group + eps)`, std unbiased
    /// (Bessel's correction, like `torch.std` and TRL's `nanstd`).
    Group,
    /// `A = (R - mean_group) / (std_batch + eps)`: one unbiased std over all
    /// rewards of the batch (TRL's `scale_rewards = "batch"`).
    Batch,
    /// Dr. GRPO: `A = R - mean_group`, no division (TRL's `scale_rewards = "none"`).
    None,
}

/// What happens to groups whose rewards are all equal (zero std, so every
/// advantage is 0 and they carry no policy-gradient signal).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ZeroStdGroups {
    /// Keep their rows (TRL's behaviour): they still count in the loss
    /// normalizers and in the KL term.
    Keep,
    /// Drop their rows from the batch (DAPO's dynamic-sampling filter);
    /// [`Advantages::kept_rows`] lists the rows that remain.
    Drop,
    /// Drop them, and draw further tasks (rolling out their groups) until
    /// the step has `tasks_per_step` groups with a spread or `[grpo]
    /// max_resample_draws` further tasks were drawn (DAPO's dynamic
    /// sampling, which refills the batch; `grpo::resample`). Here,
    /// on the rewards of every group drawn, the same as `Drop`.
    Resample,
}

/// Mean and unbiased standard deviation of one group.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GroupStats {
    pub mean: f64,
    /// Unbiased (divides by n - 1); NaN for a group of one, like `torch.std`.
    pub std: f64,
}

impl GroupStats {
    /// Whether the group's rewards are all equal (TRL's `is_std_zero`).
    pub fn is_zero_std(&self) -> bool {
        self.std.abs() <= ZERO_STD_ATOL
    }
}

/// Advantages of a batch of grouped rewards, and the statistics TRL logs.
#[derive(Debug, Clone, PartialEq)]
pub struct Advantages {
    /// One advantage per kept row, in the order of `kept_rows`.
    pub values: Vec<f32>,
    /// Indices (into the reward slice) of the rows kept: all of them with
    /// [`ZeroStdGroups::Keep`], the rows of non-constant groups with `Drop`
    /// and `Resample`.
    pub kept_rows: Vec<usize>,
    /// Per-group mean and std.
    pub groups: Vec<GroupStats>,
    /// Number of groups whose rewards are all equal.
    pub zero_std_groups: usize,
    /// TRL's `frac_reward_zero_std`: fraction of rows in such a group (equal
    /// to the fraction of groups, as every group has `group_size` rows).
    /// Always about groups: with [`AdvantageScaling::Batch`] TRL instead
    /// tests the batch std, which is rarely what one wants to watch.
    pub frac_reward_zero_std: f64,
    /// TRL's `reward`: mean of all rewards (before any drop).
    pub reward_mean: f64,
    /// TRL's `reward_std`: unbiased std of all rewards (before any drop).
    pub reward_std: f64,
}

/// Mean of a slice (NaN when empty).
pub fn mean(xs: &[f64]) -> f64 {
    xs.iter().sum::<f64>() / xs.len() as f64
}

/// Unbiased standard deviation (Bessel's correction, `torch.std`'s default);
/// NaN for fewer than two values, as in torch.
pub fn unbiased_std(xs: &[f64]) -> f64 {
    if xs.len() < 2 {
        return f64::NAN;
    }
    let m = mean(xs);
    (xs.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (xs.len() - 1) as f64).sqrt()
}

/// Mean and unbiased std of each group of `group_size` consecutive rewards.
pub fn group_stats(rewards: &[f64], group_size: usize) -> Result<Vec<GroupStats>> {
    check_groups(rewards, group_size)?;
    Ok(rewards
        .chunks(group_size)
        .map(|g| GroupStats {
            mean: mean(g),
            std: unbiased_std(g),
        })
        .collect())
}

fn check_groups(rewards: &[f64], group_size: usize) -> Result<()> {
    if group_size < 2 {
        return Err(Error::invalid(
            "advantages",
            format!("group size is {group_size}, GRPO needs at least 2"),
        ));
    }
    if rewards.is_empty() || !rewards.len().is_multiple_of(group_size) {
        return Err(Error::invalid(
            "advantages",
            format!(
                "{} rewards do not form whole groups of {group_size}",
                rewards.len()
            ),
        ));
    }
    if let Some(i) = rewards.iter().position(|r| !r.is_finite()) {
        return Err(Error::invalid(
            "advantages",
            format!("reward of row {i} is {}", rewards[i]),
        ));
    }
    Ok(())
}

/// Group-relative advantages of `rewards` (grouped as described in the module
/// doc), with `eps` added to the std (TRL uses [`TRL_ADVANTAGE_EPS`]).
pub fn group_advantages(
    rewards: &[f64],
    group_size: usize,
    scaling: AdvantageScaling,
    eps: f64,
    zero_std: ZeroStdGroups,
) -> Result<Advantages> {
    let groups = group_stats(rewards, group_size)?;
    let batch_std = unbiased_std(rewards);
    let all: Vec<f64> = rewards
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let g = &groups[i / group_size];
            let centred = r - g.mean;
            match scaling {
                AdvantageScaling::Group => centred / (g.std + eps),
                AdvantageScaling::Batch => centred / (batch_std + eps),
                AdvantageScaling::None => centred,
            }
        })
        .collect();
    let zero_std_groups = groups.iter().filter(|g| g.is_zero_std()).count();
    let kept_rows: Vec<usize> = (0..rewards.len())
        .filter(|&i| zero_std == ZeroStdGroups::Keep || !groups[i / group_size].is_zero_std())
        .collect();
    Ok(Advantages {
        values: kept_rows.iter().map(|&i| all[i] as f32).collect(),
        kept_rows,
        frac_reward_zero_std: zero_std_groups as f64 / groups.len() as f64,
        zero_std_groups,
        groups,
        reward_mean: mean(rewards),
        reward_std: batch_std,
    })
}
