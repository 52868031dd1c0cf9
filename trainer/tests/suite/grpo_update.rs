//! GRPO on the tiny fixture models: micro-batched gradient accumulation gives
//! the one-big-batch gradients for every aggregation, one update lowers the
//! loss on its batch, and the reference model never receives a gradient.

use trainer::packing::MicroBatching;
use crate::common;

use candle_core::{DType, Device, Tensor, Var};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use trainer::backward::{detached_logprobs, hidden_logprobs, hidden_weighted_logprobs, EntropyMetric};
use trainer::grpo::{accumulate_gradients, ClipRange, GrpoBatch, GrpoLossConfig, ImportanceSampling, LossAggregation, OldLogprobs, RolloutCorrection};
use lm::model::recompute::Recompute;
use trainer::optim::{AdamW, AdamWConfig, Gradients, WeightDecayScope};
use lm::weights::TensorMap;
use lm::{CausalLm, ModelConfig};

const ROWS: usize = 5;
const COLS: usize = 14;

fn cfg(aggregation: LossAggregation, beta: f64) -> GrpoLossConfig {
    GrpoLossConfig {
        clip: ClipRange {
            low: 0.2,
            high: 0.28,
        },
        beta,
        temperature: 0.7,
        aggregation,
        max_completion_length: 16,
        entropy: EntropyMetric::Compute,
        recompute: Recompute::Off,
        rollout_correction: RolloutCorrection::None,
        tis_cap: 3.0,
        importance_sampling: ImportanceSampling::Token,
        skip_zero_advantage: true,
        fold_linear_loss: true,
    }
}

/// A reference model: the fixture weights scaled by 1.03 (so the KL has a
/// nonzero gradient), built from `Var`s so a stray gradient would show.
fn reference(c: &ModelConfig, w: &TensorMap) -> (CausalLm, BTreeMap<String, Var>) {
    let scaled: TensorMap = w
        .iter()
        .map(|(n, t)| (n.clone(), (t * 1.03).unwrap()))
        .collect();
    CausalLm::trainable(c, &scaled).unwrap()
}

/// Right-padded rows of different lengths; the mask has prompt tokens, a
/// masked "tool response" span and padding at 0.
fn batch(model: &CausalLm, reference: &CausalLm, vocab: usize, seed: u64, temperature: f64) -> GrpoBatch {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let lens = [14, 9, 12, 6, 11];
    let mut tokens = vec![0u32; ROWS * COLS];
    let mut mask = vec![0f32; ROWS * COLS];
    for (r, &len) in lens.iter().enumerate() {
        for j in 0..len {
            tokens[r * COLS + j] = rng.random_range(0..vocab as u32);
            let prompt = j < 3;
            let tool = (6..8).contains(&j) && len > 9;
            mask[r * COLS + j] = if prompt || tool { 0.0 } else { 1.0 };
        }
    }
    let dev = Device::Cpu;
    let tokens = Tensor::from_vec(tokens, (ROWS, COLS), &dev).unwrap();
    let mask = Tensor::from_vec(mask, (ROWS, COLS), &dev).unwrap();
    let advantages = Tensor::new(&[1.1f32, -0.7, 0.4, -1.3, 0.9], &dev).unwrap();
    // stored old log-probs = current ones shifted by up to +-0.45, so the ratio
    // is clipped on both sides
    let current = detached_logprobs(model, &tokens, &mask, temperature, MicroBatching::Rows(2)).unwrap();
    let noise: Vec<f32> = (0..ROWS * COLS)
        .map(|_| rng.random_range(-0.45f32..0.45))
        .collect();
    let old = (current + Tensor::from_vec(noise, (ROWS, COLS), &dev).unwrap()).unwrap();
    let ref_logprobs = Some(detached_logprobs(reference, &tokens, &mask, temperature, MicroBatching::Rows(3)).unwrap());
    GrpoBatch {
        tokens,
        mask,
        advantages,
        old_logprobs: OldLogprobs::Stored(old),
        ref_logprobs,
        rollout_logprobs: None,
    }
}

fn max_rel_diff(a: &Gradients, b: &Gradients) -> f64 {
    assert_eq!(a.len(), b.len());
    let mut worst = 0f64;
    for (name, ga) in a.iter() {
        let gb = b.get(name).expect("same parameters");
        let scale = ga
            .abs()
            .unwrap()
            .flatten_all()
            .unwrap()
            .max(0)
            .unwrap()
            .to_scalar::<f32>()
            .unwrap() as f64;
        let d = (ga - gb)
            .unwrap()
            .abs()
            .unwrap()
            .flatten_all()
            .unwrap()
            .max(0)
            .unwrap()
            .to_scalar::<f32>()
            .unwrap() as f64;
        worst = worst.max(d / scale.max(1e-12));
    }
    worst
}

