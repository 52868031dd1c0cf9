//! LoRA adapters (PEFT's LoRA): for a target projection `W` (`[out, in]`),
//! `y = x W^T + s * (x A^T) B^T` with `A` `[r, in]`, `B` `[out, r]` and
//! `s = alpha / r` (`alpha / sqrt(r)` with rsLoRA).
//!
//! An [`Adapter`] is a value the model takes ([`crate::CausalLm::with_adapter`]),
//! never a second model: the base weights stay as they are (frozen in
//! training), and the adapter's tensors are named as PEFT saves them
//! (`base_model.model.model.layers.{i}.self_attn.q_proj.lora_A.weight`), so
//! the same map is the trainable parameter set, the optimizer's keys and the
//! file ([`peft`]).

pub mod peft;

use crate::config::ModelConfig;
use crate::error::{Error, Result};
use crate::weights::TensorMap;
use candle_core::{DType, Device, Tensor};
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// A projection LoRA can adapt, by PEFT's module name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    /// `self_attn.q_proj`.
    QProj,
    /// `self_attn.k_proj`.
    KProj,
    /// `self_attn.v_proj`.
    VProj,
    /// `self_attn.o_proj`.
    OProj,
    /// `mlp.gate_proj`.
    GateProj,
    /// `mlp.up_proj`.
    UpProj,
    /// `mlp.down_proj`.
    DownProj,
}

impl Target {
    /// Every target, in a layer's order.
    pub const ALL: [Target; 7] = [Target::QProj, Target::KProj, Target::VProj, Target::OProj, Target::GateProj, Target::UpProj, Target::DownProj];

    /// PEFT's name (`q_proj`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Target::QProj => "q_proj",
            Target::KProj => "k_proj",
            Target::VProj => "v_proj",
            Target::OProj => "o_proj",
            Target::GateProj => "gate_proj",
            Target::UpProj => "up_proj",
            Target::DownProj => "down_proj",
        }
    }

    /// From PEFT's name.
    pub fn from_name(name: &str) -> Option<Target> {
        Target::ALL.into_iter().find(|t| t.name() == name)
    }

    /// The module path inside a layer (`self_attn.q_proj`).
    pub fn module(self) -> String {
        let block = if matches!(self, Target::GateProj | Target::UpProj | Target::DownProj) { "mlp" } else { "self_attn" };
        format!("{block}.{}", self.name())
    }

    /// The base weight's shape `[out, in]` in a model of `cfg`.
    pub fn shape(self, cfg: &ModelConfig) -> (usize, usize) {
        let (h, i) = (cfg.hidden_size, cfg.intermediate_size);
        let (q, kv) = (cfg.num_attention_heads * cfg.head_dim, cfg.num_key_value_heads * cfg.head_dim);
        match self {
            Target::QProj => (q, h),
            Target::KProj | Target::VProj => (kv, h),
            Target::OProj => (h, q),
            Target::GateProj | Target::UpProj => (i, h),
            Target::DownProj => (h, i),
        }
    }
}

/// A validated LoRA setting.
#[derive(Debug, Clone, PartialEq)]
pub struct LoraConfig {
    pub r: usize,
    pub alpha: f64,
    pub use_rslora: bool,
    pub targets: BTreeSet<Target>,
    pub init_seed: u64,
    pub merge_for_rollouts: bool,
}

impl LoraConfig {
    /// `s = alpha / r`, or `alpha / sqrt(r)` with rsLoRA.
    pub fn scale(&self) -> f64 {
        if self.use_rslora { self.alpha / (self.r as f64).sqrt() } else { self.alpha / self.r as f64 }
    }
}

/// PEFT's name of a LoRA tensor: `which` is `lora_A` or `lora_B`.
pub fn tensor_name(layer: usize, target: Target, which: &str) -> String {
    format!("base_model.model.model.layers.{layer}.{}.{which}.weight", target.module())
}

