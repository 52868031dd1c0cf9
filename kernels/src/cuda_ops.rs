//! Tensor-level entry points of the CUDA kernels, forward and backward as
//! separate calls (no autograd): what `fusegrpo selftest --device cuda`
//! compares with the plain-tensor references. The CustomOps call the
//! storage-level functions in `logprobs/cuda.rs`, `norm/cuda.rs`,
//! `rope/cuda.rs` and `sampling/cuda.rs` directly. Inputs must live on a CUDA device; they are made
//! contiguous here, except attention's (its kernels take strided q, k, v).

use crate::attention::Visibility;
use crate::logprobs::cuda::{token_logprobs_bwd_cuda, token_logprobs_fwd_cuda};
use crate::norm::cuda::{rms_norm_bwd_cuda, rms_norm_bwd_dw_cuda, rms_norm_bwd_dx_cuda, rms_norm_fwd_cuda};
use crate::rope::cuda::{rope_bwd_cuda, rope_fwd_cuda, rope_op_cuda};
use crate::sampling::SampleMode;
use crate::sampling::cuda::sample_cuda;
use candle_core::cuda_backend::CudaStorage;
use candle_core::op::BackpropOp;
use candle_core::{bail, Layout, Result, Shape, Storage, Tensor};
use std::sync::Arc;

/// Runs `f` on the CUDA storages and layouts of `tensors` (made contiguous).
fn with_cuda<R>(tensors: &[&Tensor], f: impl FnOnce(&[(&CudaStorage, &Layout)]) -> Result<R>) -> Result<R> {
    let owned: Vec<Tensor> = tensors.iter().map(|t| t.contiguous()).collect::<Result<_>>()?;
    let guards: Vec<_> = owned.iter().map(|t| t.storage_and_layout()).collect();
    let mut ins = Vec::with_capacity(guards.len());
    for (storage, layout) in &guards {
        match &**storage {
            Storage::Cuda(s) => ins.push((s, *layout)),
            _ => bail!("kernels::cuda_ops: expected tensors on a CUDA device"),
        }
    }
    f(&ins)
}

/// A fresh tensor (no gradient tracking) over a kernel's output.
fn tensor((storage, shape): (CudaStorage, Shape)) -> Tensor {
    Tensor::from_storage(Storage::Cuda(storage), shape, BackpropOp::none(), false)
}

/// Stats `[N, 3]` f32 = (log p(target), log-sum-exp, entropy) per token of
/// `softmax(hidden [N, d] lm_head[V, d]^T / temperature)`, targets u32 `[N]`
/// (what `TokenLogprobsOp` returns).
pub fn token_logprobs_stats(hidden: &Tensor, lm_head: &Tensor, targets: &Tensor, temperature: f64) -> Result<Tensor> {
    with_cuda(&[hidden, lm_head, targets], |x| {
        token_logprobs_fwd_cuda(temperature, x[0].0, x[0].1, x[1].0, x[1].1, x[2].0, x[2].1).map(tensor)
    })
}

/// `[N + V, d]`: grad_hidden over grad_lm_head of `sum(g_logp logp + g_lse lse)`
/// from aux `[N, 4]` f32 rows (target, lse, g_logp, g_lse) (what
/// `TokenLogprobsBackward` returns).
pub fn token_logprobs_backward(hidden: &Tensor, lm_head: &Tensor, aux: &Tensor, temperature: f64) -> Result<Tensor> {
    with_cuda(&[hidden, lm_head, aux], |x| {
        token_logprobs_bwd_cuda(temperature, x[0].0, x[0].1, x[1].0, x[1].1, x[2].0, x[2].1).map(tensor)
    })
}

/// The folded log-prob head (what `weighted_logprob_sum` runs on CUDA):
/// hidden `[N, d]`, lm_head `[V, d]` and aux `[N, 2]` f32 rows (target,
/// weight) -> stats `[N, 4]` f32 (log p, lse, entropy, w log p) and
/// `[N + V, d]`: the gradients of `sum w log p` for hidden over lm_head.
pub fn folded_logprobs(hidden: &Tensor, lm_head: &Tensor, aux: &Tensor, temperature: f64) -> Result<(Tensor, Tensor)> {
    let (n, d) = hidden.dims2()?;
    let v = lm_head.dim(0)?;
    with_cuda(&[hidden, lm_head, aux], |x| {
        let (stats, grads) = crate::logprobs::cuda::folded_fwd_cuda(temperature, x[0], x[1], x[2], true)?;
        Ok((tensor((stats, Shape::from((n, 4)))), tensor((grads, Shape::from((n + v, d))))))
    })
}

