//! AdamW exactly as `torch.optim.AdamW` (single-tensor path, amsgrad off):
//!
//! ```text
//! t      += 1                                  (per parameter, only when it has a gradient)
//! p      *= 1 - lr * wd                        (decoupled weight decay)
//! m       = m + (1 - b1) * (g - m)
//! v       = b2 * v + (1 - b2) * g²
//! p      -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
//! ```
//!
//! `m` and `v` are f32. A parameter stored in bf16/f16 gets an f32 master
//! copy: the update is applied to the master, and the `Var` receives the
//! master rounded to its dtype.

use super::Gradients;
use crate::error::{Error, Result};
use candle_core::{DType, Tensor, Var};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

/// Which parameters weight decay applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WeightDecayScope {
    /// Every parameter (plain `torch.optim.AdamW` on all parameters).
    All,
    /// All but biases and norm weights, as the transformers Trainer
    /// (`get_decay_parameter_names`: names matching `bias`, `layernorm`,
    /// `rmsnorm`, `(^|.)norm($|.)` or `_norm($|.)`).
    SkipBiasesAndNorms,
}

impl WeightDecayScope {
    /// Whether weight decay applies to the parameter `name`.
    pub fn decays(&self, name: &str) -> bool {
        match self {
            WeightDecayScope::All => true,
            WeightDecayScope::SkipBiasesAndNorms => {
                let n = name.to_ascii_lowercase();
                let dotted = |p: &str| {
                    n.match_indices(p).any(|(i, _)| {
                        let after = &n[i + p.len()..];
                        after.is_empty() || after.starts_with('.')
                    })
                };
                let norm_segment = n.split('.').any(|s| s == "norm");
                !(n.contains("bias")
                    || n.contains("layernorm")
                    || n.contains("rmsnorm")
                    || norm_segment
                    || dotted("_norm"))
            }
        }
    }
}

/// Hyper-parameters (the learning rate is passed to each [`AdamW::step`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdamWConfig {
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
    pub decay_scope: WeightDecayScope,
}

impl Default for AdamWConfig {
    /// torch's defaults: betas (0.9, 0.999), eps 1e-8, weight decay 0.01.
    fn default() -> Self {
        AdamWConfig {
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.01,
            decay_scope: WeightDecayScope::All,
        }
    }
}

#[derive(Debug, Clone)]
struct ParamState {
    step: u64,
    m: Tensor,
    v: Tensor,
    /// f32 master weights when the parameter is not f32.
    master: Option<Tensor>,
}

/// AdamW over named `Var`s (every parameter, or under ZeRO-1 this rank's
/// shard of them: [`AdamW::new_shard`]).
#[derive(Debug, Clone)]
pub struct AdamW {
    cfg: AdamWConfig,
    /// Optimizer steps taken.
    step: u64,
    state: BTreeMap<String, ParamState>,
    /// Parameters whose state other ranks keep (ZeRO-1): their saved state
    /// is passed over on import, not an error.
    foreign: std::collections::BTreeSet<String>,
}

/// Saved optimizer tensors: names and shapes known up front, each tensor
/// loaded when asked for (a map in memory, or a checkpoint file read tensor
/// by tensor).
pub trait SavedState {
    fn keys(&self) -> Vec<String>;
    fn shape(&self, key: &str) -> Option<Vec<usize>>;
    fn load(&self, key: &str) -> Result<Tensor>;
}

impl SavedState for HashMap<String, Tensor> {
    fn keys(&self) -> Vec<String> {
        HashMap::keys(self).cloned().collect()
    }

    fn shape(&self, key: &str) -> Option<Vec<usize>> {
        self.get(key).map(|t| t.dims().to_vec())
    }

    fn load(&self, key: &str) -> Result<Tensor> {
        self.get(key).cloned().ok_or_else(|| state_err(key, "is missing from the optimizer state"))
    }
}

fn state_err(name: &str, message: impl Into<String>) -> Error {
    Error::OptimizerState {
        name: name.to_string(),
        message: message.into(),
    }
}

impl AdamW {
    /// Zero moments for every parameter, and f32 masters for non-f32 ones.
    pub fn new(params: &BTreeMap<String, Var>, cfg: AdamWConfig) -> Result<Self> {
        Self::new_shard(params, cfg, |_| true)
    }

