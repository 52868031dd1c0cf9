//! CUDA path of the rotary embedding, rotate-half layout as
//! `lm/src/model/rope.rs` (`kernels/cuda/rope.cu`): x `[B, H, T, D]`,
//! cos/sin tables with rows per (batch, position) or per position, of width
//! D (transformers' duplicated halves; only the first half is read) or D/2.
//! The backward is the transposed rotation (sin negated).

use crate::cuda_util::{cfg_1d, common_float, kernel_name, launch, to_i32, view, wrap, KernelFloat, ROPE};
use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::CudaStorage;
use candle_core::{bail, DType, Layout, Result, Shape};

/// Most blocks a launch uses (the kernel loops over the rest).
const MAX_BLOCKS: usize = 65_535;

/// x's `[B, H, T, D]` and how a table row is addressed.
#[derive(Debug, Clone, Copy)]
struct Geometry {
    b: usize,
    h: usize,
    t: usize,
    d: usize,
    cs_row: usize,
    cs_batched: bool,
}

/// Validates x `[B, H, T, D]` (D even) and cos/sin holding `[T, W]` or
/// `[B, T, W]` rows (any leading 1-dims, e.g. `[B, 1, T, D]`), W = D or D/2.
fn geometry(x_l: &Layout, cos_l: &Layout, sin_l: &Layout) -> Result<Geometry> {
    let (b, h, t, d) = x_l.shape().dims4()?;
    if d == 0 || d % 2 != 0 {
        bail!("rope (cuda): head dim {d} must be even and > 0");
    }
    if cos_l.shape() != sin_l.shape() {
        bail!("rope (cuda): cos {:?} and sin {:?} differ", cos_l.shape(), sin_l.shape());
    }
    let cs_row = cos_l.shape().dims().last().copied().unwrap_or(0);
    if cs_row != d && cs_row != d / 2 {
        bail!("rope (cuda): cos/sin rows of {cs_row} values, expected {d} or {}", d / 2);
    }
    let rows = cos_l.shape().elem_count() / cs_row;
    let cs_batched = match rows {
        r if r == t => false,
        r if r == b * t => true,
        _ => bail!("rope (cuda): cos/sin {:?} must hold T = {t} or B*T = {} rows for x {:?}", cos_l.shape(), b * t, x_l.shape()),
    };
    Ok(Geometry { b, h, t, d, cs_row, cs_batched })
}

/// `RopeOp { inverse }`: the forward rotation, or with `inverse` its
/// transpose (the backward). The body of `RopeOp::cuda_fwd`.
pub(crate) fn rope_op_cuda(inverse: bool, x: &CudaStorage, x_l: &Layout, cos: &CudaStorage, cos_l: &Layout, sin: &CudaStorage, sin_l: &Layout) -> Result<(CudaStorage, Shape)> {
    rope_cuda(if inverse { -1.0 } else { 1.0 }, x, x_l, cos, cos_l, sin, sin_l)
}

/// Forward: the rotated x (x, cos, sin of one dtype).
pub(crate) fn rope_fwd_cuda(x: &CudaStorage, x_l: &Layout, cos: &CudaStorage, cos_l: &Layout, sin: &CudaStorage, sin_l: &Layout) -> Result<(CudaStorage, Shape)> {
    rope_cuda(1.0, x, x_l, cos, cos_l, sin, sin_l)
}

/// Backward: the gradient of x from the output's gradient `dy` (the inverse
/// rotation; no gradient flows to the tables).
pub(crate) fn rope_bwd_cuda(dy: &CudaStorage, dy_l: &Layout, cos: &CudaStorage, cos_l: &Layout, sin: &CudaStorage, sin_l: &Layout) -> Result<(CudaStorage, Shape)> {
    rope_cuda(-1.0, dy, dy_l, cos, cos_l, sin, sin_l)
}

fn rope_cuda(sign: f32, x: &CudaStorage, x_l: &Layout, cos: &CudaStorage, cos_l: &Layout, sin: &CudaStorage, sin_l: &Layout) -> Result<(CudaStorage, Shape)> {
    let g = geometry(x_l, cos_l, sin_l)?;
    let ins = [(x, x_l), (cos, cos_l), (sin, sin_l)];
    let out = match common_float("rope", &[x.dtype(), cos.dtype(), sin.dtype()])? {
        DType::F32 => rope_typed::<f32>(sign, g, ins)?,
        _ => rope_typed::<half::bf16>(sign, g, ins)?,
    };
    Ok((out, x_l.shape().clone()))
}

fn rope_typed<T: KernelFloat>(sign: f32, g: Geometry, ins: [(&CudaStorage, &Layout); 3]) -> Result<CudaStorage> {
    let dev = ins[0].0.device();
    let xv = view::<T>(ins[0].0, ins[0].1, "x")?;
    let cv = view::<T>(ins[1].0, ins[1].1, "cos")?;
    let sv = view::<T>(ins[2].0, ins[2].1, "sin")?;
    let len = g.b * g.h * g.t * g.d;
    if len == 0 {
        bail!("rope (cuda): empty input");
    }
    let (b, h, t, d) = (to_i32(g.b, "B")?, to_i32(g.h, "H")?, to_i32(g.t, "T")?, to_i32(g.d, "D")?);
    let (cs_row, cs_batched) = (to_i32(g.cs_row, "table row")?, g.cs_batched as i32);
    // SAFETY: the kernel's grid-stride loop writes both halves of every pair,
    // i.e. all len elements.
    let mut y = unsafe { dev.alloc::<T>(len)? };
    // SAFETY: rope_T(const T* x, const T* cos, const T* sin, int B, int H,
    // int T, int D, int cs_row, int cs_batched, float sign, T* y): x and y hold
    // B*H*T*D; cos/sin hold (B or 1)*T rows of cs_row >= D/2 values, checked
    // by `geometry`; the grid-stride loop stops at B*H*T*D/2 pairs.
    launch!(dev, ROPE, kernel_name::<T>("rope"), cfg_1d((len / 2).div_ceil(256).min(MAX_BLOCKS), 256)?;
        &xv, &cv, &sv, &b, &h, &t, &d, &cs_row, &cs_batched, &sign, &mut y)?;
    Ok(wrap(y, dev))
}
