//! Random Qwen3 weights from a seed: tiny models for tests and CPU runs, and
//! full-size architectures for memory and speed benchmarks.

use crate::config::ModelConfig;
use crate::error::Result;
use crate::params::{is_norm, parameter_shapes};
use crate::weights::TensorMap;
use candle_core::{DType, Device, Tensor};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Standard deviation of random weights (transformers' `initializer_range`).
pub const INIT_STD: f32 = 0.02;

/// Random weights for `cfg`: normal(0, INIT_STD) matrices, RMSNorm scales at 1.
/// Each tensor gets its own stream derived from `seed`, so the result does not
/// depend on iteration order.
pub fn random_weights(cfg: &ModelConfig, seed: u64, dtype: DType, device: &Device) -> Result<TensorMap> {
    use rayon::prelude::*;
    let shapes: Vec<(usize, (String, Vec<usize>))> = parameter_shapes(cfg).into_iter().enumerate().collect();
    shapes
        .into_par_iter()
        .map(|(k, (name, shape))| {
            let n: usize = shape.iter().product();
            let t = if is_norm(&name) {
                Tensor::ones(shape, dtype, device)?
            } else {
                let mut rng = ChaCha8Rng::seed_from_u64(seed ^ (k as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
                let data: Vec<f32> = (0..n).map(|_| normal(&mut rng) * INIT_STD).collect();
                Tensor::from_vec(data, shape, device)?.to_dtype(dtype)?
            };
            Ok((name, t))
        })
        .collect()
}

/// A standard normal draw (Box-Muller).
fn normal<R: Rng>(rng: &mut R) -> f32 {
    let u1: f32 = rng.random::<f32>().max(f32::MIN_POSITIVE);
    let u2: f32 = rng.random();
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f32::consts::PI * u2).cos()
}

/// The published Qwen3-4B architecture (hidden 2560, 36 layers, 32 query
/// heads of 128, 8 KV heads, vocab 151936, tied embeddings, theta 1e6).
pub fn qwen3_4b_config() -> ModelConfig {
    let mut cfg = ModelConfig::new_tiny(151_936, 2560, 9728, 36, 32, 8, 128, true);
    cfg.max_position_embeddings = 40_960;
    cfg.raw = cfg.to_raw();
    cfg
}