/// The layer, target and half (`lora_A`/`lora_B`) of a PEFT tensor name,
/// the inverse of [`tensor_name`].
pub fn parse_tensor_name(name: &str) -> Option<(usize, Target, &'static str)> {
    let rest = name.strip_prefix("base_model.model.model.layers.")?.strip_suffix(".weight")?;
    let (layer, rest) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let (module, which) = rest.rsplit_once('.')?;
    let which = ["lora_A", "lora_B"].into_iter().find(|w| *w == which)?;
    let target = Target::ALL.into_iter().find(|t| t.module() == module)?;
    Some((layer, target, which))
}

/// A LoRA adapter over a model's projections: its setting and its tensors
/// by PEFT name (f32, or the run's dtype).
#[derive(Debug, Clone)]
pub struct Adapter {
    pub cfg: LoraConfig,
    pub tensors: TensorMap,
}

/// One projection's pair and scale, as the model applies it.
#[derive(Debug, Clone)]
pub struct LoraPair {
    /// `[r, in]`.
    pub a: Tensor,
    /// `[out, r]`.
    pub b: Tensor,
    pub scale: f64,
}

impl Adapter {
    /// PEFT's initialization: A as `nn.init.kaiming_uniform_(a=sqrt(5))`
    /// (uniform in `±1/sqrt(in)`), drawn from `cfg.init_seed`; B zeros, so
    /// the adapted model starts equal to the base.
    pub fn init(cfg: &LoraConfig, model: &ModelConfig, device: &Device) -> Result<Adapter> {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(cfg.init_seed);
        let mut tensors = TensorMap::new();
        for layer in 0..model.num_hidden_layers {
            for &t in &cfg.targets {
                let (out, inp) = t.shape(model);
                let bound = 1.0 / (inp as f64).sqrt();
                let a: Vec<f32> = (0..cfg.r * inp).map(|_| rng.random_range(-bound..bound) as f32).collect();
                tensors.insert(tensor_name(layer, t, "lora_A"), Tensor::from_vec(a, (cfg.r, inp), device)?);
                tensors.insert(tensor_name(layer, t, "lora_B"), Tensor::zeros((out, cfg.r), DType::F32, device)?);
            }
        }
        Ok(Adapter { cfg: cfg.clone(), tensors })
    }

    /// The names and shapes an adapter of `cfg` over `model` has.
    pub fn expected_shapes(cfg: &LoraConfig, model: &ModelConfig) -> Vec<(String, Vec<usize>)> {
        let mut out = Vec::new();
        for layer in 0..model.num_hidden_layers {
            for &t in &cfg.targets {
                let (o, i) = t.shape(model);
                out.push((tensor_name(layer, t, "lora_A"), vec![cfg.r, i]));
                out.push((tensor_name(layer, t, "lora_B"), vec![o, cfg.r]));
            }
        }
        out
    }

    /// Checks the tensors against their own config, with no model at hand
    /// (what `export-adapter` can check): at least one tensor; every one a
    /// `lora_A`/`lora_B` of a target of `target_modules` in some layer; each
    /// rank dimension equal to `r`; both halves of every pair, and the same
    /// targets in every layer from 0 to the last. `what` names the source.
    pub fn check_structure(&self, what: &str) -> Result<()> {
        let r = self.cfg.r;
        let mut layers: BTreeMap<usize, BTreeSet<(Target, &str)>> = BTreeMap::new();
        for (name, t) in &self.tensors {
            let (layer, target, which) = parse_tensor_name(name).ok_or_else(|| {
                Error::invalid(what, format!("tensor `{name}` is not a LoRA tensor (base_model.model.model.layers.N.<module>.lora_A|lora_B.weight)"))
            })?;
            if !self.cfg.targets.contains(&target) {
                return Err(Error::invalid(what, format!("tensor `{name}` adapts {}, which `target_modules` in {} does not list ({})", target.name(), peft::CONFIG_FILE, self.target_names().join(", "))));
            }
            let dims = t.dims();
            let rank = match (which, dims) {
                ("lora_A", [rank, _]) | ("lora_B", [_, rank]) => *rank,
                _ => return Err(Error::invalid(what, format!("tensor `{name}` has shape {dims:?}: a LoRA matrix has 2 dimensions"))),
            };
            if rank != r {
                return Err(Error::invalid(what, format!("`r` in {} is {r}, but tensor `{name}` has rank {rank} (shape {dims:?}): the config and the weights disagree", peft::CONFIG_FILE)));
            }
            layers.entry(layer).or_default().insert((target, which));
        }
        let Some(&last) = layers.keys().next_back() else {
            return Err(Error::invalid(what, format!("{} holds no tensor", peft::WEIGHTS_FILE)));
        };
        for layer in 0..=last {
            for &t in &self.cfg.targets {
                for which in ["lora_A", "lora_B"] {
                    if !layers.get(&layer).is_some_and(|have| have.contains(&(t, which))) {
                        return Err(Error::invalid(what, format!("tensor `{}` is missing (layers 0 to {last} are adapted)", tensor_name(layer, t, which))));
                    }
                }
            }
        }
        Ok(())
    }

