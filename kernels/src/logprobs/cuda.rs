//! CUDA path of the token log-probs: the log-prob head on cuBLAS, built as
//! Liger-Kernel's FusedLinearCrossEntropy is. Tokens go in chunks of
//! [`CHUNK_LOGITS_BYTES`] of f32 logits (`head_plan.rs`); per chunk a cuBLAS
//! GEMM (bf16 or f32 inputs, f32 accumulation and output) makes the logits,
//! one row kernel of ours (`kernels/cuda/logprobs.cu`, `tlp_rows_*`) their
//! statistics and, where a gradient is wanted, the logits' gradient written
//! over them, and two more GEMMs carry that gradient to hidden (each
//! chunk's rows once) and to lm_head (accumulated in f32 over the chunks).
//! Memory: one chunk of logits, never `[N, V]`, plus the f32 accumulator of
//! lm_head's gradient for bf16 inputs when that gradient is wanted.
//!
//! - [`token_logprobs_fwd_cuda`]: `TokenLogprobsOp`'s forward, stats `[N, 3]`;
//! - [`token_logprobs_bwd_cuda`]: `TokenLogprobsBackward`, `[N + V, d]` from
//!   aux `[N, 4]` rows (the logits recomputed chunk by chunk);
//! - [`folded_fwd_cuda`]: the loss folded into the forward
//!   (`weighted_logprob_sum`): stats `[N, 4]` and both gradients at once.
//!
//! f32 and bf16 inputs (one dtype).

use super::head_plan::{self as plan, Buf, Chunk, Gemm, CHUNK_LOGITS_BYTES};
use crate::cuda_util::{cfg_1d, common_float, expect_dtype, kernel_name, launch, to_i32, view, wrap, KernelFloat, LOGPROBS};
use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::cublas::{result as blas, sys as blas_sys};
use candle_core::cuda_backend::cudarc::driver::{CudaSlice, DevicePtr};
use candle_core::cuda_backend::{CudaStorage, WrapErr};
use candle_core::{bail, CudaDevice, DType, Layout, Result, Shape};

/// Columns of the forward's output (logp, lse, entropy).
const STATS: usize = 3;
/// Columns of the folded forward's output (logp, lse, entropy, w logp).
const FOLDED_STATS: usize = 4;
/// Columns of the backward's per-token input (target, lse, grad logp, grad lse).
const AUX: usize = 4;
/// Columns of the folded forward's per-token input (target, weight).
const FOLDED_AUX: usize = 2;
/// Threads of the row kernel's blocks (one block per token): the most a
/// block takes, so a chunk of ~440 rows fills an H100's or H200's SMs with
/// memory traffic (the kernel reads each row twice and writes it once).
const ROW_THREADS: u32 = 1024;
/// The row kernel's modes (`TLP_*` in logprobs.cu).
const MODE_STATS: i32 = 0;
const MODE_FOLDED: i32 = 1;
const MODE_GRAD: i32 = 2;

/// Problem size: N tokens, V vocabulary rows, d hidden size.
#[derive(Debug, Clone, Copy)]
struct Dims {
    n: usize,
    v: usize,
    d: usize,
}

/// Checks hidden [N, d], lm_head [V, d], the per-token input [N] or
/// [N, cols] and the temperature.
fn dims(temperature: f64, hidden_l: &Layout, w_l: &Layout, per_token_l: &Layout, cols: Option<usize>) -> Result<Dims> {
    let (n, d) = hidden_l.shape().dims2()?;
    let (v, d2) = w_l.shape().dims2()?;
    let (n2, c2) = match cols {
        None => (per_token_l.shape().dims1()?, None),
        Some(_) => {
            let (a, b) = per_token_l.shape().dims2()?;
            (a, Some(b))
        }
    };
    if d != d2 || n != n2 || c2 != cols {
        bail!(
            "token_logprobs (cuda): hidden [N, d] = [{n}, {d}], lm_head [V, d] = [{v}, {d2}] and per-token input {:?} disagree",
            per_token_l.shape()
        );
    }
    if n == 0 || v == 0 || d == 0 {
        bail!("token_logprobs (cuda): empty input (N = {n}, V = {v}, d = {d})");
    }
    if !(temperature.is_finite() && temperature > 0.0) {
        bail!("token_logprobs (cuda): temperature must be finite and > 0, got {temperature}");
    }
    Ok(Dims { n, v, d })
}