#[test]
fn micro_batches_give_the_big_batch_gradients_for_every_aggregation() {
    for case in common::CASES {
        let (c, w) = common::load(case);
        let (model, params) = CausalLm::trainable(&c, &w).unwrap();
        let (ref_model, _) = reference(&c, &w);
        let b = batch(&model, &ref_model, c.vocab_size, 7, 0.7);
        for agg in [
            LossAggregation::Grpo,
            LossAggregation::Bnpo,
            LossAggregation::DrGrpo,
            LossAggregation::Dapo,
        ] {
            let cfg = cfg(agg, 0.05);
            let (big, mb) = accumulate_gradients(&model, &params, &b, &cfg, MicroBatching::Rows(ROWS)).unwrap();
            assert_eq!(big.len(), params.len(), "every parameter gets a gradient");
            assert!(
                mb.clip_ratio_low_mean > 0.0 && mb.clip_ratio_high_mean > 0.0,
                "{mb:?}"
            );
            assert!(mb.kl.unwrap() > 0.0 && mb.entropy.unwrap() > 0.0);
            assert!(mb.padding.share() > 0.1, "right-padded rows of different lengths: {:?}", mb.padding);
            // Any split agrees with the one-big-batch gradients within 1e-5
            // (f32 accumulation over micro-batches whose gradients partly
            // cancel); a packed split agrees with the padded split that
            // groups the same episodes within 1e-6 (budget 14: one episode
            // per pack, as one row per micro-batch; 1000: all in one pack).
            let (one_row, one_row_m) = accumulate_gradients(&model, &params, &b, &cfg, MicroBatching::Rows(1)).unwrap();
            let splits = [
                (MicroBatching::Rows(2), None),
                (MicroBatching::Rows(1), None),
                (MicroBatching::Tokens(20), None),
                (MicroBatching::Tokens(14), Some((&one_row, &one_row_m))),
                (MicroBatching::Tokens(1000), Some((&big, &mb))),
            ];
            for (micro, same_grouping) in splits {
                let (small, ms) = accumulate_gradients(&model, &params, &b, &cfg, micro).unwrap();
                let d = max_rel_diff(&big, &small);
                println!(
                    "{case} {agg:?} micro={micro:?}: grads max rel diff = {d:.3e}, loss {} vs {}",
                    mb.loss, ms.loss
                );
                assert!(d < 1e-5, "{case} {agg:?} micro={micro:?}: {d:.3e}");
                assert!((mb.loss - ms.loss).abs() <= 1e-5 * mb.loss.abs().max(1e-3));
                if let Some((padded, pm)) = same_grouping {
                    let d = max_rel_diff(padded, &small);
                    println!("{case} {agg:?} micro={micro:?} vs the padded split of the same grouping: {d:.3e}, loss {} vs {}", pm.loss, ms.loss);
                    assert!(d < 1e-6, "{case} {agg:?} micro={micro:?} vs padded: {d:.3e}");
                    assert!((pm.loss - ms.loss).abs() <= 1e-6 * pm.loss.abs().max(1e-3));
                }
                if let MicroBatching::Tokens(_) = micro {
                    assert_eq!(ms.padding.share(), 0.0, "packed rows compute no padding");
                    assert_eq!(ms.padding.tokens, mb.padding.tokens, "the same tokens computed");
                }
                assert!((mb.kl.unwrap() - ms.kl.unwrap()).abs() < 1e-6);
                assert!((mb.entropy.unwrap() - ms.entropy.unwrap()).abs() < 1e-5);
                assert!((mb.clip_ratio_region_mean - ms.clip_ratio_region_mean).abs() < 1e-12);
            }
        }
    }
}

#[test]
fn packed_detached_logprobs_equal_the_padded_ones_on_trained_columns() {
    for case in common::CASES {
        let (c, w) = common::load(case);
        let (model, _) = CausalLm::trainable(&c, &w).unwrap();
        let (ref_model, _) = reference(&c, &w);
        let b = batch(&model, &ref_model, c.vocab_size, 5, 0.7);
        let padded = detached_logprobs(&model, &b.tokens, &b.mask, 0.7, MicroBatching::Rows(ROWS)).unwrap();
        for budget in [14, 20, 1000] {
            let packed = detached_logprobs(&model, &b.tokens, &b.mask, 0.7, MicroBatching::Tokens(budget)).unwrap();
            assert_eq!(packed.dims(), padded.dims());
            let on = (&packed - &padded).unwrap().mul(&b.mask).unwrap();
            let d = on.abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
            println!("{case} budget {budget}: packed vs padded log-probs on policy tokens max |diff| {d:.3e}");
            assert!(d < 1e-5, "{case} budget {budget}: {d:e}");
            // Column 0 of every row is 0, as in the padded layout.
            let col0 = packed.narrow(1, 0, 1).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
            assert_eq!(col0, 0.0);
        }
    }
}