    /// [`AdamW::new`] keeping state for the parameters `owned` accepts only
    /// (this rank's shard under ZeRO-1); the others are updated elsewhere.
    pub fn new_shard(params: &BTreeMap<String, Var>, cfg: AdamWConfig, owned: impl Fn(&str) -> bool) -> Result<Self> {
        let ok = |x: f64, lo: f64, hi: f64| x >= lo && x < hi;
        if !ok(cfg.beta1, 0.0, 1.0) || !ok(cfg.beta2, 0.0, 1.0) {
            return Err(Error::invalid(
                "adamw: betas",
                format!("({}, {}) must lie in [0, 1)", cfg.beta1, cfg.beta2),
            ));
        }
        if !(cfg.eps >= 0.0 && cfg.weight_decay >= 0.0) {
            return Err(Error::invalid(
                "adamw",
                format!(
                    "eps {} and weight_decay {} must be >= 0",
                    cfg.eps, cfg.weight_decay
                ),
            ));
        }
        let mut state = BTreeMap::new();
        let mut foreign = std::collections::BTreeSet::new();
        for (name, var) in params {
            if !owned(name) {
                foreign.insert(name.clone());
                continue;
            }
            let p = var.as_tensor();
            let zeros = Tensor::zeros(p.shape(), DType::F32, p.device())?;
            let master = if p.dtype() == DType::F32 {
                None
            } else {
                Some(p.to_dtype(DType::F32)?.detach())
            };
            state.insert(
                name.clone(),
                ParamState {
                    step: 0,
                    m: zeros.clone(),
                    v: zeros,
                    master,
                },
            );
        }
        Ok(AdamW {
            cfg,
            step: 0,
            state,
            foreign,
        })
    }

    pub fn config(&self) -> &AdamWConfig {
        &self.cfg
    }

    /// Optimizer steps taken so far.
    pub fn steps(&self) -> u64 {
        self.step
    }

    /// One update with learning rate `lr`. Parameters without a gradient are
    /// skipped (their moments and step count stay as they are, as in torch);
    /// a gradient for an unknown parameter is an error.
    pub fn step(
        &mut self,
        params: &BTreeMap<String, Var>,
        grads: &Gradients,
        lr: f64,
    ) -> Result<()> {
        if let Some((name, _)) = grads
            .iter()
            .find(|(n, _)| !self.state.contains_key(n.as_str()))
        {
            return Err(state_err(
                name,
                "has a gradient but is not managed by this optimizer",
            ));
        }
        let c = self.cfg;
        for (name, var) in params {
            let Some(g) = grads.get(name) else { continue };
            let st = self
                .state
                .get_mut(name)
                .ok_or_else(|| state_err(name, "is not managed by this optimizer"))?;
            if g.dims() != st.m.dims() {
                return Err(state_err(
                    name,
                    format!("gradient is {:?}, parameter is {:?}", g.dims(), st.m.dims()),
                ));
            }
            let g = g.to_dtype(DType::F32)?;
            st.step += 1;
            let t = st.step as i32;
            let p = match &st.master {
                Some(m) => m.clone(),
                None => var.as_tensor().detach(),
            };
            let wd = if c.decays(name) { c.weight_decay } else { 0.0 };
            let p = if wd != 0.0 { (p * (1.0 - lr * wd))? } else { p };
            st.m = (&st.m + ((&g - &st.m)? * (1.0 - c.beta1))?)?;
            st.v = ((&st.v * c.beta2)? + (g.sqr()? * (1.0 - c.beta2))?)?;
            let bc1 = 1.0 - c.beta1.powi(t);
            let bc2_sqrt = (1.0 - c.beta2.powi(t)).sqrt();
            let denom = ((st.v.sqrt()? / bc2_sqrt)? + c.eps)?;
            let p = (p - (st.m.div(&denom)? * (lr / bc1))?)?;
            match &mut st.master {
                Some(m) => {
                    var.set(&p.to_dtype(var.dtype())?)?;
                    *m = p;
                }
                None => var.set(&p)?,
            }
        }
        self.step += 1;
        Ok(())
    }

    /// The state as named tensors for `optimizer.safetensors`: `step` (i64
    /// `[1]`), and per parameter `state.<name>.step` (i64 `[1]`),
    /// `state.<name>.exp_avg`, `state.<name>.exp_avg_sq` and, for non-f32
    /// parameters, `state.<name>.master` (all f32).
    pub fn export_state(&self) -> Result<HashMap<String, Tensor>> {
        let dev = self
            .state
            .values()
            .next()
            .map(|s| s.m.device().clone())
            .unwrap_or(candle_core::Device::Cpu);
        let scalar = |x: u64| Tensor::new(&[x as i64], &dev);
        let mut out = HashMap::new();
        out.insert("step".to_string(), scalar(self.step)?);
        for (name, st) in &self.state {
            out.insert(format!("state.{name}.step"), scalar(st.step)?);
            out.insert(format!("state.{name}.exp_avg"), st.m.clone());
            out.insert(format!("state.{name}.exp_avg_sq"), st.v.clone());
            if let Some(m) = &st.master {
                out.insert(format!("state.{name}.master"), m.clone());
            }
        }
        Ok(out)
    }

