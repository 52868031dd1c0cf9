//! The SwiGLU gate, `silu(g) * u` element-wise, with a fused backward:
//! one pass forward, one pass backward (`dg = dh * u * s * (1 + g (1 - s))`,
//! `du = dh * g * s` with `s = sigmoid(g)`), where the composition of stock
//! ops runs about ten element-wise passes, each allocating a full tensor.
//!
//! - [`swiglu_gate`]: differentiable in `g` and `u` (f32 on the CPU; other
//!   dtypes and devices use the reference).
//! - [`swiglu_gate_reference`]: `g.silu() * u` from stock ops.
//! - [`SwigluOp`] / [`SwigluBackward`]: the custom ops (CPU: rayon over chunks).

use crate::fastmath::exp;
use crate::storage::{contiguous_slice, f32_slice};
use candle_core::{CpuStorage, CustomOp2, CustomOp3, DType, Layout, Result, Shape, Tensor};
use rayon::prelude::*;

/// Elements per rayon task.
const CHUNK: usize = 16 * 1024;

/// `silu(g) * u` for `g`, `u` of one shape.
pub fn swiglu_gate(g: &Tensor, u: &Tensor) -> Result<Tensor> {
    if g.dims() != u.dims() {
        candle_core::bail!("swiglu: gate is {:?}, up {:?}", g.dims(), u.dims());
    }
    let native = crate::has_native_path(g.device()) && g.dtype() == DType::F32 && u.dtype() == DType::F32;
    if !native {
        return swiglu_gate_reference(g, u);
    }
    g.contiguous()?.apply_op2(&u.contiguous()?, SwigluOp)
}

/// `g.silu() * u` from stock (differentiable) ops.
pub fn swiglu_gate_reference(g: &Tensor, u: &Tensor) -> Result<Tensor> {
    g.silu()? * u
}

/// Forward op: `(g, u)` -> `silu(g) * u`.
#[derive(Clone, Copy, Debug)]
pub struct SwigluOp;

/// Backward op: `(g, u, grad_h)` -> `[2, ..]`: the gradient of `g`, then of `u`.
#[derive(Clone, Copy, Debug)]
pub struct SwigluBackward;

#[inline(always)]
fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + exp(-x))
}

impl CustomOp2 for SwigluOp {
    fn name(&self) -> &'static str {
        "swiglu"
    }

    fn cpu_fwd(&self, s1: &CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout) -> Result<(CpuStorage, Shape)> {
        let g = contiguous_slice(f32_slice(s1, "gate")?, l1, "gate")?;
        let u = contiguous_slice(f32_slice(s2, "up")?, l2, "up")?;
        Ok((CpuStorage::F32(gate_forward(g, u)), l1.shape().clone()))
    }

    fn bwd(&self, g: &Tensor, u: &Tensor, _res: &Tensor, grad_h: &Tensor) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let grads = g.apply_op3_no_bwd(u, &grad_h.contiguous()?, &SwigluBackward)?;
        Ok((Some(grads.get(0)?.reshape(g.shape())?), Some(grads.get(1)?.reshape(u.shape())?)))
    }
}

impl CustomOp3 for SwigluBackward {
    fn name(&self) -> &'static str {
        "swiglu-backward"
    }

    fn cpu_fwd(&self, s1: &CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout, s3: &CpuStorage, l3: &Layout) -> Result<(CpuStorage, Shape)> {
        let g = contiguous_slice(f32_slice(s1, "gate")?, l1, "gate")?;
        let u = contiguous_slice(f32_slice(s2, "up")?, l2, "up")?;
        let dh = contiguous_slice(f32_slice(s3, "grad")?, l3, "grad")?;
        let n = g.len();
        let mut out = vec![0.0f32; 2 * n];
        let (dg, du) = out.split_at_mut(n);
        gate_backward(g, u, dh, dg, du);
        Ok((CpuStorage::F32(out), Shape::from((2, n))))
    }
}

/// `silu(g) * u` element-wise (rayon over chunks).
pub(crate) fn gate_forward(g: &[f32], u: &[f32]) -> Vec<f32> {
    let mut h = vec![0.0f32; g.len()];
    h.par_chunks_mut(CHUNK).zip(g.par_chunks(CHUNK).zip(u.par_chunks(CHUNK))).for_each(|(hs, (gs, us))| {
        for ((h, &g), &u) in hs.iter_mut().zip(gs).zip(us) {
            *h = g * sigmoid(g) * u;
        }
    });
    h
}

/// The gradients of `silu(g) * u` given the upstream `dh`, into `dg` and `du`
/// (rayon over chunks).
pub(crate) fn gate_backward(g: &[f32], u: &[f32], dh: &[f32], dg: &mut [f32], du: &mut [f32]) {
    dg.par_chunks_mut(CHUNK)
        .zip(du.par_chunks_mut(CHUNK))
        .zip(g.par_chunks(CHUNK).zip(u.par_chunks(CHUNK)).zip(dh.par_chunks(CHUNK)))
        .for_each(|((dgs, dus), ((gs, us), dhs))| {
            for ((dg, du), ((&g, &u), &dh)) in dgs.iter_mut().zip(dus.iter_mut()).zip(gs.iter().zip(us).zip(dhs)) {
                let s = sigmoid(g);
                *dg = dh * u * s * (1.0 + g * (1.0 - s));
                *du = dh * g * s;
            }
        });
}