    /// Checks the tensors against `model`: every expected one present with
    /// its shape, nothing else. `what` names the source in errors.
    pub fn check(&self, model: &ModelConfig, what: &str) -> Result<()> {
        let expected = Adapter::expected_shapes(&self.cfg, model);
        for (name, shape) in &expected {
            let t = self.tensors.get(name).ok_or_else(|| Error::invalid(what, format!("tensor `{name}` is missing")))?;
            if t.dims() != shape.as_slice() {
                // The rank dimension (A's first, B's second) is the config's `r`.
                let rank_dim = usize::from(name.contains(".lora_B."));
                let r = self.cfg.r;
                if t.dims().len() == 2 && t.dims()[rank_dim] != r && t.dims()[1 - rank_dim] == shape[1 - rank_dim] {
                    return Err(Error::invalid(
                        what,
                        format!("`r` in {} is {r}, but tensor `{name}` has rank {} (shape {:?}): the config and the weights disagree", peft::CONFIG_FILE, t.dims()[rank_dim], t.dims()),
                    ));
                }
                return Err(Error::invalid(
                    what,
                    format!("tensor `{name}` has shape {:?}, this model needs {shape:?} (r = {r}): the adapter was made for another base model", t.dims()),
                ));
            }
        }
        if self.tensors.len() != expected.len() {
            let known: BTreeSet<&String> = expected.iter().map(|(n, _)| n).collect();
            let extra = self.tensors.keys().find(|k| !known.contains(k)).cloned().unwrap_or_default();
            return Err(Error::invalid(what, format!("tensor `{extra}` is not a LoRA tensor of this model ({} layers, targets {})", model.num_hidden_layers, self.target_names().join(", "))));
        }
        Ok(())
    }

    /// The pair of `target` in `layer`, with the scale, if adapted.
    pub fn pair(&self, layer: usize, target: Target) -> Option<LoraPair> {
        let a = self.tensors.get(&tensor_name(layer, target, "lora_A"))?.clone();
        let b = self.tensors.get(&tensor_name(layer, target, "lora_B"))?.clone();
        Some(LoraPair { a, b, scale: self.cfg.scale() })
    }

    /// PEFT's names of the targets, in a layer's order.
    pub fn target_names(&self) -> Vec<String> {
        self.cfg.targets.iter().map(|t| t.name().to_string()).collect()
    }

    /// The same adapter with its tensors converted to `dtype`.
    pub fn to_dtype(&self, dtype: DType) -> Result<Adapter> {
        let tensors = self.tensors.iter().map(|(k, t)| Ok((k.clone(), t.to_dtype(dtype)?))).collect::<Result<_>>()?;
        Ok(Adapter { cfg: self.cfg.clone(), tensors })
    }