/// Picks `[rows, 2]` f32 rows (token, log-prob) of logits `[rows, V]` (f32
/// or bf16) with uniforms `[rows]` f64 (what `SampleOp` returns; the mode is
/// not validated here).
pub fn sample(logits: &Tensor, uniforms: &Tensor, mode: SampleMode) -> Result<Tensor> {
    with_cuda(&[logits, uniforms], |x| sample_cuda(mode, x[0].0, x[0].1, x[1].0, x[1].1).map(tensor))
}

/// RMSNorm over the last dimension: `w * x / sqrt(mean(x^2) + eps)`.
pub fn rms_norm(x: &Tensor, w: &Tensor, eps: f64) -> Result<Tensor> {
    with_cuda(&[x, w], |a| rms_norm_fwd_cuda(eps, a[0].0, a[0].1, a[1].0, a[1].1).map(tensor))
}

/// `(grad_x, grad_w)` of RMSNorm given the output gradient `dy`.
pub fn rms_norm_backward(x: &Tensor, w: &Tensor, dy: &Tensor, eps: f64) -> Result<(Tensor, Tensor)> {
    with_cuda(&[x, w, dy], |a| {
        let dx = rms_norm_bwd_dx_cuda(eps, a[0].0, a[0].1, a[1].0, a[1].1, a[2].0, a[2].1)?;
        let dw = rms_norm_bwd_dw_cuda(eps, a[0].0, a[0].1, a[2].0, a[2].1)?;
        Ok((tensor(dx), tensor(dw)))
    })
}

/// `[rows + 1, D]`: grad_x rows then grad_w, as `RmsNormBackward` returns.
pub fn rms_norm_backward_packed(x: &Tensor, w: &Tensor, dy: &Tensor, eps: f64) -> Result<Tensor> {
    with_cuda(&[x, w, dy], |a| rms_norm_bwd_cuda(eps, a[0].0, a[0].1, a[1].0, a[1].1, a[2].0, a[2].1).map(tensor))
}

/// `RopeOp { inverse }` on CUDA: [`rope`], or [`rope_backward`] when `inverse`.
pub fn rope_op(x: &Tensor, cos: &Tensor, sin: &Tensor, inverse: bool) -> Result<Tensor> {
    with_cuda(&[x, cos, sin], |a| rope_op_cuda(inverse, a[0].0, a[0].1, a[1].0, a[1].1, a[2].0, a[2].1).map(tensor))
}

/// Rotary embedding (rotate-half) of x `[B, H, T, D]` with cos/sin tables
/// `[B, 1, T, D]` as `RopeTables` builds them (or `[T, D/2]`-style rows).
pub fn rope(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    with_cuda(&[x, cos, sin], |a| rope_fwd_cuda(a[0].0, a[0].1, a[1].0, a[1].1, a[2].0, a[2].1).map(tensor))
}

/// Gradient of x through [`rope`] given the output gradient `dy`.
pub fn rope_backward(dy: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    with_cuda(&[dy, cos, sin], |a| rope_bwd_cuda(a[0].0, a[0].1, a[1].0, a[1].1, a[2].0, a[2].1).map(tensor))
}

/// `(out, dq, dk, dv)` of the attention op on CUDA: its `cuda_fwd`, then its
/// CUDA backward for the output gradient `grad_out` `[b, t, heads * d]`,
/// outside autograd (q `[b, heads, t, d]`, k, v `[b, kv_heads, s, d]`, any
/// strides with a contiguous last dimension; all f32 or all bf16; head dim
/// 64 or 128). Runs the kernels whatever `has_native_path` says, cuDNN or
/// the fused kernel as `settings` say; with which one ran.
pub fn attention_forward_backward(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    vis: &Arc<Visibility>,
    scale: f64,
    grad_out: &Tensor,
    settings: crate::attention::Settings,
) -> Result<(Tensor, Tensor, Tensor, Tensor, crate::attention::Ran)> {
    crate::attention::forward_backward_cuda(q, k, v, vis, scale, grad_out, settings)
}

/// `(out, dq, dk, dv)` of the attention op on cuDNN's fused attention
/// (feature `cudnn`): an error says why cuDNN declined (bf16/f16 only).
#[cfg(feature = "cudnn")]
pub fn attention_cudnn_forward_backward(q: &Tensor, k: &Tensor, v: &Tensor, vis: &Arc<Visibility>, scale: f64, grad_out: &Tensor) -> Result<(Tensor, Tensor, Tensor, Tensor)> {
    crate::attention::forward_backward_cudnn(q, k, v, vis, scale, grad_out)
}
