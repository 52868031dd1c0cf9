//! Intervals for the report: the 95% interval of a stage's mean held-out
//! reward and of the paired difference between two stages, by bootstrap over
//! held-out tasks (the unit that was sampled; a task's episodes are not
//! independent draws). Every stage is evaluated on the same tasks with the
//! same episode seeds, so differences are paired task by task.

use rand::{Rng, SeedableRng};
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
pub use rollout::episode::summary::task_rewards;

/// The 95% percentile-bootstrap interval of the mean of `values`.
pub fn mean_ci95(values: &[f64]) -> [f64; 2] {
    let singletons: Vec<Vec<f64>> = values.iter().map(|v| vec![*v]).collect();
    clustered_ci95(&singletons)
}

/// The 95% interval of the mean over every value of `clusters`, resampling
/// whole clusters (values that are not independent of each other: one
/// held-out task's differences in several runs). With one value per
/// cluster this is the plain bootstrap of `mean_ci95`, draw for draw.
pub fn clustered_ci95(clusters: &[Vec<f64>]) -> [f64; 2] {
    if clusters.iter().all(|c| c.is_empty()) {
        return [f64::NAN, f64::NAN];
    }
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(SEED);
    let n = clusters.len();
    let mut means: Vec<f64> = (0..RESAMPLES)
        .map(|_| {
            let (mut sum, mut count) = (0.0, 0usize);
            for _ in 0..n {
                let c = &clusters[rng.random_range(0..n)];
                sum += c.iter().sum::<f64>();
                count += c.len();
            }
            sum / count.max(1) as f64
        })
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

/// `later - earlier` pooled over several runs (seeds), each given as its
/// `(earlier, later)` per-task rewards. A held-out task evaluated in several
/// runs is one cluster of the bootstrap: the runs share their held-out tasks
/// when the split seed is fixed, so a task's differences are not independent
/// draws, and a copy of a run adds no evidence.
pub fn pooled_paired(runs: &[(&BTreeMap<String, f64>, &BTreeMap<String, f64>)]) -> Pooled {
    let mut clusters: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for (earlier, later) in runs {
        for (task, l) in later.iter() {
            if let Some(e) = earlier.get(task) {
                clusters.entry(task).or_default().push(l - e);
            }
        }
    }
    let clusters: Vec<Vec<f64>> = clusters.into_values().collect();
    let units: usize = clusters.iter().map(Vec::len).sum();
    let mean = if units == 0 { f64::NAN } else { clusters.iter().map(|c| c.iter().sum::<f64>()).sum::<f64>() / units as f64 };
    let task_means: Vec<f64> = clusters.iter().map(|c| c.iter().sum::<f64>() / c.len() as f64).collect();
    Pooled { mean, ci95: clustered_ci95(&clusters), tasks: clusters.len(), units, task_sd: sample_sd(&task_means) }
}

/// A paired difference pooled over runs (`pooled_paired`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Pooled {
    pub mean: f64,
    pub ci95: [f64; 2],
    /// Distinct held-out tasks (bootstrap clusters).
    pub tasks: usize,
    /// Task-run pairs (differences) in all.
    pub units: usize,
    /// Standard deviation across tasks of a task's mean difference.
    pub task_sd: f64,
}

impl Pooled {
    /// Held-out tasks (each evaluated in as many runs as here) that a true
    /// gain of `gain` needs for a two-sided 95% interval to exclude 0 with
    /// 80% probability, at this spread across tasks: ((1.96 + 0.84) sd / gain)^2.
    pub fn tasks_for_gain(&self, gain: f64) -> f64 {
        const Z: f64 = 1.959_964 + 0.841_621;
        (Z * self.task_sd / gain).powi(2).ceil()
    }
}

fn sample_sd(values: &[f64]) -> f64 {
    if values.len() < 2 {
        return f64::NAN;
    }
    let mean = values.iter().sum::<f64>() / values.len() as f64;
    (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (values.len() - 1) as f64).sqrt()
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

    fn rewards(pairs: &[(&str, f64)]) -> BTreeMap<String, f64> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn one_run_pooled_is_the_paired_difference() {
        let e = rewards(&[("a", 0.1), ("b", 0.5), ("c", 0.0), ("d", 0.9), ("e", 0.3)]);
        let l = rewards(&[("a", 0.4), ("b", 0.5), ("c", 0.6), ("d", 0.7), ("e", 0.9)]);
        let (p, q) = (paired(&e, &l), pooled_paired(&[(&e, &l)]));
        assert_eq!((q.mean, q.ci95, q.tasks, q.units), (p.mean, p.ci95, p.tasks, p.tasks));
    }

    #[test]
    fn a_copied_run_adds_no_evidence_but_an_independent_one_does() {
        let tasks: Vec<String> = (0..40).map(|i| format!("t{i}")).collect();
        let e: BTreeMap<String, f64> = tasks.iter().map(|t| (t.clone(), 0.0)).collect();
        let l: BTreeMap<String, f64> = tasks.iter().enumerate().map(|(i, t)| (t.clone(), (i % 3) as f64 * 0.1)).collect();
        let one = pooled_paired(&[(&e, &l)]);
        let copied = pooled_paired(&[(&e, &l), (&e, &l)]);
        assert_eq!((copied.mean, copied.ci95, copied.tasks, copied.units), (one.mean, one.ci95, 40, 80));
        // Another run on other tasks: twice the clusters, a narrower interval.
        let e2: BTreeMap<String, f64> = e.iter().map(|(k, v)| (format!("{k}-other"), *v)).collect();
        let l2: BTreeMap<String, f64> = l.iter().map(|(k, v)| (format!("{k}-other"), *v)).collect();
        let two = pooled_paired(&[(&e, &l), (&e2, &l2)]);
        assert_eq!(two.tasks, 80);
        assert!(two.ci95[1] - two.ci95[0] < 0.8 * (one.ci95[1] - one.ci95[0]), "{two:?} vs {one:?}");
    }

    #[test]
    fn tasks_for_a_gain_follow_the_spread() {
        let p = Pooled { mean: 0.0, ci95: [0.0; 2], tasks: 32, units: 32, task_sd: 0.33 };
        // (2.8016 * 0.33 / 0.03)^2 = 949.7
        assert_eq!(p.tasks_for_gain(0.03), 950.0);
        assert_eq!(p.tasks_for_gain(0.06), 238.0);
        let l = rewards(&[("a", 1.0), ("b", 0.0), ("c", 1.0), ("d", 0.0)]);
        let e = rewards(&[("a", 0.0), ("b", 0.0), ("c", 0.0), ("d", 0.0)]);
        // Differences 1, 0, 1, 0: sample sd sqrt(1/3).
        assert!((pooled_paired(&[(&e, &l)]).task_sd - (1.0f64 / 3.0).sqrt()).abs() < 1e-12);
    }
}
