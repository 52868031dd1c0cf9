//! AdamW, gradient clipping and LR schedules against torch / transformers
//! goldens (scripts/make_grpo_fixtures.py), bf16 master weights, and the
//! optimizer state round trip.

use candle_core::{DType, Device, Tensor, Var};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use trainer::optim::{AdamW, AdamWConfig, Gradients, LrSchedule, WeightDecayScope};

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/grpo")
}

fn meta() -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir().join("optim.json")).unwrap()).unwrap()
}

fn golden() -> HashMap<String, Tensor> {
    candle_core::safetensors::load(dir().join("optim.safetensors"), &Device::Cpu).unwrap()
}

fn max_abs_diff(a: &Tensor, b: &Tensor) -> f64 {
    (a.to_dtype(DType::F64).unwrap() - b.to_dtype(DType::F64).unwrap())
        .unwrap()
        .abs()
        .unwrap()
        .flatten_all()
        .unwrap()
        .max(0)
        .unwrap()
        .to_scalar::<f64>()
        .unwrap()
}

fn config(m: &Value) -> AdamWConfig {
    AdamWConfig {
        beta1: m["betas"][0].as_f64().unwrap(),
        beta2: m["betas"][1].as_f64().unwrap(),
        eps: m["eps"].as_f64().unwrap(),
        weight_decay: m["weight_decay"].as_f64().unwrap(),
        decay_scope: WeightDecayScope::All,
    }
}

fn names(m: &Value) -> Vec<String> {
    m["names"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap().to_string())
        .collect()
}

/// Runs the golden's 3 steps (clip then AdamW) on `dtype` parameters;
/// returns the optimizer, the params and the pre-clip norms.
fn run(dtype: DType, steps: usize) -> (AdamW, BTreeMap<String, Var>, Vec<f64>) {
    run_from(dtype, dtype, steps)
}

/// As [`run`], with the initial weights first rounded to `init_dtype`.
fn run_from(
    init_dtype: DType,
    dtype: DType,
    steps: usize,
) -> (AdamW, BTreeMap<String, Var>, Vec<f64>) {
    let (m, g) = (meta(), golden());
    let params: BTreeMap<String, Var> = names(&m)
        .into_iter()
        .map(|n| {
            let t = g[&format!("init.{n}")]
                .to_dtype(init_dtype)
                .unwrap()
                .to_dtype(dtype)
                .unwrap();
            (n, Var::from_tensor(&t).unwrap())
        })
        .collect();
    let mut opt = AdamW::new(&params, config(&m)).unwrap();
    let mut norms = Vec::new();
    for k in 0..steps {
        let mut grads = Gradients::default();
        for n in params.keys() {
            grads.add(n, &g[&format!("grad{k}.{n}")]).unwrap();
        }
        norms.push(
            grads
                .clip_global_norm(m["max_norm"].as_f64().unwrap())
                .unwrap(),
        );
        opt.step(&params, &grads, m["lrs"][k].as_f64().unwrap())
            .unwrap();
    }
    (opt, params, norms)
}

#[test]
fn adamw_and_clipping_match_torch() {
    let (m, g) = (meta(), golden());
    let (opt, params, norms) = run(DType::F32, 3);
    let mut max_norm_rel = 0f64;
    for (got, want) in norms.iter().zip(m["total_norms"].as_array().unwrap()) {
        let want = want.as_f64().unwrap();
        max_norm_rel = max_norm_rel.max((got - want).abs() / want);
    }
    println!("clip_grad_norm_: max rel diff = {max_norm_rel:.3e}");
    assert!(max_norm_rel < 1e-6);
    let mut max_p = 0f64;
    for (n, v) in &params {
        max_p = max_p.max(max_abs_diff(v.as_tensor(), &g[&format!("after2.{n}")]));
    }
    let state = opt.export_state().unwrap();
    let mut max_m = 0f64;
    for n in params.keys() {
        max_m = max_m.max(max_abs_diff(
            &state[&format!("state.{n}.exp_avg")],
            &g[&format!("exp_avg.{n}")],
        ));
        max_m = max_m.max(max_abs_diff(
            &state[&format!("state.{n}.exp_avg_sq")],
            &g[&format!("exp_avg_sq.{n}")],
        ));
    }
    println!("adamw: params max |diff| = {max_p:.3e}, moments max |diff| = {max_m:.3e}");
    assert!(max_p < 1e-6, "params differ from torch by {max_p:.3e}");
    assert!(max_m < 1e-6, "moments differ from torch by {max_m:.3e}");
    // the update moved the weights well beyond the tolerance
    let init = &g[&format!("init.{}", names(&m)[0])];
    assert!(max_abs_diff(params[&names(&m)[0]].as_tensor(), init) > 1e-3);
}