#[test]
fn aggregations_differ_so_the_equivalence_test_can_fail() {
    // A split-unaware normalizer (each micro-batch by its own token count)
    // would change the gradient: the variants must differ on this batch.
    let (c, w) = common::load("untied");
    let (model, params) = CausalLm::trainable(&c, &w).unwrap();
    let (ref_model, _) = reference(&c, &w);
    let b = batch(&model, &ref_model, c.vocab_size, 7, 0.7);
    let g = |agg| {
        accumulate_gradients(&model, &params, &b, &cfg(agg, 0.05), MicroBatching::Rows(ROWS))
            .unwrap()
            .0
    };
    assert!(max_rel_diff(&g(LossAggregation::Grpo), &g(LossAggregation::Dapo)) > 1e-2);
    assert!(max_rel_diff(&g(LossAggregation::DrGrpo), &g(LossAggregation::Dapo)) > 1e-2);
}

#[test]
fn one_update_lowers_the_loss_and_the_reference_gets_no_gradient() {
    let (c, w) = common::load("tied_sharded");
    let (model, params) = CausalLm::trainable(&c, &w).unwrap();
    let (ref_model, ref_params) = reference(&c, &w);
    let ref_before: Vec<Tensor> = ref_params
        .values()
        .map(|v| v.as_tensor().copy().unwrap())
        .collect();
    let b = batch(&model, &ref_model, c.vocab_size, 11, 1.0);
    let cfg = cfg(LossAggregation::Grpo, 0.1);

    let (mut grads, before) = accumulate_gradients(&model, &params, &b, &cfg, MicroBatching::Rows(2)).unwrap();
    // The reference model's Vars are absent from the gradients of the loss.
    let (ref_grads, _) = accumulate_gradients(&model, &ref_params, &b, &cfg, MicroBatching::Rows(2)).unwrap();
    assert!(
        ref_grads.is_empty(),
        "reference received gradients: {:?}",
        ref_grads.iter().map(|(n, _)| n).collect::<Vec<_>>()
    );

    let norm = grads.clip_global_norm(1.0).unwrap();
    assert!(norm.is_finite() && norm > 0.0);
    let adamw = AdamWConfig {
        weight_decay: 0.0,
        decay_scope: WeightDecayScope::SkipBiasesAndNorms,
        ..AdamWConfig::default()
    };
    let mut opt = AdamW::new(&params, adamw).unwrap();
    opt.step(&params, &grads, 2e-3).unwrap();

    let (_, after) = accumulate_gradients(&model, &params, &b, &cfg, MicroBatching::Rows(2)).unwrap();
    println!(
        "grpo update: loss {:.6} -> {:.6} (kl {:?} -> {:?}), grad norm {norm:.4}",
        before.loss, after.loss, before.kl, after.kl
    );
    assert!(
        after.loss < before.loss - 1e-3,
        "loss {} -> {}",
        before.loss,
        after.loss
    );
    for (t0, v) in ref_before.iter().zip(ref_params.values()) {
        let d = (t0 - v.as_tensor())
            .unwrap()
            .abs()
            .unwrap()
            .flatten_all()
            .unwrap()
            .max(0)
            .unwrap();
        assert_eq!(
            d.to_dtype(DType::F32).unwrap().to_scalar::<f32>().unwrap(),
            0.0
        );
    }
}

#[test]
fn bad_batches_are_errors() {
    let (c, w) = common::load("untied");
    let (model, params) = CausalLm::trainable(&c, &w).unwrap();
    let (ref_model, _) = reference(&c, &w);
    let good = batch(&model, &ref_model, c.vocab_size, 3, 1.0);
    let mut no_ref = good.clone();
    no_ref.ref_logprobs = None;
    let err = accumulate_gradients(
        &model,
        &params,
        &no_ref,
        &cfg(LossAggregation::Dapo, 0.1),
        MicroBatching::Rows(2),
    )
    .unwrap_err();
    assert!(err.to_string().contains("reference"), "{err}");
    assert!(accumulate_gradients(
        &model,
        &params,
        &no_ref,
        &cfg(LossAggregation::Dapo, 0.0),
        MicroBatching::Rows(2)
    )
    .is_ok());
    let mut first_col = good.clone();
    first_col.mask = first_col
        .mask
        .slice_assign(
            &[0..1, 0..1],
            &Tensor::ones((1, 1), DType::F32, &Device::Cpu).unwrap(),
        )
        .unwrap();
    assert!(accumulate_gradients(
        &model,
        &params,
        &first_col,
        &cfg(LossAggregation::Dapo, 0.1),
        MicroBatching::Rows(2)
    )
    .is_err());
    let mut short_adv = good;
    short_adv.advantages = short_adv.advantages.narrow(0, 0, 3).unwrap();
    assert!(accumulate_gradients(
        &model,
        &params,
        &short_adv,
        &cfg(LossAggregation::Dapo, 0.1),
        MicroBatching::Rows(2)
    )
    .is_err());
    assert!(accumulate_gradients(
        &model,
        &params,
        &no_ref,
        &cfg(LossAggregation::Dapo, 0.0),
        MicroBatching::Rows(0)
    )
    .is_err());
}

