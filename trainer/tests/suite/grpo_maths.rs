//! GRPO maths against goldens from TRL 1.16.0 (scripts/make_grpo_fixtures.py):
//! advantages, and the loss and d(loss)/d(logp) of every aggregation with
//! clipping active on both sides, with and without beta, mu == 1 and mu > 1,
//! at token level and at sequence level (GSPO).

use candle_core::{Device, Tensor, Var};
use serde_json::Value;
use std::path::PathBuf;
use trainer::grpo::drift::Drift;
use trainer::grpo::linear_coefficients;
use trainer::grpo::loss::token_weight;
use trainer::grpo::{
    group_advantages, grpo_loss, Aggregate, AdvantageScaling, BatchTotals, ClipRange, GrpoLossConfig, ImportanceSampling, Loss,
    LossAggregation, LossInputs, RolloutCorrection, Segments, ZeroStdGroups,
};

/// The loss of `logp` (on-policy when `old` is `None`), aggregated over the
/// rows of `mask` as one optimizer batch.
#[allow(clippy::too_many_arguments)]
fn loss_of(logp: &Tensor, old: Option<&Tensor>, reference: Option<&Tensor>, rollout: Option<&Tensor>, adv: &Tensor, mask: &Tensor, cfg: &GrpoLossConfig) -> trainer::Result<Loss> {
    let totals = BatchTotals::of_mask(mask).unwrap();
    grpo_loss(LossInputs { logp, old, reference, rollout, advantages: adv, mask, entropy: None, sequences: None }, Aggregate::rows(cfg, totals), cfg)
}

fn fixture(name: &str) -> Value {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/grpo")
        .join(name);
    serde_json::from_str(&std::fs::read_to_string(&p).expect("fixture")).expect("fixture json")
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_f64().expect("number"))
        .collect()
}

fn matrix(v: &Value) -> Vec<Vec<f64>> {
    v.as_array().expect("rows").iter().map(floats).collect()
}

fn tensor2(v: &Value) -> Tensor {
    let m = matrix(v);
    let flat: Vec<f32> = m.iter().flatten().map(|&x| x as f32).collect();
    Tensor::from_vec(flat, (m.len(), m[0].len()), &Device::Cpu).unwrap()
}

fn rel_diff(a: f64, b: f64) -> f64 {
    (a - b).abs() / b.abs().max(1e-3)
}

#[test]
fn advantages_match_trl() {
    let cases = fixture("advantages.json");
    let mut max = 0f64;
    for case in cases.as_array().unwrap() {
        let rewards = floats(&case["rewards"]);
        let g = case["group_size"].as_u64().unwrap() as usize;
        for (key, scaling) in [
            ("group", AdvantageScaling::Group),
            ("batch", AdvantageScaling::Batch),
            ("none", AdvantageScaling::None),
        ] {
            let want = &case[key];
            let got = group_advantages(&rewards, g, scaling, 1e-4, ZeroStdGroups::Keep).unwrap();
            for (a, b) in got.values.iter().zip(floats(&want["advantages"])) {
                max = max.max((*a as f64 - b).abs());
            }
            assert_eq!(got.values.len(), rewards.len());
            assert!((got.reward_mean - want["reward"].as_f64().unwrap()).abs() < 1e-6);
            assert!((got.reward_std - want["reward_std"].as_f64().unwrap()).abs() < 1e-6);
            // TRL's frac_reward_zero_std with "batch" scaling tests the batch std;
            // ours always counts constant groups, which equals TRL's for group/none.
            if scaling != AdvantageScaling::Batch {
                assert!(
                    (got.frac_reward_zero_std - want["frac_reward_zero_std"].as_f64().unwrap())
                        .abs()
                        < 1e-6,
                    "{key}"
                );
            }
        }
    }
    println!("advantages: max |diff| = {max:.3e}");
    assert!(max < 1e-5, "advantages differ from TRL by {max:.3e}");
}

