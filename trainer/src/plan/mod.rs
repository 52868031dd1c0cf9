//! The memory planner: where a run's bytes go, phase by phase, from the
//! model's shape and the run's settings alone (nothing is allocated).
//!
//! A run's memory peaks in one of its phases: the rollout (weights,
//! optimizer state, KV caches), the GRPO update or the SFT update (weights,
//! optimizer state, gradients, one micro-batch's activations). Each phase
//! is a list of [`Part`]s; the largest phase total is the peak. `fusegrpo
//! plan` prints the table; `train`, `sft` and `pipeline` check the peak
//! against the device's memory before loading anything and name the
//! setting to lower when it does not fit.

pub mod bytes;
pub mod device_memory;
pub mod footprint;
pub mod known;
pub mod phases;

use crate::error::{Error, Result};
use serde_json::{json, Map, Value};

/// A stage of a run with its own resident set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PhaseKind {
    /// Generating episodes: weights, optimizer state and KV caches.
    Rollout,
    /// The GRPO forward/backward of one micro-batch.
    GrpoUpdate,
    /// The SFT forward/backward of one micro-batch.
    SftUpdate,
    /// One training micro-batch of `fusegrpo bench step` (no optimizer).
    BenchStep,
}

impl PhaseKind {
    pub fn name(self) -> &'static str {
        match self {
            PhaseKind::Rollout => "rollout",
            PhaseKind::GrpoUpdate => "grpo_update",
            PhaseKind::SftUpdate => "sft_update",
            PhaseKind::BenchStep => "bench_step",
        }
    }
}

/// One kind of memory in a phase.
#[derive(Debug, Clone, PartialEq)]
pub struct Part {
    /// Short key (`weights`, `kv_cache`, ...), also the JSON key.
    pub name: &'static str,
    pub bytes: u64,
    /// How the figure was reached, for the table.
    pub detail: String,
    /// The config setting that sizes this part, named when the plan does
    /// not fit and this part is among the largest adjustable ones.
    pub setting: Option<&'static str>,
    /// When the part grows linearly with its setting: how many units
    /// (tokens, KV slots) `bytes` is for, so a limit gives the most units
    /// that fit ([`MemoryPlan::fit`]).
    pub units: Option<u64>,
}

/// A phase and its parts.
#[derive(Debug, Clone, PartialEq)]
pub struct Phase {
    pub kind: PhaseKind,
    pub parts: Vec<Part>,
}

impl Phase {
    pub fn total(&self) -> u64 {
        self.parts.iter().map(|p| p.bytes).sum()
    }
}

/// Every phase of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryPlan {
    /// `cpu` or `cuda`: whose memory the figures are.
    pub device: &'static str,
    pub phases: Vec<Phase>,
    /// What the figures assume or leave out, printed under the table.
    pub notes: Vec<String>,
}

impl MemoryPlan {
    /// The phase with the largest total.
    pub fn peak_phase(&self) -> Option<&Phase> {
        self.phases.iter().max_by_key(|p| p.total())
    }

    pub fn peak_bytes(&self) -> u64 {
        self.peak_phase().map_or(0, Phase::total)
    }

    /// Ok when the peak fits in `limit` bytes; else an error naming the
    /// phase, the figures and the settings of its largest adjustable parts.
    pub fn check(&self, limit: u64, what: &str) -> Result<()> {
        let Some(peak) = self.peak_phase() else { return Ok(()) };
        if peak.total() <= limit {
            return Ok(());
        }
        let mut adjustable: Vec<&Part> = peak.parts.iter().filter(|p| p.setting.is_some() && p.setting != Some(phases::CUDA_KERNELS_SETTING)).collect();
        adjustable.sort_by_key(|p| std::cmp::Reverse(p.bytes));
        let lower: Vec<String> = adjustable
            .iter()
            .take(2)
            .map(|p| format!("{} ({} for {})", p.setting.expect("filtered"), bytes::format(p.bytes), p.name))
            .collect();
        let mut hint = if lower.is_empty() { "nothing in the config sizes it: a smaller model or dtype".to_string() } else { format!("lower {}", lower.join(" or ")) };
        if let Some(scores) = peak.parts.iter().find(|p| p.setting == Some(phases::CUDA_KERNELS_SETTING)) {
            hint = format!(
                "set {} = \"on\" (the reference attention's scores take {} of it; the fused kernel's memory is linear), or {hint}",
                phases::CUDA_KERNELS_SETTING,
                bytes::format(scores.bytes)
            );
        }
        Err(Error::invalid(
            "memory plan",
            format!(
                "the {} phase needs {} but {what} has {}: {hint} (fusegrpo plan --config ... prints every part; --no-memory-check skips this check)",
                peak.kind.name(),
                bytes::format(peak.total()),
                bytes::format(limit)
            ),
        ))
    }