#[test]
fn clip_scales_only_above_max_norm() {
    let mut g = Gradients::default();
    g.add("a", &Tensor::new(&[3.0f32, 0.0], &Device::Cpu).unwrap())
        .unwrap();
    g.add("b", &Tensor::new(&[[0.0f32, 4.0]], &Device::Cpu).unwrap())
        .unwrap();
    assert_eq!(g.clip_global_norm(10.0).unwrap(), 5.0);
    assert_eq!(
        g.get("a").unwrap().to_vec1::<f32>().unwrap(),
        vec![3.0, 0.0]
    );
    let total = g.clip_global_norm(1.0).unwrap();
    assert_eq!(total, 5.0);
    let after = g.global_norm().unwrap();
    assert!((after - 1.0).abs() < 1e-5, "{after}");
}

#[test]
fn bf16_parameters_keep_f32_masters() {
    // f32 parameters starting from the bf16-rounded weights: the reference
    // trajectory the masters must follow exactly.
    let (opt32, p32, _) = run_from(DType::BF16, DType::F32, 3);
    let (opt16, p16, _) = run(DType::BF16, 3);
    let s32 = opt32.export_state().unwrap();
    let s16 = opt16.export_state().unwrap();
    let (mut max_master, mut max_var, mut moved) = (0f64, 0f64, 0f64);
    for (n, v) in &p16 {
        assert_eq!(v.dtype(), DType::BF16);
        let master = &s16[&format!("state.{n}.master")];
        assert_eq!(master.dtype(), DType::F32);
        assert_eq!(s16[&format!("state.{n}.exp_avg")].dtype(), DType::F32);
        // the var is the master rounded to bf16
        assert_eq!(
            max_abs_diff(v.as_tensor(), &master.to_dtype(DType::BF16).unwrap()),
            0.0
        );
        max_master = max_master.max(max_abs_diff(master, p32[n].as_tensor()));
        max_var = max_var.max(max_abs_diff(v.as_tensor(), p32[n].as_tensor()));
        moved = moved.max(max_abs_diff(master, &master.to_dtype(DType::BF16).unwrap()));
        assert!(!s32.contains_key(&format!("state.{n}.master")));
    }
    println!(
        "bf16 masters vs f32 run: max |diff| = {max_master:.3e} (bf16 weights: {max_var:.3e})"
    );
    assert!(max_master < 1e-7, "{max_master:.3e}");
    // the masters hold precision the bf16 weights cannot
    assert!(moved > 0.0);
}

#[test]
fn state_round_trip_continues_identically_and_names_missing_tensors() {
    let m = meta();
    let (opt_a, params_a, _) = run(DType::F32, 2);
    let saved = opt_a.export_state().unwrap();
    assert_eq!(saved["step"].to_vec1::<i64>().unwrap(), vec![2]);
    // a fresh optimizer with the saved state and weights continues identically
    let params_b: BTreeMap<String, Var> = params_a
        .iter()
        .map(|(n, v)| {
            (
                n.clone(),
                Var::from_tensor(&v.as_tensor().copy().unwrap()).unwrap(),
            )
        })
        .collect();
    let mut opt_b = AdamW::new(&params_b, config(&m)).unwrap();
    opt_b.import_state(&saved).unwrap();
    assert_eq!(opt_b.steps(), 2);
    let g = golden();
    let mut opt_a = opt_a;
    for (opt, params) in [(&mut opt_a, &params_a), (&mut opt_b, &params_b)] {
        let mut grads = Gradients::default();
        for n in params.keys() {
            grads.add(n, &g[&format!("grad2.{n}")]).unwrap();
        }
        grads.clip_global_norm(1.0).unwrap();
        opt.step(params, &grads, 2e-3).unwrap();
    }
    for n in params_a.keys() {
        assert_eq!(
            max_abs_diff(params_a[n].as_tensor(), params_b[n].as_tensor()),
            0.0,
            "{n}"
        );
    }
    // a missing tensor is named
    let name = names(&m)[1].clone();
    let mut broken = saved.clone();
    broken.remove(&format!("state.{name}.exp_avg_sq"));
    let err = AdamW::new(&params_b, config(&m))
        .unwrap()
        .import_state(&broken)
        .unwrap_err()
        .to_string();
    assert!(err.contains(&format!("state.{name}.exp_avg_sq")), "{err}");
    // a wrong shape is named
    let mut broken = saved.clone();
    broken.insert(
        format!("state.{name}.exp_avg"),
        Tensor::zeros(7, DType::F32, &Device::Cpu).unwrap(),
    );
    let err = AdamW::new(&params_b, config(&m))
        .unwrap()
        .import_state(&broken)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!("state.{name}.exp_avg")) && err.contains("shape"),
        "{err}"
    );
    // an extra tensor is named
    let mut broken = saved;
    broken.insert(
        "state.nope.exp_avg".into(),
        Tensor::zeros(1, DType::F32, &Device::Cpu).unwrap(),
    );
    let err = AdamW::new(&params_b, config(&m))
        .unwrap()
        .import_state(&broken)
        .unwrap_err()
        .to_string();
    assert!(err.contains("state.nope.exp_avg"), "{err}");
}

