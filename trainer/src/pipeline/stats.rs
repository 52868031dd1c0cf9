//! Intervals for the report: the 95% interval of a stage's mean held-out
//! reward and of the paired difference between two stages, by bootstrap over
//! held-out tasks (the unit that was sampled; a task's episodes are not
//! independent draws). Every stage is evaluated on the same tasks with the
//! same episode seeds, so differences are paired task by task.

use rand::{Rng, SeedableRng};
use rollout::episode::Episode;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Bootstrap resamples (percentile intervals).
pub const RESAMPLES: usize = 10_000;
/// Seed of the resampling, fixed so a report is reproducible.
const SEED: u64 = 0x5eed_b007;

/// A paired difference of mean held-out reward, `later - earlier`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Paired {
    pub mean: f64,
    pub ci95: [f64; 2],
    /// Held-out tasks both stages were evaluated on.
    pub tasks: usize,
}

/// Mean reward per task id.
pub fn task_rewards(episodes: &[Episode]) -> BTreeMap<String, f64> {
    let mut sums: BTreeMap<String, (f64, usize)> = BTreeMap::new();
    for e in episodes {
        let s = sums.entry(e.task_id.clone()).or_default();
        s.0 += e.score.unwrap_or_default().reward;
        s.1 += 1;
    }
    sums.into_iter().map(|(k, (sum, n))| (k, sum / n as f64)).collect()
}

/// The 95% percentile-bootstrap interval of the mean of `values`.
pub fn mean_ci95(values: &[f64]) -> [f64; 2] {
    if values.is_empty() {
        return [f64::NAN, f64::NAN];
    }
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(SEED);
    let n = values.len();
    let mut means: Vec<f64> = (0..RESAMPLES)
        .map(|_| (0..n).map(|_| values[rng.random_range(0..n)]).sum::<f64>() / n as f64)
        .collect();
    means.sort_by(f64::total_cmp);
    let at = |q: f64| means[((q * RESAMPLES as f64) as usize).min(RESAMPLES - 1)];
    [at(0.025), at(0.975)]
}

/// `later - earlier` over the tasks both were evaluated on.
pub fn paired(earlier: &BTreeMap<String, f64>, later: &BTreeMap<String, f64>) -> Paired {
    let diffs: Vec<f64> = later.iter().filter_map(|(t, l)| earlier.get(t).map(|e| l - e)).collect();
    let mean = if diffs.is_empty() { f64::NAN } else { diffs.iter().sum::<f64>() / diffs.len() as f64 };
    Paired { mean, ci95: mean_ci95(&diffs), tasks: diffs.len() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interval_holds_the_mean_and_shrinks_with_more_tasks() {
        let small: Vec<f64> = (0..10).map(|i| (i % 2) as f64).collect();
        let large: Vec<f64> = (0..400).map(|i| (i % 2) as f64).collect();
        let (a, b) = (mean_ci95(&small), mean_ci95(&large));
        assert!(a[0] < 0.5 && 0.5 < a[1], "{a:?}");
        assert!(b[0] < 0.5 && 0.5 < b[1], "{b:?}");
        assert!(b[1] - b[0] < (a[1] - a[0]) / 3.0, "{a:?} vs {b:?}");
        // Normal approximation for 400 Bernoulli(0.5): +-1.96 * 0.5 / 20 = 0.049.
        assert!(((b[1] - b[0]) / 2.0 - 0.049).abs() < 0.01, "{b:?}");
    }

    #[test]
    fn paired_differences_use_common_tasks_only() {
        let e: BTreeMap<String, f64> = [("a", 0.1), ("b", 0.2), ("c", 0.3)].iter().map(|(k, v)| (k.to_string(), *v)).collect();
        let l: BTreeMap<String, f64> = [("a", 0.3), ("b", 0.4), ("d", 9.0)].iter().map(|(k, v)| (k.to_string(), *v)).collect();
        let p = paired(&e, &l);
        assert_eq!(p.tasks, 2);
        assert!((p.mean - 0.2).abs() < 1e-12);
        assert!((p.ci95[0] - 0.2).abs() < 1e-12 && (p.ci95[1] - 0.2).abs() < 1e-12, "constant differences: {p:?}");
    }
}
