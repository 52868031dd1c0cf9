//! Fused token log-probabilities: `log softmax(hidden @ lm_head^T / T)[target]`
//! per token, without ever materializing the `[N, V]` logits.
//!
//! - [`token_logprobs`]: differentiable log-probs `[N]` (gradients for hidden
//!   and lm_head), [`token_logprobs_and_entropy`] adds the detached entropy
//!   from the same pass, [`token_entropy`] the entropy alone.
//! - [`token_logprobs_reference`]: the plain-tensor composition they match.
//! - [`TokenLogprobsOp`] / [`TokenLogprobsBackward`]: the Candle custom ops.
//!   The CPU code lives in `cpu.rs`; the CUDA path (`cuda.rs`, feature
//!   `cuda`, with [`crate::has_native_path`] true for the device) is the
//!   log-prob head on cuBLAS: chunks of tokens, each chunk's logits by a
//!   cuBLAS GEMM, one row kernel of ours, cuBLAS for the gradients
//!   (`head_plan.rs`, [`CHUNK_LOGITS_BYTES`]). Where the path is off the
//!   public functions fall back to the reference.
//!
//! Forward: chunks over tokens and vocabulary with an online log-sum-exp.
//! Backward: recomputes each logits block and turns it into the gradient at
//! once (`d logp_n / d s_{n,v} = 1[v = t_n] - p_{n,v}`).
//!
//! [`weighted_logprob_sum`] (`folded.rs`) folds a loss that is linear in the
//! log-probs into the op: its gradient comes out of the forward sweep, with
//! one matrix-product pass fewer than the forward and backward above.

mod cpu;
#[cfg(feature = "cuda")]
pub(crate) mod cuda;
mod folded;
mod folded_cpu;
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
mod head_plan;

pub use folded::{weighted_logprob_sum, WeightedLogprobs};
pub use head_plan::CHUNK_LOGITS_BYTES;

/// Working memory (bytes) of the CUDA log-prob head for `tokens` tokens, a
/// vocabulary of `vocab`, hidden size `hidden` and inputs of `elem_bytes`
/// bytes, at most: one chunk of f32 logits ([`CHUNK_LOGITS_BYTES`]) and,
/// when lm_head trains (`head_grad`), the gradient the folded op holds from
/// its forward to its backward (`[vocab, hidden]` in the inputs' dtype)
/// and, for bf16 inputs, the f32 accumulator it is summed in. The
/// gradient of the hidden states it returns is not included.
pub fn cuda_head_workspace_bytes(tokens: usize, vocab: usize, hidden: usize, elem_bytes: usize, head_grad: bool) -> u64 {
    let rows = head_plan::chunk_rows(tokens, vocab, CHUNK_LOGITS_BYTES);
    let logits = (rows * vocab * 4) as u64;
    let head = (vocab * hidden) as u64;
    let grads = match (head_grad, elem_bytes) {
        (false, _) => 0,
        (true, 4) => head * 4,
        (true, e) => head * (4 + e as u64),
    };
    logits + grads
}

/// Working memory (bytes) of [`weighted_logprob_sum`] on the CPU for a
/// vocabulary of `vocab`, hidden size `hidden` and `threads` threads, at
/// most: its logits buffer and partial gradients (the gradients it returns
/// not included).
pub fn folded_workspace_bytes(vocab: usize, hidden: usize, threads: usize) -> u64 {
    folded_cpu::workspace_bytes(vocab, hidden, threads) as u64
}

use crate::storage::{contiguous_slice, f32_slice};
use candle_core::{CpuStorage, CustomOp3, DType, Layout, Result, Shape, Tensor, D};

/// Columns of the op's output: `[log p(target), log-sum-exp, entropy]`.
pub(crate) const STATS: usize = 3;
/// Columns of the backward op's per-token input:
/// `[target (as f32, exact below 2^24), lse, grad of logp, grad of lse]`.
pub(crate) const AUX: usize = 4;
/// Largest vocabulary whose ids survive the f32 round trip of [`AUX`].
pub(crate) const MAX_VOCAB: usize = 1 << 24;