type In<'a> = (&'a CudaStorage, &'a Layout);

/// Device addresses of the head's buffers, and the inputs' cuBLAS type.
struct Buffers {
    hidden: u64,
    lm_head: u64,
    logits: u64,
    grad_hidden: u64,
    grad_head: u64,
    /// `CUDA_R_32F` or `CUDA_R_16BF`.
    ty: blas_sys::cudaDataType_t,
    /// Bytes of one element of the inputs.
    elem: usize,
}

impl Buffers {
    /// The address and cuBLAS type of an operand.
    fn operand(&self, o: plan::Operand) -> (u64, blas_sys::cudaDataType_t) {
        let f32_ty = blas_sys::cudaDataType_t::CUDA_R_32F;
        let (base, ty, elem) = match o.buf {
            Buf::Hidden => (self.hidden, self.ty, self.elem),
            Buf::LmHead => (self.lm_head, self.ty, self.elem),
            Buf::Logits => (self.logits, f32_ty, 4),
            Buf::Dz => (self.logits, self.ty, self.elem),
            Buf::GradHidden => (self.grad_hidden, self.ty, self.elem),
            Buf::GradHead => (self.grad_head, f32_ty, 4),
        };
        (base + (o.offset * elem) as u64, ty)
    }
}

/// Runs one planned product on the device's cuBLAS handle (its stream).
fn gemm(dev: &CudaDevice, bufs: &Buffers, g: &Gemm) -> Result<()> {
    let handle = dev.cublas_handle();
    let op = |t: bool| if t { blas_sys::cublasOperation_t::CUBLAS_OP_T } else { blas_sys::cublasOperation_t::CUBLAS_OP_N };
    let (a, a_ty) = bufs.operand(g.a);
    let (b, b_ty) = bufs.operand(g.b);
    let (c, c_ty) = bufs.operand(g.c);
    let (alpha, beta) = (g.alpha, g.beta);
    // SAFETY: the plan's operands lie inside the buffers (head_plan's tests
    // run the same plans on host buffers of these sizes); alpha and beta
    // are host f32 scalars, as CUBLAS_COMPUTE_32F takes them in the
    // handle's default (host) pointer mode; the handle runs on the device's
    // stream, where every buffer was written.
    unsafe {
        blas::gemm_ex(
            *handle.handle(),
            op(g.trans_a),
            op(g.trans_b),
            to_i32(g.m, "gemm m")?,
            to_i32(g.n, "gemm n")?,
            to_i32(g.k, "gemm k")?,
            (&alpha) as *const f32 as *const _,
            a as *const _,
            a_ty,
            to_i32(g.a.ld, "gemm lda")?,
            b as *const _,
            b_ty,
            to_i32(g.b.ld, "gemm ldb")?,
            (&beta) as *const f32 as *const _,
            c as *mut _,
            c_ty,
            to_i32(g.c.ld, "gemm ldc")?,
            blas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            blas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )
    }
    .w()
}

/// The row kernel on one chunk: `z` the chunk's logits, `tgt` its targets
/// (u32, mode stats), `coef` its aux rows (modes folded and grad), `stats`
/// its output rows (addresses already at the chunk's first token; 0 where
/// the mode reads or writes none).
#[allow(clippy::too_many_arguments)]
fn rows<T: KernelFloat>(dev: &CudaDevice, c: Chunk, v: usize, inv_t: f32, z: u64, tgt: u64, coef: u64, mode: i32, stats: u64) -> Result<()> {
    let v_i = to_i32(v, "V")?;
    // SAFETY: tlp_rows_T(float* z, int V, float inv_t, const u32* tgt, const
    // float* coef, int mode, float* stats): z holds rows x V f32 (the chunk
    // buffer), tgt rows targets (stats), coef 2 (folded) or 4 (grad) x rows
    // aux values, stats 3 (stats) or 4 (folded) x rows; one block per row
    // of the grid, which reads and writes its own row only.
    launch!(dev, LOGPROBS, kernel_name::<T>("tlp_rows"), cfg_1d(c.rows, ROW_THREADS)?;
        &z, &v_i, &inv_t, &tgt, &coef, &mode, &stats)
}