    /// Restores a state written by [`AdamW::export_state`] into an optimizer
    /// built by [`AdamW::new`] for the same parameters. A missing tensor, a
    /// wrong shape or an unexpected extra tensor is an error naming it.
    /// Masters are restored too; call it before the next `step`.
    pub fn import_state(&mut self, map: &HashMap<String, Tensor>) -> Result<()> {
        self.import_from(map)
    }

    /// [`AdamW::import_state`] from any [`SavedState`], tensor by tensor:
    /// every name and shape is checked first (nothing changes on an error),
    /// then each moment replaces the one it restores as it is loaded, so a
    /// resume never holds two copies of the optimizer state.
    pub fn import_from(&mut self, src: &impl SavedState) -> Result<()> {
        let mut expected = vec!["step".to_string()];
        for (name, st) in &self.state {
            expected.push(format!("state.{name}.step"));
            let mut tensors = vec!["exp_avg", "exp_avg_sq"];
            if st.master.is_some() {
                tensors.push("master");
            }
            for suffix in tensors {
                let key = format!("state.{name}.{suffix}");
                match src.shape(&key) {
                    None => return Err(state_err(&key, "is missing from the optimizer state")),
                    Some(dims) if dims != st.m.dims() => {
                        return Err(state_err(&key, format!("has shape {dims:?}, parameter is {:?}", st.m.dims())))
                    }
                    Some(_) => expected.push(key),
                }
            }
        }
        // Another rank's shard (ZeRO-1), or a whole state read by one shard.
        let foreign_key = |k: &str| {
            let Some(rest) = k.strip_prefix("state.") else { return false };
            [".step", ".exp_avg", ".exp_avg_sq", ".master"].iter().any(|s| rest.strip_suffix(s).is_some_and(|n| self.foreign.contains(n)))
        };
        let keys: Vec<String> = src.keys().into_iter().filter(|k| !foreign_key(k)).collect();
        if let Some(missing) = expected.iter().find(|k| !keys.contains(k)) {
            return Err(state_err(missing, "is missing from the optimizer state"));
        }
        if let Some(extra) = keys.iter().find(|k| !expected.contains(k)) {
            return Err(state_err(extra, "is in the optimizer state but matches no parameter of this model"));
        }
        let scalar = |key: &str| -> Result<u64> {
            let v = src.load(key)?.flatten_all()?.to_dtype(DType::I64)?.to_vec1::<i64>().map_err(|e| state_err(key, e.to_string()))?;
            match v.as_slice() {
                [x] if *x >= 0 => Ok(*x as u64),
                _ => Err(state_err(key, format!("must hold one non-negative count, holds {v:?}"))),
            }
        };
        // Counts first: a bad one fails before any moment is replaced.
        let steps = self.state.keys().map(|name| scalar(&format!("state.{name}.step"))).collect::<Result<Vec<_>>>()?;
        let step = scalar("step")?;
        for ((name, st), s) in self.state.iter_mut().zip(steps) {
            let device = st.m.device().clone();
            let load = |suffix: &str| -> Result<Tensor> { Ok(src.load(&format!("state.{name}.{suffix}"))?.to_dtype(DType::F32)?.to_device(&device)?) };
            st.step = s;
            st.m = load("exp_avg")?;
            st.v = load("exp_avg_sq")?;
            if st.master.is_some() {
                st.master = Some(load("master")?);
            }
        }
        self.step = step;
        Ok(())
    }

    /// After [`AdamW::import_state`]: sets every low-precision `Var` from its
    /// restored master (the saved model holds the rounded weights already, so
    /// this only matters if they were saved at a different precision).
    pub fn sync_params_from_masters(&self, params: &BTreeMap<String, Var>) -> Result<()> {
        for (name, var) in params {
            if let Some(m) = self.state.get(name).and_then(|s| s.master.as_ref()) {
                var.set(&m.to_dtype(var.dtype())?)?;
            }
        }
        Ok(())
    }
}

impl AdamWConfig {
    fn decays(&self, name: &str) -> bool {
        self.decay_scope.decays(name)
    }
}