/// Log-probs `[N]` (f32) of `targets` `[N]` (u32) under
/// `softmax(hidden @ lm_head^T / temperature)`, for `hidden` `[N, d]` and
/// `lm_head` `[V, d]`. Differentiable with respect to `hidden` and `lm_head`.
/// Inputs of another float dtype are converted to f32 first (the gradients
/// flow back through the conversion).
pub fn token_logprobs(hidden: &Tensor, lm_head: &Tensor, targets: &Tensor, temperature: f64) -> Result<Tensor> {
    if !crate::has_native_path(hidden.device()) {
        return token_logprobs_reference(hidden, lm_head, targets, temperature);
    }
    fused_stats(hidden, lm_head, targets, temperature)?.narrow(1, 0, 1)?.squeeze(1)
}

/// [`token_logprobs`] and the entropy `[N]` of each token's distribution
/// (detached: a metric) from one pass over the vocabulary.
pub fn token_logprobs_and_entropy(hidden: &Tensor, lm_head: &Tensor, targets: &Tensor, temperature: f64) -> Result<(Tensor, Tensor)> {
    if !crate::has_native_path(hidden.device()) {
        let logp = token_logprobs_reference(hidden, lm_head, targets, temperature)?;
        return Ok((logp, token_entropy_reference(hidden, lm_head, temperature)?));
    }
    let stats = fused_stats(hidden, lm_head, targets, temperature)?;
    let logp = stats.narrow(1, 0, 1)?.squeeze(1)?;
    let entropy = stats.narrow(1, 2, 1)?.squeeze(1)?.detach();
    Ok((logp, entropy))
}

/// Entropy `[N]` (f32, no gradient) of `softmax(hidden @ lm_head^T / temperature)`.
pub fn token_entropy(hidden: &Tensor, lm_head: &Tensor, temperature: f64) -> Result<Tensor> {
    if !crate::has_native_path(hidden.device()) {
        return token_entropy_reference(hidden, lm_head, temperature);
    }
    let n = hidden.dim(0)?;
    let targets = Tensor::zeros(n, DType::U32, hidden.device())?;
    let (hidden, lm_head, targets) = prepare(hidden, lm_head, &targets, temperature)?;
    let stats = hidden.apply_op3_no_bwd(&lm_head, &targets, &TokenLogprobsOp { temperature })?;
    stats.narrow(1, 2, 1)?.squeeze(1)
}

/// The plain-tensor composition the fused op replaces: matmul, `/ T`,
/// max-shifted log-softmax, gather. Materializes `[N, V]`; for tests and
/// benchmarks.
pub fn token_logprobs_reference(hidden: &Tensor, lm_head: &Tensor, targets: &Tensor, temperature: f64) -> Result<Tensor> {
    let logits = (hidden.to_dtype(DType::F32)?.matmul(&lm_head.to_dtype(DType::F32)?.t()?)? / temperature)?;
    let max = logits.max_keepdim(D::Minus1)?.detach();
    let shifted = logits.broadcast_sub(&max)?;
    let lse = shifted.exp()?.sum_keepdim(D::Minus1)?.log()?;
    let logp = shifted.broadcast_sub(&lse)?;
    logp.gather(&targets.unsqueeze(D::Minus1)?, D::Minus1)?.squeeze(D::Minus1)
}

/// Entropy `[N]` through the full logits (detached), in row chunks that
/// bound the extra memory; the fallback where the op has no native path.
pub fn token_entropy_reference(hidden: &Tensor, lm_head: &Tensor, temperature: f64) -> Result<Tensor> {
    const ROWS: usize = 1024;
    let (hidden, lm_head) = (hidden.detach().to_dtype(DType::F32)?, lm_head.detach().to_dtype(DType::F32)?);
    let n = hidden.dim(0)?;
    let mut parts = Vec::new();
    for start in (0..n).step_by(ROWS) {
        let logits = (hidden.narrow(0, start, ROWS.min(n - start))?.matmul(&lm_head.t()?)? / temperature)?;
        let max = logits.max_keepdim(D::Minus1)?;
        let shifted = logits.broadcast_sub(&max)?;
        let logp = shifted.broadcast_sub(&shifted.exp()?.sum_keepdim(D::Minus1)?.log()?)?;
        parts.push((logp.exp()? * &logp)?.sum(D::Minus1)?.neg()?);
    }
    if parts.is_empty() {
        return Tensor::zeros(0, DType::F32, hidden.device());
    }
    Tensor::cat(&parts, 0)
}