#[test]
fn weight_decay_scope_skips_norms_and_biases_like_transformers() {
    let s = WeightDecayScope::SkipBiasesAndNorms;
    for n in [
        "model.norm.weight",
        "model.layers.0.input_layernorm.weight",
        "model.layers.0.post_attention_layernorm.weight",
        "model.layers.0.self_attn.q_norm.weight",
        "model.layers.0.self_attn.k_norm.weight",
        "model.layers.0.self_attn.q_proj.bias",
    ] {
        assert!(!s.decays(n), "{n}");
    }
    for n in [
        "model.embed_tokens.weight",
        "model.layers.0.mlp.up_proj.weight",
        "lm_head.weight",
        "model.normalizer.weight",
    ] {
        assert!(s.decays(n), "{n}");
    }
    assert!(WeightDecayScope::All.decays("model.norm.weight"));
}

#[test]
fn lr_schedules_match_transformers() {
    let m = meta();
    let s = &m["schedules"];
    let steps: Vec<u64> = s["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect();
    let mut max = 0f64;
    for (key, sched) in [
        (
            "warmup_cosine",
            LrSchedule::WarmupCosine {
                warmup_steps: 3,
                total_steps: 10,
                min_lr_ratio: 0.0,
            },
        ),
        (
            "warmup_cosine_min_0.1",
            LrSchedule::WarmupCosine {
                warmup_steps: 3,
                total_steps: 10,
                min_lr_ratio: 0.1,
            },
        ),
        (
            "warmup_constant",
            LrSchedule::WarmupConstant { warmup_steps: 4 },
        ),
    ] {
        sched.validate().unwrap();
        for (step, want) in steps.iter().zip(s[key].as_array().unwrap()) {
            let d = (sched.factor(*step) - want.as_f64().unwrap()).abs();
            max = max.max(d);
            assert!(
                d < 1e-12,
                "{key} step {step}: {} vs {want}",
                sched.factor(*step)
            );
        }
    }
    assert_eq!(LrSchedule::Constant.factor(123), 1.0);
    assert!(LrSchedule::WarmupCosine {
        warmup_steps: 11,
        total_steps: 10,
        min_lr_ratio: 0.0
    }
    .validate()
    .is_err());
    println!("lr schedules: max |diff| = {max:.3e}");
}

#[test]
fn cosine_total_zero_runs_over_the_run_length() {
    let open = LrSchedule::WarmupCosine { warmup_steps: 3, total_steps: 0, min_lr_ratio: 0.1 };
    open.validate().unwrap();
    let set = LrSchedule::WarmupCosine { warmup_steps: 3, total_steps: 10, min_lr_ratio: 0.1 };
    let run = open.for_run(10);
    assert_eq!(run, set);
    for step in 0..10 {
        assert_eq!(run.factor(step), set.factor(step), "step {step}");
    }
    // The last update of the run has the floor's neighbourhood, never a rise.
    let f: Vec<f64> = (3..10).map(|s| run.factor(s)).collect();
    assert!(f.windows(2).all(|w| w[1] <= w[0]), "{f:?}");
    // A hand-set total is kept; other schedules pass through.
    assert_eq!(set.for_run(99), set);
    assert_eq!(LrSchedule::Constant.for_run(5), LrSchedule::Constant);
}
