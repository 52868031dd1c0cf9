//! The weighted log-prob sum `L = sum_i w_i log p(target_i)` with the loss
//! folded into the op: when the weights are known before the forward pass
//! (mean NLL, GRPO's on-policy surrogate without KL: any loss linear in the
//! log-probs), the gradient of `L` is computed in the forward sweep over the
//! vocabulary, from logits that are computed once, and the backward only
//! scales it. That is three matrix-product passes (logits, gradient of
//! lm_head, gradient of hidden), the count of the unfused path, without its
//! `[N, V]` logits: each chunk of tokens holds one
//! [`folded_cpu::BUFFER_BYTES`]-sized block of them.
//!
//! On CUDA the same fold runs on the cuBLAS head (`cuda.rs`): per chunk of
//! tokens the row kernel writes the gradient over the logits it just
//! summarized, and lm_head's product is skipped when lm_head does not train.
//!
//! [`weighted_logprob_sum`] is the entry point; on devices without a native
//! path it composes [`super::token_logprobs_and_entropy`] and a weighted sum.

use super::folded_cpu;
use super::{cpu_inputs, prepare, target_id, MAX_VOCAB};
use candle_core::{CpuStorage, CustomOp3, DType, Device, Layout, Result, Shape, Tensor};
use std::sync::{Arc, Mutex};

/// Columns of the folded op's output: `[log p, lse, entropy, w * log p]`.
const COLUMNS: usize = 4;

/// What [`weighted_logprob_sum`] returns.
#[derive(Debug, Clone)]
pub struct WeightedLogprobs {
    /// `sum_i w_i log p_i`, a scalar differentiable with respect to hidden and lm_head.
    pub sum: Tensor,
    /// `[N]` log-probs (detached).
    pub logprobs: Tensor,
    /// `[N]` entropies of each token's distribution (detached).
    pub entropy: Tensor,
}

/// `sum_i weights_i * log softmax(hidden @ lm_head^T / temperature)[i, targets_i]`
/// for `hidden` `[N, d]`, `lm_head` `[V, d]`, `targets` `[N]` (u32) and
/// constant `weights` `[N]`, with the per-token log-probs and entropies
/// (detached) from the same sweep. Use it for a loss that is linear in the
/// log-probs; the weights are its coefficients (`-1/N` for a mean NLL).
pub fn weighted_logprob_sum(hidden: &Tensor, lm_head: &Tensor, targets: &Tensor, weights: &Tensor, temperature: f64) -> Result<WeightedLogprobs> {
    let n = hidden.dim(0)?;
    if weights.dims() != [n] {
        candle_core::bail!("weighted_logprob_sum: weights are {:?}, expected [{n}]", weights.dims());
    }
    let weights = weights.detach().to_dtype(DType::F32)?;
    if !crate::has_native_path(hidden.device()) {
        let (logp, entropy) = super::token_logprobs_and_entropy(hidden, lm_head, targets, temperature)?;
        let sum = (&logp * &weights)?.sum_all()?;
        return Ok(WeightedLogprobs { sum, logprobs: logp.detach(), entropy });
    }
    let (hidden, lm_head, targets) = prepare(hidden, lm_head, targets, temperature)?;
    debug_assert!(lm_head.dim(0)? <= MAX_VOCAB);
    let aux = Tensor::stack(&[targets.to_dtype(DType::F32)?, weights], 1)?.contiguous()?;
    let op = FoldedLogprobsOp { temperature, head_grad: lm_head.track_op(), grads: Arc::new(Mutex::new(None)) };
    let out = hidden.apply_op3(&lm_head, &aux, op)?;
    Ok(WeightedLogprobs {
        sum: out.narrow(1, 3, 1)?.sum_all()?,
        logprobs: out.narrow(1, 0, 1)?.squeeze(1)?.detach(),
        entropy: out.narrow(1, 2, 1)?.squeeze(1)?.detach(),
    })
}

