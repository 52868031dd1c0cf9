//! `[lora]`: train a LoRA adapter instead of every weight (PEFT's names and
//! defaults). Its module names are read as the model crate's [`Target`]s
//! (an unknown one is refused where it is read, naming the key), so that
//! a validated section is the model crate's [`LoraConfig`] as it is
//! ([`LoraSection::config`], which cannot fail).

use lm::lora::{LoraConfig, Target};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// `[lora]` of a run config (TOML; PEFT's names and defaults).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoraSection {
    /// The rank r (at least 1).
    pub r: usize,
    /// The scale's numerator (PEFT's `lora_alpha`; default 8, as PEFT's).
    #[serde(default = "default_alpha")]
    pub alpha: f64,
    /// Dropout on the adapter's input (PEFT's `lora_dropout`); only 0 is
    /// implemented.
    #[serde(default)]
    pub dropout: f64,
    /// PEFT's module names; default all seven projections.
    #[serde(default = "all_targets", serialize_with = "target_names", deserialize_with = "targets_by_name")]
    pub target_modules: Vec<Target>,
    /// Scale `alpha / sqrt(r)` instead of `alpha / r`.
    #[serde(default)]
    pub use_rslora: bool,
    /// Seed of A's Kaiming-uniform initialization.
    #[serde(default)]
    pub init_seed: u64,
    /// GRPO's rollouts decode through the base with the adapter merged into
    /// a copy of the adapted projections (faster, BENCHMARKS.md; the copy
    /// costs memory: `fusegrpo plan` counts it); false applies the adapter
    /// at every token instead.
    #[serde(default = "yes")]
    pub merge_for_rollouts: bool,
}

fn yes() -> bool {
    true
}

fn default_alpha() -> f64 {
    8.0
}

/// Every projection, `[lora] target_modules`' default.
fn all_targets() -> Vec<Target> {
    Target::ALL.to_vec()
}

/// Every projection's PEFT name, comma-separated.
fn names() -> String {
    Target::ALL.iter().map(|t| t.name()).collect::<Vec<_>>().join(", ")
}

/// `target_modules` as written: PEFT's names, in the order given.
fn target_names<S: serde::Serializer>(targets: &[Target], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(targets.iter().map(|t| t.name()))
}

/// `target_modules` read by PEFT's names; another name is refused, listing
/// the supported ones.
fn targets_by_name<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<Target>, D::Error> {
    Vec::<String>::deserialize(d)?
        .iter()
        .map(|name| Target::from_name(name).ok_or_else(|| serde::de::Error::custom(format!("`{name}` is not a projection these models have; supported: {}", names()))))
        .collect()
}

impl LoraSection {
    /// The model crate's setting: the section as it is (its names were
    /// read as projections; its ranges are [`LoraSection::validate`]'s).
    pub fn config(&self) -> LoraConfig {
        let targets: BTreeSet<Target> = self.target_modules.iter().copied().collect();
        LoraConfig { r: self.r, alpha: self.alpha, use_rslora: self.use_rslora, targets, init_seed: self.init_seed, merge_for_rollouts: self.merge_for_rollouts }
    }

    /// Checks every key; `Err((key, message))` names the one at fault.
    pub fn validate(&self) -> std::result::Result<(), (String, String)> {
        if self.r == 0 {
            return Err(("r".into(), "must be at least 1".into()));
        }
        if !(self.alpha > 0.0 && self.alpha.is_finite()) {
            return Err(("alpha".into(), format!("must be a positive number, got {}", self.alpha)));
        }
        if self.dropout != 0.0 {
            return Err(("dropout".into(), format!("{} is not supported: only 0 (no dropout) is implemented", self.dropout)));
        }
        if self.target_modules.is_empty() {
            return Err(("target_modules".into(), "lists no module".into()));
        }
        Ok(())
    }
}
