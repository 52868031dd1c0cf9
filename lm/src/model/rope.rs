//! Rotary position embeddings with per-row positions (rotate-half layout, as
//! transformers' Qwen3 and Llama). Angles are computed in f32 exactly as
//! transformers does (`freqs = pos * inv_freq`, `inv_freq` from
//! [`crate::config::ModelConfig::inv_freq`]: `1 / theta^(2i/d)`, or llama3-scaled).

use candle_core::{DType, Device, Result, Tensor, D};

/// cos/sin tables for one forward pass, shape `[b, 1, t, head_dim]`.
pub struct RopeTables {
    pub cos: Tensor,
    pub sin: Tensor,
}

impl RopeTables {
    /// Tables for `positions` (row-major `[b, t]`; negative = padding, treated
    /// as 0) and a head's `inv_freq` (head_dim / 2 values).
    pub fn new(positions: &[i64], b: usize, t: usize, inv_freq: &[f32], dtype: DType, device: &Device) -> Result<Self> {
        let head_dim = 2 * inv_freq.len();
        let mut cos = Vec::with_capacity(b * t * head_dim);
        let mut sin = Vec::with_capacity(b * t * head_dim);
        for &p in positions {
            let p = p.max(0) as f32;
            for _ in 0..2 {
                for f in inv_freq {
                    let angle = p * f;
                    cos.push(angle.cos());
                    sin.push(angle.sin());
                }
            }
        }
        let shape = (b, 1, t, head_dim);
        Ok(RopeTables {
            cos: Tensor::from_vec(cos, shape, device)?.to_dtype(dtype)?,
            sin: Tensor::from_vec(sin, shape, device)?.to_dtype(dtype)?,
        })
    }

    /// `x * cos + rotate_half(x) * sin` for `x` of shape `[b, heads, t, head_dim]`:
    /// the fused kernel (`kernels::rope`, with backward; 5-6x faster
    /// forward+backward, BENCHMARKS.md) for f32 where it runs natively, else
    /// [`RopeTables::apply_composed`].
    pub fn apply(&self, x: &Tensor) -> Result<Tensor> {
        if x.dtype() == DType::F32 && self.cos.dtype() == DType::F32 && kernels::has_native_path(x.device()) {
            return kernels::rope::rope(x, &self.cos, &self.sin);
        }
        self.apply_composed(x)
    }

    /// [`RopeTables::apply`] for a token-major `x` `[b * t, heads, 1,
    /// head_dim]` (the projection's `[b, t, heads, head_dim]` reshaped), the
    /// tables viewed `[b * t, 1, 1, head_dim]`: the same values, no transpose.
    pub fn apply_token_major(&self, x: &Tensor, b: usize, t: usize) -> Result<Tensor> {
        let d = self.cos.dim(D::Minus1)?;
        let view = |tab: &Tensor| tab.reshape((b * t, 1, 1, d));
        RopeTables { cos: view(&self.cos)?, sin: view(&self.sin)? }.apply(x)
    }

    /// [`RopeTables::apply`] from stock ops (any dtype): the reference of the fused kernel.
    pub fn apply_composed(&self, x: &Tensor) -> Result<Tensor> {
        let d = x.dim(D::Minus1)?;
        let x1 = x.narrow(D::Minus1, 0, d / 2)?;
        let x2 = x.narrow(D::Minus1, d / 2, d / 2)?;
        let rotated = Tensor::cat(&[&x2.neg()?, &x1], D::Minus1)?;
        x.broadcast_mul(&self.cos)? + rotated.broadcast_mul(&self.sin)?
    }
}