/// Forward: stats `[N, 3]` (f32: log p(target), lse, entropy); an
/// out-of-range target gives a NaN log-prob. The body of
/// `TokenLogprobsOp::cuda_fwd`.
pub(crate) fn token_logprobs_fwd_cuda(
    temperature: f64,
    hidden: &CudaStorage,
    hidden_l: &Layout,
    w: &CudaStorage,
    w_l: &Layout,
    t: &CudaStorage,
    t_l: &Layout,
) -> Result<(CudaStorage, Shape)> {
    let dm = dims(temperature, hidden_l, w_l, t_l, None)?;
    expect_dtype(t, DType::U32, "targets")?;
    let inv_t = (1.0 / temperature) as f32;
    let ins = [(hidden, hidden_l), (w, w_l)];
    let stats = match common_float("token_logprobs", &[hidden.dtype(), w.dtype()])? {
        DType::F32 => fwd_typed::<f32>(dm, inv_t, ins, (t, t_l))?,
        _ => fwd_typed::<half::bf16>(dm, inv_t, ins, (t, t_l))?,
    };
    Ok((stats, Shape::from((dm.n, STATS))))
}

/// A chunk buffer of f32 logits for `n` tokens of a vocabulary of `v`, and
/// the tokens per chunk it holds.
fn logits_buffer(dev: &CudaDevice, dm: Dims) -> Result<(CudaSlice<f32>, usize)> {
    let most = plan::chunk_rows(dm.n, dm.v, CHUNK_LOGITS_BYTES);
    // SAFETY: uninitialized; each chunk's logits GEMM writes its rows x V
    // values before the row kernel reads them.
    let buf = unsafe { dev.alloc::<f32>(most * dm.v)? };
    Ok((buf, most))
}

fn fwd_typed<T: KernelFloat>(dm: Dims, inv_t: f32, [hidden, w]: [In; 2], t: In) -> Result<CudaStorage> {
    let dev = hidden.0.device();
    let stream = dev.cuda_stream();
    let h = view::<T>(hidden.0, hidden.1, "hidden")?;
    let wv = view::<T>(w.0, w.1, "lm_head")?;
    let tv = view::<u32>(t.0, t.1, "targets")?;
    let (logits, most) = logits_buffer(dev, dm)?;
    // SAFETY: the row kernel writes all 3 values of every token.
    let stats = unsafe { dev.alloc::<f32>(dm.n * STATS)? };
    let ((hp, _g1), (wp, _g2), (tp, _g3)) = (h.device_ptr(&stream), wv.device_ptr(&stream), tv.device_ptr(&stream));
    let ((lp, _g4), (sp, _g5)) = (logits.device_ptr(&stream), stats.device_ptr(&stream));
    let bufs = Buffers { hidden: hp, lm_head: wp, logits: lp, grad_hidden: 0, grad_head: 0, ty: blas_type::<T>(), elem: T::DTYPE.size_in_bytes() };
    for c in plan::chunks(dm.n, most) {
        gemm(dev, &bufs, &plan::logits(c, dm.v, dm.d, inv_t))?;
        rows::<T>(dev, c, dm.v, inv_t, lp, tp + 4 * c.t0 as u64, 0, MODE_STATS, sp + (4 * STATS * c.t0) as u64)?;
    }
    drop((_g1, _g2, _g3, _g4, _g5));
    Ok(wrap(stats, dev))
}

