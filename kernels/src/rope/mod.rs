//! Rotary position embeddings (non-interleaved "rotate half", as Qwen3/Llama)
//! with a fused backward:
//! `y = x * cos + rotate_half(x) * sin`, `rotate_half([a, b]) = [-b, a]`.
//!
//! - [`rope`]: `x` `[b, heads, t, head_dim]`, `cos`/`sin` `[b, 1, t, head_dim]`
//!   (per-row positions; both halves of a table row repeat the same angles, as
//!   the trainer's `RopeTables` builds them). Differentiable in `x`; the tables
//!   are constants.
//! - [`rope_reference`]: the stock-op composition it matches.
//! - [`RopeOp`]: the custom op; its backward is the inverse rotation, the same
//!   op with `inverse` flipped.

#[cfg(feature = "cuda")]
pub(crate) mod cuda;

use crate::storage::{contiguous_slice, f32_slice};
use candle_core::{CpuStorage, CustomOp3, DType, Layout, Result, Shape, Tensor, D};
use rayon::prelude::*;

/// Rotary embedding of `x` `[b, heads, t, head_dim]` with tables `[b, 1, t, head_dim]`.
pub fn rope(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    let (b, _, t, hd) = x.dims4()?;
    for (name, tab) in [("cos", cos), ("sin", sin)] {
        if tab.dims() != [b, 1, t, hd] {
            candle_core::bail!("rope: {name} is {:?}, expected [{b}, 1, {t}, {hd}]", tab.dims());
        }
    }
    if hd % 2 != 0 {
        candle_core::bail!("rope: head_dim {hd} is odd");
    }
    if !crate::has_native_path(x.device()) {
        return rope_reference(x, cos, sin);
    }
    let dtype = x.dtype();
    let f = |v: &Tensor| v.to_dtype(DType::F32)?.contiguous();
    f(x)?.apply_op3(&f(cos)?, &f(sin)?, RopeOp { inverse: false })?.to_dtype(dtype)
}

/// `x * cos + rotate_half(x) * sin` from stock (differentiable) ops.
pub fn rope_reference(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    let d = x.dim(D::Minus1)?;
    let x1 = x.narrow(D::Minus1, 0, d / 2)?;
    let x2 = x.narrow(D::Minus1, d / 2, d / 2)?;
    let rotated = Tensor::cat(&[&x2.neg()?, &x1], D::Minus1)?;
    x.broadcast_mul(cos)? + rotated.broadcast_mul(sin)?
}

/// `(x [b, h, t, hd] f32, cos, sin [b, 1, t, hd] f32)` -> rotated `x`.
/// With `inverse`, applies the transpose of the forward rotation (the
/// rotation by the opposite angles), i.e. the gradient with respect to `x`.
#[derive(Clone, Copy, Debug)]
pub struct RopeOp {
    /// Apply the transpose (rotate by `-angle`) instead of the rotation.
    pub inverse: bool,
}

impl CustomOp3 for RopeOp {
    fn name(&self) -> &'static str {
        "rope"
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
        s3: &candle_core::CudaStorage,
        l3: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        cuda::rope_op_cuda(self.inverse, s1, l1, s2, l2, s3, l3)
    }

    fn cpu_fwd(&self, s1: &CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout, s3: &CpuStorage, l3: &Layout) -> Result<(CpuStorage, Shape)> {
        let (_, heads, t, hd) = l1.shape().dims4()?;
        let x = contiguous_slice(f32_slice(s1, "x")?, l1, "x")?;
        let cos = contiguous_slice(f32_slice(s2, "cos")?, l2, "cos")?;
        let sin = contiguous_slice(f32_slice(s3, "sin")?, l3, "sin")?;
        let inverse = self.inverse;
        let half = hd / 2;
        let mut y = vec![0.0f32; x.len()];
        // One task per (batch row, head): a [t, hd] slab sharing its row's tables.
        y.par_chunks_mut(t * hd).zip(x.par_chunks(t * hd)).enumerate().for_each(|(slab, (ys, xs))| {
            let row = slab / heads;
            let (c, s) = (&cos[row * t * hd..(row + 1) * t * hd], &sin[row * t * hd..(row + 1) * t * hd]);
            for (((yr, xr), cr), sr) in ys.chunks_mut(hd).zip(xs.chunks(hd)).zip(c.chunks(hd)).zip(s.chunks(hd)) {
                for i in 0..half {
                    let (a, b, j) = (xr[i], xr[i + half], i + half);
                    if inverse {
                        // The transpose of the forward's 2x2 block (exact even if the halves' tables differed).
                        yr[i] = a * cr[i] + b * sr[j];
                        yr[j] = b * cr[j] - a * sr[i];
                    } else {
                        yr[i] = a * cr[i] - b * sr[i];
                        yr[j] = b * cr[j] + a * sr[j];
                    }
                }
            }
        });
        Ok((CpuStorage::F32(y), l1.shape().clone()))
    }

    fn bwd(&self, _x: &Tensor, cos: &Tensor, sin: &Tensor, _res: &Tensor, grad: &Tensor) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let gx = grad.contiguous()?.apply_op3_no_bwd(cos, sin, &RopeOp { inverse: !self.inverse })?;
        Ok((Some(gx), None, None))
    }
}
