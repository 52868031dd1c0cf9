//! The phases of a run (or of `bench step`) from its settings.

use super::footprint::{elem, head_activation_bytes, kv_bytes_per_slot, layer_activation_bytes, logprob_workspace_bytes, ParamSizes};
use super::{MemoryPlan, Part, Phase, PhaseKind};
use crate::config::ModelConfig;
use crate::device::DeviceKind;
use crate::model::recompute::Recompute;
use crate::packing::MicroBatching;
use crate::run_config::RunConfig;
use candle_core::DType;

/// The process itself on the CPU: code, the tokenizer, thread stacks,
/// allocator slack. Measured (BENCHMARKS.md, "The memory planner"): 37 MiB
/// for the demo's `train` with its small tokenizer (a one-episode step's
/// peak minus weights and moments); Qwen3's tokenizer adds ~38 MiB.
pub const CPU_PROCESS_BYTES: u64 = 64 << 20;
/// The CUDA context, cuBLAS workspaces and the caching allocator's slack on
/// the GPU: an assumption until scripts/gpu-check measures it.
pub const CUDA_CONTEXT_BYTES: u64 = 2 << 30;

fn part(name: &'static str, bytes: u64, detail: impl Into<String>, setting: Option<&'static str>) -> Part {
    Part { name, bytes, detail: detail.into(), setting, units: None }
}

/// The model and device a plan is for.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    pub model: &'a ModelConfig,
    pub dtype: DType,
    pub device: DeviceKind,
    /// CPU threads (the fused log-probs keep working memory per thread).
    pub threads: usize,
    /// A LoRA run: only the adapter trains (f32), the base is frozen.
    pub lora: Option<&'a crate::lora::LoraConfig>,
}

