//! A decoder-only causal LM (Qwen3, Qwen2 or Llama) for training and
//! generation, in plain differentiable Candle ops.
//!
//! One set of weights serves both uses: `forward(tokens, positions, cache)`
//! takes per-row positions (padding = -1) and an optional KV cache owned by
//! the caller. The architectures differ only in the attention block: q/k
//! RMSNorm (Qwen3), q/k/v biases (Qwen2, or `attention_bias`, which also
//! biases o), rope frequencies (llama3 scaling). All share GQA, a head_dim
//! independent of hidden_size, SwiGLU, and tied or untied embeddings.

pub mod cache;
pub mod load;
pub mod ops;
pub mod recompute;
pub mod rope;

use crate::config::ModelConfig;
use crate::error::{Error, Result};
use crate::lora::{Adapter, LoraPair, Target};
use crate::params::parameter_shapes;
use crate::profile::{self, Phase};
use crate::weights::TensorMap;
use cache::{visibility, KvCache, Positions};
use kernels::attention::Visibility;
use std::sync::Arc;
use candle_core::{DType, Tensor, Var};
use rope::RopeTables;
use std::collections::BTreeMap;

#[derive(Clone)]
struct Attention {
    q: Tensor,
    k: Tensor,
    v: Tensor,
    o: Tensor,
    q_bias: Option<Tensor>,
    k_bias: Option<Tensor>,
    v_bias: Option<Tensor>,
    o_bias: Option<Tensor>,
    /// Per-head RMSNorm scales of queries and keys (Qwen3 only).
    q_norm: Option<Tensor>,
    k_norm: Option<Tensor>,
}

#[derive(Clone)]
struct Layer {
    input_norm: Tensor,
    attn: Attention,
    post_norm: Tensor,
    gate: Tensor,
    up: Tensor,
    down: Tensor,
    /// LoRA pairs by [`Target`] (index in [`Target::ALL`]), when adapted.
    lora: [Option<LoraPair>; 7],
}

impl Layer {
    fn lora(&self, t: Target) -> Option<&LoraPair> {
        self.lora[t as usize].as_ref()
    }
}

/// A causal language model of one of the [`crate::config::Architecture`]s,
/// with or without a LoRA adapter.
#[derive(Clone)]
pub struct CausalLm {
    cfg: ModelConfig,
    /// Rotary inverse frequencies, from the config.
    inv_freq: Vec<f32>,
    embed: Tensor,
    layers: Vec<Layer>,
    norm: Tensor,
    lm_head: Tensor,
}

fn take(map: &TensorMap, name: &str) -> Result<Tensor> {
    map.get(name).cloned().ok_or_else(|| Error::invalid("model weights", format!("tensor `{name}` is missing")))
}

