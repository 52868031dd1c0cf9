//! `x @ w^T` for few rows (the decoding kernel) against Candle's matmul:
//! every path of the kernel (4 x 4 blocks with AVX-512VL, 2 x 4 with AVX2,
//! leftover rows and columns, the tail of `k` past a multiple of 8) and the
//! gradients through Candle's autograd.

use crate::common::{assert_close, tensor};
use candle_core::Var;
use kernels::linear::{linear_few_rows, linear_reference, MAX_ROWS};

/// Relative tolerance of values and gradients (sums of up to 300 products
/// in another order).
const REL: f32 = 1e-5;

#[test]
fn few_rows_linear_matches_the_reference() {
    let mut seed = 1u64;
    for m in [1usize, 2, 3, 4, 5, 7, 16, 33, MAX_ROWS] {
        for k in [1usize, 7, 8, 64, 67, 300] {
            for n in [1usize, 3, 4, 5, 129, 1000] {
                seed += 3;
                let x = tensor(seed, &[m, k], 1.0);
                let w = tensor(seed + 1, &[n, k], 0.5);
                let a = linear_few_rows(&x, &w).unwrap();
                let b = linear_reference(&x, &w).unwrap();
                let (diff, scale) = crate::common::max_diff(&a, &b);
                assert!(diff <= REL * scale.max(1.0), "m={m} k={k} n={n}: max |diff| {diff:e} (max |ref| {scale:e})");
            }
        }
    }
}

#[test]
fn few_rows_linear_gradients_match_the_reference() {
    for (m, k, n, seed) in [(16usize, 64usize, 4099usize, 11u64), (5, 67, 9, 12), (64, 256, 768, 13)] {
        let x = Var::from_tensor(&tensor(seed, &[m, k], 1.0)).unwrap();
        let w = Var::from_tensor(&tensor(seed + 1, &[n, k], 0.5)).unwrap();
        let g = tensor(seed + 2, &[m, n], 1.0);
        let a = linear_few_rows(x.as_tensor(), w.as_tensor()).unwrap();
        let b = linear_reference(x.as_tensor(), w.as_tensor()).unwrap();
        assert_close(&format!("linear {m}x{k} @ {n}x{k}^T"), &a, &b, REL);
        let ga = (a * &g).unwrap().sum_all().unwrap().backward().unwrap();
        let gb = (b * &g).unwrap().sum_all().unwrap().backward().unwrap();
        for (name, v) in [("grad x", &x), ("grad w", &w)] {
            assert_close(&format!("linear {m}x{k} {name}"), ga.get(v.as_tensor()).unwrap(), gb.get(v.as_tensor()).unwrap(), REL);
        }
    }
}
