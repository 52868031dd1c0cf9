//! Differentiable building blocks, composed from stock Candle ops so that
//! gradients reach every weight (Candle's fused `rms_norm`, `rope` and
//! `softmax_last_dim` have no backward). RMSNorm switches to the fused
//! kernel (`kernels::norm`, with backward) for f32 where the kernels run
//! natively: 4-6x faster forward+backward at Qwen3-4B's width (BENCHMARKS.md).
//! Other dtypes keep the composition, which rounds as transformers does.

use candle_core::{DType, Result, Tensor, D};

/// `x @ w^T (+ b)` for `x` of shape `[.., in]` and `w` of shape `[out, in]`.
pub fn linear(x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> Result<Tensor> {
    let dims = x.dims().to_vec();
    let inner = dims[dims.len() - 1];
    let rows: usize = dims[..dims.len() - 1].iter().product();
    // Few rows without gradients (a decoding step, a short prefill): the
    // unpacked kernel. Otherwise (training, long prefills) the packed
    // product, as one autograd node, for every row count, so a
    // micro-batch's products sum in the same order however the batch is
    // split or packed.
    let inference = !x.track_op() && !w.track_op();
    let few_rows_f32 = rows <= kernels::linear::MAX_ROWS && x.device().is_cpu() && x.dtype() == DType::F32 && w.dtype() == DType::F32;
    let y = if inference && few_rows_f32 {
        let mut out_dims = dims;
        *out_dims.last_mut().expect("non-empty") = w.dim(0)?;
        kernels::linear::linear_few_rows(&x.reshape((rows, inner))?, w)?.reshape(out_dims)?
    } else {
        kernels::projection::linear(x, w)?
    };
    match b {
        Some(b) => y.broadcast_add(b),
        None => Ok(y),
    }
}

/// RMSNorm over the last dimension, computed in f32 as transformers does:
/// `w * (x / sqrt(mean(x^2) + eps)).to(dtype)`.
pub fn rms_norm(x: &Tensor, w: &Tensor, eps: f64) -> Result<Tensor> {
    if x.dtype() == DType::F32 && w.dtype() == DType::F32 && kernels::has_native_path(x.device()) {
        return kernels::norm::rms_norm(x, w, eps);
    }
    rms_norm_composed(x, w, eps)
}

/// [`rms_norm`] from stock ops (any dtype): the reference of the fused kernel.
pub fn rms_norm_composed(x: &Tensor, w: &Tensor, eps: f64) -> Result<Tensor> {
    let dtype = x.dtype();
    let xf = x.to_dtype(DType::F32)?;
    let var = xf.sqr()?.mean_keepdim(D::Minus1)?;
    let normed = xf.broadcast_mul(&(var + eps)?.sqrt()?.recip()?)?;
    normed.to_dtype(dtype)?.broadcast_mul(w)
}

/// Softmax over the last dimension (max-shifted, differentiable).
pub fn softmax_last(x: &Tensor) -> Result<Tensor> {
    let max = x.max_keepdim(D::Minus1)?.detach();
    let e = x.broadcast_sub(&max)?.exp()?;
    let sum = e.sum_keepdim(D::Minus1)?;
    e.broadcast_div(&sum)
}

/// Log-softmax over the last dimension (max-shifted, differentiable).
pub fn log_softmax_last(x: &Tensor) -> Result<Tensor> {
    let max = x.max_keepdim(D::Minus1)?.detach();
    let shifted = x.broadcast_sub(&max)?;
    let lse = shifted.exp()?.sum_keepdim(D::Minus1)?.log()?;
    shifted.broadcast_sub(&lse)
}

/// SwiGLU feed-forward: `down(silu(gate(x)) * up(x))`. In training and long
/// prefills the gate, up and SwiGLU are one node (`kernels::gated`, which
/// keeps the widest activations out of Candle's gradient bookkeeping); a
/// decoding step's few rows take [`linear`]'s unpacked kernel and the fused
/// gate (`kernels::swiglu`).
pub fn swiglu(x: &Tensor, gate: &Tensor, up: &Tensor, down: &Tensor) -> Result<Tensor> {
    let rows = x.elem_count() / x.dims().last().copied().unwrap_or(1).max(1);
    let inference = !x.track_op() && !gate.track_op() && !up.track_op();
    let h = if inference && rows <= kernels::linear::MAX_ROWS {
        let g = linear(x, gate, None)?;
        let u = linear(x, up, None)?;
        kernels::swiglu::swiglu_gate(&g, &u)?
    } else {
        kernels::gated::gated_projection(x, gate, up)?
    };
    linear(&h, down, None)
}
