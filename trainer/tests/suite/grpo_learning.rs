//! A learning check: GRPO with a simple verifiable reward (the share of
//! generated tokens that fall in a target set) on a tiny random model. The
//! mean reward must rise clearly within a few dozen steps.

use trainer::packing::MicroBatching;
use candle_core::{DType, Device, Tensor};
use rand::{Rng, SeedableRng};
use lm::generate::{generate, GenerateConfig};
use trainer::grpo::advantages::TRL_ADVANTAGE_EPS;
use trainer::backward::EntropyMetric;
use trainer::grpo::{accumulate_gradients, group_advantages, AdvantageScaling, ClipRange, GrpoBatch, GrpoLossConfig, LossAggregation, OldLogprobs, ZeroStdGroups};
use trainer::optim::{AdamW, AdamWConfig};
use lm::sampling::SamplerConfig;
use lm::weights::TensorMap;
use lm::{CausalLm, ModelConfig};

const VOCAB: usize = 64;
const TARGET: u32 = 8; // tokens 0..8 are rewarded: 1/8 of a uniform vocabulary
const PROMPTS: usize = 4;
const GROUP: usize = 8;
const NEW: usize = 6;
const STEPS: usize = 30;

#[test]
fn mean_reward_rises_with_grpo() {
    let cfg = ModelConfig::new_tiny(VOCAB, 32, 64, 2, 4, 2, 8, true);
    let weights = lm::init::random_weights(&cfg, 0, DType::F32, &Device::Cpu).unwrap();
    let (model, vars) = CausalLm::trainable(&cfg, &weights).unwrap();
    let view: TensorMap = vars.iter().map(|(k, v)| (k.clone(), v.as_tensor().detach())).collect();
    let sampler_model = CausalLm::new(&cfg, &view).unwrap();
    let mut opt = AdamW::new(&vars, AdamWConfig { weight_decay: 0.0, ..Default::default() }).unwrap();
    let loss_cfg = GrpoLossConfig {
        clip: ClipRange { low: 0.2, high: 0.2 },
        beta: 0.0,
        temperature: 1.0,
        aggregation: LossAggregation::Dapo,
        max_completion_length: NEW,
        entropy: EntropyMetric::Skip,
        ..grpo_defaults()
    };
    let gen_cfg = GenerateConfig { max_new_tokens: NEW, sampler: SamplerConfig { temperature: 1.0, top_p: 1.0, top_k: 0 }, stop_tokens: vec![] };
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(42);
    let mut curve = Vec::new();
    for _ in 0..STEPS {
        let prompts: Vec<Vec<u32>> = (0..PROMPTS)
            .flat_map(|_| {
                let p: Vec<u32> = (0..5).map(|_| rng.random_range(TARGET..VOCAB as u32)).collect();
                std::iter::repeat_n(p, GROUP)
            })
            .collect();
        let gens = generate(&sampler_model, &prompts, &gen_cfg, &mut rng).unwrap();
        let rewards: Vec<f64> = gens.iter().map(|g| g.ids.iter().filter(|&&t| t < TARGET).count() as f64 / NEW as f64).collect();
        curve.push(rewards.iter().sum::<f64>() / rewards.len() as f64);
        let adv = group_advantages(&rewards, GROUP, AdvantageScaling::Group, TRL_ADVANTAGE_EPS, ZeroStdGroups::Keep).unwrap();
        let width = 5 + NEW;
        let tokens: Vec<u32> = prompts.iter().zip(&gens).flat_map(|(p, g)| p.iter().chain(&g.ids).copied().collect::<Vec<_>>()).collect();
        let mask: Vec<f32> = (0..prompts.len()).flat_map(|_| (0..width).map(|j| if j >= 5 { 1.0 } else { 0.0 })).collect();
        let batch = GrpoBatch {
            tokens: Tensor::from_vec(tokens, (prompts.len(), width), &Device::Cpu).unwrap(),
            mask: Tensor::from_vec(mask, (prompts.len(), width), &Device::Cpu).unwrap(),
            advantages: Tensor::from_vec(adv.values.clone(), prompts.len(), &Device::Cpu).unwrap(),
            old_logprobs: OldLogprobs::Current,
            ref_logprobs: None,
            rollout_logprobs: None,
        };
        let (mut grads, _) = accumulate_gradients(&model, &vars, &batch, &loss_cfg, MicroBatching::Rows(16)).unwrap();
        grads.clip_global_norm(1.0).unwrap();
        opt.step(&vars, &grads, 1e-2).unwrap();
    }
    let first = curve[..5].iter().sum::<f64>() / 5.0;
    let last = curve[STEPS - 5..].iter().sum::<f64>() / 5.0;
    println!("mean reward: first 5 steps {first:.3}, last 5 steps {last:.3}; curve {:?}", curve.iter().map(|r| (r * 1000.0).round() / 1000.0).collect::<Vec<_>>());
    assert!(first < 0.25, "starts near chance (1/8): {first}");
    assert!(last > 2.0 * first && last > 0.4, "reward did not rise: {first} -> {last}");
}

/// Fields added to the loss config later keep their defaults here.
fn grpo_defaults() -> GrpoLossConfig {
    serde_json::from_value(serde_json::json!({
        "clip": {"low": 0.2, "high": 0.2}, "beta": 0.0, "temperature": 1.0, "aggregation": "dapo",
        "max_completion_length": 1, "entropy": "skip"
    }))
    .unwrap()
}