    /// For each phase with a part that grows with its setting (the update's
    /// micro-batch tokens, the rollout's KV slots): the most units of that
    /// setting that keep the phase within `limit` (0 when the rest alone
    /// does not fit), with the setting's name.
    pub fn fit(&self, limit: u64) -> Vec<(PhaseKind, &'static str, u64)> {
        let mut out = Vec::new();
        for phase in &self.phases {
            let Some(p) = phase.parts.iter().find(|p| p.units.is_some_and(|u| u > 0) && p.setting.is_some()) else { continue };
            let units = p.units.expect("found");
            let rest = phase.total() - p.bytes;
            let per_unit = p.bytes as f64 / units as f64;
            let fit = if limit <= rest || per_unit <= 0.0 { 0 } else { ((limit - rest) as f64 / per_unit).floor() as u64 };
            out.push((phase.kind, p.setting.expect("found"), fit));
        }
        out
    }

    /// A text table: one block per phase, its parts and total, then the peak
    /// and, with a limit, whether it fits and the most each phase's sizing
    /// setting can take.
    pub fn table(&self, limit: Option<u64>) -> String {
        let mut out = String::new();
        for phase in &self.phases {
            out.push_str(&format!("{} ({}):\n", phase.kind.name(), self.device));
            for p in &phase.parts {
                out.push_str(&format!("  {:<22} {:>11}  {}\n", p.name, bytes::format(p.bytes), p.detail));
            }
            out.push_str(&format!("  {:<22} {:>11}\n", "total", bytes::format(phase.total())));
        }
        let peak = self.peak_phase().map_or("none", |p| p.kind.name());
        out.push_str(&format!("peak: {} ({peak})", bytes::format(self.peak_bytes())));
        if let Some(limit) = limit {
            let verdict = if self.peak_bytes() <= limit { "fits" } else { "does NOT fit" };
            out.push_str(&format!(", {verdict} in {}", bytes::format_both(limit)));
        }
        out.push('\n');
        if let Some(limit) = limit {
            for (kind, setting, units) in self.fit(limit) {
                let unit = if setting.contains("kv") {
                    "KV slots"
                } else if setting.contains("rows") {
                    "tokens per micro-batch (rows x the longest episode)"
                } else {
                    "tokens per micro-batch"
                };
                out.push_str(&format!("in {}: {} can hold at most {units} {unit} ({setting})\n", bytes::format(limit), kind.name()));
            }
        }
        for n in &self.notes {
            out.push_str(&format!("note: {n}\n"));
        }
        out
    }

    /// `{"peak_bytes": .., "fits": .., "peak_phase": .., "limit_bytes": ..,
    /// "parts": {phase: {part: bytes}}}` (`fits` is null without a limit).
    pub fn json(&self, limit: Option<u64>) -> Value {
        let parts: Map<String, Value> = self
            .phases
            .iter()
            .map(|ph| (ph.kind.name().to_string(), Value::Object(ph.parts.iter().map(|p| (p.name.to_string(), json!(p.bytes))).collect())))
            .collect();
        json!({
            "peak_bytes": self.peak_bytes(),
            "peak_phase": self.peak_phase().map(|p| p.kind.name()),
            "fits": limit.map(|l| self.peak_bytes() <= l),
            "limit_bytes": limit,
            "device": self.device,
            "parts": parts,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> MemoryPlan {
        let part = |name, bytes, setting| Part { name, bytes, detail: String::new(), setting, units: None };
        MemoryPlan {
            device: "cpu",
            phases: vec![
                Phase { kind: PhaseKind::Rollout, parts: vec![part("weights", 100, None), part("kv_cache", 300, Some("[rollout] max_kv_tokens"))] },
                Phase { kind: PhaseKind::GrpoUpdate, parts: vec![part("weights", 100, None), part("activations", 50, Some("[train] micro_batch_tokens"))] },
            ],
            notes: vec![],
        }
    }

    #[test]
    fn the_peak_is_the_largest_phase_and_the_error_names_its_setting() {
        let p = plan();
        assert_eq!(p.peak_phase().map(|p| p.kind), Some(PhaseKind::Rollout));
        assert_eq!(p.peak_bytes(), 400);
        assert!(p.check(400, "the test").is_ok());
        let e = p.check(399, "the test").unwrap_err().to_string();
        assert!(e.contains("rollout") && e.contains("[rollout] max_kv_tokens") && !e.contains("micro_batch_tokens"), "{e}");
        let j = p.json(Some(399));
        assert_eq!(j["peak_bytes"], 400);
        assert_eq!(j["fits"], false);
        assert_eq!(j["parts"]["grpo_update"]["activations"], 50);
        assert!(p.table(Some(1000)).contains("fits in"));
    }
}