/// `(hidden [N, d], lm_head [V, d], aux [N, 2] = [target as f32, weight])`
/// -> `[N, 4]` ([`COLUMNS`]). The forward keeps the gradients of the weighted
/// sum for the backward, which accepts only a uniform upstream gradient on
/// the last column (the sum's) and none on the others.
#[derive(Clone, Debug)]
struct FoldedLogprobsOp {
    temperature: f64,
    /// Whether lm_head trains (its gradient is made on CUDA only then).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    head_grad: bool,
    /// `(grad hidden [N, d], grad lm_head [V, d])` from the forward, taken
    /// by the backward (in the inputs' dtype, on their device).
    grads: Arc<Mutex<Option<(Tensor, Option<Tensor>)>>>,
}

impl FoldedLogprobsOp {
    fn keep(&self, grads: (Tensor, Option<Tensor>)) {
        *self.grads.lock().expect("folded-logprobs gradients") = Some(grads);
    }
}

impl CustomOp3 for FoldedLogprobsOp {
    fn name(&self) -> &'static str {
        "folded-logprobs"
    }

    fn cpu_fwd(&self, s1: &CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout, s3: &CpuStorage, l3: &Layout) -> Result<(CpuStorage, Shape)> {
        let (p, aux) = cpu_inputs((s1, l1), (s2, l2), (s3, l3), self.temperature)?;
        let mut targets = Vec::with_capacity(p.n);
        let mut weights = Vec::with_capacity(p.n);
        for (i, row) in aux.chunks_exact(2).enumerate() {
            let Some(t) = target_id(row[0], p.v) else {
                candle_core::bail!("folded-logprobs: target {} at row {i} is outside the vocabulary of {}", row[0], p.v);
            };
            targets.push(t);
            weights.push(row[1]);
        }
        let folded = folded_cpu::forward(&p, &targets, &weights);
        let gh = Tensor::from_vec(folded.grad_hidden, (p.n, p.d), &Device::Cpu)?;
        self.keep((gh, Some(Tensor::from_vec(folded.grad_lm_head, (p.v, p.d), &Device::Cpu)?)));
        Ok((CpuStorage::F32(folded.stats), Shape::from((p.n, COLUMNS))))
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
        let (n, d) = l1.shape().dims2()?;
        let v = l2.shape().dims2()?.0;
        let (stats, grads) = super::cuda::folded_fwd_cuda(self.temperature, (s1, l1), (s2, l2), (s3, l3), self.head_grad)?;
        let rows = if self.head_grad { n + v } else { n };
        let both = Tensor::from_storage(candle_core::Storage::Cuda(grads), (rows, d), candle_core::op::BackpropOp::none(), false);
        let head = if self.head_grad { Some(both.narrow(0, n, v)?) } else { None };
        self.keep((both.narrow(0, 0, n)?, head));
        Ok((stats, Shape::from((n, COLUMNS))))
    }

    fn bwd(&self, hidden: &Tensor, lm_head: &Tensor, _aux: &Tensor, _res: &Tensor, grad_res: &Tensor) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let g = grad_res.to_dtype(DType::F32)?.to_vec2::<f32>()?;
        let scale = g.first().map_or(0.0, |row| row[COLUMNS - 1]);
        if g.iter().any(|row| row[..COLUMNS - 1].iter().any(|&x| x != 0.0) || row[COLUMNS - 1] != scale) {
            candle_core::bail!("folded-logprobs: only the weighted sum is differentiable (the log-probs and entropies it returns are detached)");
        }
        let Some((gh, gw)) = self.grads.lock().expect("folded-logprobs gradients").take() else {
            candle_core::bail!("folded-logprobs: the backward ran twice on one forward");
        };
        let scaled = |g: Tensor| if scale != 1.0 { g.affine(scale as f64, 0.0) } else { Ok(g) };
        let gh = scaled(gh)?.reshape(hidden.shape())?;
        // A frozen head (a LoRA run) gets none. On the CPU its product was
        // still made in the forward sweep; on CUDA it was skipped.
        let gw = match gw {
            Some(g) if lm_head.track_op() => Some(scaled(g)?.reshape(lm_head.shape())?),
            _ => None,
        };
        Ok((Some(gh), gw, None))
    }
}
