//! LoRA as the trainer sets it up: `[lora]`'s section makes a new adapter
//! (PEFT's initialization, bad keys named) and the memory plan counts the
//! adapter, not the full optimizer state (the adapter against PEFT itself:
//! lm's tests/suite/lora.rs).

use crate::common::load;

use candle_core::Device;
use std::path::PathBuf;
use lm::logprobs::score_sequence;
use lm::lora::{Adapter, Target};
use trainer::run_config::LoraSection;
use lm::CausalLm;

fn max_abs(t: &candle_core::Tensor) -> f32 {
    t.abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap()
}

#[test]
fn a_new_adapter_starts_as_the_base_model_with_peft_initialization() {
    let (cfg, w) = load("untied");
    let section: LoraSection = toml::from_str("r = 4\nalpha = 8\ntarget_modules = [\"q_proj\", \"down_proj\"]\ninit_seed = 3").unwrap();
    section.validate().unwrap();
    let lora = section.config();
    let adapter = Adapter::init(&lora, &cfg, &Device::Cpu).unwrap();
    assert_eq!(adapter.tensors.len(), 2 * 2 * cfg.num_hidden_layers);
    let a = &adapter.tensors[&lm::lora::tensor_name(0, Target::DownProj, "lora_A")];
    let bound = 1.0 / (cfg.intermediate_size as f32).sqrt();
    assert_eq!(a.dims(), &[4, cfg.intermediate_size]);
    let amax = max_abs(a);
    assert!(amax <= bound && amax > 0.9 * bound, "Kaiming-uniform bound 1/sqrt(in): {amax} vs {bound}");
    let base = CausalLm::new(&cfg, &w).unwrap();
    let ids: Vec<u32> = (1..40).collect();
    assert_eq!(score_sequence(&base, &ids).unwrap(), score_sequence(&base.with_adapter(&adapter).unwrap(), &ids).unwrap(), "B = 0: the base's log-probs");
    // Keys that cannot work are named.
    for (text, key) in [("r = 0", "r"), ("r = 4\ndropout = 0.1", "dropout"), ("r = 4\ntarget_modules = []", "target_modules")] {
        let s: LoraSection = toml::from_str(text).unwrap();
        assert_eq!(s.validate().unwrap_err().0, key, "{text}");
    }
    // A module name these models lack is refused where it is read, listing theirs.
    let e = toml::from_str::<LoraSection>("r = 4\ntarget_modules = [\"q_proj\", \"c_attn\"]").unwrap_err().to_string();
    assert!(e.contains("`c_attn` is not a projection these models have; supported: q_proj, k_proj"), "{e}");
}


#[test]
fn the_memory_plan_counts_the_adapter_not_the_full_optimizer_state() {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let text = std::fs::read_to_string(repo.join("configs/qwen3-4b-fusesearch.toml")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (full_path, lora_path) = (dir.path().join("full.toml"), dir.path().join("lora.toml"));
    std::fs::write(&full_path, &text).unwrap();
    std::fs::write(&lora_path, format!("{text}\n[lora]\nr = 64\nalpha = 128\n")).unwrap();
    let model = trainer::plan::known::published("Qwen/Qwen3-4B").unwrap();
    // The fused attention (the kernels on): its memory is linear in the tokens.
    let plan = |p: &std::path::Path| {
        let mut cfg = trainer::run_config::RunConfig::from_file(p).unwrap();
        cfg.model.cuda_kernels = trainer::gpu_check::CudaKernels::On;
        trainer::plan::phases::for_run(&cfg, &model, 2, 1).unwrap()
    };
    let (full, lora) = (plan(&full_path), plan(&lora_path));
    let part = |plan: &trainer::plan::MemoryPlan, phase: usize, name: &str| plan.phases[phase].parts.iter().find(|p| p.name == name).map(|p| p.bytes);
    // r = 64 on the seven projections of 36 layers: r x (in + out) each.
    let per_layer = 64 * ((4096 + 2560) + 2 * (1024 + 2560) + (2560 + 4096) + 2 * (9728 + 2560) + (2560 + 9728));
    let adapter = (36 * per_layer * 4) as u64;
    assert_eq!(part(&lora, 1, "adapter"), Some(adapter));
    assert_eq!(part(&lora, 1, "moments"), Some(2 * adapter));
    assert_eq!(part(&lora, 1, "grad_accumulator"), Some(adapter));
    assert_eq!(part(&lora, 1, "masters"), None, "the frozen base has no f32 masters");
    assert_eq!(part(&lora, 1, "reference"), None, "the KL reference is the base itself");
    assert!(part(&full, 1, "moments").unwrap() > 25 * part(&lora, 1, "moments").unwrap());
    // What a limit holds: the activations' tokens grow until the phase fills it.
    let limit = 24u64 << 30;
    let (kind, setting, tokens) = lora.fit(limit)[1];
    assert_eq!((kind.name(), setting), ("grpo_update", "[train] micro_batch_tokens"));
    let act = part(&lora, 1, "activations").unwrap();
    let per_token = act as f64 / 65536.0;
    let rest = lora.phases[1].total() - act;
    assert!(rest as f64 + tokens as f64 * per_token <= limit as f64 && rest as f64 + (tokens + 1) as f64 * per_token > limit as f64);
    println!("Qwen3-4B, r = 64 on all seven projections: adapter {} MiB; in 24 GiB the update holds {tokens} tokens per micro-batch", adapter >> 20);
}