fn json_matrix(v: &serde_json::Value) -> Vec<Vec<f64>> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|r| {
            r.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap())
                .collect()
        })
        .collect()
}

fn f32_tensor2(v: &serde_json::Value) -> Tensor {
    let m = json_matrix(v);
    let flat: Vec<f32> = m.iter().flatten().map(|&x| x as f32).collect();
    Tensor::from_vec(flat, (m.len(), m[0].len()), &Device::Cpu).unwrap()
}

fn max_abs(t: &Tensor) -> f64 {
    t.abs()
        .unwrap()
        .flatten_all()
        .unwrap()
        .max(0)
        .unwrap()
        .to_scalar::<f32>()
        .unwrap() as f64
}

/// The loss settings of an update fixture (TRL's dapo with its clip range,
/// beta, temperature and completion length).
fn trl_update_config(f: &serde_json::Value) -> GrpoLossConfig {
    let num = |k: &str| f[k].as_f64().unwrap();
    GrpoLossConfig {
        clip: ClipRange { low: num("eps_low"), high: num("eps_high") },
        beta: num("beta"),
        temperature: num("temperature"),
        aggregation: LossAggregation::Dapo,
        max_completion_length: f["max_completion_length"].as_u64().unwrap() as usize,
        entropy: EntropyMetric::Skip,
        recompute: Recompute::Off,
        rollout_correction: RolloutCorrection::None,
        tis_cap: 3.0,
        importance_sampling: ImportanceSampling::Token,
        skip_zero_advantage: true,
        fold_linear_loss: true,
    }
}

#[test]
fn one_update_matches_pytorch_and_trl() {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/grpo");
    let f: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("update.json")).unwrap()).unwrap();
    let want =
        candle_core::safetensors::load(dir.join("update.safetensors"), &Device::Cpu).unwrap();
    let (c, w) = common::load("untied");
    let (model, params) = CausalLm::trainable(&c, &w).unwrap();
    let (ref_model, _) = reference(&c, &w);
    let num = |k: &str| f[k].as_f64().unwrap();
    let tokens: Vec<u32> = json_matrix(&f["tokens"])
        .iter()
        .flatten()
        .map(|&x| x as u32)
        .collect();
    let rows = f["tokens"].as_array().unwrap().len();
    let tokens = Tensor::from_vec(tokens, (rows, ()), &Device::Cpu).unwrap();
    let adv: Vec<f32> = f["advantages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect();
    let temperature = num("temperature");

    // the reference path reproduces transformers' log-probs
    let ref_logp = f32_tensor2(&f["ref_logp"]);
    let ours = detached_logprobs(&ref_model, &tokens, &Tensor::ones(tokens.dims(), DType::F32, &Device::Cpu).unwrap(), temperature, MicroBatching::Rows(3)).unwrap();
    let ref_diff = max_abs(&(&ours - &ref_logp).unwrap());
    assert!(
        ref_diff < 1e-4,
        "reference log-probs differ by {ref_diff:.3e}"
    );

    let batch = GrpoBatch {
        tokens,
        mask: f32_tensor2(&f["mask"]),
        advantages: Tensor::new(adv.as_slice(), &Device::Cpu).unwrap(),
        old_logprobs: OldLogprobs::Stored(f32_tensor2(&f["old_logp"])),
        ref_logprobs: Some(ref_logp),
        rollout_logprobs: None,
    };
    let cfg = trl_update_config(&f);
    let (mut grads, metrics) = accumulate_gradients(&model, &params, &batch, &cfg, MicroBatching::Rows(3)).unwrap();
    let mut grad_rel = 0f64;
    for (name, g) in grads.iter() {
        let torch = &want[&format!("grad.{name}")];
        grad_rel = grad_rel.max(max_abs(&(g - torch).unwrap()) / max_abs(torch));
    }
    let norm = grads.clip_global_norm(num("max_norm")).unwrap();
    let adamw = AdamWConfig {
        beta1: f["betas"][0].as_f64().unwrap(),
        beta2: f["betas"][1].as_f64().unwrap(),
        eps: num("eps"),
        weight_decay: num("weight_decay"),
        decay_scope: WeightDecayScope::All,
    };
    let mut opt = AdamW::new(&params, adamw).unwrap();
    opt.step(&params, &grads, num("lr")).unwrap();

    let loss_rel = (metrics.loss - num("loss")).abs() / num("loss").abs();
    let norm_rel = (norm - num("grad_norm")).abs() / num("grad_norm");
    let kl_rel = (metrics.kl.unwrap() - num("kl")).abs() / num("kl");
    let (mut param_rel, mut update_rel) = (0f64, 0f64);
    for (name, var) in &params {
        let torch = &want[&format!("after.{name}")];
        let d = max_abs(&(var.as_tensor() - torch).unwrap());
        param_rel = param_rel.max(d / max_abs(torch));
        update_rel = update_rel.max(d / max_abs(&(torch - &w[name]).unwrap()));
    }
    println!(
        "grpo update vs pytorch: loss rel {loss_rel:.3e}, grad norm rel {norm_rel:.3e}, kl rel {kl_rel:.3e}, \
         grads max rel diff {grad_rel:.3e}, params max rel diff {param_rel:.3e} (of the update: {update_rel:.3e}), \
         ref log-probs max |diff| {ref_diff:.3e}"
    );
    assert_eq!(grads.len(), params.len());
    assert!(loss_rel < 1e-4 && norm_rel < 1e-4 && kl_rel < 1e-4);
    assert!(grad_rel < 1e-4, "{grad_rel:.3e}");
    assert!(update_rel < 1e-2, "{update_rel:.3e}");
    assert!(param_rel < 1e-4, "{param_rel:.3e}");
}