#[test]
fn zero_std_groups_are_counted_and_dropped() {
    // groups: [1,0,.5,.5] [.25 x4] [0,0,0,0]
    let r = [
        1.0, 0.0, 0.5, 0.5, 0.25, 0.25, 0.25, 0.25, 0.0, 0.0, 0.0, 0.0,
    ];
    let keep = group_advantages(&r, 4, AdvantageScaling::Group, 1e-4, ZeroStdGroups::Keep).unwrap();
    assert_eq!(keep.zero_std_groups, 2);
    assert!((keep.frac_reward_zero_std - 2.0 / 3.0).abs() < 1e-12);
    assert_eq!(keep.kept_rows, (0..12).collect::<Vec<_>>());
    assert!(keep.values[4..].iter().all(|&a| a == 0.0));
    let drop = group_advantages(&r, 4, AdvantageScaling::Group, 1e-4, ZeroStdGroups::Drop).unwrap();
    assert_eq!(drop.kept_rows, vec![0, 1, 2, 3]);
    assert_eq!(drop.values, keep.values[..4].to_vec());
    assert_eq!(drop.zero_std_groups, 2);
    // Dr. GRPO: centred only. std of [1,0,.5,.5] is sqrt(1/6) (unbiased).
    let none = group_advantages(&r, 4, AdvantageScaling::None, 1e-4, ZeroStdGroups::Keep).unwrap();
    assert_eq!(&none.values[..4], &[0.5, -0.5, 0.0, 0.0]);
    assert!((keep.groups[0].std - (1.0f64 / 6.0).sqrt()).abs() < 1e-12);
    assert!((keep.values[0] as f64 - 0.5 / ((1.0f64 / 6.0).sqrt() + 1e-4)).abs() < 1e-6);
    // malformed input is an error, not a panic
    assert!(group_advantages(
        &r[..5],
        4,
        AdvantageScaling::Group,
        1e-4,
        ZeroStdGroups::Keep
    )
    .is_err());
    assert!(group_advantages(&r, 1, AdvantageScaling::Group, 1e-4, ZeroStdGroups::Keep).is_err());
    assert!(group_advantages(
        &[f64::NAN, 1.0],
        2,
        AdvantageScaling::Group,
        1e-4,
        ZeroStdGroups::Keep
    )
    .is_err());
}

fn aggregation(name: &str) -> LossAggregation {
    match name {
        "grpo" => LossAggregation::Grpo,
        "bnpo" => LossAggregation::Bnpo,
        "dr_grpo" => LossAggregation::DrGrpo,
        "dapo" => LossAggregation::Dapo,
        other => panic!("unknown loss type {other}"),
    }
}

