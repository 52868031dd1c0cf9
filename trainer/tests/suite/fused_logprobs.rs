//! The training path's log-probs use the fused kernel; a GRPO loss and the
//! gradients of every parameter through it equal those through the unfused
//! composition (full logits, log-softmax, gather).

use crate::common;

use candle_core::{DType, Device, Tensor};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use trainer::backward::{hidden_logprobs, EntropyMetric};
use trainer::grpo::{Aggregate, BatchTotals, ClipRange, GrpoLossConfig, LossAggregation, LossInputs};
use lm::logprobs::token_logprobs_unfused;
use lm::model::cache::Positions;
use lm::CausalLm;

const ROWS: usize = 3;
const COLS: usize = 11;
const TEMPERATURE: f64 = 0.7;
/// Relative tolerance of the loss.
const LOSS_REL: f64 = 1e-5;
/// The loss magnitude below which the tolerance stops shrinking: the loss
/// (~0.016 here) is a small mean of per-token terms built from log-probs
/// near -7, whose f32 rounding is ~5e-7 each, so two exact implementations
/// differ by ~1e-7 (1e-5 of 0.016 sat right at that floor; a float-order
/// change in the attention's exp moved the difference from 8e-8 to 1.7e-7).
const LOSS_FLOOR: f64 = 0.1;
/// Tolerance of each parameter's gradient, relative to its largest entry.
const GRAD_REL: f64 = 1e-4;

/// Unfused log-probs `[b, t]` laid out as `hidden_logprobs` lays them out.
fn unfused_logprobs(model: &CausalLm, hidden: &Tensor, tokens: &Tensor) -> Tensor {
    let (b, t) = tokens.dims2().unwrap();
    let h = hidden.narrow(1, 0, t - 1).unwrap().reshape((b * (t - 1), ())).unwrap();
    let targets = tokens.narrow(1, 1, t - 1).unwrap().flatten_all().unwrap();
    let lp = token_logprobs_unfused(model, &h, &targets, TEMPERATURE).unwrap();
    lp.reshape((b, t - 1)).unwrap().pad_with_zeros(1, 1, 0).unwrap()
}

/// The GRPO loss of `logp` with fixed old/ref log-probs, advantages and mask.
fn grpo_loss(logp: &Tensor, old: &Tensor, reference: &Tensor, mask: &Tensor) -> Tensor {
    let adv = Tensor::new(&[0.9f32, -1.2, 0.5], &Device::Cpu).unwrap();
    let clip = ClipRange { low: 0.2, high: 0.28 };
    let cfg = GrpoLossConfig::new(LossAggregation::Dapo, clip, 0.04, 16);
    let totals = BatchTotals::of_mask(mask).unwrap();
    let x = LossInputs { logp, old: Some(old), reference: Some(reference), rollout: None, advantages: &adv, mask, entropy: None, sequences: None };
    trainer::grpo::grpo_loss(x, Aggregate::rows(&cfg, totals), &cfg).unwrap().loss
}

fn max_abs(t: &Tensor) -> f64 {
    t.abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap() as f64
}

#[test]
fn grpo_loss_and_gradients_match_the_unfused_path() {
    for case in common::CASES {
        let (c, w) = common::load(case);
        let (model, params) = CausalLm::trainable(&c, &w).unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let ids: Vec<u32> = (0..ROWS * COLS).map(|_| rng.random_range(0..c.vocab_size as u32)).collect();
        let tokens = Tensor::from_vec(ids, (ROWS, COLS), &Device::Cpu).unwrap();
        let mask: Vec<f32> = (0..ROWS * COLS).map(|i| if i % COLS < 2 || i % 7 == 3 { 0.0 } else { 1.0 }).collect();
        let mask = Tensor::from_vec(mask, (ROWS, COLS), &Device::Cpu).unwrap();
        let noise = |rng: &mut ChaCha8Rng| -> Tensor {
            let v: Vec<f32> = (0..ROWS * COLS).map(|_| rng.random_range(-0.4f32..0.4)).collect();
            Tensor::from_vec(v, (ROWS, COLS), &Device::Cpu).unwrap()
        };

        let hidden = model.forward(&tokens, &Positions::sequential(ROWS, COLS), None).unwrap();
        let (fused, _) = hidden_logprobs(&model, &hidden, &tokens, TEMPERATURE, EntropyMetric::Skip).unwrap();
        let unfused = unfused_logprobs(&model, &hidden, &tokens);
        let old = (unfused.detach() + noise(&mut rng)).unwrap();
        let reference = (unfused.detach() + noise(&mut rng)).unwrap();

        let loss_f = grpo_loss(&fused, &old, &reference, &mask);
        let loss_u = grpo_loss(&unfused, &old, &reference, &mask);
        let (lf, lu) = (loss_f.to_scalar::<f32>().unwrap() as f64, loss_u.to_scalar::<f32>().unwrap() as f64);
        println!("{case}: loss fused {lf:.8} unfused {lu:.8} (|diff| {:.3e})", (lf - lu).abs());
        assert!((lf - lu).abs() <= LOSS_REL * lu.abs().max(LOSS_FLOOR), "{case}: loss {lf} vs {lu}");

        let gf = loss_f.backward().unwrap();
        let gu = loss_u.backward().unwrap();
        let mut worst = 0f64;
        for (name, var) in &params {
            let a = gf.get(var.as_tensor()).unwrap_or_else(|| panic!("{case}: fused path gives no gradient to {name}"));
            let b = gu.get(var.as_tensor()).unwrap_or_else(|| panic!("{case}: unfused path gives no gradient to {name}"));
            let rel = max_abs(&(a.to_dtype(DType::F32).unwrap() - b).unwrap()) / max_abs(b).max(1e-12);
            worst = worst.max(rel);
            assert!(rel <= GRAD_REL, "{case} {name}: gradient max rel diff {rel:.3e}");
        }
        println!("{case}: {} parameters, gradients max rel diff {worst:.3e} (tolerance {GRAD_REL:e})", params.len());
    }
}
