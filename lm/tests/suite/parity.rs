//! Parity with transformers on tiny random Qwen3 checkpoints (f32, CPU):
//! per-token log-probs, greedy continuations, and the gradients of a loss.

use crate::common;

use candle_core::Device;
use common::{expected, ids, load, model, CASES};
use rand::SeedableRng;
use lm::generate::{generate, GenerateConfig};
use lm::logprobs::score_sequence;
use lm::sampling::SamplerConfig;
use lm::CausalLm;

/// Absolute tolerance on log-probs (issue 2: within 1e-4).
const LOGPROB_TOL: f32 = 1e-4;
/// Relative tolerance on gradients: max |g - g_ref| / max |g_ref| per tensor.
const GRAD_REL_TOL: f32 = 1e-4;

#[test]
fn logprobs_match_transformers() {
    for case in CASES {
        let m = model(case);
        let mut worst = 0f32;
        for row in expected(case)["score"].as_array().unwrap() {
            let ids = ids(&row["ids"]);
            let want = row["logprobs"].as_array().unwrap();
            let got = score_sequence(&m, &ids).unwrap();
            assert_eq!(got.len(), want.len());
            assert!(got[0].is_none() && want[0].is_null());
            for (g, w) in got.iter().zip(want).skip(1) {
                let d = (g.unwrap() - w.as_f64().unwrap() as f32).abs();
                worst = worst.max(d);
            }
        }
        println!("{case}: log-prob max |diff| = {worst:.3e} (tolerance {LOGPROB_TOL:e})");
        assert!(worst <= LOGPROB_TOL, "{case}: log-prob diff {worst}");
    }
}

#[test]
fn batched_greedy_generation_matches_transformers() {
    for case in CASES {
        let m = model(case);
        let rows = expected(case)["greedy"].as_array().unwrap().clone();
        let prompts: Vec<Vec<u32>> = rows.iter().map(|r| ids(&r["prompt"])).collect();
        let cfg = GenerateConfig { max_new_tokens: 16, sampler: SamplerConfig::default(), stop_tokens: vec![] };
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
        let got = generate(&m, &prompts, &cfg, &mut rng).unwrap();
        for (g, r) in got.iter().zip(&rows) {
            assert_eq!(g.ids, ids(&r["new"]), "{case}: prompt {:?}", r["prompt"]);
        }
        println!("{case}: {} prompts x 16 greedy tokens identical to transformers", rows.len());
    }
}


#[test]
fn gradients_match_pytorch_and_reach_every_parameter() {
    for case in CASES {
        let (cfg, weights) = load(case);
        let (m, vars) = CausalLm::trainable(&cfg, &weights).unwrap();
        let exp = expected(case);
        let loss = common::mean_nll(&m, &ids(&exp["grad"]["ids"]));
        let want_loss = exp["grad"]["loss"].as_f64().unwrap() as f32;
        let got_loss = loss.to_scalar::<f32>().unwrap();
        assert!((got_loss - want_loss).abs() < 1e-4, "{case}: loss {got_loss} vs {want_loss}");
        let grads = loss.backward().unwrap();
        let reference = candle_core::safetensors::load(common::fixture_dir(case).join("grads.safetensors"), &Device::Cpu).unwrap();
        assert_eq!(reference.len(), vars.len(), "{case}: parameter count");
        let mut worst = (0f32, String::new());
        for (name, var) in &vars {
            let g = grads.get(var.as_tensor()).unwrap_or_else(|| panic!("{case}: no gradient for {name}"));
            let gmax = g.abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
            assert!(gmax > 0.0, "{case}: gradient of {name} is all zero");
            let r = &reference[name];
            let rmax = r.abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
            let diff = (g - r).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
            let rel = diff / rmax;
            if rel > worst.0 {
                worst = (rel, name.clone());
            }
            assert!(rel <= GRAD_REL_TOL, "{case}: {name}: relative gradient diff {rel:e}");
        }
        println!("{case}: {} parameters, all with non-zero gradients; worst relative diff {:.3e} ({})", vars.len(), worst.0, worst.1);
    }
}