impl Target<'_> {
    fn params(&self) -> ParamSizes {
        ParamSizes::of(self.model)
    }

    /// What trains: every parameter, or the adapter's (with the largest
    /// adapter tensor and one layer's).
    fn trained(&self) -> ParamSizes {
        match self.lora {
            None => self.params(),
            Some(l) => {
                let m = self.model;
                let per_target: Vec<u64> = l.targets.iter().map(|t| { let (o, i) = t.shape(m); (l.r * (o + i)) as u64 }).collect();
                let per_layer: u64 = per_target.iter().sum();
                let largest = l.targets.iter().map(|t| { let (o, i) = t.shape(m); (l.r * o.max(i)) as u64 }).max().unwrap_or(0);
                ParamSizes { count: per_layer * m.num_hidden_layers as u64, largest, per_layer }
            }
        }
    }

    /// Bytes of one trained parameter's value and gradient: the model's
    /// dtype, or f32 for an adapter.
    fn trained_elem(&self) -> u64 {
        if self.lora.is_some() { 4 } else { elem(self.dtype) }
    }

    fn process(&self) -> Part {
        match self.device {
            DeviceKind::Cpu => part("process", CPU_PROCESS_BYTES, "code, tokenizer, threads (measured)", None),
            DeviceKind::Cuda => part("cuda_context", CUDA_CONTEXT_BYTES, "CUDA context and workspaces (assumed)", None),
        }
    }

    fn weights(&self) -> Part {
        let p = self.params();
        part("weights", p.count * elem(self.dtype), format!("{} parameters x {} B", p.count, elem(self.dtype)), None)
    }

    /// Weights, f32 masters (non-f32 models), AdamW's two moments and the
    /// frozen reference (beta > 0): resident for the whole run.
    fn training_state(&self, beta: f64) -> Vec<Part> {
        let n = self.params().count;
        let mut parts = vec![self.process(), self.weights()];
        if let Some(l) = self.lora {
            let a = self.trained().count;
            parts.push(part("adapter", a * 4, format!("LoRA r = {} on {} projections x {} layers: {a} parameters, f32", l.r, l.targets.len(), self.model.num_hidden_layers), Some("[lora] r")));
            parts.push(part("moments", 2 * a * 4, "AdamW m and v of the adapter, f32", None));
            // The KL reference is the base with the adapter off: no copy.
            return parts;
        }
        if self.dtype != DType::F32 {
            parts.push(part("masters", n * 4, "f32 master weights", None));
        }
        parts.push(part("moments", 2 * n * 4, "AdamW m and v, f32", None));
        if beta > 0.0 {
            parts.push(part("reference", n * elem(self.dtype), "frozen reference model (beta > 0)", Some("[grpo] beta")));
        }
        parts
    }

    /// Gradients of one backward beside the f32 accumulator.
    fn gradients(&self, recompute: Recompute) -> Vec<Part> {
        let p = self.trained();
        let e = self.trained_elem();
        let in_flight = match recompute {
            // One backward's GradStore holds every parameter's gradient.
            Recompute::Off => p.count * e,
            // One layer's at a time, and the embedding's.
            Recompute::PerLayer => p.per_layer * e + p.largest * e,
        };
        vec![
            part("grad_accumulator", p.count * 4, "f32 sum over micro-batches", None),
            part("grads_in_flight", in_flight + p.largest * 4, "one backward's gradients + one tensor being added", None),
        ]
    }

    /// Activations one micro-batch of `tokens` keeps for its backward.
    fn activations(&self, tokens: u64, recompute: Recompute, setting: &'static str) -> Vec<Part> {
        let m = self.model;
        let layers = m.num_hidden_layers as u64;
        let layer = layer_activation_bytes(m, self.dtype);
        let (bytes, how) = match recompute {
            Recompute::Off => (layers * layer, format!("{layers} layers x {layer} B per token")),
            // Every layer's input, plus one layer's activations (and as much
            // again for their gradients) while it is recomputed.
            Recompute::PerLayer => {
                let kept = layers * m.hidden_size as u64 * elem(self.dtype);
                (kept + 2 * layer, format!("{kept} B of layer inputs + 2 x {layer} B for the recomputed layer, per token"))
            }
        };
        let head = head_activation_bytes(m, self.dtype);
        let (bytes, how) = match self.lora {
            None => (bytes, how),
            Some(l) => {
                // Each adapted projection keeps x A^T (r values); adapted
                // gate/up leave the fused gated node for a composition that
                // also keeps silu(gate) and the product (2 x intermediate).
                let e = elem(self.dtype);
                let mut extra = l.targets.len() as u64 * l.r as u64 * e;
                if l.targets.iter().any(|t| matches!(t, crate::lora::Target::GateProj | crate::lora::Target::UpProj)) {
                    extra += 2 * m.intermediate_size as u64 * e;
                }
                let kept_layers = match recompute {
                    Recompute::Off => layers,
                    Recompute::PerLayer => 2,
                };
                (bytes + kept_layers * extra, format!("{how}, + {extra} B per adapted layer for LoRA"))
            }
        };
        vec![
            Part { units: Some(tokens), ..part("activations", tokens * (bytes + head), format!("{tokens} tokens x ({how} + {head} B outside the layers)"), Some(setting)) },
            part("logprob_workspace", logprob_workspace_bytes(m, self.threads), format!("fused log-probs, {} threads", self.threads), None),
        ]
    }
}

/// Tokens of the largest micro-batch: `rows` padded rows of up to `longest`
/// tokens, or a packed row of at most `tokens` (a longer sequence gets a
/// row of its own).
fn micro_batch_tokens(micro: MicroBatching, longest: usize) -> u64 {
    match micro {
        MicroBatching::Rows(rows) => (rows * longest) as u64,
        MicroBatching::Tokens(tokens) => tokens.max(longest) as u64,
    }
}

