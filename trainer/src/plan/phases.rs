//! The phases of a run (or of `bench step`) from its settings.

use super::footprint::{cuda_logprob_workspace_bytes, elem, head_activation_bytes, kv_bytes_per_slot, layer_activation_bytes, logprob_workspace_bytes, ParamSizes, CUDA_EXTRA_LAYERS_PER_TOKEN};
use super::{MemoryPlan, Part, Phase, PhaseKind};
use lm::config::ModelConfig;
use crate::device::DeviceKind;
use crate::dist::partition::Partition;
use lm::model::recompute::Recompute;
use lm::params::parameter_shapes;
use crate::packing::MicroBatching;
use crate::run_config::RunConfig;
use candle_core::DType;

/// The setting the planner names when the reference attention's scores
/// are what does not fit.
pub const CUDA_KERNELS_SETTING: &str = "[model] cuda_kernels";

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
    pub lora: Option<&'a lm::lora::LoraConfig>,
    /// Attention by the fused kernel (memory linear in the sequence), or by
    /// the plain-tensor reference, which materializes every score (on CUDA
    /// with `[model] cuda_kernels` off).
    pub fused_attention: bool,
}

/// Bytes per score `[heads, queries, keys]` that the reference attention
/// keeps in a training pass: its forward graph holds the scores' matmul
/// output and scaled copy and the probabilities cast back (model dtype),
/// and the f32 scores, masked scores, shifted scores, exponentials and
/// probabilities (5 x 4 B); the backward adds two f32 gradients of them.
pub fn reference_score_bytes_training(dtype: DType) -> u64 {
    3 * elem(dtype) + 7 * 4
}

