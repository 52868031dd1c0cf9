//! RMSNorm over the last dimension with a fused backward:
//! `y = w * x / sqrt(mean(x^2) + eps)`.
//!
//! - [`rms_norm`]: differentiable in `x` and `w` (f32; other float dtypes are
//!   computed in f32 and cast back).
//! - [`rms_norm_reference`]: the stock-op composition it matches.
//! - [`RmsNormOp`] / [`RmsNormBackward`]: the custom ops (CPU: rayon over rows).

#[cfg(feature = "cuda")]
pub(crate) mod cuda;

use crate::storage::{contiguous_slice, f32_slice};
use candle_core::{CpuStorage, CustomOp2, CustomOp3, DType, Layout, Result, Shape, Tensor, D};
use rayon::prelude::*;

/// Rows per rayon task.
const ROWS_PER_TASK: usize = 64;

/// RMSNorm of `x` `[..., d]` with weight `w` `[d]`.
pub fn rms_norm(x: &Tensor, w: &Tensor, eps: f64) -> Result<Tensor> {
    let d = x.dim(D::Minus1)?;
    if w.dims() != [d] {
        candle_core::bail!("rms_norm: weight is {:?}, expected [{d}]", w.dims());
    }
    if !crate::has_native_path(x.device()) {
        return rms_norm_reference(x, w, eps)?.to_dtype(x.dtype());
    }
    let dtype = x.dtype();
    let xf = x.to_dtype(DType::F32)?.contiguous()?;
    let wf = w.to_dtype(DType::F32)?.contiguous()?;
    xf.apply_op2(&wf, RmsNormOp { eps })?.to_dtype(dtype)
}

/// `w * (x / sqrt(mean(x^2) + eps))` from stock (differentiable) ops, in f32.
pub fn rms_norm_reference(x: &Tensor, w: &Tensor, eps: f64) -> Result<Tensor> {
    let xf = x.to_dtype(DType::F32)?;
    let var = xf.sqr()?.mean_keepdim(D::Minus1)?;
    xf.broadcast_mul(&(var + eps)?.sqrt()?.recip()?)?.broadcast_mul(&w.to_dtype(DType::F32)?)
}

/// Forward op: `(x [..., d] f32, w [d] f32)` -> `y` of `x`'s shape.
#[derive(Clone, Copy, Debug)]
pub struct RmsNormOp {
    /// Added to the mean square before the square root.
    pub eps: f64,
}

/// Backward op: `(x [..., d], w [d], grad_y [..., d])` -> `[rows + 1, d]`:
/// the gradient of `x` (flattened to rows) then, in the last row, of `w`.
#[derive(Clone, Copy, Debug)]
pub struct RmsNormBackward {
    /// The forward's epsilon.
    pub eps: f64,
}

/// `1 / sqrt(mean(row^2) + eps)`.
fn inv_rms(row: &[f32], eps: f64) -> f32 {
    let ms = row.iter().map(|&v| (v as f64) * (v as f64)).sum::<f64>() / row.len() as f64;
    (1.0 / (ms + eps).sqrt()) as f32
}

impl CustomOp2 for RmsNormOp {
    fn name(&self) -> &'static str {
        "rms-norm"
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(&self, s1: &candle_core::CudaStorage, l1: &Layout, s2: &candle_core::CudaStorage, l2: &Layout) -> Result<(candle_core::CudaStorage, Shape)> {
        cuda::rms_norm_fwd_cuda(self.eps, s1, l1, s2, l2)
    }

    fn cpu_fwd(&self, s1: &CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout) -> Result<(CpuStorage, Shape)> {
        let x = contiguous_slice(f32_slice(s1, "x")?, l1, "x")?;
        let w = contiguous_slice(f32_slice(s2, "w")?, l2, "w")?;
        let d = w.len();
        let mut y = vec![0.0f32; x.len()];
        y.par_chunks_mut(ROWS_PER_TASK * d).zip(x.par_chunks(ROWS_PER_TASK * d)).for_each(|(ys, xs)| {
            for (yr, xr) in ys.chunks_mut(d).zip(xs.chunks(d)) {
                let r = inv_rms(xr, self.eps);
                for ((o, &v), &g) in yr.iter_mut().zip(xr).zip(w) {
                    *o = v * r * g;
                }
            }
        });
        Ok((CpuStorage::F32(y), l1.shape().clone()))
    }

    fn bwd(&self, x: &Tensor, w: &Tensor, _res: &Tensor, grad_y: &Tensor) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let d = w.dim(0)?;
        let rows = x.elem_count() / d;
        let grads = x.apply_op3_no_bwd(w, &grad_y.contiguous()?, &RmsNormBackward { eps: self.eps })?;
        // A frozen scale (a LoRA run's base) gets none.
        let grad_w = if w.track_op() { Some(grads.narrow(0, rows, 1)?.squeeze(0)?) } else { None };
        Ok((Some(grads.narrow(0, 0, rows)?.reshape(x.shape())?), grad_w))
    }
}

impl CustomOp3 for RmsNormBackward {
    fn name(&self) -> &'static str {
        "rms-norm-backward"
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
        cuda::rms_norm_bwd_cuda(self.eps, s1, l1, s2, l2, s3, l3)
    }

    fn cpu_fwd(&self, s1: &CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout, s3: &CpuStorage, l3: &Layout) -> Result<(CpuStorage, Shape)> {
        let x = contiguous_slice(f32_slice(s1, "x")?, l1, "x")?;
        let w = contiguous_slice(f32_slice(s2, "w")?, l2, "w")?;
        let gy = contiguous_slice(f32_slice(s3, "grad_y")?, l3, "grad_y")?;
        let d = w.len();
        let rows = x.len() / d;
        let mut out = vec![0.0f32; (rows + 1) * d];
        let (gx, gw) = out.split_at_mut(rows * d);
        // Each task writes its rows of grad_x and returns its partial grad_w.
        let partials: Vec<Vec<f32>> = gx
            .par_chunks_mut(ROWS_PER_TASK * d)
            .zip(x.par_chunks(ROWS_PER_TASK * d).zip(gy.par_chunks(ROWS_PER_TASK * d)))
            .map(|(gxs, (xs, gys))| {
                let mut pw = vec![0.0f32; d];
                for ((gxr, xr), gyr) in gxs.chunks_mut(d).zip(xs.chunks(d)).zip(gys.chunks(d)) {
                    backward_row(xr, w, gyr, self.eps, gxr, &mut pw);
                }
                pw
            })
            .collect();
        for p in &partials {
            gw.iter_mut().zip(p).for_each(|(a, b)| *a += b);
        }
        Ok((CpuStorage::F32(out), Shape::from((rows + 1, d))))
    }
}

/// One row: `gx = r * (w*g - xhat * mean(w*g*xhat))`, `gw += g * xhat`.
fn backward_row(x: &[f32], w: &[f32], g: &[f32], eps: f64, gx: &mut [f32], gw: &mut [f32]) {
    let r = inv_rms(x, eps);
    let d = x.len() as f32;
    let dot: f32 = x.iter().zip(w).zip(g).map(|((&xv, &wv), &gv)| xv * r * wv * gv).sum();
    let m = dot / d;
    for i in 0..x.len() {
        let xhat = x[i] * r;
        gx[i] = r * (w[i] * g[i] - xhat * m);
        gw[i] += g[i] * xhat;
    }
}
