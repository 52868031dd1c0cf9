//! Fused token log-probs against the plain-tensor reference: forward,
//! entropy and gradients (through Candle's autograd on both paths), with
//! shapes that do not divide the chunk sizes, N = 1 and Qwen3's vocabulary.

use crate::common::{assert_close, ids, reference_entropy, tensor};
use candle_core::{Tensor, Var};
use kernels::logprobs::{token_entropy, token_logprobs, token_logprobs_and_entropy, token_logprobs_reference};

/// Relative tolerance of forward values (log-probs, entropies).
const FWD_REL: f32 = 1e-5;
/// Relative tolerance of gradients (to the largest reference entry).
const GRAD_REL: f32 = 1e-5;

/// Forward and gradient parity for one shape; `seed` varies the data.
fn check(n: usize, d: usize, v: usize, temperature: f64, seed: u64) {
    let what = format!("N={n} d={d} V={v} T={temperature}");
    let h = Var::from_tensor(&tensor(seed, &[n, d], 1.0)).unwrap();
    let w = Var::from_tensor(&tensor(seed + 1, &[v, d], 1.0)).unwrap();
    let t = ids(seed + 2, n, v);
    // Weights of the per-token log-probs in the loss, so each token's upstream gradient differs.
    let g = tensor(seed + 3, &[n], 1.0);

    let fused = token_logprobs(h.as_tensor(), w.as_tensor(), &t, temperature).unwrap();
    let reference = token_logprobs_reference(h.as_tensor(), w.as_tensor(), &t, temperature).unwrap();
    assert_close(&format!("{what} logp"), &fused, &reference, FWD_REL);

    let grads_fused = (fused * &g).unwrap().sum_all().unwrap().backward().unwrap();
    let grads_ref = (reference * &g).unwrap().sum_all().unwrap().backward().unwrap();
    for (name, var) in [("grad hidden", &h), ("grad lm_head", &w)] {
        let a = grads_fused.get(var.as_tensor()).expect("fused gradient");
        let b = grads_ref.get(var.as_tensor()).expect("reference gradient");
        assert_close(&format!("{what} {name}"), a, b, GRAD_REL);
    }
}

#[test]
fn odd_shapes_match_the_reference() {
    // 300 tokens, 1000 entries: neither divides the forward (256 x 512) nor the backward (512 x 256) blocks.
    check(300, 37, 1000, 0.7, 1);
}

#[test]
fn one_token_matches_the_reference() {
    check(1, 64, 777, 1.3, 2);
}

#[test]
fn several_backward_passes_match_the_reference() {
    // More tokens than two backward passes (512 each) hold, with a partial last one.
    check(1100, 8, 700, 0.9, 3);
}

#[test]
fn qwen3_vocabulary_matches_the_reference() {
    check(17, 8, 151_936, 0.6, 4);
}

#[test]
fn entropy_matches_the_reference() {
    let (n, d, v, temp) = (70, 24, 3001, 0.8);
    let h = tensor(5, &[n, d], 1.0);
    let w = tensor(6, &[v, d], 1.0);
    let t = ids(7, n, v);
    let reference = reference_entropy(&h, &w, temp);
    assert_close("entropy", &token_entropy(&h, &w, temp).unwrap(), &reference, FWD_REL);
    let (logp, ent) = token_logprobs_and_entropy(&h, &w, &t, temp).unwrap();
    assert_close("entropy beside logp", &ent, &reference, FWD_REL);
    assert_close("logp beside entropy", &logp, &token_logprobs_reference(&h, &w, &t, temp).unwrap(), FWD_REL);
}

#[test]
fn bf16_inputs_are_converted() {
    let h = tensor(8, &[9, 16], 1.0).to_dtype(candle_core::DType::BF16).unwrap();
    let w = tensor(9, &[50, 16], 1.0).to_dtype(candle_core::DType::BF16).unwrap();
    let t = ids(10, 9, 50);
    let fused = token_logprobs(&h, &w, &t, 1.0).unwrap();
    assert_close("bf16 logp", &fused, &token_logprobs_reference(&h, &w, &t, 1.0).unwrap(), FWD_REL);
}

#[test]
fn out_of_range_target_is_an_error() {
    let h = tensor(11, &[3, 4], 1.0);
    let w = tensor(12, &[5, 4], 1.0);
    let t = Tensor::from_vec(vec![0u32, 5, 1], 3, &candle_core::Device::Cpu).unwrap();
    let err = token_logprobs(&h, &w, &t, 1.0).unwrap_err().to_string();
    assert!(err.contains("outside the vocabulary"), "{err}");
}

#[test]
fn mismatched_shapes_are_an_error() {
    let h = tensor(13, &[3, 4], 1.0);
    let w = tensor(14, &[5, 6], 1.0);
    let t = ids(15, 3, 5);
    assert!(token_logprobs(&h, &w, &t, 1.0).is_err());
    assert!(token_logprobs(&h, &tensor(14, &[5, 4], 1.0), &t, 0.0).is_err());
}