#[test]
fn loss_and_gradient_match_trl_for_every_aggregation() {
    let f = fixture("loss.json");
    let logp0 = tensor2(&f["logp"]);
    let old = tensor2(&f["old_logp"]);
    let reference = tensor2(&f["ref_logp"]);
    let mask = tensor2(&f["mask"]);
    let adv_v: Vec<f32> = floats(&f["advantages"]).iter().map(|&x| x as f32).collect();
    let adv = Tensor::new(adv_v.as_slice(), &Device::Cpu).unwrap();
    let clip = ClipRange {
        low: f["eps_low"].as_f64().unwrap(),
        high: f["eps_high"].as_f64().unwrap(),
    };
    let max_len = f["max_completion_length"].as_u64().unwrap() as usize;
    let cases = f["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 12);
    let (mut max_loss, mut max_grad, mut max_metric) = (0f64, 0f64, 0f64);
    let mut saw_clip = (false, false);
    for case in cases {
        let agg = aggregation(case["loss_type"].as_str().unwrap());
        let beta = case["beta"].as_f64().unwrap();
        let logp = Var::from_tensor(&logp0).unwrap();
        let old_used = (case["old"] != "current").then_some(&old);
        let refp = (beta != 0.0).then_some(&reference);
        let cfg = GrpoLossConfig::new(agg, clip, beta, max_len);
        let out = loss_of(logp.as_tensor(), old_used, refp, None, &adv, &mask, &cfg).unwrap();
        let loss = out.loss;
        let grads = loss.backward().unwrap();
        let grad = grads
            .get(logp.as_tensor())
            .expect("gradient reaches logp")
            .to_vec2::<f32>()
            .unwrap();
        let want_loss = case["loss"].as_f64().unwrap();
        let got_loss = loss.to_scalar::<f32>().unwrap() as f64;
        let dl = rel_diff(got_loss, want_loss);
        max_loss = max_loss.max(dl);
        assert!(dl < 1e-5, "{case:?}: loss {got_loss} vs TRL {want_loss}");
        for (gr, wr) in grad.iter().zip(matrix(&case["grad_logp"])) {
            for (g, w) in gr.iter().zip(wr) {
                let d = (*g as f64 - w).abs();
                max_grad = max_grad.max(d);
                assert!(
                    d < 1e-6 + 1e-5 * w.abs(),
                    "{}: grad {g} vs TRL {w}",
                    case["loss_type"]
                );
            }
        }
        let m = out.sums.metrics();
        for (got, key) in [
            (m.clip_ratio_low_mean, "clip_ratio/low_mean"),
            (m.clip_ratio_high_mean, "clip_ratio/high_mean"),
            (m.clip_ratio_region_mean, "clip_ratio/region_mean"),
        ] {
            let want = case[key].as_f64().unwrap();
            max_metric = max_metric.max((got - want).abs());
            assert!((got - want).abs() < 1e-6, "{key}: {got} vs {want}");
        }
        if case["old"] == "stored" {
            saw_clip = (
                saw_clip.0 || m.clip_ratio_low_mean > 0.0,
                saw_clip.1 || m.clip_ratio_high_mean > 0.0,
            );
        }
        match (m.kl, case["kl"].as_f64()) {
            (Some(got), Some(want)) => {
                max_metric = max_metric.max((got - want).abs());
                assert!((got - want).abs() < 1e-6, "kl {got} vs {want}");
            }
            (None, None) => {}
            other => panic!("kl presence differs: {other:?}"),
        }
    }
    assert!(saw_clip.0 && saw_clip.1, "fixture must clip on both sides");
    println!("grpo loss: max rel diff = {max_loss:.3e}, grad max |diff| = {max_grad:.3e}, metrics max |diff| = {max_metric:.3e}");
}

#[test]
fn padding_values_cannot_poison_the_loss() {
    // Huge stored values at masked positions would give inf/NaN without the
    // masking of old/ref inputs.
    let dev = Device::Cpu;
    let logp =
        Var::from_tensor(&Tensor::new(&[[0.0f32, -1.0, -2.0, -0.5]], &dev).unwrap()).unwrap();
    let mask = Tensor::new(&[[0.0f32, 1.0, 1.0, 0.0]], &dev).unwrap();
    let old = Tensor::new(&[[-1e4f32, -1.1, -1.9, -1e4]], &dev).unwrap();
    let reference = Tensor::new(&[[1e4f32, -1.0, -2.1, 1e4]], &dev).unwrap();
    let adv = Tensor::new(&[1.0f32], &dev).unwrap();
    let clip = ClipRange {
        low: 0.2,
        high: 0.2,
    };
    let cfg = GrpoLossConfig::new(LossAggregation::Dapo, clip, 0.1, 4);
    let loss = loss_of(logp.as_tensor(), Some(&old), Some(&reference), None, &adv, &mask, &cfg).unwrap().loss;
    let g = loss
        .backward()
        .unwrap()
        .get(logp.as_tensor())
        .unwrap()
        .to_vec2::<f32>()
        .unwrap();
    assert!(loss.to_scalar::<f32>().unwrap().is_finite());
    assert!(g[0].iter().all(|x| x.is_finite()), "{g:?}");
    assert_eq!((g[0][0], g[0][3]), (0.0, 0.0));
    // beta > 0 without reference log-probs is an error
    let err = loss_of(logp.as_tensor(), Some(&old), None, None, &adv, &mask, &cfg).unwrap_err().to_string();
    assert!(err.contains("no reference log-probs"), "{err}");
}

#[test]
fn truncated_importance_sampling_matches_trl() {
    let f = fixture("tis.json");
    let logp0 = tensor2(&f["logp"]);
    let old = tensor2(&f["old_logp"]);
    let sampling = tensor2(&f["sampling_logp"]);
    let reference = tensor2(&f["ref_logp"]);
    let mask = tensor2(&f["mask"]);
    let adv_v: Vec<f32> = floats(&f["advantages"]).iter().map(|&x| x as f32).collect();
    let adv = Tensor::new(adv_v.as_slice(), &Device::Cpu).unwrap();
    let clip = ClipRange { low: f["eps_low"].as_f64().unwrap(), high: f["eps_high"].as_f64().unwrap() };
    let cap = f["cap"].as_f64().unwrap();
    let max_len = f["max_completion_length"].as_u64().unwrap() as usize;
    let drift = Drift::of(&old, &sampling, &mask, Some(cap)).unwrap();
    let m = drift.sums.metrics().unwrap();
    for (got, key) in [
        (m.logp_difference_mean, "sampling/sampling_logp_difference/mean"),
        (m.logp_difference_max, "sampling/sampling_logp_difference/max"),
        (m.ratio_min, "sampling/importance_sampling_ratio/min"),
        (m.ratio_mean, "sampling/importance_sampling_ratio/mean"),
        (m.ratio_max, "sampling/importance_sampling_ratio/max"),
    ] {
        let want = f[key].as_f64().unwrap();
        assert!((got - want).abs() < 1e-6, "{key}: {got} vs TRL {want}");
    }
    assert_eq!(m.ratio_max, cap, "the cap is reached, so truncation is exercised");
    let cases = f["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 4);
    let mut worst = 0f64;
    for case in cases {
        let agg = aggregation(case["loss_type"].as_str().unwrap());
        let beta = case["beta"].as_f64().unwrap();
        let logp = Var::from_tensor(&logp0).unwrap();
        let refp = (beta != 0.0).then_some(&reference);
        let plain_cfg = GrpoLossConfig::new(agg, clip, beta, max_len);
        let cfg = GrpoLossConfig { rollout_correction: RolloutCorrection::Tis, tis_cap: cap, ..plain_cfg };
        let loss = loss_of(logp.as_tensor(), Some(&old), refp, Some(&sampling), &adv, &mask, &cfg).unwrap().loss;
        let got_loss = loss.to_scalar::<f32>().unwrap() as f64;
        let want_loss = case["loss"].as_f64().unwrap();
        assert!(rel_diff(got_loss, want_loss) < 1e-5, "{case:?}: loss {got_loss} vs TRL {want_loss}");
        let grad = loss.backward().unwrap().get(logp.as_tensor()).unwrap().to_vec2::<f32>().unwrap();
        for (gr, wr) in grad.iter().zip(matrix(&case["grad_logp"])) {
            for (g, w) in gr.iter().zip(wr) {
                let d = (*g as f64 - w).abs();
                worst = worst.max(d);
                assert!(d < 1e-6 + 1e-5 * w.abs(), "{}: grad {g} vs TRL {w}", case["loss_type"]);
            }
        }
        // Without the correction the loss differs: the test can fail.
        let plain = loss_of(logp.as_tensor(), Some(&old), refp, Some(&sampling), &adv, &mask, &plain_cfg).unwrap().loss;
        let plain_loss = plain.to_scalar::<f32>().unwrap() as f64;
        assert!(rel_diff(plain_loss, want_loss) > 1e-3, "TIS changes the loss ({plain_loss} vs {want_loss})");
    }
    println!("TIS vs TRL {}: worst gradient |diff| {worst:.3e}", f["trl_version"]);
}

/// The gradient of `loss` with respect to `logp`, as `[b, t]` rows.
fn grad_rows(loss: &Tensor, logp: &Var) -> Vec<Vec<f32>> {
    loss.backward().unwrap().get(logp.as_tensor()).expect("gradient reaches logp").to_vec2::<f32>().unwrap()
}

#[test]
fn an_epsilon_of_zero_matches_trl_on_policy() {
    // On-policy the ratio is exactly 1: with an epsilon of 0 it sits on an end
    // of the clip range, where torch.clamp passes no gradient and torch.min
    // halves the tie, so TRL's gradient is -A*w/2 (Candle's own clamp would
    // give 3/4 of it). Both the autograd path (beta > 0) and the closed form
    // of the folded head (beta = 0) must give TRL's numbers.
    let f = fixture("clip-edges.json");
    let logp0 = tensor2(&f["logp"]);
    let reference = tensor2(&f["ref_logp"]);
    let mask = tensor2(&f["mask"]);
    let adv_v: Vec<f32> = floats(&f["advantages"]).iter().map(|&x| x as f32).collect();
    let adv = Tensor::new(adv_v.as_slice(), &Device::Cpu).unwrap();
    let max_len = f["max_completion_length"].as_u64().unwrap() as usize;
    let totals = BatchTotals::of_mask(&mask).unwrap();
    let cases = f["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 24);
    let mut worst = 0f64;
    for case in cases {
        let clip = ClipRange { low: case["eps_low"].as_f64().unwrap(), high: case["eps_high"].as_f64().unwrap() };
        let beta = case["beta"].as_f64().unwrap();
        let cfg = GrpoLossConfig::new(aggregation(case["loss_type"].as_str().unwrap()), clip, beta, max_len);
        let logp = Var::from_tensor(&logp0).unwrap();
        let out = loss_of(logp.as_tensor(), None, (beta != 0.0).then_some(&reference), None, &adv, &mask, &cfg).unwrap();
        let want_loss = case["loss"].as_f64().unwrap();
        assert!((out.loss.to_scalar::<f32>().unwrap() as f64 - want_loss).abs() < 1e-6, "{case:?}: loss");
        let want = matrix(&case["grad_logp"]);
        let mut check = |got: &[Vec<f32>], what: &str| {
            for (gr, wr) in got.iter().zip(&want) {
                for (g, w) in gr.iter().zip(wr) {
                    let d = (*g as f64 - w).abs();
                    worst = worst.max(d);
                    assert!(d < 1e-6 + 1e-5 * w.abs(), "{what} {}: {g} vs TRL {w}", case["loss_type"]);
                }
            }
        };
        check(&grad_rows(&out.loss, &logp), "autograd");
        if beta == 0.0 {
            let c = linear_coefficients(&adv, &mask, Aggregate::rows(&cfg, totals), clip).unwrap();
            check(&c.to_vec2::<f32>().unwrap(), "closed form");
        }
    }
    println!("epsilon 0 vs TRL {}: worst gradient |diff| {worst:.3e}", f["trl_version"]);
}

#[test]
fn the_folded_heads_closed_form_equals_autograd_exactly() {
    // The folded head (on-policy, beta = 0, no TIS) takes its coefficients
    // from the closed form; they must be the very numbers autograd gives
    // through grpo_loss, for every aggregation, both micro-batch layouts
    // (a row's formula, and per-token weights as packed rows use) and clip
    // ranges with and without an epsilon of 0.
    let dev = Device::Cpu;
    let (b, t) = (5, 9);
    let lens = [8usize, 3, 6, 1, 5];
    let mut mask = vec![0f32; b * t];
    for (i, &n) in lens.iter().enumerate() {
        for j in 1..=n {
            mask[i * t + j] = if (i + j) % 5 == 4 { 0.0 } else { 1.0 };
        }
    }
    let mask = Tensor::from_vec(mask, (b, t), &dev).unwrap();
    let logp0 = Tensor::from_vec((0..b * t).map(|i| -0.1 - (i % 7) as f32 * 0.37).collect::<Vec<_>>(), (b, t), &dev).unwrap();
    let adv_rows = [1.37f32, -0.61, 0.0, 2.9, -1.113];
    let adv = Tensor::new(&adv_rows, &dev).unwrap();
    let adv_tokens = adv.unsqueeze(1).unwrap().broadcast_as((b, t)).unwrap().contiguous().unwrap();
    let totals = BatchTotals::of_mask(&mask).unwrap();
    let mask_rows = mask.to_vec2::<f32>().unwrap();
    let mut compared = 0;
    for agg in [LossAggregation::Grpo, LossAggregation::Bnpo, LossAggregation::DrGrpo, LossAggregation::Dapo] {
        let weights: Vec<f32> = mask_rows
            .iter()
            .flat_map(|row| {
                let w = token_weight(agg, totals, 12, row.iter().map(|&m| m as f64).sum());
                row.iter().map(move |&m| (m as f64 * w) as f32)
            })
            .collect();
        let weights = Tensor::from_vec(weights, (b, t), &dev).unwrap();
        for (low, high) in [(0.2, 0.28), (0.0, 0.28), (0.2, 0.0), (0.0, 0.0)] {
            let clip = ClipRange { low, high };
            let cfg = GrpoLossConfig::new(agg, clip, 0.0, 12);
            for (aggregate, advantages) in [(Aggregate::rows(&cfg, totals), &adv), (Aggregate::Weights(&weights), &adv_tokens)] {
                let logp = Var::from_tensor(&logp0).unwrap();
                let x = LossInputs { logp: logp.as_tensor(), old: None, reference: None, rollout: None, advantages, mask: &mask, entropy: None, sequences: None };
                let auto = grad_rows(&grpo_loss(x, aggregate, &cfg).unwrap().loss, &logp);
                let closed = linear_coefficients(advantages, &mask, aggregate, clip).unwrap().to_vec2::<f32>().unwrap();
                assert_eq!(closed, auto, "{agg:?} {clip:?} {aggregate:?}");
                assert!(auto.iter().flatten().any(|&g| g != 0.0));
                compared += 1;
            }
        }
    }
    assert_eq!(compared, 32);
}

/// The GSPO config of a fixture case: sequence-level ratios.
fn gspo(agg: LossAggregation, clip: ClipRange, beta: f64, max_len: usize) -> GrpoLossConfig {
    GrpoLossConfig { importance_sampling: ImportanceSampling::Sequence, ..GrpoLossConfig::new(agg, clip, beta, max_len) }
}

/// Asserts `grad` (of `loss`) is TRL's within 1e-6 + 1e-5 relative, returning the worst |diff|.
fn assert_matches_trl(loss: &Tensor, logp: &Var, case: &Value) -> f64 {
    let want_loss = case["loss"].as_f64().unwrap();
    let got_loss = loss.to_scalar::<f32>().unwrap() as f64;
    assert!(rel_diff(got_loss, want_loss) < 1e-5, "{}: loss {got_loss} vs TRL {want_loss}", case["loss_type"]);
    let mut worst = 0f64;
    for (gr, wr) in grad_rows(loss, logp).iter().zip(matrix(&case["grad_logp"])) {
        for (g, w) in gr.iter().zip(wr) {
            let d = (*g as f64 - w).abs();
            worst = worst.max(d);
            assert!(d < 1e-6 + 1e-5 * w.abs(), "{} beta {} old {}: grad {g} vs TRL {w}", case["loss_type"], case["beta"], case["old"]);
        }
    }
    worst
}

#[test]
fn gspo_matches_trl_for_every_aggregation() {
    let f = fixture("gspo.json");
    // The same episodes as the token-level fixture.
    let token_level = fixture("loss.json");
    for key in ["logp", "old_logp", "ref_logp", "advantages", "mask"] {
        assert_eq!(f[key], token_level[key], "{key}");
    }
    let logp0 = tensor2(&f["logp"]);
    let reference = tensor2(&f["ref_logp"]);
    let mask = tensor2(&f["mask"]);
    let olds = [("stored", tensor2(&f["old_logp"])), ("shifted", tensor2(&f["shifted_old_logp"]))];
    let adv_v: Vec<f32> = floats(&f["advantages"]).iter().map(|&x| x as f32).collect();
    let adv = Tensor::new(adv_v.as_slice(), &Device::Cpu).unwrap();
    let clip = ClipRange { low: f["eps_low"].as_f64().unwrap(), high: f["eps_high"].as_f64().unwrap() };
    let max_len = f["max_completion_length"].as_u64().unwrap() as usize;
    let cases = f["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 24);
    let (mut worst, mut saw_clip) = (0f64, (false, false));
    for case in cases {
        let agg = aggregation(case["loss_type"].as_str().unwrap());
        let beta = case["beta"].as_f64().unwrap();
        let old = olds.iter().find(|(k, _)| case["old"] == *k).map(|(_, t)| t);
        assert!(old.is_some() || case["old"] == "current", "{case:?}");
        let refp = (beta != 0.0).then_some(&reference);
        let logp = Var::from_tensor(&logp0).unwrap();
        let out = loss_of(logp.as_tensor(), old, refp, None, &adv, &mask, &gspo(agg, clip, beta, max_len)).unwrap();
        worst = worst.max(assert_matches_trl(&out.loss, &logp, case));
        let m = out.sums.metrics();
        for (got, key) in [
            (m.clip_ratio_low_mean, "clip_ratio/low_mean"),
            (m.clip_ratio_high_mean, "clip_ratio/high_mean"),
            (m.clip_ratio_region_mean, "clip_ratio/region_mean"),
        ] {
            let want = case[key].as_f64().unwrap();
            assert!((got - want).abs() < 1e-6, "{key}: {got} vs TRL {want}");
        }
        saw_clip = (saw_clip.0 || m.clip_ratio_low_mean > 0.0, saw_clip.1 || m.clip_ratio_high_mean > 0.0);
        match (m.kl, case["kl"].as_f64()) {
            (Some(got), Some(want)) => assert!((got - want).abs() < 1e-6, "kl {got} vs {want}"),
            (None, None) => {}
            other => panic!("kl presence differs: {other:?}"),
        }
        // Token-level ratios give another loss off-policy: the test can fail.
        if let Some(old) = old {
            let token = loss_of(logp.as_tensor(), Some(old), refp, None, &adv, &mask, &GrpoLossConfig::new(agg, clip, beta, max_len)).unwrap();
            let (t, want) = (token.loss.to_scalar::<f32>().unwrap() as f64, case["loss"].as_f64().unwrap());
            assert!(rel_diff(t, want) > 1e-3, "{case:?}: token level gives GSPO's loss {t}");
        }
    }
    assert!(saw_clip.0 && saw_clip.1, "the fixture clips sequences on both sides");
    println!("GSPO vs TRL {}: worst gradient |diff| {worst:.3e}", f["trl_version"]);
}

#[test]
fn gspo_with_truncated_importance_sampling_matches_trl() {
    let f = fixture("gspo.json");
    let t = &f["tis"];
    let token_level = fixture("tis.json");
    for key in ["logp", "old_logp", "sampling_logp", "ref_logp", "advantages", "mask", "cap"] {
        assert_eq!(t[key], token_level[key], "{key}");
    }
    let logp0 = tensor2(&t["logp"]);
    let (old, sampling, reference, mask) = (tensor2(&t["old_logp"]), tensor2(&t["sampling_logp"]), tensor2(&t["ref_logp"]), tensor2(&t["mask"]));
    let adv_v: Vec<f32> = floats(&t["advantages"]).iter().map(|&x| x as f32).collect();
    let adv = Tensor::new(adv_v.as_slice(), &Device::Cpu).unwrap();
    let clip = ClipRange { low: f["eps_low"].as_f64().unwrap(), high: f["eps_high"].as_f64().unwrap() };
    let max_len = f["max_completion_length"].as_u64().unwrap() as usize;
    let cases = t["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 8);
    let mut worst = 0f64;
    for case in cases {
        let agg = aggregation(case["loss_type"].as_str().unwrap());
        let beta = case["beta"].as_f64().unwrap();
        let refp = (beta != 0.0).then_some(&reference);
        let cfg = GrpoLossConfig { rollout_correction: RolloutCorrection::Tis, tis_cap: t["cap"].as_f64().unwrap(), ..gspo(agg, clip, beta, max_len) };
        let logp = Var::from_tensor(&logp0).unwrap();
        let out = loss_of(logp.as_tensor(), Some(&old), refp, Some(&sampling), &adv, &mask, &cfg).unwrap();
        worst = worst.max(assert_matches_trl(&out.loss, &logp, case));
    }
    println!("GSPO with TIS vs TRL {}: worst gradient |diff| {worst:.3e}", f["trl_version"]);
}

/// `[b, t]` rows as one packed row `[1, b*t]` (each row a sequence of `t` columns).
fn packed(x: &Tensor) -> Tensor {
    x.reshape((1, x.elem_count())).unwrap()
}

#[test]
fn gspo_on_packed_rows_equals_unpacked() {
    // The fixture's rows end to end in one packed row: the sequence ratio is a
    // mean over each episode's tokens (Segments), never over the packed row.
    let f = fixture("gspo.json");
    let logp0 = tensor2(&f["logp"]);
    let (reference, mask) = (tensor2(&f["ref_logp"]), tensor2(&f["mask"]));
    let old = tensor2(&f["shifted_old_logp"]);
    let (b, t) = mask.dims2().unwrap();
    let adv_v: Vec<f32> = floats(&f["advantages"]).iter().map(|&x| x as f32).collect();
    let adv = Tensor::new(adv_v.as_slice(), &Device::Cpu).unwrap();
    let adv_tokens = packed(&adv.unsqueeze(1).unwrap().broadcast_as((b, t)).unwrap().contiguous().unwrap());
    let clip = ClipRange { low: 0.2, high: 0.28 };
    let totals = BatchTotals::of_mask(&mask).unwrap();
    let segments = Segments::of_lengths(&vec![t; b], &Device::Cpu).unwrap();
    let mask_rows = mask.to_vec2::<f32>().unwrap();
    for agg in [LossAggregation::Grpo, LossAggregation::Bnpo, LossAggregation::DrGrpo, LossAggregation::Dapo] {
        for beta in [0.0, 0.04] {
            let cfg = gspo(agg, clip, beta, 10);
            let refp = (beta != 0.0).then_some(&reference);
            let logp = Var::from_tensor(&logp0).unwrap();
            let rows = loss_of(logp.as_tensor(), Some(&old), refp, None, &adv, &mask, &cfg).unwrap();
            let want = grad_rows(&rows.loss, &logp);
            let weights: Vec<f32> = mask_rows
                .iter()
                .flat_map(|row| {
                    let w = token_weight(agg, totals, 10, row.iter().map(|&m| m as f64).sum());
                    row.iter().map(move |&m| (m as f64 * w) as f32)
                })
                .collect();
            let weights = Tensor::from_vec(weights, (1, b * t), &Device::Cpu).unwrap();
            let (p_old, p_ref, p_mask) = (packed(&old), refp.map(packed), packed(&mask));
            let of = |sequences: Option<&Segments>| {
                let logp = Var::from_tensor(&logp0).unwrap();
                let p_logp = packed(logp.as_tensor());
                let x = LossInputs { logp: &p_logp, old: Some(&p_old), reference: p_ref.as_ref(), rollout: None, advantages: &adv_tokens, mask: &p_mask, entropy: None, sequences };
                let out = grpo_loss(x, Aggregate::Weights(&weights), &cfg).unwrap();
                let g = grad_rows(&out.loss, &logp);
                (out, g)
            };
            let (out, got) = of(Some(&segments));
            let (l0, l1) = (rows.loss.to_scalar::<f32>().unwrap() as f64, out.loss.to_scalar::<f32>().unwrap() as f64);
            // (a sum of terms of both signs: float rounding, relative to its terms)
            assert!((l1 - l0).abs() < 1e-7 + 1e-6 * l0.abs(), "{agg:?} beta {beta}: packed loss {l1} vs rows {l0}");
            for (gr, wr) in got.iter().zip(&want) {
                for (g, w) in gr.iter().zip(wr) {
                    assert!((g - w).abs() <= 1e-7 + 1e-6 * w.abs(), "{agg:?} beta {beta}: packed grad {g} vs rows {w}");
                }
            }
            let (mr, mp) = (rows.sums.metrics(), out.sums.metrics());
            assert!((mr.clip_ratio_region_mean - mp.clip_ratio_region_mean).abs() < 1e-6 && mr.clip_ratio_region_mean > 0.0, "{mr:?} vs {mp:?}");
            // The packed row taken as one sequence is another loss.
            let (whole, _) = of(None);
            let lw = whole.loss.to_scalar::<f32>().unwrap() as f64;
            assert!(rel_diff(lw, l0) > 1e-3, "{agg:?}: a packed row's mean ({lw}) must not be the episodes' ({l0})");
        }
    }
}

#[test]
fn gspos_on_policy_gradient_is_the_folded_closed_form() {
    // On-policy the sequence ratio is 1 and its gradient spreads 1/n over the
    // sequence's n tokens, so the folded closed form (-A*w per token) is
    // GSPO's gradient too, for both layouts and every clip range (up to float
    // rounding: the spread is summed and divided).
    let f = fixture("clip-edges.json");
    let logp0 = tensor2(&f["logp"]);
    let mask = tensor2(&f["mask"]);
    let (b, t) = mask.dims2().unwrap();
    let adv_v: Vec<f32> = floats(&f["advantages"]).iter().map(|&x| x as f32).collect();
    let adv = Tensor::new(adv_v.as_slice(), &Device::Cpu).unwrap();
    let adv_tokens = packed(&adv.unsqueeze(1).unwrap().broadcast_as((b, t)).unwrap().contiguous().unwrap());
    let totals = BatchTotals::of_mask(&mask).unwrap();
    let segments = Segments::of_lengths(&vec![t; b], &Device::Cpu).unwrap();
    let p_mask = packed(&mask);
    let mut worst = 0f64;
    for agg in [LossAggregation::Grpo, LossAggregation::Bnpo, LossAggregation::DrGrpo, LossAggregation::Dapo] {
        let weights: Vec<f32> = mask.to_vec2::<f32>().unwrap().iter().flat_map(|row| {
            let w = token_weight(agg, totals, 8, row.iter().map(|&m| m as f64).sum());
            row.iter().map(move |&m| (m as f64 * w) as f32).collect::<Vec<_>>()
        }).collect();
        let weights = Tensor::from_vec(weights, (1, b * t), &Device::Cpu).unwrap();
        for (low, high) in [(0.2, 0.28), (0.0, 0.28), (0.2, 0.0), (0.0, 0.0)] {
            let clip = ClipRange { low, high };
            let cfg = gspo(agg, clip, 0.0, 8);
            let logp = Var::from_tensor(&logp0).unwrap();
            let rows = grad_rows(&loss_of(logp.as_tensor(), None, None, None, &adv, &mask, &cfg).unwrap().loss, &logp);
            let closed = linear_coefficients(&adv, &mask, Aggregate::rows(&cfg, totals), clip).unwrap().to_vec2::<f32>().unwrap();
            let logp = Var::from_tensor(&logp0).unwrap();
            let p_logp = packed(logp.as_tensor());
            let x = LossInputs { logp: &p_logp, old: None, reference: None, rollout: None, advantages: &adv_tokens, mask: &p_mask, entropy: None, sequences: Some(&segments) };
            let packed_grad = grad_rows(&grpo_loss(x, Aggregate::Weights(&weights), &cfg).unwrap().loss, &logp);
            let packed_closed = linear_coefficients(&adv_tokens, &p_mask, Aggregate::Weights(&weights), clip).unwrap().to_vec2::<f32>().unwrap();
            let packed_closed: Vec<Vec<f32>> = packed_closed[0].chunks(t).map(<[f32]>::to_vec).collect();
            for (auto, closed) in [(&rows, &closed), (&packed_grad, &packed_closed)] {
                for (ar, cr) in auto.iter().zip(closed.iter()) {
                    for (a, c) in ar.iter().zip(cr) {
                        let d = (*a as f64 - *c as f64).abs();
                        worst = worst.max(d);
                        assert!(d <= 1e-7 + 1e-6 * (*c as f64).abs(), "{agg:?} {clip:?}: autograd {a} vs closed form {c}");
                    }
                }
            }
            assert!(rows.iter().flatten().any(|&g| g != 0.0));
        }
    }
    println!("GSPO on-policy: closed form vs autograd worst |diff| {worst:.3e}");
}