/// The cuBLAS type of `T`.
fn blas_type<T: KernelFloat>() -> blas_sys::cudaDataType_t {
    match T::DTYPE {
        DType::BF16 => blas_sys::cudaDataType_t::CUDA_R_16BF,
        _ => blas_sys::cudaDataType_t::CUDA_R_32F,
    }
}

/// Backward: `[N + V, d]` = grad_hidden over grad_lm_head (the inputs' dtype)
/// from aux `[N, 4]` f32 rows (target, lse, grad of logp, grad of lse).
/// Tokens whose target is not a valid id get no gradient. The body of
/// `TokenLogprobsBackward::cuda_fwd`.
pub(crate) fn token_logprobs_bwd_cuda(
    temperature: f64,
    hidden: &CudaStorage,
    hidden_l: &Layout,
    w: &CudaStorage,
    w_l: &Layout,
    aux: &CudaStorage,
    aux_l: &Layout,
) -> Result<(CudaStorage, Shape)> {
    let dm = dims(temperature, hidden_l, w_l, aux_l, Some(AUX))?;
    expect_dtype(aux, DType::F32, "aux")?;
    let inv_t = (1.0 / temperature) as f32;
    let ins = [(hidden, hidden_l), (w, w_l)];
    let grads = match common_float("token_logprobs backward", &[hidden.dtype(), w.dtype()])? {
        DType::F32 => grads_typed::<f32>(dm, inv_t, ins, Rows::Grad(aux, aux_l), true)?,
        _ => grads_typed::<half::bf16>(dm, inv_t, ins, Rows::Grad(aux, aux_l), true)?,
    };
    Ok((grads.out, Shape::from((dm.n + dm.v, dm.d))))
}

/// The folded forward (`weighted_logprob_sum`, `FoldedLogprobsOp`): hidden
/// `[N, d]`, lm_head `[V, d]` and aux `[N, 2]` f32 rows (target, weight) -> stats `[N, 4]` f32
/// (log p, lse, entropy, w log p) and the gradients of `sum w log p` in the
/// inputs' dtype: `[N + V, d]` (hidden's over lm_head's) with `head_grad`,
/// else `[N, d]` (a frozen head skips its product and its accumulator).
pub(crate) fn folded_fwd_cuda(
    temperature: f64,
    (hidden, hidden_l): In,
    (w, w_l): In,
    aux: In,
    head_grad: bool,
) -> Result<(CudaStorage, CudaStorage)> {
    let dm = dims(temperature, hidden_l, w_l, aux.1, Some(FOLDED_AUX))?;
    expect_dtype(aux.0, DType::F32, "aux")?;
    let inv_t = (1.0 / temperature) as f32;
    let ins = [(hidden, hidden_l), (w, w_l)];
    let rows = Rows::Folded(aux.0, aux.1);
    let g = match common_float("weighted_logprob_sum", &[hidden.dtype(), w.dtype()])? {
        DType::F32 => grads_typed::<f32>(dm, inv_t, ins, rows, head_grad)?,
        _ => grads_typed::<half::bf16>(dm, inv_t, ins, rows, head_grad)?,
    };
    let stats = g.stats.ok_or_else(|| candle_core::Error::Msg("weighted_logprob_sum (cuda): no statistics".into()))?;
    Ok((wrap(stats, hidden.device()), g.out))
}

/// What the row kernel is given per token in a gradient pass.
enum Rows<'a> {
    /// The backward: aux `[N, 4]` rows.
    Grad(&'a CudaStorage, &'a Layout),
    /// The folded forward: aux `[N, 2]` rows (target, weight).
    Folded(&'a CudaStorage, &'a Layout),
}

/// A gradient pass's results: `[N, d]` grad_hidden followed, with the head's
/// gradient, by `[V, d]` grad_lm_head, in `T`; the folded forward's stats.
struct Grads {
    out: CudaStorage,
    stats: Option<CudaSlice<f32>>,
}