/// The same for a forward without a graph (the rollout's prefill): the f32
/// scores, exponentials and probabilities at once, and the cast back.
pub fn reference_score_bytes_inference(dtype: DType) -> u64 {
    3 * 4 + elem(dtype)
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

    /// Scalars of the largest shard of the optimizer state over `shards`
    /// ranks (ZeRO-1's partition of the parameters; all of them with one).
    fn optimizer_shard(&self, shards: usize) -> u64 {
        if shards <= 1 {
            return self.trained().count;
        }
        if self.lora.is_some() {
            // Small tensors, finely split: an even share, rounded up.
            return self.trained().count.div_ceil(shards as u64);
        }
        let shapes = parameter_shapes(self.model);
        let sizes: Vec<(String, usize)> = shapes.iter().map(|(n, s)| (n.clone(), s.iter().product())).collect();
        let p = Partition::new(sizes.iter().map(|(n, c)| (n, *c)), shards);
        (0..shards).map(|r| sizes.iter().filter(|(n, _)| p.owner(n) == r).map(|(_, c)| *c as u64).sum()).max().unwrap_or(0)
    }

    /// Weights, f32 masters (non-f32 models), AdamW's two moments and the
    /// frozen reference (beta > 0): resident for the whole run. Under ZeRO-1
    /// over `shards` ranks, masters and moments are this rank's shard's.
    fn training_state(&self, reference: crate::grpo::Reference, shards: usize) -> Vec<Part> {
        let n = self.params().count;
        let o = self.optimizer_shard(shards);
        let of = |what: &str| if shards > 1 { format!("{what}, ZeRO-1: the largest of {shards} shards, {o} of {} parameters", self.trained().count) } else { what.to_string() };
        let mut parts = vec![self.process(), self.weights()];
        if let Some(l) = self.lora {
            let a = self.trained().count;
            parts.push(part("adapter", a * 4, format!("LoRA r = {} on {} projections x {} layers: {a} parameters, f32", l.r, l.targets.len(), self.model.num_hidden_layers), Some("[lora] r")));
            parts.push(part("moments", 2 * o * 4, of("AdamW m and v of the adapter, f32"), None));
            // The KL reference (if any) is the base with the adapter off: no copy.
            return parts;
        }
        if self.dtype != DType::F32 {
            parts.push(part("masters", o * 4, of("f32 master weights"), None));
        }
        parts.push(part("moments", 2 * o * 4, of("AdamW m and v, f32"), None));
        if reference == crate::grpo::Reference::Copy {
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
        let (bytes, how) = match self.device {
            DeviceKind::Cpu => (bytes, how),
            DeviceKind::Cuda => {
                let extra = (CUDA_EXTRA_LAYERS_PER_TOKEN * layer as f64).round() as u64;
                (bytes + extra, format!("{how}, + {extra} B on CUDA ({CUDA_EXTRA_LAYERS_PER_TOKEN} layers, calibrated on an H200)"))
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
                if l.targets.iter().any(|t| matches!(t, lm::lora::Target::GateProj | lm::lora::Target::UpProj)) {
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
            self.logprob_workspace(tokens),
        ]
    }

    /// The log-prob head's working memory: per CPU thread, or one chunk of
    /// logits (and lm_head's gradient when it trains) on CUDA.
    fn logprob_workspace(&self, tokens: u64) -> Part {
        let m = self.model;
        match self.device {
            DeviceKind::Cpu => part("logprob_workspace", logprob_workspace_bytes(m, self.threads), format!("fused log-probs, {} threads", self.threads), None),
            DeviceKind::Cuda => {
                let head_trained = self.lora.is_none();
                let what = if head_trained { "one chunk of f32 logits, lm_head's gradient (and its f32 accumulator for bf16)" } else { "one chunk of f32 logits (lm_head frozen)" };
                part("logprob_workspace", cuda_logprob_workspace_bytes(m, tokens, self.dtype, head_trained), format!("log-prob head on cuBLAS: {what}"), None)
            }
        }
    }

    /// The reference attention's scores for a micro-batch of `rows` rows of
    /// `row_tokens` (none with the fused kernel): every layer's with
    /// recompute off, one layer's at a time with it.
    fn attention_scores(&self, rows: u64, row_tokens: u64, recompute: Recompute) -> Option<Part> {
        if self.fused_attention {
            return None;
        }
        let m = self.model;
        let per = reference_score_bytes_training(self.dtype);
        let layers = match recompute {
            Recompute::Off => m.num_hidden_layers as u64,
            Recompute::PerLayer => 1,
        };
        let scores = rows * m.num_attention_heads as u64 * row_tokens * row_tokens;
        Some(part(
            "attention_scores",
            layers * scores * per,
            format!("reference attention (CUDA kernels off): {layers} layer(s) x {rows} row(s) x {} heads x {row_tokens}^2 scores x {per} B", m.num_attention_heads),
            Some(CUDA_KERNELS_SETTING),
        ))
    }
}

/// The setting that sizes cuDNN attention's backward workspace.
pub const CUDNN_WORKSPACE_SETTING: &str = "[model] attention_workspace_mib";

/// cuDNN attention's backward workspace in an update whose micro-batch
/// holds `tokens` tokens in sequences of at most `longest`, where cuDNN may
/// run (on CUDA, the kernels on, `[model] attention` auto or cudnn; counted
/// whatever this build's features, as the plan is for the build that
/// runs): `auto` takes cuDNN only while the backward's workspace is within
/// `[model] attention_workspace_mib`, so the budget; `cudnn` runs it over
/// the budget too, so with the deterministic backward the larger of the
/// budget and the quadratic dP workspace of cuDNN < 9.25 on Hopper
/// (`sequences x heads x longest^2 x 2` bytes).
fn cudnn_workspace(cfg: &RunConfig, model: &ModelConfig, fused_attention: bool, tokens: u64, longest: u64) -> Option<Part> {
    use kernels::attention::Backend;
    if cfg.model.device != DeviceKind::Cuda || !fused_attention {
        return None;
    }
    let s = cfg.model.placement().attention;
    let budget = s.workspace_budget;
    let (bytes, detail) = match s.backend {
        Backend::Kernel => return None,
        Backend::Auto => (budget, format!("cuDNN attention's backward workspace (a `cudnn` build's): at most {} MiB, over which [model] attention = \"auto\" runs the fused kernel", budget >> 20)),
        Backend::Cudnn if s.deterministic => {
            let longest = longest.max(1);
            let quadratic = tokens.div_ceil(longest) * model.num_attention_heads as u64 * longest * longest * 2;
            (budget.max(quadratic), format!("cuDNN attention's backward workspace (a `cudnn` build's; [model] attention = \"cudnn\" runs over the {} MiB budget): the deterministic dP workspace of cuDNN < 9.25 on Hopper, {} sequence(s) x {} heads x {longest}^2 x 2 B", budget >> 20, tokens.div_ceil(longest), model.num_attention_heads))
        }
        Backend::Cudnn => (budget, format!("cuDNN attention's backward workspace (a `cudnn` build's): the {} MiB budget (assumed for the non-deterministic backward)", budget >> 20)),
    };
    Some(part("cudnn_workspace", bytes, detail, Some(CUDNN_WORKSPACE_SETTING)))
}

/// Rows and the longest row of the largest micro-batch (a packed row holds
/// up to its token budget).
fn micro_batch_rows(micro: MicroBatching, longest: usize) -> (u64, u64) {
    match micro {
        MicroBatching::Rows(rows) => (rows as u64, longest as u64),
        MicroBatching::Tokens(tokens) => (1, tokens.max(longest) as u64),
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

/// Every phase of a GRPO run (rollout, update) and of its SFT stage, per
/// rank of a run over `ranks` data-parallel ranks (each rolls out its share
/// of a step's tasks; under `[optim] zero_stage = 1` each keeps its shard
/// of the optimizer state).
pub fn for_run(cfg: &RunConfig, model: &ModelConfig, threads: usize, ranks: usize) -> crate::Result<MemoryPlan> {
    let lora = cfg.lora();
    let fused_attention = cfg.model.device == DeviceKind::Cpu || cfg.model.cuda_kernels.planned();
    let t = Target { model, dtype: cfg.model.dtype.into(), device: cfg.model.device, threads, lora: lora.as_ref(), fused_attention };
    let ranks = ranks.max(1);
    let shards = if cfg.optim.zero_stage >= 1 { ranks } else { 1 };
    let episodes = (cfg.train.tasks_per_step.div_ceil(ranks) * cfg.rollout.group) as u64;
    let longest = cfg.episode.max_total_tokens;

    let on_vllm = cfg.rollout.engine == crate::run_config::Engine::Vllm;
    let mut rollout = t.training_state(cfg.reference(), shards);
    let merged = t.lora.filter(|l| l.merge_for_rollouts).map(|l| {
        // Rollouts decode through a merged copy of the adapted projections.
        let per_layer: u64 = l.targets.iter().map(|x| { let (o, i) = x.shape(model); (o * i) as u64 }).sum();
        let n = per_layer * model.num_hidden_layers as u64;
        part("merged_projections", n * elem(t.dtype), format!("{n} adapted projection weights, merged for decoding"), None)
    });
    if !on_vllm {
        // (On vLLM the server decodes; this process only holds its training state.)
        rollout.extend(merged.clone());
        rollout.extend(rollout_parts(&t, cfg, episodes));
    }

    let mut grpo = t.training_state(cfg.reference(), shards);
    grpo.extend(t.gradients(cfg.train.recompute));
    let grpo_tokens = micro_batch_tokens(cfg.train.micro_batching()?, longest);
    let grpo_setting = if cfg.train.micro_batch_tokens.is_some() { "[train] micro_batch_tokens" } else { "[train] micro_batch_rows" };
    grpo.extend(t.activations(grpo_tokens, cfg.train.recompute, grpo_setting));
    let (rows, row) = micro_batch_rows(cfg.train.micro_batching()?, longest);
    grpo.extend(t.attention_scores(rows, row, cfg.train.recompute));
    grpo.extend(cudnn_workspace(cfg, model, fused_attention, grpo_tokens, longest as u64));
    if cfg.rollout.off_policy > 0 && !on_vllm {
        // The next step's rollouts decode during the update, from weights
        // the update does not touch: the merged projections of a LoRA run,
        // else a copy of what trains.
        let n = t.trained().count;
        grpo.push(merged.unwrap_or_else(|| part("frozen_rollout_weights", n * t.trained_elem(), format!("{n} trained parameters copied for the next step's rollouts ([rollout] off_policy)"), Some("[rollout] off_policy"))));
        grpo.extend(rollout_parts(&t, cfg, episodes));
    }

    let mut sft = t.training_state(crate::grpo::Reference::None, shards);
    sft.extend(t.gradients(cfg.sft.recompute));
    let sft_tokens = micro_batch_tokens(cfg.sft.micro_batching()?, cfg.sft.filter.max_tokens);
    let sft_setting = if cfg.sft.micro_batch_tokens.is_some() { "[sft] micro_batch_tokens" } else { "[sft] micro_batch_rows" };
    sft.extend(t.activations(sft_tokens, cfg.sft.recompute, sft_setting));
    let (rows, row) = micro_batch_rows(cfg.sft.micro_batching()?, cfg.sft.filter.max_tokens);
    sft.extend(t.attention_scores(rows, row, cfg.sft.recompute));
    sft.extend(cudnn_workspace(cfg, model, fused_attention, sft_tokens, cfg.sft.filter.max_tokens as u64));

    let mut notes = vec![
        format!("worst case: every episode at [episode] max_total_tokens = {longest}, every micro-batch full"),
        "repository snapshots and task files are not counted".to_string(),
    ];
    if cfg.model.device == DeviceKind::Cuda {
        notes.push(if fused_attention {
            format!("{}; memory linear in the sequence ([model] cuda_kernels)", crate::gpu_check::attention_line(true, false, cfg.model.placement().attention).replacen("attention on CUDA: ", "attention: ", 1))
        } else {
            let why = match cfg.model.cuda_kernels {
                crate::gpu_check::CudaKernels::Auto if kernels::cuda_kernels_in_env() == Some(false) => "\"auto\" with FUSEGRPO_CUDA_KERNELS=0",
                crate::gpu_check::CudaKernels::Auto => "\"auto\" and scripts/gpu-check has not passed for this build",
                _ => "\"off\"",
            };
            format!("attention: the quadratic reference, the CUDA kernels being off ([model] cuda_kernels = {why}); cuda_kernels = \"on\" runs the fused kernel")
        });
    }
    if on_vllm {
        notes.push(
            "rollouts on vLLM ([rollout] engine): its weights and KV cache are the server's, not counted here; on the same GPU, give vLLM the rest with --gpu-memory-utilization".to_string(),
        );
    }
    if ranks > 1 {
        let how = if shards > 1 { "optimizer state sharded ([optim] zero_stage = 1)" } else { "optimizer state replicated ([optim] zero_stage = 0)" };
        notes.push(format!("per rank of {ranks}: {} of {} tasks a step rolled out, {how}", cfg.train.tasks_per_step.div_ceil(ranks), cfg.train.tasks_per_step));
    }
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
    let mut parts = vec![
        kv,
        part("prefill", prefill * layer, format!("{prefill} tokens ([rollout] max_prefill_tokens) x one layer's {layer} B"), Some("[rollout] max_prefill_tokens")),
        part("decode_logits", rows * m.vocab_size as u64 * 4 * 2, format!("{rows} rows x {} vocabulary x f32, device + host", m.vocab_size), None),
    ];
    if !t.fused_attention {
        // The prefill's queries against keys of up to an episode each.
        let per = reference_score_bytes_inference(t.dtype);
        parts.push(part(
            "attention_scores",
            prefill * longest * m.num_attention_heads as u64 * per,
            format!("reference attention (CUDA kernels off): {prefill} prefill tokens x up to {longest} keys x {} heads x {per} B", m.num_attention_heads),
            Some(CUDA_KERNELS_SETTING),
        ));
    }
    parts
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

#[cfg(test)]
mod tests {
    use super::*;

    fn part(plan: &MemoryPlan, phase: PhaseKind, name: &str) -> u64 {
        plan.phases.iter().find(|p| p.kind == phase).and_then(|p| p.parts.iter().find(|x| x.name == name)).map_or(0, |x| x.bytes)
    }

    /// `off_policy = 1`: the update phase also holds the next step's
    /// rollouts (their KV cache) and the frozen copy they decode from.
    #[test]
    fn off_policy_plans_the_rollouts_inside_the_update() {
        let model = crate::plan::known::published("Qwen/Qwen3-4B").expect("known");
        let mut cfg: RunConfig = toml::from_str("name = \"t\"\n[model]\npath = \"m\"\ndtype = \"bf16\"\n[env]\nrepos_dir = \"r\"\n").unwrap();
        let on = for_run(&cfg, &model, 2, 1).unwrap();
        assert_eq!(part(&on, PhaseKind::GrpoUpdate, "frozen_rollout_weights"), 0);
        cfg.rollout.off_policy = 1;
        let off = for_run(&cfg, &model, 2, 1).unwrap();
        let n = ParamSizes::of(&model).count;
        assert_eq!(part(&off, PhaseKind::GrpoUpdate, "frozen_rollout_weights"), n * 2, "a bf16 copy of every weight");
        assert_eq!(part(&off, PhaseKind::GrpoUpdate, "kv_cache"), part(&off, PhaseKind::Rollout, "kv_cache"));
        assert!(off.peak_bytes() > on.peak_bytes());
    }

    #[test]
    fn zero1_plans_each_rank_with_its_shard_of_masters_and_moments() {
        let model = crate::plan::known::published("Qwen/Qwen3-4B").expect("known");
        let mut cfg: RunConfig = toml::from_str("name = \"t\"\n[model]\npath = \"m\"\ndtype = \"bf16\"\n[env]\nrepos_dir = \"r\"\n").unwrap();
        let n = ParamSizes::of(&model).count;
        let one = for_run(&cfg, &model, 2, 8).unwrap();
        assert_eq!(part(&one, PhaseKind::GrpoUpdate, "moments"), 2 * n * 4, "zero_stage 0 replicates the state on 8 ranks");
        cfg.optim.zero_stage = 1;
        let sharded = for_run(&cfg, &model, 2, 8).unwrap();
        let m = part(&sharded, PhaseKind::GrpoUpdate, "moments");
        // The largest shard: at least an eighth, and within one large tensor (the embedding) of it.
        let largest = ParamSizes::of(&model).largest;
        assert!(m >= 2 * 4 * n / 8 && m <= 2 * 4 * (n / 8 + largest), "moments {m} of {}", 2 * n * 4);
        assert_eq!(part(&sharded, PhaseKind::GrpoUpdate, "masters") * 2, m);
        assert_eq!(part(&sharded, PhaseKind::GrpoUpdate, "weights"), part(&one, PhaseKind::GrpoUpdate, "weights"), "weights stay whole");
        assert_eq!(part(&sharded, PhaseKind::GrpoUpdate, "grad_accumulator"), n * 4, "ZeRO-1 keeps the whole accumulator");
        // One rank: nothing to shard.
        let alone = for_run(&cfg, &model, 2, 1).unwrap();
        assert_eq!(part(&alone, PhaseKind::GrpoUpdate, "moments"), 2 * n * 4);
    }

    /// With rollouts on vLLM the rollout phase holds the training state
    /// only: no KV cache, prefill or logits of ours, and a note says why.
    #[test]
    fn rollouts_on_vllm_count_no_kv_cache_here() {
        let model = crate::plan::known::published("Qwen/Qwen3-4B").expect("known");
        let base = "name = \"t\"\n[model]\npath = \"m\"\ndtype = \"bf16\"\n[env]\nrepos_dir = \"r\"\n";
        let builtin: RunConfig = toml::from_str(base).unwrap();
        let vllm: RunConfig = toml::from_str(&format!("{base}[rollout]\nengine = \"vllm\"\n[rollout.vllm]\nurl = \"http://h:1\"\nserved_model = \"p\"\n")).unwrap();
        let (a, b) = (for_run(&builtin, &model, 2, 1).unwrap(), for_run(&vllm, &model, 2, 1).unwrap());
        assert!(part(&a, PhaseKind::Rollout, "kv_cache") > 0);
        for name in ["kv_cache", "prefill", "decode_logits"] {
            assert_eq!(part(&b, PhaseKind::Rollout, name), 0, "{name}");
        }
        assert_eq!(part(&b, PhaseKind::Rollout, "weights"), part(&a, PhaseKind::Rollout, "weights"));
        assert_eq!(part(&b, PhaseKind::GrpoUpdate, "moments"), part(&a, PhaseKind::GrpoUpdate, "moments"));
        assert!(b.notes.iter().any(|n| n.contains("--gpu-memory-utilization")), "{:?}", b.notes);
    }

    /// Qwen3-4B's widths with `layers` layers (tied), as `bench step
    /// --model qwen3-4b --layers L` builds them.
    fn qwen3_4b_layers(layers: usize) -> ModelConfig {
        ModelConfig::new_tiny(151_936, 2560, 9728, layers, 32, 8, 128, true)
    }

    /// The log-prob head of the build measured on the H200 (26c14ae), bf16,
    /// at `n` tokens: the op converted hidden and lm_head to f32 and kept
    /// both for its backward (4 B each), which held a 256 MiB f32 scratch,
    /// an f32 hidden-gradient accumulator (4 B), its `[N + V, d]` f32
    /// output (4 B) and the bf16 copies of both gradients (2 B): `14 N d +
    /// 10 V d` bytes and the scratch. The new head (cuBLAS) replaces it.
    fn measured_builds_head_bytes(n: u64) -> u64 {
        let (v, d) = (151_936u64, 2560u64);
        14 * n * d + 10 * v * d + (256 << 20)
    }

    /// The plan of `bench step --device cuda --dtype bf16 --recompute
    /// per-layer` (no optimizer) against the GPU peaks that nvidia-smi
    /// sampled on one H200, BENCHMARKS.md "On one H200" (2026-12-04), with
    /// the measured build's log-prob head in place of the new one (whose
    /// peak waits for a GPU): never below, at most 1.25x. Before the
    /// calibration the plan was 13-32% below.
    #[test]
    fn the_cuda_plan_bounds_the_peaks_measured_on_an_h200() {
        // (layers, tokens, measured peak MiB): "Memory planner vs the GPU's
        // peak" (4 x 16,384: 19,575; 4 x 8,192: 14,615) and the second
        // session's 36-layer micro-batch (39,767).
        for (layers, tokens, measured_mib) in [(4usize, 16_384u64, 19_575u64), (4, 8_192, 14_615), (36, 16_384, 39_767)] {
            let model = qwen3_4b_layers(layers);
            let t = Target { model: &model, dtype: DType::BF16, device: DeviceKind::Cuda, threads: 16, lora: None, fused_attention: true };
            let plan = for_bench_step(&t, 1, tokens as usize, Recompute::PerLayer);
            let new_head = part(&plan, PhaseKind::BenchStep, "logprob_workspace");
            // The head's f32 gradient of the hidden states, counted per token, is inside the old head's figure.
            let as_measured = plan.peak_bytes() - new_head - 4 * 2560 * tokens + measured_builds_head_bytes(tokens);
            let ratio = as_measured as f64 / (measured_mib << 20) as f64;
            assert!((1.0..=1.25).contains(&ratio), "{layers} layers x {tokens}: planned {} MiB for a measured {measured_mib} MiB ({ratio:.3}x)", as_measured >> 20);
        }
    }

    /// On CUDA the log-prob head holds one chunk of f32 logits (at most
    /// kernels::logprobs::CHUNK_LOGITS_BYTES), never `[N, V]`, whatever the
    /// CPU threads; lm_head's gradient and its f32 accumulator only when it
    /// trains.
    #[test]
    fn the_cuda_log_prob_head_is_one_chunk_of_logits() {
        let model = qwen3_4b_layers(4);
        let lora = lm::lora::LoraConfig { r: 16, alpha: 32.0, use_rslora: false, targets: [lm::lora::Target::QProj].into_iter().collect(), init_seed: 0, merge_for_rollouts: false };
        let (v, d) = (151_936u64, 2560u64);
        for tokens in [1_024u64, 16_384, 65_536] {
            let head = |threads, lora| {
                let t = Target { model: &model, dtype: DType::BF16, device: DeviceKind::Cuda, threads, lora, fused_attention: true };
                part(&for_bench_step(&t, 1, tokens as usize, Recompute::PerLayer), PhaseKind::BenchStep, "logprob_workspace")
            };
            let chunk = 440 * v * 4;
            assert!(chunk <= kernels::logprobs::CHUNK_LOGITS_BYTES as u64);
            assert_eq!(head(2, None), chunk + v * d * (4 + 2), "{tokens} tokens, full fine-tuning");
            assert_eq!(head(16, None), head(2, None), "the CPU threads do not count on CUDA");
            assert_eq!(head(2, Some(&lora)), chunk, "{tokens} tokens, LoRA (lm_head frozen)");
        }
    }

    #[test]
    fn the_reference_attention_is_counted_when_the_cuda_kernels_are_off() {
        let model = crate::plan::known::published("Qwen/Qwen3-4B").expect("known");
        let text = "name = \"t\"\n[model]\npath = \"m\"\ndtype = \"bf16\"\ndevice = \"cuda\"\n[env]\nrepos_dir = \"r\"\n[episode]\nmax_total_tokens = 16384\n[train]\nmicro_batch_rows = 1\nrecompute = \"per_layer\"\n";
        let mut cfg: RunConfig = toml::from_str(text).unwrap();
        cfg.model.cuda_kernels = crate::gpu_check::CudaKernels::Off;
        let off = for_run(&cfg, &model, 2, 1).unwrap();
        // One layer's (recompute per layer) scores of one 16K row: 32 heads x 16384^2 x 34 B (bf16).
        assert_eq!(part(&off, PhaseKind::GrpoUpdate, "attention_scores"), 32 * 16384 * 16384 * 34);
        assert!(part(&off, PhaseKind::Rollout, "attention_scores") > 0, "the prefill's scores too");
        let e = off.check(141_000_000_000, "the test").unwrap_err().to_string();
        assert!(e.contains("set [model] cuda_kernels = \"on\""), "{e}");
        cfg.model.cuda_kernels = crate::gpu_check::CudaKernels::On;
        let on = for_run(&cfg, &model, 2, 1).unwrap();
        assert_eq!(part(&on, PhaseKind::GrpoUpdate, "attention_scores"), 0);
        // The note names the attention that runs (this test build has no cuDNN attention).
        let note = on.notes.iter().find(|n| n.starts_with("attention:")).expect("an attention note");
        assert!(note.contains("the fused kernel (this build has no cuDNN attention: cargo build --features cuda,cudnn)") && note.contains("memory linear"), "{note}");
        // On the CPU the fused kernel always runs.
        cfg.model.device = DeviceKind::Cpu;
        cfg.model.cuda_kernels = crate::gpu_check::CudaKernels::Off;
        assert_eq!(part(&for_run(&cfg, &model, 2, 1).unwrap(), PhaseKind::GrpoUpdate, "attention_scores"), 0);
    }

    /// `[model] attention` is a setting (issue 61): read by name, carried
    /// in the placement the models are loaded with, in the config's
    /// serialization (its hash), and printed by the plan from the same line
    /// `kernels status` prints.
    #[test]
    fn the_attention_backend_is_a_model_setting() {
        use kernels::attention::Backend;
        let base = "name = \"t\"\n[model]\npath = \"m\"\ndtype = \"bf16\"\ndevice = \"cuda\"\ncuda_kernels = \"on\"\n";
        let default: RunConfig = toml::from_str(&format!("{base}[env]\nrepos_dir = \"r\"\n")).unwrap();
        assert_eq!(default.model.placement().attention, kernels::attention::Settings::default());
        let cfg: RunConfig = toml::from_str(&format!("{base}attention = \"kernel\"\nattention_deterministic = false\n[env]\nrepos_dir = \"r\"\n")).unwrap();
        let settings = cfg.model.placement().attention;
        assert_eq!((settings.backend, settings.deterministic), (Backend::Kernel, false));
        let (a, b) = (serde_json::to_value(&default).unwrap(), serde_json::to_value(&cfg).unwrap());
        assert_eq!(b["model"]["attention"], "kernel");
        assert!(a["model"].get("attention").is_none(), "auto is left out, so older runs keep their hash");
        assert_ne!(crate::checkpoint::config_hash(&a), crate::checkpoint::config_hash(&b));
        let e = toml::from_str::<RunConfig>(&format!("{base}attention = \"flash\"\n[env]\nrepos_dir = \"r\"\n")).unwrap_err().to_string();
        assert!(e.contains("flash") && e.contains("cudnn"), "{e}");
        let model = crate::plan::known::published("Qwen/Qwen3-4B").expect("known");
        let plan = for_run(&cfg, &model, 2, 1).unwrap();
        let note = plan.notes.iter().find(|n| n.starts_with("attention:")).expect("an attention note");
        assert!(note.contains("[model] attention = \"kernel\""), "{note}");
        assert_eq!(note.replacen("attention: ", "attention on CUDA: ", 1), format!("{}; memory linear in the sequence ([model] cuda_kernels)", crate::gpu_check::attention_line(true, false, settings)));
    }

    /// Issue 61 (B4): cuDNN attention's backward workspace is a named line
    /// of the updates wherever cuDNN may run, sized by `[model]
    /// attention_workspace_mib`; none with `attention = "kernel"`, on the
    /// CPU, or with the kernels off; a forced `cudnn` with the deterministic
    /// backward counts cuDNN < 9.25's quadratic dP workspace.
    #[test]
    fn the_cudnn_workspace_is_counted_where_cudnn_may_run() {
        let model = crate::plan::known::published("Qwen/Qwen3-4B").expect("known");
        let base = "name = \"t\"\n[model]\npath = \"m\"\ndtype = \"bf16\"\ndevice = \"cuda\"\ncuda_kernels = \"on\"\n";
        let tail = "[env]\nrepos_dir = \"r\"\n[episode]\nmax_total_tokens = 16384\n[train]\nmicro_batch_tokens = 65536\n";
        let plan = |extra: &str| for_run(&toml::from_str::<RunConfig>(&format!("{base}{extra}{tail}")).unwrap(), &model, 2, 1).unwrap();
        let auto = plan("");
        assert_eq!(part(&auto, PhaseKind::GrpoUpdate, "cudnn_workspace"), 4 << 30, "the default budget");
        assert_eq!(part(&auto, PhaseKind::SftUpdate, "cudnn_workspace"), 4 << 30);
        assert_eq!(part(&auto, PhaseKind::Rollout, "cudnn_workspace"), 0, "no backward in the rollout");
        let small = plan("attention_workspace_mib = 1024\n");
        assert_eq!(part(&small, PhaseKind::GrpoUpdate, "cudnn_workspace"), 1 << 30);
        assert_eq!(auto.peak_bytes() - small.peak_bytes(), 3 << 30, "the update is the peak here");
        assert_eq!(part(&plan("attention = \"kernel\"\n"), PhaseKind::GrpoUpdate, "cudnn_workspace"), 0);
        // Forced cuDNN with the deterministic backward: 4 sequences of 16K x 32 heads x 16384^2 x 2 B.
        assert_eq!(part(&plan("attention = \"cudnn\"\n"), PhaseKind::GrpoUpdate, "cudnn_workspace"), 4 * 32 * 16384 * 16384 * 2);
        assert_eq!(part(&plan("attention = \"cudnn\"\nattention_deterministic = false\n"), PhaseKind::GrpoUpdate, "cudnn_workspace"), 4 << 30);
        assert_eq!(part(&plan("attention_workspace_mib = 1024\n"), PhaseKind::GrpoUpdate, "cudnn_workspace"), 1 << 30);
        let off = for_run(&toml::from_str::<RunConfig>(&format!("{}{tail}", base.replace("\"on\"", "\"off\""))).unwrap(), &model, 2, 1).unwrap();
        assert_eq!(part(&off, PhaseKind::GrpoUpdate, "cudnn_workspace"), 0, "the reference attention runs");
        // The setting is carried to the kernels and left out of the config at its default (older runs keep their hash).
        let cfg: RunConfig = toml::from_str(&format!("{base}attention_workspace_mib = 1024\n{tail}")).unwrap();
        assert_eq!(cfg.model.placement().attention.workspace_budget, 1 << 30);
        let default: RunConfig = toml::from_str(&format!("{base}{tail}")).unwrap();
        assert!(serde_json::to_value(&default).unwrap()["model"].get("attention_workspace_mib").is_none());
        assert_eq!(serde_json::to_value(&cfg).unwrap()["model"]["attention_workspace_mib"], 1024);
    }
}
