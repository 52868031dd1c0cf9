//! SFT's cross-entropy against transformers: on the fixture sequence with
//! every token trained, the loss and gradients of `sft_gradients` equal the
//! gradients of transformers' mean NLL (grads.safetensors, made by
//! scripts/make_model_fixtures.py); masked tokens and padding change nothing;
//! micro-batching gives the one-big-batch gradients.

use trainer::packing::MicroBatching;
use crate::common::{self, expected, ids, load, CASES};
use candle_core::Device;
use rollout::episode::filter::SftExample;
use lm::model::recompute::Recompute;
use trainer::sft::{sft_gradients, SftBatch};
use lm::CausalLm;

/// Relative tolerance on gradients: max |g - g_ref| / max |g_ref| per tensor.
const GRAD_REL_TOL: f32 = 1e-4;

fn example(ids: &[u32], mask: Vec<u8>) -> SftExample {
    SftExample { task_id: "t".into(), sample: 0, tokens: ids.to_vec(), loss_mask: mask, truncated_tokens: 0, reward: 1.0 }
}

fn max_rel(a: &candle_core::Tensor, b: &candle_core::Tensor) -> f32 {
    let bmax = b.abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
    (a - b).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap() / bmax.max(1e-30)
}

#[test]
fn sft_loss_and_gradients_match_transformers_mean_nll() {
    for case in CASES {
        let (cfg, w) = load(case);
        let (m, vars) = CausalLm::trainable(&cfg, &w).unwrap();
        let exp = expected(case);
        let seq = ids(&exp["grad"]["ids"]);
        let examples = vec![example(&seq, vec![1; seq.len()])];
        let batch = SftBatch::of(&examples, &[0], &Device::Cpu).unwrap();
        let (grads, loss) = sft_gradients(&m, &vars, &batch, MicroBatching::Rows(1), Recompute::Off).unwrap();
        let want = exp["grad"]["loss"].as_f64().unwrap();
        assert!((loss - want).abs() < 1e-5, "{case}: loss {loss} vs transformers {want}");
        let reference = candle_core::safetensors::load(common::fixture_dir(case).join("grads.safetensors"), &Device::Cpu).unwrap();
        let mut worst = 0f32;
        for name in vars.keys() {
            let rel = max_rel(grads.get(name).unwrap(), &reference[name]);
            worst = worst.max(rel);
            assert!(rel <= GRAD_REL_TOL, "{case}: {name}: relative diff {rel:e}");
        }
        println!("{case}: sft loss {loss:.6} (transformers {want:.6}); worst relative gradient diff {worst:.3e} (tol {GRAD_REL_TOL:e})");
    }
}

#[test]
fn masked_tokens_padding_and_micro_batches_change_nothing() {
    let (cfg, w) = load("untied");
    let (m, vars) = CausalLm::trainable(&cfg, &w).unwrap();
    let seq = ids(&expected("untied")["grad"]["ids"]);
    let n = seq.len();
    // Row 0: trains on its second half; row 1: shorter, trains on a middle span
    // (padded to row 0's width); row 2: a third sequence.
    let half: Vec<u8> = (0..n).map(|j| (j >= n / 2) as u8).collect();
    let short = &seq[..n - 3];
    let mid: Vec<u8> = (0..short.len()).map(|j| (j % 3 == 1) as u8).collect();
    let rev: Vec<u32> = seq.iter().rev().copied().collect();
    let examples = vec![example(&seq, half), example(short, mid), example(&rev, vec![1; n])];
    let batch = SftBatch::of(&examples, &[0, 1, 2], &Device::Cpu).unwrap();
    let (whole, loss_whole) = sft_gradients(&m, &vars, &batch, MicroBatching::Rows(3), Recompute::Off).unwrap();
    for (micro, recompute) in [
        (MicroBatching::Rows(1), Recompute::Off),
        (MicroBatching::Rows(2), Recompute::Off),
        (MicroBatching::Rows(1), Recompute::PerLayer),
        (MicroBatching::Tokens(2 * n), Recompute::Off),
        (MicroBatching::Tokens(3 * n), Recompute::PerLayer),
        (MicroBatching::Tokens(1), Recompute::Off),
    ] {
        let (split, loss_split) = sft_gradients(&m, &vars, &batch, micro, recompute).unwrap();
        assert!((loss_whole - loss_split).abs() < 1e-5 * loss_whole.abs(), "loss {loss_whole} vs {loss_split}");
        let worst = vars.keys().map(|k| max_rel(split.get(k).unwrap(), whole.get(k).unwrap())).fold(0f32, f32::max);
        assert!(worst < 1e-4, "micro {micro:?} {recompute:?}: relative diff {worst:e}");
        println!("micro-batch {micro:?}, recompute {recompute:?}: loss {loss_split:.6} vs {loss_whole:.6}, worst gradient diff {worst:.2e}");
    }
    // The loss is the mean NLL over exactly the masked tokens of the batch.
    let lp: Vec<Vec<f32>> = examples
        .iter()
        .map(|e| lm::logprobs::score_sequence(&m, &e.tokens).unwrap().into_iter().map(|x| x.unwrap_or(0.0)).collect())
        .collect();
    let (mut nll, mut count) = (0f64, 0f64);
    for (e, l) in examples.iter().zip(&lp) {
        for j in 1..e.tokens.len() {
            if e.loss_mask[j] == 1 {
                nll -= l[j] as f64;
                count += 1.0;
            }
        }
    }
    assert!((loss_whole - nll / count).abs() < 1e-5, "loss {loss_whole} vs mean masked NLL {}", nll / count);
}
