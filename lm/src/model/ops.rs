//! Differentiable building blocks, composed from stock Candle ops so that
//! gradients reach every weight (Candle's fused `rms_norm`, `rope` and
//! `softmax_last_dim` have no backward). RMSNorm switches to the fused
//! kernel (`kernels::norm`, with backward) for f32 where the kernels run
//! natively: 4-6x faster forward+backward at Qwen3-4B's width (BENCHMARKS.md).
//! Other dtypes keep the composition, which rounds as transformers does.

use crate::lora::LoraPair;
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

/// [`linear`] plus, with a LoRA pair, `s * (x A^T) B^T` (the pair cast to
/// `x`'s dtype inside the graph, so f32 adapter weights get gradients
/// through a bf16 forward).
pub fn lora_linear(x: &Tensor, w: &Tensor, b: Option<&Tensor>, lora: Option<&LoraPair>) -> Result<Tensor> {
    let y = linear(x, w, b)?;
    let Some(p) = lora else { return Ok(y) };
    let (a, bm) = (p.a.to_dtype(x.dtype())?, p.b.to_dtype(x.dtype())?);
    let delta = linear(&linear(x, &a, None)?, &bm, None)?;
    y + (delta * p.scale)?
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

/// [`swiglu`] with LoRA pairs on any of its three projections: the gate and
/// up products are composed (the fused gated node takes plain weights), so
/// each adapter's delta joins its projection before the SwiGLU.
pub fn swiglu_lora(x: &Tensor, w: [&Tensor; 3], lora: [Option<&LoraPair>; 3]) -> Result<Tensor> {
    if lora.iter().all(Option::is_none) {
        return swiglu(x, w[0], w[1], w[2]);
    }
    let h = if lora[0].is_none() && lora[1].is_none() {
        let rows = x.elem_count() / x.dims().last().copied().unwrap_or(1).max(1);
        let inference = !x.track_op() && !w[0].track_op() && !w[1].track_op();
        if inference && rows <= kernels::linear::MAX_ROWS {
            kernels::swiglu::swiglu_gate(&linear(x, w[0], None)?, &linear(x, w[1], None)?)?
        } else {
            kernels::gated::gated_projection(x, w[0], w[1])?
        }
    } else {
        // The gate as one node with a fused backward (kernels::swiglu), not
        // silu and mul: two fewer full-width activations and gradients.
        let g = lora_linear(x, w[0], None, lora[0])?;
        let u = lora_linear(x, w[1], None, lora[1])?;
        kernels::swiglu::swiglu_gate(&g, &u)?
    };
    lora_linear(&h, w[2], None, lora[2])
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
