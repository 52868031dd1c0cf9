//! DAPO's dynamic sampling that refills the batch (`[grpo] zero_std_groups =
//! "resample"`): groups whose rewards are all equal carry no policy-gradient
//! signal, so a step draws further tasks and rolls out their groups until
//! `tasks_per_step` groups have a reward spread, or until it has drawn
//! `max_resample_draws` further tasks; then it trains on the groups with a
//! spread it has (fewer than `tasks_per_step` when the bound was reached).
//!
//! Each round draws exactly the groups still missing, so a step never keeps
//! more than `tasks_per_step`. The draws come from the task sampler (whose
//! cursor the checkpoint saves after the step) and the rollouts from the
//! step's sampling stream, so a resumed run draws and samples the same.
//! Under data parallelism every rank decides on the gathered episodes of
//! every round (the same on each rank), so all ranks draw the same tasks
//! and run the same rounds.

use crate::error::Result;
use crate::grpo::advantages::group_stats;
use rollout::episode::Episode;
use serde::{Deserialize, Serialize};

/// What a step's refill did (metrics.jsonl: `resample/...`, and verl's
/// `num_gen_batches`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refill {
    /// Groups rolled out in the step (the first `tasks_per_step` and every
    /// further one).
    #[serde(rename = "resample/groups_drawn")]
    pub groups_drawn: usize,
    /// Groups with a reward spread the step trains on (at most
    /// `tasks_per_step`; fewer when the bound on draws was reached).
    #[serde(rename = "resample/groups_kept")]
    pub groups_kept: usize,
    /// Rounds of rollouts (1 when the first draw had enough spread).
    #[serde(rename = "num_gen_batches")]
    pub rounds: usize,
}

/// Groups among `rewards` (consecutive groups of `group`) whose rewards are
/// not all equal.
pub fn groups_with_spread(rewards: &[f64], group: usize) -> Result<usize> {
    if rewards.is_empty() {
        return Ok(0);
    }
    Ok(group_stats(rewards, group)?.iter().filter(|g| !g.is_zero_std()).count())
}

/// Appends to `episodes` (the step's first groups, `group` episodes each)
/// the groups of further tasks until `target` groups have a reward spread
/// or `max_more` further tasks were drawn. `draw(k)` draws `k` more tasks
/// and returns their episodes (every rank's, in the same order on each);
/// `reward` is the reward the advantages use.
pub fn refill(
    episodes: &mut Vec<Episode>,
    group: usize,
    target: usize,
    max_more: usize,
    reward: impl Fn(&Episode) -> f64,
    mut draw: impl FnMut(usize) -> Result<Vec<Episode>>,
) -> Result<Refill> {
    let rewards = |eps: &[Episode]| eps.iter().map(&reward).collect::<Vec<f64>>();
    let mut kept = groups_with_spread(&rewards(episodes), group)?;
    let (mut drawn, mut more, mut rounds) = (episodes.len() / group, 0, 1);
    while kept < target && more < max_more {
        let k = (target - kept).min(max_more - more);
        let new = draw(k)?;
        if new.is_empty() {
            break; // no task to draw from
        }
        kept += groups_with_spread(&rewards(&new), group)?;
        drawn += new.len() / group;
        (more, rounds) = (more + k, rounds + 1);
        episodes.extend(new);
    }
    if kept < target {
        tracing::warn!(kept, target, drawn, "resample: the bound on draws (grpo.max_resample_draws) was reached; the step trains on the groups with a reward spread it has");
    }
    Ok(Refill { groups_drawn: drawn, groups_kept: kept.min(target), rounds })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rollout::episode::Phase;

    /// One episode of task `task` whose reward is `r` (the test reads it
    /// from `seconds`).
    fn episode(task: usize, r: f64) -> Episode {
        Episode {
            task_id: format!("t{task}"),
            sample: 0,
            prompt_tokens: 0,
            tokens: Vec::new(),
            logprobs: Vec::new(),
            loss_mask: Vec::new(),
            turns: Vec::new(),
            phase: Phase::Done(rollout::episode::StopReason::Answer),
            answer: Vec::new(),
            score: None,
            seconds: r,
        }
    }

    /// Two episodes of each task: a spread when `spread(task)`.
    fn groups(tasks: std::ops::Range<usize>, spread: impl Fn(usize) -> bool) -> Vec<Episode> {
        tasks.flat_map(|t| [episode(t, 0.0), episode(t, if spread(t) { 1.0 } else { 0.0 })]).collect()
    }

    /// Tasks 0..n in order; every third (1, 4, 7, ...) gives a spread.
    fn run(target: usize, max_more: usize, spread: fn(usize) -> bool) -> (Vec<Episode>, Refill, Vec<usize>) {
        let mut next = target;
        let mut asked = Vec::new();
        let mut eps = groups(0..target, spread);
        let r = refill(&mut eps, 2, target, max_more, |e| e.seconds, |k| {
            asked.push(k);
            let out = groups(next..next + k, spread);
            next += k;
            Ok(out)
        })
        .unwrap();
        (eps, r, asked)
    }

    #[test]
    fn draws_the_missing_groups_until_the_step_is_full() {
        let (eps, r, asked) = run(3, 100, |t| t % 3 == 1);
        // Tasks 0..3 give one spread (task 1); then 2 more (2 draws: 3, 4 ->
        // task 4), then 1 (5: none), 1 (6: none), 1 (7: spread).
        assert_eq!(asked, vec![2, 1, 1, 1]);
        assert_eq!(r, Refill { groups_drawn: 8, groups_kept: 3, rounds: 5 });
        assert_eq!(eps.len(), 16);
        let rewards: Vec<f64> = eps.iter().map(|e| e.seconds).collect();
        assert_eq!(groups_with_spread(&rewards, 2).unwrap(), 3, "exactly tasks_per_step groups with a spread");
    }

    #[test]
    fn stops_at_the_bound_and_keeps_what_it_has() {
        let (eps, r, asked) = run(3, 3, |t| t == 1);
        assert_eq!(asked, vec![2, 1], "3 further tasks at most");
        assert_eq!(r, Refill { groups_drawn: 6, groups_kept: 1, rounds: 3 });
        assert_eq!(eps.len(), 12);
        // Enough spread at once: no further draw.
        let (eps, r, asked) = run(2, 5, |_| true);
        assert!(asked.is_empty());
        assert_eq!((r, eps.len()), (Refill { groups_drawn: 2, groups_kept: 2, rounds: 1 }, 4));
    }
}