#[test]
fn zero_advantage_rows_skip_the_pass_and_leave_the_update_unchanged() {
    let (c, w) = common::load("untied");
    let (model, params) = CausalLm::trainable(&c, &w).unwrap();
    let (ref_model, _) = reference(&c, &w);
    let mut b = batch(&model, &ref_model, c.vocab_size, 9, 0.7);
    b.advantages = Tensor::new(&[1.1f32, 0.0, 0.4, 0.0, -0.9], &Device::Cpu).unwrap();
    for agg in [LossAggregation::Grpo, LossAggregation::Dapo, LossAggregation::DrGrpo] {
        let on = cfg(agg, 0.0);
        let off = GrpoLossConfig { skip_zero_advantage: false, ..on };
        // Same grouping of the computed rows: equal to 1e-7; other groupings: float noise.
        for (micro, tol) in [(MicroBatching::Rows(1), 1e-7), (MicroBatching::Tokens(14), 1e-7), (MicroBatching::Rows(ROWS), 1e-5), (MicroBatching::Tokens(1000), 1e-5)] {
            let (g_on, m_on) = accumulate_gradients(&model, &params, &b, &on, micro).unwrap();
            let (g_off, m_off) = accumulate_gradients(&model, &params, &b, &off, micro).unwrap();
            let d = max_rel_diff(&g_off, &g_on);
            println!("{agg:?} {micro:?}: skipped {} rows, grads max rel diff {d:.3e}, loss {} vs {}", m_on.skipped_rows, m_on.loss, m_off.loss);
            assert_eq!((m_on.skipped_rows, m_off.skipped_rows), (2, 0));
            assert!(d <= tol, "{agg:?} {micro:?}: {d:.3e}");
            assert!((m_on.loss - m_off.loss).abs() <= tol * m_off.loss.abs().max(1e-3));
            assert_eq!(m_on.tokens, m_off.tokens, "skipped rows' tokens still count");
            assert!((m_on.clip_ratio_region_mean - m_off.clip_ratio_region_mean).abs() < 1e-12);
            assert!(m_on.padding.tokens < m_off.padding.tokens, "fewer tokens computed");
        }
    }
    // With a KL term a zero-advantage row still has a gradient: nothing is skipped.
    let (_, m) = accumulate_gradients(&model, &params, &b, &cfg(LossAggregation::Dapo, 0.05), MicroBatching::Rows(2)).unwrap();
    assert_eq!(m.skipped_rows, 0);
}

