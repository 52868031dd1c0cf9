//! Seeded test data and comparison helpers.

use candle_core::{Device, Tensor};

/// Deterministic uniform values in `[-scale, scale)` (xorshift64*).
pub fn uniform(seed: u64, len: usize, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            s ^= s >> 12;
            s ^= s << 25;
            s ^= s >> 27;
            let u = (s.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 40) as f32 / (1u64 << 24) as f32;
            (2.0 * u - 1.0) * scale
        })
        .collect()
}

/// A seeded f32 tensor of `shape` with entries in `[-scale, scale)`.
pub fn tensor(seed: u64, shape: &[usize], scale: f32) -> Tensor {
    let len = shape.iter().product();
    Tensor::from_vec(uniform(seed, len, scale), shape, &Device::Cpu).unwrap()
}

/// Seeded ids in `0..vocab`.
pub fn ids(seed: u64, n: usize, vocab: usize) -> Tensor {
    let v: Vec<u32> = uniform(seed, n, 1.0).iter().map(|x| (((x + 1.0) / 2.0 * vocab as f32) as usize).min(vocab - 1) as u32).collect();
    Tensor::from_vec(v, n, &Device::Cpu).unwrap()
}

/// `max |a - b|` and `max |b|` over all elements.
pub fn max_diff(a: &Tensor, b: &Tensor) -> (f32, f32) {
    assert_eq!(a.dims(), b.dims(), "shapes differ");
    let a = a.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    let b = b.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    let diff = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
    let scale = b.iter().map(|y| y.abs()).fold(0.0f32, f32::max);
    (diff, scale)
}

/// Asserts `max |a - b| <= rel * max(1, max |b|)` and prints the figures.
pub fn assert_close(what: &str, a: &Tensor, b: &Tensor, rel: f32) {
    let (diff, scale) = max_diff(a, b);
    let bound = rel * scale.max(1.0);
    println!("{what}: max |diff| = {diff:.3e}, max |ref| = {scale:.3e}, bound = {bound:.3e}");
    assert!(diff <= bound, "{what}: max |diff| {diff:e} > {bound:e} (max |ref| {scale:e})");
}

/// Entropy of each row of `softmax(h @ w^T / temperature)` through plain tensor ops.
pub fn reference_entropy(h: &Tensor, w: &Tensor, temperature: f64) -> Tensor {
    let logits = (h.matmul(&w.t().unwrap()).unwrap() / temperature).unwrap();
    let max = logits.max_keepdim(candle_core::D::Minus1).unwrap();
    let shifted = logits.broadcast_sub(&max).unwrap();
    let lse = shifted.exp().unwrap().sum_keepdim(candle_core::D::Minus1).unwrap().log().unwrap();
    let logp = shifted.broadcast_sub(&lse).unwrap();
    (logp.exp().unwrap() * &logp).unwrap().sum(candle_core::D::Minus1).unwrap().neg().unwrap()
}
