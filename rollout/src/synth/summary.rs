//! The recall distribution of verified synthetic tasks, as one line.

use serde::Serialize;

use super::SynthTask;

/// Count, mean and histogram (r = 0, 0 < r < 1, r = 1) of the verified recalls.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RecallSummary {
    /// Tasks with a recall.
    pub count: usize,
    /// Mean function recall.
    pub mean: f64,
    /// Tasks with r = 0.
    pub zero: usize,
    /// Tasks with 0 < r < 1.
    pub partial: usize,
    /// Tasks with r = 1.
    pub one: usize,
    /// Mean file recall.
    pub mean_file: f64,
}

impl RecallSummary {
    /// The summary of the tasks that carry a recall.
    pub fn of(tasks: &[SynthTask]) -> RecallSummary {
        let pairs: Vec<(f64, f64)> = tasks.iter().filter_map(|t| Some((t.synth.recall?, t.synth.file_recall.unwrap_or(0.0)))).collect();
        let n = pairs.len();
        let mean = |f: fn(&(f64, f64)) -> f64| if n == 0 { 0.0 } else { pairs.iter().map(f).sum::<f64>() / n as f64 };
        RecallSummary {
            count: n,
            mean: mean(|p| p.0),
            zero: pairs.iter().filter(|p| p.0 <= 0.0).count(),
            partial: pairs.iter().filter(|p| p.0 > 0.0 && p.0 < 1.0).count(),
            one: pairs.iter().filter(|p| p.0 >= 1.0).count(),
            mean_file: mean(|p| p.1),
        }
    }

    /// `recall: count 50, mean 0.620, r=0: 19, 0<r<1: 0, r=1: 31 (file recall 0.800)`.
    pub fn line(&self) -> String {
        format!(
            "recall: count {}, mean {:.3}, r=0: {}, 0<r<1: {}, r=1: {} (file recall {:.3})",
            self.count, self.mean, self.zero, self.partial, self.one, self.mean_file
        )
    }
}