#[test]
fn drift_against_the_rollout_is_measured_and_tis_only_reweights() {
    let (c, w) = common::load("tied_sharded");
    let (model, params) = CausalLm::trainable(&c, &w).unwrap();
    let (ref_model, _) = reference(&c, &w);
    let mut b = batch(&model, &ref_model, c.vocab_size, 4, 0.7);
    b.old_logprobs = OldLogprobs::Current;
    let current = detached_logprobs(&model, &b.tokens, &b.mask, 0.7, MicroBatching::Rows(ROWS)).unwrap();
    let base = cfg(LossAggregation::Dapo, 0.0);
    let tis = GrpoLossConfig { rollout_correction: RolloutCorrection::Tis, tis_cap: 2.0, ..base };
    let err = accumulate_gradients(&model, &params, &b, &tis, MicroBatching::Rows(2)).unwrap_err();
    assert!(err.to_string().contains("rollout"), "{err}");
    // The rollout sampled with exactly the trainer's log-probs: no drift, TIS changes nothing.
    b.rollout_logprobs = Some(current.clone());
    for micro in [MicroBatching::Rows(2), MicroBatching::Tokens(30)] {
        let (g0, m0) = accumulate_gradients(&model, &params, &b, &base, micro).unwrap();
        let (g1, m1) = accumulate_gradients(&model, &params, &b, &tis, micro).unwrap();
        let d = m0.drift.unwrap();
        println!("{micro:?}: no drift: {d:?}");
        assert!(d.logp_difference_max < 1e-5 && (d.ratio_min - 1.0).abs() < 1e-5 && (d.ratio_max - 1.0).abs() < 1e-5, "{d:?}");
        assert!(max_rel_diff(&g0, &g1) < 1e-5 && (m0.loss - m1.loss).abs() < 1e-6);
    }
    // A drifted rollout: measured on policy tokens only; TIS reweights the update.
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let noise: Vec<f32> = (0..ROWS * COLS).map(|_| rng.random_range(-0.5f32..0.5)).collect();
    let drifted = (&current + Tensor::from_vec(noise, (ROWS, COLS), &Device::Cpu).unwrap()).unwrap();
    b.rollout_logprobs = Some(drifted.clone());
    let (g0, m0) = accumulate_gradients(&model, &params, &b, &base, MicroBatching::Rows(2)).unwrap();
    let (g1, m1) = accumulate_gradients(&model, &params, &b, &tis, MicroBatching::Rows(2)).unwrap();
    let (g2, m2) = accumulate_gradients(&model, &params, &b, &tis, MicroBatching::Tokens(30)).unwrap();
    let diffs = ((&current - &drifted).unwrap().abs().unwrap() * &b.mask).unwrap();
    let want_max = diffs.max_all().unwrap().to_scalar::<f32>().unwrap() as f64;
    let want_mean = diffs.sum_all().unwrap().to_scalar::<f32>().unwrap() as f64 / m0.tokens as f64;
    let d = m0.drift.unwrap();
    println!("drifted: {d:?}; tis: {:?}", m1.drift.unwrap());
    assert!((d.logp_difference_max - want_max).abs() < 1e-5 && (d.logp_difference_mean - want_mean).abs() < 1e-5, "{d:?} vs max {want_max} mean {want_mean}");
    assert!(m1.drift.unwrap().ratio_max <= 2.0 + 1e-6, "the truncated ratio is reported");
    assert!(max_rel_diff(&g0, &g1) > 1e-3, "TIS changes the gradient");
    assert!(max_rel_diff(&g1, &g2) < 1e-5 && (m1.loss - m2.loss).abs() < 1e-6, "packed TIS equals padded TIS");
}

#[test]
fn folding_the_linear_loss_into_the_logprob_op_changes_nothing() {
    let (c, w) = common::load("tied_sharded");
    let (model, params) = CausalLm::trainable(&c, &w).unwrap();
    let (ref_model, _) = reference(&c, &w);
    let mut b = batch(&model, &ref_model, c.vocab_size, 5, 0.7);
    b.old_logprobs = OldLogprobs::Current;
    for agg in [LossAggregation::Grpo, LossAggregation::Bnpo, LossAggregation::DrGrpo, LossAggregation::Dapo] {
        for recompute in [Recompute::Off, Recompute::PerLayer] {
            let folded = GrpoLossConfig { recompute, ..cfg(agg, 0.0) };
            let unfolded = GrpoLossConfig { fold_linear_loss: false, ..folded };
            for micro in [MicroBatching::Rows(2), MicroBatching::Tokens(30)] {
                let (g1, m1) = accumulate_gradients(&model, &params, &b, &folded, micro).unwrap();
                let (g0, m0) = accumulate_gradients(&model, &params, &b, &unfolded, micro).unwrap();
                let d = max_rel_diff(&g0, &g1);
                println!("{agg:?} {recompute:?} {micro:?}: grads max rel diff {d:.3e}, loss {} vs {}", m1.loss, m0.loss);
                assert_eq!(g1.len(), params.len());
                assert!(d < 5e-6, "{agg:?} {recompute:?} {micro:?}: {d:.3e}");
                assert!((m1.loss - m0.loss).abs() <= 1e-6 * m0.loss.abs().max(1e-3));
                assert!((m1.entropy.unwrap() - m0.entropy.unwrap()).abs() < 1e-5 * m0.entropy.unwrap());
                assert_eq!((m1.tokens, m1.clip_ratio_region_mean), (m0.tokens, m0.clip_ratio_region_mean));
            }
        }
    }
}