/// The op's `[N, 3]` output (see [`STATS`]) with gradient tracking.
fn fused_stats(hidden: &Tensor, lm_head: &Tensor, targets: &Tensor, temperature: f64) -> Result<Tensor> {
    let (hidden, lm_head, targets) = prepare(hidden, lm_head, targets, temperature)?;
    hidden.apply_op3(&lm_head, &targets, TokenLogprobsOp { temperature })
}

/// Checks shapes and the temperature; returns contiguous float inputs
/// (bf16 kept on CUDA, where the cuBLAS head takes it; f32 elsewhere) and
/// u32 targets.
fn prepare(hidden: &Tensor, lm_head: &Tensor, targets: &Tensor, temperature: f64) -> Result<(Tensor, Tensor, Tensor)> {
    let (n, d) = hidden.dims2()?;
    let (v, dw) = lm_head.dims2()?;
    let nt = targets.dims1()?;
    if d != dw || n != nt {
        candle_core::bail!("token_logprobs: hidden is {n}x{d}, lm_head {v}x{dw}, targets {nt}: expected [N,d], [V,d], [N]");
    }
    if v == 0 || v > MAX_VOCAB {
        candle_core::bail!("token_logprobs: vocabulary of {v} outside 1..={MAX_VOCAB}");
    }
    if !(temperature.is_finite() && temperature > 0.0) {
        candle_core::bail!("token_logprobs: temperature must be positive and finite, got {temperature}");
    }
    let float = if hidden.device().is_cuda() && hidden.dtype() == DType::BF16 && lm_head.dtype() == DType::BF16 { DType::BF16 } else { DType::F32 };
    Ok((
        hidden.to_dtype(float)?.contiguous()?,
        lm_head.to_dtype(float)?.contiguous()?,
        targets.to_dtype(DType::U32)?.contiguous()?,
    ))
}

/// Forward op: `(hidden [N, d] f32, lm_head [V, d] f32, targets [N] u32)` ->
/// `[N, 3]` f32 rows `[log p(target), log-sum-exp, entropy]` of the
/// temperature-scaled logits. Its backward handles the first two columns (the
/// entropy column is meant to be detached).
#[derive(Clone, Copy, Debug)]
pub struct TokenLogprobsOp {
    /// Softmax temperature (> 0): logits are divided by it.
    pub temperature: f64,
}

/// Backward op: `(hidden [N, d], lm_head [V, d], aux [N, 4])` (see [`AUX`])
/// -> `[N + V, d]`: the gradient of hidden in the first `N` rows, of
/// lm_head in the last `V`.
#[derive(Clone, Copy, Debug)]
pub struct TokenLogprobsBackward {
    /// The forward's temperature.
    pub temperature: f64,
}

/// Per-token inputs of the backward kernels, unpacked from [`AUX`] rows.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Stats {
    pub lse: f32,
    pub grad_logp: f32,
    pub grad_lse: f32,
}