    /// `weights` with the adapter merged in: `W + s * B A` for every
    /// adapted projection (computed in f32, returned in each weight's dtype).
    pub fn merge_into(&self, model: &ModelConfig, weights: &TensorMap) -> Result<TensorMap> {
        let mut out = weights.clone();
        for layer in 0..model.num_hidden_layers {
            for &t in &self.cfg.targets {
                let name = format!("model.layers.{layer}.{}.weight", t.module());
                let w = weights.get(&name).ok_or_else(|| Error::invalid("merge", format!("base tensor `{name}` is missing")))?;
                let p = self.pair(layer, t).ok_or_else(|| Error::invalid("merge", format!("the adapter has no pair for `{name}`")))?;
                let delta = (p.b.to_dtype(DType::F32)?.matmul(&p.a.to_dtype(DType::F32)?)? * p.scale)?;
                let merged = (w.to_dtype(DType::F32)? + delta)?.to_dtype(w.dtype())?;
                out.insert(name, merged);
            }
        }
        Ok(out)
    }
}

/// Refuses a tensor holding a NaN or an infinity, naming `what` (the file,
/// or the merge) and the tensor, with how many of its values are.
pub fn check_finite<'a>(what: &str, tensors: impl Iterator<Item = (&'a String, &'a Tensor)>) -> Result<()> {
    for (name, t) in tensors {
        let values = t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
        let bad = values.iter().filter(|v| !v.is_finite()).count();
        if bad > 0 {
            return Err(Error::invalid(what, format!("tensor `{name}` holds {bad} non-finite values (NaN or infinity) of {}", values.len())));
        }
    }
    Ok(())
}

/// A model to run: its base folder and, when adapted, the adapter folder.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelSpec {
    pub base: std::path::PathBuf,
    pub adapter: Option<std::path::PathBuf>,
}

/// Resolves `spec` (a model folder, a hub id, or an adapter folder such as
/// a LoRA run's checkpoint, whose base is its `base_model_name_or_path`)
/// and an explicit `adapter` (`--adapter`, `[model] adapter`).
pub fn resolve(spec: &str, adapter: Option<&std::path::Path>) -> Result<ModelSpec> {
    let as_dir = std::path::Path::new(spec);
    if peft::is_adapter_dir(as_dir) && !as_dir.join("config.json").exists() {
        if let Some(other) = adapter {
            return Err(Error::invalid("--adapter", format!("{} is given, but the model {spec} is itself an adapter", other.display())));
        }
        let base_name = peft::base_model_name(as_dir)?;
        let base = crate::hub::resolve_model_dir(&base_name)
            .map_err(|e| Error::invalid(format!("{}", as_dir.join(peft::CONFIG_FILE).display()), format!("its base_model_name_or_path `{base_name}`: {e}; pass --model BASE --adapter {spec}")))?;
        return Ok(ModelSpec { base, adapter: Some(as_dir.to_path_buf()) });
    }
    let base = crate::hub::resolve_model_dir(spec)?;
    if let Some(a) = adapter {
        if !peft::is_adapter_dir(a) {
            return Err(Error::invalid("--adapter", format!("{} holds no {} (an adapter folder: PEFT's, or a LoRA run's checkpoint)", a.display(), peft::CONFIG_FILE)));
        }
    }
    Ok(ModelSpec { base, adapter: adapter.map(std::path::Path::to_path_buf) })
}

impl LoraConfig {
    /// A starting adapter (`[model] adapter`, a checkpoint) must have the
    /// run's rank, scale and targets.
    pub fn check_matches(&self, adapter: &LoraConfig) -> Result<()> {
        if self.r != adapter.r || self.targets != adapter.targets || (self.scale() - adapter.scale()).abs() > 1e-12 {
            return Err(Error::invalid(
                "[lora]",
                format!(
                    "the starting adapter has r = {}, scale {}, targets {:?}; the run's [lora] says r = {}, scale {}, targets {:?}: make them agree",
                    adapter.r,
                    adapter.scale(),
                    adapter.targets.iter().map(|t| t.name()).collect::<Vec<_>>(),
                    self.r,
                    self.scale(),
                    self.targets.iter().map(|t| t.name()).collect::<Vec<_>>()
                ),
            ));
        }
        Ok(())
    }
}