fn grads_typed<T: KernelFloat>(dm: Dims, inv_t: f32, [hidden, w]: [In; 2], per_token: Rows, head_grad: bool) -> Result<Grads> {
    let dev = hidden.0.device();
    let stream = dev.cuda_stream();
    let h = view::<T>(hidden.0, hidden.1, "hidden")?;
    let wv = view::<T>(w.0, w.1, "lm_head")?;
    let (nd, vd) = (dm.n * dm.d, dm.v * dm.d);
    let elem = T::DTYPE.size_in_bytes();
    let (logits, most) = logits_buffer(dev, dm)?;
    // SAFETY: uninitialized; the first N x d values are written by the
    // chunks' grad_hidden products (each row once), the last V x d (with
    // the head's gradient) by the first chunk's grad_head product (beta 0)
    // or, for bf16, by the cast of the f32 accumulator.
    let out = unsafe { dev.alloc::<T>(if head_grad { nd + vd } else { nd })? };
    // bf16 accumulates lm_head's gradient over the chunks in f32; f32 in place.
    let acc = if head_grad && T::DTYPE != DType::F32 {
        // SAFETY: the first chunk's product (beta 0) writes all of it.
        Some(unsafe { dev.alloc::<f32>(vd)? })
    } else {
        None
    };
    let stats = match per_token {
        // SAFETY: the row kernel writes all 4 values of every token.
        Rows::Folded(..) => Some(unsafe { dev.alloc::<f32>(dm.n * FOLDED_STATS)? }),
        Rows::Grad(..) => None,
    };
    let ((hp, _g1), (wp, _g2)) = (h.device_ptr(&stream), wv.device_ptr(&stream));
    let ((lp, _g3), (op, _g4)) = (logits.device_ptr(&stream), out.device_ptr(&stream));
    let acc_ptr = acc.as_ref().map(|a| a.device_ptr(&stream));
    let stats_ptr = stats.as_ref().map(|s| s.device_ptr(&stream));
    let grad_head = match &acc_ptr {
        Some((p, _)) => *p,
        None => op + (nd * elem) as u64,
    };
    let bufs = Buffers { hidden: hp, lm_head: wp, logits: lp, grad_hidden: op, grad_head, ty: blas_type::<T>(), elem };
    let ld = plan::dz_ld(dm.v, elem);
    // The per-token rows' address (kept borrowed for the loop).
    let coef = match &per_token {
        Rows::Grad(aux, aux_l) | Rows::Folded(aux, aux_l) => view::<f32>(aux, aux_l, "aux")?,
    };
    let (coef_p, _g5) = coef.device_ptr(&stream);
    for (i, c) in plan::chunks(dm.n, most).enumerate() {
        gemm(dev, &bufs, &plan::logits(c, dm.v, dm.d, inv_t))?;
        match &stats_ptr {
            Some((sp, _)) => {
                let (coef, st) = (coef_p + (4 * FOLDED_AUX * c.t0) as u64, sp + (4 * FOLDED_STATS * c.t0) as u64);
                rows::<T>(dev, c, dm.v, inv_t, lp, 0, coef, MODE_FOLDED, st)?;
            }
            None => rows::<T>(dev, c, dm.v, inv_t, lp, 0, coef_p + (4 * AUX * c.t0) as u64, MODE_GRAD, 0)?,
        }
        gemm(dev, &bufs, &plan::grad_hidden(c, dm.v, dm.d, ld))?;
        if head_grad {
            gemm(dev, &bufs, &plan::grad_head(c, dm.v, dm.d, ld, i == 0))?;
        }
    }
    if let Some((acc_p, _)) = &acc_ptr {
        let tail = op + (nd * elem) as u64;
        let vd_i = vd as i64;
        // SAFETY: tlp_cast_T(const float* src, int64_t n, T* dst): the
        // accumulator holds V x d f32, the output's tail V x d T; threads
        // past n return.
        launch!(dev, LOGPROBS, kernel_name::<T>("tlp_cast"), cfg_1d(vd.div_ceil(256), 256)?; acc_p, &vd_i, &tail)?;
    }
    drop((stats_ptr, acc_ptr, _g1, _g2, _g3, _g4, _g5));
    Ok(Grads { out: wrap(out, dev), stats })
}