impl CustomOp3 for TokenLogprobsOp {
    fn name(&self) -> &'static str {
        "token-logprobs"
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
        cuda::token_logprobs_fwd_cuda(self.temperature, s1, l1, s2, l2, s3, l3)
    }

    fn cpu_fwd(&self, s1: &CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout, s3: &CpuStorage, l3: &Layout) -> Result<(CpuStorage, Shape)> {
        let (n, d) = l1.shape().dims2()?;
        let (v, _) = l2.shape().dims2()?;
        let hidden = contiguous_slice(f32_slice(s1, "hidden")?, l1, "hidden")?;
        let lm_head = contiguous_slice(f32_slice(s2, "lm_head")?, l2, "lm_head")?;
        let targets = match s3 {
            CpuStorage::U32(t) => contiguous_slice(t, l3, "targets")?,
            _ => candle_core::bail!("token-logprobs: targets must be u32"),
        };
        if let Some((i, t)) = targets.iter().enumerate().find(|(_, &t)| t as usize >= v) {
            candle_core::bail!("token-logprobs: target {t} at row {i} is outside the vocabulary of {v}");
        }
        let p = cpu::Problem { hidden, lm_head, n, d, v, inv_t: (1.0 / self.temperature) as f32 };
        Ok((CpuStorage::F32(cpu::forward(&p, targets)), Shape::from((n, STATS))))
    }

    fn bwd(&self, hidden: &Tensor, lm_head: &Tensor, targets: &Tensor, res: &Tensor, grad_res: &Tensor) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let n = hidden.dim(0)?;
        let aux = Tensor::cat(
            &[
                &targets.to_dtype(DType::F32)?.unsqueeze(1)?,
                &res.narrow(1, 1, 1)?,
                &grad_res.narrow(1, 0, 1)?,
                &grad_res.narrow(1, 1, 1)?,
            ],
            1,
        )?
        .contiguous()?;
        let grads = hidden.apply_op3_no_bwd(lm_head, &aux, &TokenLogprobsBackward { temperature: self.temperature })?;
        let v = lm_head.dim(0)?;
        let head = if lm_head.track_op() { Some(grads.narrow(0, n, v)?) } else { None };
        Ok((Some(grads.narrow(0, 0, n)?), head, None))
    }
}

impl CustomOp3 for TokenLogprobsBackward {
    fn name(&self) -> &'static str {
        "token-logprobs-backward"
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
        cuda::token_logprobs_bwd_cuda(self.temperature, s1, l1, s2, l2, s3, l3)
    }

    fn cpu_fwd(&self, s1: &CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout, s3: &CpuStorage, l3: &Layout) -> Result<(CpuStorage, Shape)> {
        let (p, aux) = cpu_inputs((s1, l1), (s2, l2), (s3, l3), self.temperature)?;
        let (targets, stats) = unpack_aux(aux, p.v)?;
        Ok((CpuStorage::F32(cpu::backward(&p, &targets, &stats)), Shape::from((p.n + p.v, p.d))))
    }
}

/// The CPU kernels' inputs of the ops whose third input is f32 rows
/// (`aux`): the problem (hidden `[N, d]`, lm_head `[V, d]`, `1/T`) and those rows.
pub(crate) fn cpu_inputs<'a>(
    (s1, l1): (&'a CpuStorage, &Layout),
    (s2, l2): (&'a CpuStorage, &Layout),
    (s3, l3): (&'a CpuStorage, &Layout),
    temperature: f64,
) -> Result<(cpu::Problem<'a>, &'a [f32])> {
    let (n, d) = l1.shape().dims2()?;
    let (v, _) = l2.shape().dims2()?;
    let hidden = contiguous_slice(f32_slice(s1, "hidden")?, l1, "hidden")?;
    let lm_head = contiguous_slice(f32_slice(s2, "lm_head")?, l2, "lm_head")?;
    let aux = contiguous_slice(f32_slice(s3, "aux")?, l3, "aux")?;
    Ok((cpu::Problem { hidden, lm_head, n, d, v, inv_t: (1.0 / temperature) as f32 }, aux))
}

/// A target id carried as f32 in an aux row, when it is a whole number inside the vocabulary of `v`.
pub(crate) fn target_id(t: f32, v: usize) -> Option<u32> {
    (t >= 0.0 && (t as usize) < v && t.fract() == 0.0).then_some(t as u32)
}

/// Splits [`AUX`] rows into target ids and [`Stats`].
pub(crate) fn unpack_aux(aux: &[f32], v: usize) -> Result<(Vec<u32>, Vec<Stats>)> {
    let mut targets = Vec::with_capacity(aux.len() / AUX);
    let mut stats = Vec::with_capacity(aux.len() / AUX);
    for row in aux.chunks_exact(AUX) {
        let Some(t) = target_id(row[0], v) else {
            candle_core::bail!("token-logprobs-backward: target {} outside the vocabulary of {v}", row[0]);
        };
        targets.push(t);
        stats.push(Stats { lse: row[1], grad_logp: row[2], grad_lse: row[3] });
    }
    Ok((targets, stats))
}