impl CausalLm {
    /// Build from named tensors (Hugging Face names); shapes are checked.
    pub fn new(cfg: &ModelConfig, map: &TensorMap) -> Result<Self> {
        for (name, shape) in parameter_shapes(cfg) {
            let t = take(map, &name)?;
            if t.dims() != shape.as_slice() {
                return Err(Error::invalid(
                    "model weights",
                    format!("tensor `{name}` has shape {:?}, expected {shape:?}", t.dims()),
                ));
            }
        }
        let layers = (0..cfg.num_hidden_layers)
            .map(|l| {
                let g = |s: &str| take(map, &format!("model.layers.{l}.{s}"));
                let bias = |s: &str| if cfg.qkv_bias() { g(s).map(Some) } else { Ok(None) };
                let norm = |s: &str| if cfg.architecture.has_qk_norm() { g(s).map(Some) } else { Ok(None) };
                Ok(Layer {
                    input_norm: g("input_layernorm.weight")?,
                    attn: Attention {
                        q: g("self_attn.q_proj.weight")?,
                        k: g("self_attn.k_proj.weight")?,
                        v: g("self_attn.v_proj.weight")?,
                        o: g("self_attn.o_proj.weight")?,
                        q_bias: bias("self_attn.q_proj.bias")?,
                        k_bias: bias("self_attn.k_proj.bias")?,
                        v_bias: bias("self_attn.v_proj.bias")?,
                        o_bias: if cfg.o_bias() { Some(g("self_attn.o_proj.bias")?) } else { None },
                        q_norm: norm("self_attn.q_norm.weight")?,
                        k_norm: norm("self_attn.k_norm.weight")?,
                    },
                    post_norm: g("post_attention_layernorm.weight")?,
                    gate: g("mlp.gate_proj.weight")?,
                    up: g("mlp.up_proj.weight")?,
                    down: g("mlp.down_proj.weight")?,
                    lora: Default::default(),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let embed = take(map, "model.embed_tokens.weight")?;
        let lm_head = if cfg.tie_word_embeddings { embed.clone() } else { take(map, "lm_head.weight")? };
        let norm = take(map, "model.norm.weight")?;
        Ok(CausalLm { cfg: cfg.clone(), inv_freq: cfg.inv_freq(), embed, layers, norm, lm_head })
    }

    /// Build a trainable model: every parameter becomes a `Var` whose
    /// gradient `backward()` fills. Tied embeddings share one `Var`.
    pub fn trainable(cfg: &ModelConfig, map: &TensorMap) -> Result<(Self, BTreeMap<String, Var>)> {
        let mut vars = BTreeMap::new();
        let mut tensors = TensorMap::new();
        for (name, _) in parameter_shapes(cfg) {
            let var = Var::from_tensor(&take(map, &name)?)?;
            tensors.insert(name.clone(), var.as_tensor().clone());
            vars.insert(name, var);
        }
        Ok((CausalLm::new(cfg, &tensors)?, vars))
    }

    /// Build a model whose adapter is trainable: the base (`map`) stays
    /// frozen as it is, each of the adapter's tensors becomes a `Var` (in
    /// f32), named as PEFT names them.
    pub fn trainable_adapter(cfg: &ModelConfig, map: &TensorMap, adapter: &Adapter) -> Result<(Self, BTreeMap<String, Var>)> {
        let mut vars = BTreeMap::new();
        let mut tensors = TensorMap::new();
        for (name, t) in &adapter.tensors {
            let var = Var::from_tensor(&t.to_dtype(DType::F32)?)?;
            tensors.insert(name.clone(), var.as_tensor().clone());
            vars.insert(name.clone(), var);
        }
        let trainable = Adapter { cfg: adapter.cfg.clone(), tensors };
        Ok((CausalLm::new(cfg, map)?.with_adapter(&trainable)?, vars))
    }

    /// The same base weights (shared, not copied) with `adapter` applied to
    /// its target projections; the shapes are checked.
    pub fn with_adapter(&self, adapter: &Adapter) -> Result<CausalLm> {
        adapter.check(&self.cfg, "adapter")?;
        let mut out = self.without_adapter();
        for (l, layer) in out.layers.iter_mut().enumerate() {
            for t in Target::ALL {
                layer.lora[t as usize] = adapter.pair(l, t);
            }
        }
        Ok(out)
    }

    /// The base model alone (weights shared): the KL reference of a LoRA run.
    pub fn without_adapter(&self) -> CausalLm {
        let mut out = self.clone();
        for layer in &mut out.layers {
            layer.lora = Default::default();
        }
        out
    }

    /// The same model with attention run as `settings` say (`[model]
    /// attention`); the weights are shared.
    pub fn with_attention(mut self, settings: kernels::attention::Settings) -> CausalLm {
        self.cfg.attention = settings;
        self
    }

    pub fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    pub fn dtype(&self) -> DType {
        self.embed.dtype()
    }

    pub fn device(&self) -> &candle_core::Device {
        self.embed.device()
    }

    /// Every parameter by Hugging Face name (the tied head is not repeated).
    pub fn tensors(&self) -> TensorMap {
        let mut out = TensorMap::new();
        out.insert("model.embed_tokens.weight".into(), self.embed.clone());
        for (l, layer) in self.layers.iter().enumerate() {
            let mut put = |s: &str, t: &Tensor| {
                out.insert(format!("model.layers.{l}.{s}"), t.clone());
            };
            put("input_layernorm.weight", &layer.input_norm);
            put("self_attn.q_proj.weight", &layer.attn.q);
            put("self_attn.k_proj.weight", &layer.attn.k);
            put("self_attn.v_proj.weight", &layer.attn.v);
            put("self_attn.o_proj.weight", &layer.attn.o);
            let a = &layer.attn;
            let optional = [
                ("self_attn.q_proj.bias", &a.q_bias),
                ("self_attn.k_proj.bias", &a.k_bias),
                ("self_attn.v_proj.bias", &a.v_bias),
                ("self_attn.o_proj.bias", &a.o_bias),
                ("self_attn.q_norm.weight", &a.q_norm),
                ("self_attn.k_norm.weight", &a.k_norm),
            ];
            for (s, t) in optional {
                if let Some(t) = t {
                    put(s, t);
                }
            }
            put("post_attention_layernorm.weight", &layer.post_norm);
            put("mlp.gate_proj.weight", &layer.gate);
            put("mlp.up_proj.weight", &layer.up);
            put("mlp.down_proj.weight", &layer.down);
        }
        out.insert("model.norm.weight".into(), self.norm.clone());
        if !self.cfg.tie_word_embeddings {
            out.insert("lm_head.weight".into(), self.lm_head.clone());
        }
        out
    }

    /// Final hidden states `[b, t, hidden]` for `tokens` `[b, t]` (u32).
    /// With a cache, the new tokens attend to the cached slots of their row,
    /// and their keys/values and positions are appended to it.
    pub fn forward(&self, tokens: &Tensor, positions: &Positions, cache: Option<&mut KvCache>) -> Result<Tensor> {
        self.forward_inner(tokens, positions, cache, false)
    }

    /// [`Self::forward`] of one row with a cache, whose outputs are the
    /// same bits as forwarding its tokens one at a time: each query attends
    /// to the keys up to its own as a one-token step does, in one attention
    /// call where the kernel computes every query on its own
    /// ([`kernels::attention::queries_alone`]: the CPU), else in a call per
    /// query (elsewhere the products sum in an order that depends on how
    /// many queries share a call); every other op of a few rows is per row
    /// or the same dot products whatever the row count. Checks a draft of
    /// several tokens in one pass over the weights ([`crate::lookup`]).
    pub fn forward_steps(&self, tokens: &Tensor, positions: &Positions, cache: &mut KvCache) -> Result<Tensor> {
        if tokens.dims2()?.0 != 1 || positions.segments.is_some() {
            return Err(Error::invalid("forward_steps", format!("one unpacked row, not {:?}", tokens.dims())));
        }
        self.forward_inner(tokens, positions, Some(cache), true)
    }

    fn forward_inner(&self, tokens: &Tensor, positions: &Positions, mut cache: Option<&mut KvCache>, steps: bool) -> Result<Tensor> {
        let (b, t) = tokens.dims2()?;
        if positions.batch != b || positions.len != t {
            return Err(Error::invalid(
                "forward",
                format!("positions are {}x{}, tokens are {b}x{t}", positions.batch, positions.len),
            ));
        }
        let keys: Vec<Vec<i64>> = match cache.as_deref() {
            Some(c) if c.batch() != b => {
                return Err(Error::invalid("forward", format!("cache holds {} rows, tokens {b}", c.batch())))
            }
            Some(c) => (0..b).map(|r| [c.key_positions()[r].as_slice(), positions.row(r)].concat()).collect(),
            None => (0..b).map(|r| positions.row(r).to_vec()).collect(),
        };
        let device = tokens.device();
        let vis = visibility(positions, &keys)?;
        // One query and the keys up to its own, per step (one row), where
        // one call for every query would not give each the bits of a step.
        let step_vis = if steps && !kernels::attention::queries_alone(device, self.dtype(), t) {
            let before = keys[0].len() - t;
            (0..t).map(|i| visibility(&Positions::step(vec![positions.data[i]]), &[keys[0][..before + i + 1].to_vec()])).collect::<candle_core::Result<Vec<_>>>()?
        } else {
            Vec::new()
        };
        let rope = RopeTables::new(&positions.data, b, t, &self.inv_freq, self.dtype(), device)?;
        let mut x = self.embed.index_select(&tokens.flatten_all()?, 0)?.reshape((b, t, self.cfg.hidden_size))?;
        for (l, layer) in self.layers.iter().enumerate() {
            x = self.layer_forward_with(l, layer, &x, &rope, &vis, &step_vis, cache.as_deref_mut())?;
        }
        if let Some(c) = cache {
            c.push_positions(positions);
        }
        Ok(ops::rms_norm(&x, &self.norm, self.cfg.rms_norm_eps)?)
    }

    /// Logits `[.., vocab]` of hidden states `[.., hidden]`.
    pub fn logits(&self, hidden: &Tensor) -> Result<Tensor> {
        Ok(ops::linear(hidden, &self.lm_head, None)?)
    }

    /// The output projection `[vocab, hidden]` (the embedding when tied).
    pub fn lm_head(&self) -> &Tensor {
        &self.lm_head
    }

    fn layer_forward(
        &self,
        l: usize,
        layer: &Layer,
        x: &Tensor,
        rope: &RopeTables,
        vis: &Arc<Visibility>,
        cache: Option<&mut KvCache>,
    ) -> Result<Tensor> {
        self.layer_forward_with(l, layer, x, rope, vis, &[], cache)
    }

    /// [`Self::layer_forward`]; with `step_vis` (one per query), each query
    /// attends alone ([`Self::forward_steps`]).
    #[allow(clippy::too_many_arguments)]
    fn layer_forward_with(
        &self,
        l: usize,
        layer: &Layer,
        x: &Tensor,
        rope: &RopeTables,
        vis: &Arc<Visibility>,
        step_vis: &[Arc<Visibility>],
        cache: Option<&mut KvCache>,
    ) -> Result<Tensor> {
        let eps = self.cfg.rms_norm_eps;
        let h = profile::op(Phase::NormRopeElementwise, [x], |[x]| ops::rms_norm(&x, &layer.input_norm, eps))?;
        let attn = self.attention(l, layer, &h, rope, vis, step_vis, cache)?;
        let x = (x + attn)?;
        let h = profile::op(Phase::NormRopeElementwise, [&x], |[x]| ops::rms_norm(&x, &layer.post_norm, eps))?;
        let lora = [layer.lora(Target::GateProj), layer.lora(Target::UpProj), layer.lora(Target::DownProj)];
        let mlp = profile::op(Phase::Matmul, [&h], |[h]| ops::swiglu_lora(&h, [&layer.gate, &layer.up, &layer.down], lora))?;
        Ok((&x + mlp)?)
    }

    fn attention(
        &self,
        l: usize,
        layer: &Layer,
        x: &Tensor,
        rope: &RopeTables,
        vis: &Arc<Visibility>,
        step_vis: &[Arc<Visibility>],
        cache: Option<&mut KvCache>,
    ) -> Result<Tensor> {
        let c = &self.cfg;
        let a = &layer.attn;
        let (b, t, _) = x.dims3()?;
        // q, k, v are token-major ([b, t, heads, d] as the projections
        // leave them) and go to attention as transposed views [b, heads, t,
        // d]: the fused op (CPU, CUDA kernel, cuDNN) reads their strides as
        // they are, and cuDNN's descriptors for them neither overlap for a
        // row shorter than its length bucket nor depend on t (one graph per
        // bucket); the reference (kernels off) gets copies.
        let native = kernels::has_native_path(x.device());
        let heads = |w: &Tensor, bias: &Option<Tensor>, target: Target, n: usize, norm: Option<&Tensor>, rope: Option<&RopeTables>| -> Result<Tensor> {
            let y = profile::op(Phase::Matmul, [x], |[x]| ops::lora_linear(&x, w, bias.as_ref(), layer.lora(target)))?.reshape((b, t, n, c.head_dim))?;
            let y = match norm {
                Some(nw) => profile::op(Phase::NormRopeElementwise, [&y], |[y]| ops::rms_norm(&y, nw, c.rms_norm_eps))?,
                None => y,
            };
            let y = match rope {
                // Rotated token-major: [b * t, n, 1, d] against tables [b * t, 1, 1, d].
                Some(rope) => {
                    let y = y.contiguous()?.reshape((b * t, n, 1, c.head_dim))?;
                    profile::op(Phase::NormRopeElementwise, [&y], |[y]| rope.apply_token_major(&y, b, t))?.reshape((b, t, n, c.head_dim))?
                }
                None => y,
            };
            let y = y.transpose(1, 2)?;
            Ok(if native { y } else { y.contiguous()? })
        };
        let q = heads(&a.q, &a.q_bias, Target::QProj, c.num_attention_heads, a.q_norm.as_ref(), Some(rope))?;
        let k = heads(&a.k, &a.k_bias, Target::KProj, c.num_key_value_heads, a.k_norm.as_ref(), Some(rope))?;
        let v = heads(&a.v, &a.v_bias, Target::VProj, c.num_key_value_heads, None, None)?;
        let (k, v) = match cache {
            Some(cache) => cache.append(l, &k, &v)?,
            None => (k, v),
        };
        // Causal grouped-query attention in linear memory (kernels::attention:
        // query heads read their kv head in place, no [t, slots] scores kept),
        // heads merged as the output projection takes them.
        let scale = 1.0 / (c.head_dim as f64).sqrt();
        let out = if step_vis.is_empty() {
            profile::op(Phase::Attention, [&q, &k, &v], |[q, k, v]| kernels::attention::attention(&q, &k, &v, vis, scale, c.attention))?
        } else {
            let steps = step_vis
                .iter()
                .enumerate()
                .map(|(i, sv)| {
                    let (k, v) = (k.narrow(2, 0, sv.keys())?, v.narrow(2, 0, sv.keys())?);
                    kernels::attention::attention(&q.narrow(2, i, 1)?, &k, &v, sv, scale, c.attention)
                })
                .collect::<candle_core::Result<Vec<_>>>()?;
            Tensor::cat(&steps, 1)?
        };
        Ok(profile::op(Phase::Matmul, [&out], |[out]| ops::lora_linear(&out, &a.o, a.o_bias.as_ref(), layer.lora(Target::OProj)))?)
    }
}
