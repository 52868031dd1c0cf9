//! Activation recomputation per decoder layer: the gradients with
//! `Recompute::PerLayer` equal those with `Recompute::Off` for every
//! parameter of both tiny fixtures (tied and untied embeddings), for a GRPO
//! loss with clipping active, stored old log-probs and beta > 0, with one and
//! with several micro-batches.

use trainer::packing::MicroBatching;
use crate::common;

use candle_core::{Device, Tensor, Var};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use trainer::backward::{detached_logprobs, EntropyMetric};
use trainer::grpo::{
    accumulate_gradients, ClipRange, GrpoBatch, GrpoLossConfig, LossAggregation, OldLogprobs, RolloutCorrection,
};
use lm::model::recompute::Recompute;
use lm::model::cache::Positions;
use trainer::optim::Gradients;
use trainer::run_config::TrainSection;
use lm::weights::TensorMap;
use lm::{CausalLm, ModelConfig};

const ROWS: usize = 4;
const COLS: usize = 13;
const TOLERANCE: f64 = 1e-5;

fn cfg(aggregation: LossAggregation, recompute: Recompute) -> GrpoLossConfig {
    GrpoLossConfig {
        clip: ClipRange { low: 0.2, high: 0.28 },
        beta: 0.04,
        temperature: 0.8,
        aggregation,
        max_completion_length: 16,
        entropy: EntropyMetric::Compute,
        recompute,
        rollout_correction: RolloutCorrection::None,
        tis_cap: 3.0,
        importance_sampling: trainer::grpo::ImportanceSampling::Token,
        skip_zero_advantage: true,
        fold_linear_loss: true,
    }
}

fn reference(c: &ModelConfig, w: &TensorMap) -> (CausalLm, BTreeMap<String, Var>) {
    let scaled: TensorMap = w.iter().map(|(n, t)| (n.clone(), (t * 0.97).unwrap())).collect();
    CausalLm::trainable(c, &scaled).unwrap()
}

/// Right-padded rows with prompt, masked tool span and padding; stored old
/// log-probs shifted by up to +-0.4 so the ratio is clipped on both sides.
fn batch(model: &CausalLm, reference: &CausalLm, vocab: usize) -> GrpoBatch {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let lens = [13, 8, 11, 5];
    let mut tokens = vec![0u32; ROWS * COLS];
    let mut mask = vec![0f32; ROWS * COLS];
    for (r, &len) in lens.iter().enumerate() {
        for j in 0..len {
            tokens[r * COLS + j] = rng.random_range(0..vocab as u32);
            let masked = j < 2 || ((5..7).contains(&j) && len > 8);
            mask[r * COLS + j] = if masked { 0.0 } else { 1.0 };
        }
    }
    let dev = Device::Cpu;
    let tokens = Tensor::from_vec(tokens, (ROWS, COLS), &dev).unwrap();
    let mask = Tensor::from_vec(mask, (ROWS, COLS), &dev).unwrap();
    let advantages = Tensor::new(&[0.9f32, -1.2, 0.5, -0.3], &dev).unwrap();
    let current = detached_logprobs(model, &tokens, &mask, 0.8, MicroBatching::Rows(ROWS)).unwrap();
    let noise: Vec<f32> = (0..ROWS * COLS).map(|_| rng.random_range(-0.4f32..0.4)).collect();
    let old = (current + Tensor::from_vec(noise, (ROWS, COLS), &dev).unwrap()).unwrap();
    let ref_logprobs = Some(detached_logprobs(reference, &tokens, &mask, 0.8, MicroBatching::Rows(ROWS)).unwrap());
    GrpoBatch { tokens, mask, advantages, old_logprobs: OldLogprobs::Stored(old), ref_logprobs, rollout_logprobs: None }
}

fn max_abs(t: &Tensor) -> f64 {
    t.abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap() as f64
}

