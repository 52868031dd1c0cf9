//! The folded weighted log-prob sum against the plain-tensor reference:
//! the sum, the per-token log-probs and entropies, and the gradients of
//! hidden and lm_head, over shapes that span several chunks and blocks.

use crate::common::{assert_close, ids, reference_entropy, tensor};
use candle_core::{Device, Tensor, Var};
use kernels::logprobs::{token_logprobs_reference, weighted_logprob_sum};

/// Relative tolerance of values and gradients (to the largest reference entry).
const REL: f32 = 1e-5;

/// Values and gradients of `scale * sum(w * logp) + 1` through the folded
/// op and through the reference, for one shape.
fn check(n: usize, d: usize, v: usize, temperature: f64, scale: f64, seed: u64) {
    let what = format!("N={n} d={d} V={v} T={temperature} scale={scale}");
    let h = Var::from_tensor(&tensor(seed, &[n, d], 1.0)).unwrap();
    let w = Var::from_tensor(&tensor(seed + 1, &[v, d], 1.0)).unwrap();
    let t = ids(seed + 2, n, v);
    let weights = tensor(seed + 3, &[n], 1.0);

    let folded = weighted_logprob_sum(h.as_tensor(), w.as_tensor(), &t, &weights, temperature).unwrap();
    let reference = token_logprobs_reference(h.as_tensor(), w.as_tensor(), &t, temperature).unwrap();
    let ref_sum = (&reference * &weights).unwrap().sum_all().unwrap();
    assert_close(&format!("{what} logp"), &folded.logprobs, &reference, REL);
    assert_close(&format!("{what} sum"), &folded.sum, &ref_sum, REL);
    let ref_entropy = reference_entropy(h.as_tensor(), w.as_tensor(), temperature);
    assert_close(&format!("{what} entropy"), &folded.entropy, &ref_entropy, REL);

    let loss = |s: &Tensor| ((s * scale).unwrap() + 1.0).unwrap();
    let grads_folded = loss(&folded.sum).backward().unwrap();
    let grads_ref = loss(&ref_sum).backward().unwrap();
    for (name, var) in [("grad hidden", &h), ("grad lm_head", &w)] {
        let a = grads_folded.get(var.as_tensor()).expect("folded gradient");
        let b = grads_ref.get(var.as_tensor()).expect("reference gradient");
        assert_close(&format!("{what} {name}"), a, b, REL);
    }
}

#[test]
fn odd_shapes_match_the_reference() {
    // Neither 300 tokens nor 1,000 entries divide the 512-entry blocks.
    check(300, 37, 1000, 0.7, 1.0, 1);
}

#[test]
fn one_token_matches_the_reference() {
    check(1, 64, 777, 1.3, -0.5, 2);
}

#[test]
fn several_chunks_match_the_reference() {
    // A small vocabulary allows 1,024 tokens per chunk: 2,100 tokens take three.
    check(2100, 8, 700, 0.9, 2.0, 3);
}

#[test]
fn qwen3_vocabulary_matches_the_reference() {
    check(17, 8, 151_936, 0.6, 1.0, 4);
}

#[test]
fn zero_weights_give_zero_gradients_and_the_log_probs() {
    let (n, d, v) = (12, 16, 600);
    let h = Var::from_tensor(&tensor(20, &[n, d], 1.0)).unwrap();
    let w = Var::from_tensor(&tensor(21, &[v, d], 1.0)).unwrap();
    let t = ids(22, n, v);
    let zeros = Tensor::zeros(n, candle_core::DType::F32, &Device::Cpu).unwrap();
    let folded = weighted_logprob_sum(h.as_tensor(), w.as_tensor(), &t, &zeros, 1.0).unwrap();
    let reference = token_logprobs_reference(h.as_tensor(), w.as_tensor(), &t, 1.0).unwrap();
    assert_close("logp", &folded.logprobs, &reference, REL);
    let grads = folded.sum.backward().unwrap();
    for var in [&h, &w] {
        let g = grads.get(var.as_tensor()).expect("gradient");
        assert_eq!(g.abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap(), 0.0);
    }
}

#[test]
fn bad_weights_and_targets_are_errors() {
    let h = tensor(30, &[3, 4], 1.0);
    let w = tensor(31, &[5, 4], 1.0);
    let t = ids(32, 3, 5);
    let err = weighted_logprob_sum(&h, &w, &t, &tensor(33, &[4], 1.0), 1.0).unwrap_err().to_string();
    assert!(err.contains("weights are [4], expected [3]"), "{err}");
    let t = Tensor::from_vec(vec![0u32, 5, 1], 3, &Device::Cpu).unwrap();
    let err = weighted_logprob_sum(&h, &w, &t, &tensor(33, &[3], 1.0), 1.0).unwrap_err().to_string();
    assert!(err.contains("outside the vocabulary"), "{err}");
}