/// Every phase of a GRPO run (rollout, update) and of its SFT stage.
pub fn for_run(cfg: &RunConfig, model: &ModelConfig, threads: usize) -> crate::Result<MemoryPlan> {
    let lora = cfg.lora();
    let t = Target { model, dtype: cfg.model.dtype.into(), device: cfg.model.device, threads, lora: lora.as_ref() };
    let episodes = (cfg.train.tasks_per_step * cfg.rollout.group) as u64;
    let longest = cfg.episode.max_total_tokens;

    let mut rollout = t.training_state(cfg.grpo.beta);
    if let Some(l) = t.lora.filter(|l| l.merge_for_rollouts) {
        // Rollouts decode through a merged copy of the adapted projections.
        let per_layer: u64 = l.targets.iter().map(|x| { let (o, i) = x.shape(model); (o * i) as u64 }).sum();
        let n = per_layer * model.num_hidden_layers as u64;
        rollout.push(part("merged_projections", n * elem(t.dtype), format!("{n} adapted projection weights, merged for decoding"), None));
    }
    rollout.extend(rollout_parts(&t, cfg, episodes));

    let mut grpo = t.training_state(cfg.grpo.beta);
    grpo.extend(t.gradients(cfg.train.recompute));
    let grpo_tokens = micro_batch_tokens(cfg.train.micro_batching()?, longest);
    let grpo_setting = if cfg.train.micro_batch_tokens.is_some() { "[train] micro_batch_tokens" } else { "[train] micro_batch_rows" };
    grpo.extend(t.activations(grpo_tokens, cfg.train.recompute, grpo_setting));

    let mut sft = t.training_state(0.0);
    sft.extend(t.gradients(cfg.sft.recompute));
    let sft_tokens = micro_batch_tokens(cfg.sft.micro_batching()?, cfg.sft.filter.max_tokens);
    let sft_setting = if cfg.sft.micro_batch_tokens.is_some() { "[sft] micro_batch_tokens" } else { "[sft] micro_batch_rows" };
    sft.extend(t.activations(sft_tokens, cfg.sft.recompute, sft_setting));

    let notes = vec![
        format!("worst case: every episode at [episode] max_total_tokens = {longest}, every micro-batch full"),
        "repository snapshots and task files are not counted".to_string(),
    ];
    Ok(MemoryPlan {
        device: t.device.name(),
        phases: vec![
            Phase { kind: PhaseKind::Rollout, parts: rollout },
            Phase { kind: PhaseKind::GrpoUpdate, parts: grpo },
            Phase { kind: PhaseKind::SftUpdate, parts: sft },
        ],
        notes,
    })
}

/// KV caches, the prefill's working memory and the decode step's logits.
fn rollout_parts(t: &Target<'_>, cfg: &RunConfig, episodes: u64) -> Vec<Part> {
    let m = t.model;
    let slot = kv_bytes_per_slot(m, t.dtype);
    let longest = cfg.episode.max_total_tokens as u64;
    let r = &cfg.rollout;
    let kv = match r.max_kv_tokens {
        Some(max) => Part { units: Some(max as u64), ..part("kv_cache", max as u64 * slot, format!("{max} slots ([rollout] max_kv_tokens) x {slot} B"), Some("[rollout] max_kv_tokens")) },
        // Unbounded: every episode's cache parked, and a decode batch of all
        // of them (stacked, padded to the longest) beside the finished rows'
        // parked copies: 2 slots per token.
        None => part(
            "kv_cache",
            2 * episodes * longest * slot,
            format!("unbounded: {episodes} episodes x {longest} tokens x 2 (stacked batch + parked copies) x {slot} B"),
            Some("[rollout] max_kv_tokens"),
        ),
    };
    let prefill = (r.max_prefill_tokens as u64).min(episodes * longest);
    let layer = layer_activation_bytes(m, t.dtype);
    let rows = episodes.min((r.max_batch_tokens as u64).div_ceil(longest.max(1)).max(1));
    vec![
        kv,
        part("prefill", prefill * layer, format!("{prefill} tokens ([rollout] max_prefill_tokens) x one layer's {layer} B"), Some("[rollout] max_prefill_tokens")),
        part("decode_logits", rows * m.vocab_size as u64 * 4 * 2, format!("{rows} rows x {} vocabulary x f32, device + host", m.vocab_size), None),
    ]
}

/// `fusegrpo bench step`: random weights, one micro-batch's forward and
/// backward into a gradient store, no optimizer.
pub fn for_bench_step(t: &Target<'_>, rows: usize, tokens: usize, recompute: Recompute) -> MemoryPlan {
    let p = t.params();
    let e = elem(t.dtype);
    let mut parts = vec![t.process(), t.weights()];
    let grads = match recompute {
        Recompute::Off => p.count * 4,
        Recompute::PerLayer => p.count * 4 + p.largest * e,
    };
    parts.push(part("gradients", grads, "f32 gradients of every parameter", None));
    parts.extend(t.activations((rows * tokens) as u64, recompute, "--rows/--tokens"));
    MemoryPlan {
        device: t.device.name(),
        phases: vec![Phase { kind: PhaseKind::BenchStep, parts }],
        notes: vec![format!("one micro-batch of {rows} x {tokens} tokens, recompute {recompute:?}")],
    }
}