/// Per parameter `max|a - b| / max|b|`; returns the worst and its name.
/// Both must hold exactly the same parameters.
fn worst_rel_diff(on: &Gradients, off: &Gradients) -> (f64, String) {
    let names = |g: &Gradients| g.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    assert_eq!(names(on), names(off), "the same parameters get gradients");
    let mut worst = (0f64, String::new());
    for (name, a) in on.iter() {
        let b = off.get(name).unwrap();
        assert_eq!(a.dims(), b.dims(), "{name}");
        let scale = max_abs(b);
        assert!(scale > 0.0, "{name}: zero gradient with recomputation off");
        let d = max_abs(&(a - b).unwrap()) / scale;
        if d > worst.0 {
            worst = (d, name.clone());
        }
    }
    worst
}

#[test]
fn per_layer_recomputation_gives_the_same_gradients_for_every_parameter() {
    for case in common::CASES {
        let (c, w) = common::load(case);
        let (model, params) = CausalLm::trainable(&c, &w).unwrap();
        let (ref_model, _) = reference(&c, &w);
        let b = batch(&model, &ref_model, c.vocab_size);
        for agg in [LossAggregation::Grpo, LossAggregation::Dapo] {
            for micro in [MicroBatching::Rows(ROWS), MicroBatching::Rows(3), MicroBatching::Rows(1), MicroBatching::Tokens(20), MicroBatching::Tokens(1000)] {
                let (off, m_off) =
                    accumulate_gradients(&model, &params, &b, &cfg(agg, Recompute::Off), micro).unwrap();
                let (on, m_on) =
                    accumulate_gradients(&model, &params, &b, &cfg(agg, Recompute::PerLayer), micro)
                        .unwrap();
                assert_eq!(off.len(), params.len(), "every parameter gets a gradient");
                assert!(m_off.kl.unwrap() > 0.0, "beta > 0 with a nonzero KL");
                assert!(m_off.clip_ratio_low_mean > 0.0 && m_off.clip_ratio_high_mean > 0.0, "{m_off:?}");
                let (d, name) = worst_rel_diff(&on, &off);
                println!(
                    "{case} {agg:?} micro={micro:?}: {} parameters, max rel diff on vs off = {d:.3e} ({name}); loss {} vs {}",
                    params.len(),
                    m_on.loss,
                    m_off.loss
                );
                assert!(d <= TOLERANCE, "{case} {agg:?} micro={micro:?}: {d:.3e} on {name}");
                assert!((m_on.loss - m_off.loss).abs() <= 1e-6 * m_off.loss.abs().max(1.0));
            }
        }
    }
}

#[test]
fn layer_inputs_rebuild_the_forward_hidden_states() {
    for case in common::CASES {
        let (c, w) = common::load(case);
        let (model, _) = CausalLm::trainable(&c, &w).unwrap();
        let ids: Vec<u32> = (0..2 * 9).map(|i| (i * 37 % c.vocab_size) as u32).collect();
        let tokens = Tensor::from_vec(ids, (2, 9), &Device::Cpu).unwrap();
        let pos = Positions::sequential(2, 9);
        let full = model.forward(&tokens, &pos, None).unwrap();
        let saved = model.forward_layer_inputs(&tokens, &pos).unwrap();
        let rebuilt = model.final_norm(saved.top().as_tensor()).unwrap();
        let d = max_abs(&(full - rebuilt).unwrap());
        println!("{case}: max |forward - final_norm(top)| = {d:.3e}");
        assert!(d == 0.0, "{case}: {d}");
        let wrong = Tensor::zeros((2, 8, c.hidden_size), candle_core::DType::F32, &Device::Cpu).unwrap();
        let err = model.backward_layers(saved, &wrong, |_| Ok(())).unwrap_err();
        assert!(err.to_string().contains("gradient is [2, 8"), "{err}");
    }
}

#[test]
fn train_section_reads_recompute() {
    let t: TrainSection = toml::from_str("recompute = \"per_layer\"").unwrap();
    assert_eq!(t.recompute, Recompute::PerLayer);
    let t: TrainSection = toml::from_str("").unwrap();
    assert_eq!(t.recompute, Recompute::Off);
    let err = toml::from_str::<TrainSection>("recompute = \"always\"").unwrap_err();
    assert!(err.to_string().contains("per_layer"), "{err}");
    // off is left out of the serialized config (and so of its hash)
    assert!(!serde_json::to_string(&TrainSection::default()).unwrap().contains("recompute"));
}