#[test]
fn the_folded_pass_computes_only_the_masked_positions() {
    let (c, w) = common::load("tied_sharded");
    let (model, _) = CausalLm::trainable(&c, &w).unwrap();
    let (ref_model, _) = reference(&c, &w);
    let b = batch(&model, &ref_model, c.vocab_size, 6, 0.7);
    let (rows, cols) = b.tokens.dims2().unwrap();
    let hidden = model.forward(&b.tokens, &lm::model::cache::Positions::sequential(rows, cols), None).unwrap();
    let weights = (&b.mask * 0.3).unwrap();
    let out = hidden_weighted_logprobs(&model, &hidden, &b.tokens, &weights, &b.mask, 0.7, EntropyMetric::Compute).unwrap();
    let (full, full_entropy) = hidden_logprobs(&model, &hidden, &b.tokens, 0.7, EntropyMetric::Compute).unwrap();
    let flat = |t: &Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    let mask = flat(&b.mask);
    let (masked_out, masked_positions) = (mask.iter().filter(|&&m| m == 0.0).count(), mask.iter().filter(|&&m| m != 0.0).count());
    assert!(masked_out > rows && masked_positions > 0, "the batch has prompt, tool and padding positions");
    for (ours, theirs) in [(flat(&out.logprobs), flat(&full)), (flat(&out.entropy.unwrap()), flat(&full_entropy.unwrap()))] {
        for i in 0..mask.len() {
            if mask[i] == 0.0 {
                assert_eq!(ours[i], 0.0, "position {i} is outside the mask");
            } else {
                assert!((ours[i] - theirs[i]).abs() <= 1e-5 * theirs[i].abs().max(1.0), "position {i}: {} vs {}", ours[i], theirs[i]);
            }
        }
    }
    let expected: f32 = flat(&full).iter().zip(&mask).map(|(l, m)| l * m * 0.3).sum();
    let sum = out.sum.to_scalar::<f32>().unwrap();
    assert!((sum - expected).abs() <= 1e-5 * expected.abs(), "{sum} vs {expected}");
    // A coefficient on a position the mask leaves out would be dropped: refused.
    let stray = (&weights + 0.1).unwrap();
    let err = hidden_weighted_logprobs(&model, &hidden, &b.tokens, &stray, &b.mask, 0.7, EntropyMetric::Skip).err().expect("refused").to_string();
    assert!(err.contains("outside the loss mask"), "{err}");
}

#[test]
fn a_lora_grpo_step_matches_trl_and_peft() {
    // scripts/make_lora_fixtures.py, grpo/: TRL's _compute_loss (dapo, beta
    // > 0, stored old log-probs) on a PEFT model (the `untied` base with an
    // r = 8 adapter on all seven projections); the reference is the base
    // with the adapter off.
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../lm/tests/fixtures/lora/grpo");
    let f: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("update.json")).unwrap()).unwrap();
    let want = candle_core::safetensors::load(dir.join("grads.safetensors"), &Device::Cpu).unwrap();
    let (c, w) = common::load("untied");
    let adapter = lm::lora::peft::load(&dir, &c, None, DType::F32, &Device::Cpu).unwrap();
    let (model, params) = CausalLm::trainable_adapter(&c, &w, &adapter).unwrap();
    let num = |k: &str| f[k].as_f64().unwrap();
    let tokens: Vec<u32> = json_matrix(&f["tokens"]).iter().flatten().map(|&x| x as u32).collect();
    let rows = f["tokens"].as_array().unwrap().len();
    let tokens = Tensor::from_vec(tokens, (rows, ()), &Device::Cpu).unwrap();
    let adv: Vec<f32> = f["advantages"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect();
    let temperature = num("temperature");
    let mask = f32_tensor2(&f["mask"]);
    // Our policy's and reference's log-probs are PEFT's (masked positions).
    let lp_diff = |m: &CausalLm, key: &str| {
        let ours = detached_logprobs(m, &tokens, &Tensor::ones(tokens.dims(), DType::F32, &Device::Cpu).unwrap(), temperature, MicroBatching::Rows(2)).unwrap();
        max_abs(&((ours - f32_tensor2(&f[key])).unwrap() * &mask).unwrap())
    };
    let (policy_diff, ref_diff) = (lp_diff(&model, "logp"), lp_diff(&model.without_adapter(), "ref_logp"));
    assert!(policy_diff < 1e-4 && ref_diff < 1e-4, "log-probs: policy {policy_diff:.3e}, reference {ref_diff:.3e}");
    let batch = GrpoBatch {
        tokens,
        mask,
        advantages: Tensor::new(adv.as_slice(), &Device::Cpu).unwrap(),
        old_logprobs: OldLogprobs::Stored(f32_tensor2(&f["old_logp"])),
        ref_logprobs: Some(f32_tensor2(&f["ref_logp"])),
        rollout_logprobs: None,
    };
    let cfg = trl_update_config(&f);
    let (grads, metrics) = accumulate_gradients(&model, &params, &batch, &cfg, MicroBatching::Rows(3)).unwrap();
    assert_eq!(grads.len(), want.len(), "a gradient for every lora_A and lora_B, none for the base");
    let mut grad_rel = 0f64;
    for (name, g) in grads.iter() {
        let torch = &want[name];
        grad_rel = grad_rel.max(max_abs(&(g - torch).unwrap()) / max_abs(torch));
    }
    let loss_rel = (metrics.loss - num("loss")).abs() / num("loss").abs();
    let kl_rel = (metrics.kl.unwrap() - num("kl")).abs() / num("kl");
    println!(
        "lora grpo step vs TRL {} + PEFT {}: loss rel {loss_rel:.3e}, kl rel {kl_rel:.3e}, adapter grads max rel diff {grad_rel:.3e}, \
         log-probs policy {policy_diff:.3e} reference {ref_diff:.3e}",
        f["trl_version"], f["peft_version"]
    );
    assert!(loss_rel < 1e-4 && kl_rel < 1e-4, "loss {loss_rel:.3e} kl {kl_rel:.3e}");
    assert!(grad_rel < 1e-4, "{grad_rel:.3e}");
}

#[test]
fn gspo_packed_rows_equal_padded_rows_and_its_linear_loss_folds() {
    // Sequence-level ratios through a model: padded row ranges and packed
    // rows (several episodes in one row, each its own sequence) give the
    // one-big-batch gradients; on-policy, folding the loss changes nothing.
    let (c, w) = common::load("tied_sharded");
    let (model, params) = CausalLm::trainable(&c, &w).unwrap();
    let (ref_model, _) = reference(&c, &w);
    let mut b = batch(&model, &ref_model, c.vocab_size, 7, 0.7);
    for agg in [LossAggregation::Grpo, LossAggregation::Bnpo, LossAggregation::DrGrpo, LossAggregation::Dapo] {
        for beta in [0.0, 0.05] {
            let token = cfg(agg, beta);
            let seq = GrpoLossConfig { importance_sampling: ImportanceSampling::Sequence, ..token };
            let (g_all, m_all) = accumulate_gradients(&model, &params, &b, &seq, MicroBatching::Rows(ROWS)).unwrap();
            for micro in [MicroBatching::Rows(2), MicroBatching::Tokens(30), MicroBatching::Tokens(14)] {
                let (g, m) = accumulate_gradients(&model, &params, &b, &seq, micro).unwrap();
                let d = max_rel_diff(&g_all, &g);
                println!("GSPO {agg:?} beta {beta} {micro:?}: grads max rel diff {d:.3e}, loss {} vs {}", m.loss, m_all.loss);
                assert!(d < 1e-5, "{agg:?} beta {beta} {micro:?}: {d:.3e}");
                assert!((m.loss - m_all.loss).abs() <= 1e-5 * m_all.loss.abs().max(1e-3), "{agg:?} {micro:?}: loss {} vs {}", m.loss, m_all.loss);
                assert!((m.clip_ratio_region_mean - m_all.clip_ratio_region_mean).abs() < 1e-9, "{m:?} vs {m_all:?}");
            }
            let (g_token, _) = accumulate_gradients(&model, &params, &b, &token, MicroBatching::Rows(ROWS)).unwrap();
            assert!(max_rel_diff(&g_token, &g_all) > 1e-3, "{agg:?}: sequence level changes the gradient");
        }
    }
    b.old_logprobs = OldLogprobs::Current;
    for agg in [LossAggregation::Grpo, LossAggregation::Dapo] {
        let folded = GrpoLossConfig { importance_sampling: ImportanceSampling::Sequence, ..cfg(agg, 0.0) };
        let unfolded = GrpoLossConfig { fold_linear_loss: false, ..folded };
        for micro in [MicroBatching::Rows(2), MicroBatching::Tokens(30)] {
            let (g1, m1) = accumulate_gradients(&model, &params, &b, &folded, micro).unwrap();
            let (g0, m0) = accumulate_gradients(&model, &params, &b, &unfolded, micro).unwrap();
            let d = max_rel_diff(&g0, &g1);
            println!("GSPO on-policy {agg:?} {micro:?}: folded vs autograd max rel diff {d:.3e}");
            assert!(d < 5e-6, "{agg:?} {micro:?}: {d:.3e}");
            assert!((m1.loss - m0.loss).abs() <= 1e-6 * m0.loss.abs().max(1e-3));
        }
    }
}
