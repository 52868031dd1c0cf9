//! CUDA path of the fused token log-probs (`kernels/cuda/logprobs.cu`):
//! `logprob[n] = z[n, t[n]] - logsumexp_v z[n, v]`, `z = hidden lm_head^T / T`,
//! without an `[N, V]` logits buffer. The forward keeps an online
//! log-sum-exp per token over split-vocabulary tiles; the backward recomputes
//! the logits one vocabulary chunk at a time (an `[N, C]` f32 scratch of at
//! most [`DZ_SCRATCH_BYTES`]). f32 and bf16 inputs, f32 accumulation and
//! f32 log-probs.

use crate::cuda_util::{cfg_1d, cfg_2d, common_float, expect_dtype, kernel_name, launch, to_i32, view, wrap, KernelFloat, LOGPROBS};
use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::CudaSlice;
use candle_core::cuda_backend::CudaStorage;
use candle_core::{bail, DType, Layout, Result, Shape};

/// Output tile of the kernels: 64 tokens x 64 vocabulary rows (or columns of d).
const TILE: usize = 64;
/// Threads per block of the tiled kernels (4 x 4 outputs each).
const TILE_THREADS: u32 = 256;
/// Blocks the forward aims for (about 8 per SM on a 132-SM H100/H200): the
/// vocabulary is split until the token tiles times the splits reach it.
const TARGET_BLOCKS: usize = 1056;
/// Upper bound of the backward's per-chunk `dz` scratch.
pub const DZ_SCRATCH_BYTES: usize = 256 << 20;

/// Problem size: N tokens, V vocabulary rows, d hidden size.
#[derive(Debug, Clone, Copy)]
struct Dims {
    n: usize,
    v: usize,
    d: usize,
}

/// Checks hidden [N, d], lm_head [V, d], targets [N] (u32) and the temperature.
fn dims(temperature: f64, hidden_l: &Layout, w_l: &Layout, t: &CudaStorage, t_l: &Layout) -> Result<Dims> {
    let (n, d) = hidden_l.shape().dims2()?;
    let (v, d2) = w_l.shape().dims2()?;
    let n2 = t_l.shape().dims1()?;
    if d != d2 || n != n2 {
        bail!("token_logprobs (cuda): hidden [N, d] = [{n}, {d}], lm_head [V, d] = [{v}, {d2}] and targets [N] = [{n2}] disagree");
    }
    if n == 0 || v == 0 || d == 0 {
        bail!("token_logprobs (cuda): empty input (N = {n}, V = {v}, d = {d})");
    }
    if !(temperature.is_finite() && temperature > 0.0) {
        bail!("token_logprobs (cuda): temperature must be finite and > 0, got {temperature}");
    }
    expect_dtype(t, DType::U32, "targets")?;
    Ok(Dims { n, v, d })
}

/// Forward: log-probs `[N]` (f32) of the targets under `hidden lm_head^T / T`;
/// an out-of-range target gives NaN. The body of `TokenLogprobsOp::cuda_fwd`.
pub(crate) fn token_logprobs_fwd_cuda(
    temperature: f64,
    hidden: &CudaStorage,
    hidden_l: &Layout,
    w: &CudaStorage,
    w_l: &Layout,
    t: &CudaStorage,
    t_l: &Layout,
) -> Result<(CudaStorage, Shape)> {
    let (logprobs, _lse, shape) = token_logprobs_fwd_lse_cuda(temperature, hidden, hidden_l, w, w_l, t, t_l)?;
    Ok((logprobs, shape))
}

/// Forward returning the per-token log-sum-exp `[N]` (f32) too.
#[allow(dead_code)] // for an op that saves the lse instead of recovering it
pub(crate) fn token_logprobs_fwd_lse_cuda(
    temperature: f64,
    hidden: &CudaStorage,
    hidden_l: &Layout,
    w: &CudaStorage,
    w_l: &Layout,
    t: &CudaStorage,
    t_l: &Layout,
) -> Result<(CudaStorage, CudaStorage, Shape)> {
    let dm = dims(temperature, hidden_l, w_l, t, t_l)?;
    let inv_t = (1.0 / temperature) as f32;
    let (lp, lse) = match common_float("token_logprobs", &[hidden.dtype(), w.dtype()])? {
        DType::F32 => fwd_typed::<f32>(dm, inv_t, hidden, hidden_l, w, w_l, t, t_l)?,
        _ => fwd_typed::<half::bf16>(dm, inv_t, hidden, hidden_l, w, w_l, t, t_l)?,
    };
    let dev = hidden.device();
    Ok((wrap(lp, dev), wrap(lse, dev), Shape::from(dm.n)))
}

#[allow(clippy::too_many_arguments)]
fn fwd_typed<T: KernelFloat>(
    dm: Dims,
    inv_t: f32,
    hidden: &CudaStorage,
    hidden_l: &Layout,
    w: &CudaStorage,
    w_l: &Layout,
    t: &CudaStorage,
    t_l: &Layout,
) -> Result<(CudaSlice<f32>, CudaSlice<f32>)> {
    let dev = hidden.device();
    let h = view::<T>(hidden, hidden_l, "hidden")?;
    let wv = view::<T>(w, w_l, "lm_head")?;
    let tv = view::<u32>(t, t_l, "targets")?;
    let row_blocks = dm.n.div_ceil(TILE);
    let v_tiles = dm.v.div_ceil(TILE);
    let per_split = v_tiles.div_ceil(TARGET_BLOCKS.div_ceil(row_blocks).clamp(1, v_tiles));
    let splits = v_tiles.div_ceil(per_split);
    let (n, v, d) = (to_i32(dm.n, "N")?, to_i32(dm.v, "V")?, to_i32(dm.d, "d")?);
    let (per_split_i, splits_i) = (to_i32(per_split, "tiles per split")?, to_i32(splits, "splits")?);
    // SAFETY: uninitialized buffers; the partial kernel writes every
    // (split, row < N) entry (each split owns at least one vocabulary tile)
    // before the combine reads them.
    let mut part_m = unsafe { dev.alloc::<f32>(splits * dm.n)? };
    let mut part_s = unsafe { dev.alloc::<f32>(splits * dm.n)? };
    let mut zt = dev.alloc_zeros::<f32>(dm.n)?;
    // SAFETY: tlp_fwd_partial_T(const T* h, const T* w, const u32* tgt, int N,
    // int V, int D, float inv_t, int tiles_per_split, float* part_m,
    // float* part_s, float* zt): h holds N*D, w V*D, tgt N contiguous elements
    // (checked by `dims` and `view`), part_m/part_s splits*N, zt N; the kernel
    // bounds-checks rows < N and vocabulary < V; grid = (row tiles, splits).
    launch!(dev, LOGPROBS, kernel_name::<T>("tlp_fwd_partial"), cfg_2d(row_blocks, splits, TILE_THREADS)?;
        &h, &wv, &tv, &n, &v, &d, &inv_t, &per_split_i, &mut part_m, &mut part_s, &mut zt)?;
    // SAFETY: every element is written by the combine kernel (one thread per token).
    let mut lp = unsafe { dev.alloc::<f32>(dm.n)? };
    let mut lse = unsafe { dev.alloc::<f32>(dm.n)? };
    // SAFETY: tlp_fwd_combine(const float* part_m, const float* part_s,
    // const float* zt, const u32* tgt, int N, int V, int splits, float* logprob,
    // float* lse): sizes as allocated above; threads with n >= N return.
    launch!(dev, LOGPROBS, "tlp_fwd_combine", cfg_1d(dm.n.div_ceil(256), 256)?;
        &part_m, &part_s, &zt, &tv, &n, &v, &splits_i, &mut lp, &mut lse)?;
    Ok((lp, lse))
}

/// Backward of `sum_n grad[n] * logprob[n]`: `(grad_hidden [N, d],
/// grad_lm_head [V, d])` in the inputs' dtype. `logprobs` is the forward's
/// output (the log-sum-exp is recovered from it, so nothing else is saved);
/// `grad` is f32 `[N]`. Tokens with an out-of-range target get no gradient.
#[allow(clippy::too_many_arguments)]
pub(crate) fn token_logprobs_bwd_cuda(
    temperature: f64,
    hidden: &CudaStorage,
    hidden_l: &Layout,
    w: &CudaStorage,
    w_l: &Layout,
    t: &CudaStorage,
    t_l: &Layout,
    logprobs: &CudaStorage,
    logprobs_l: &Layout,
    grad: &CudaStorage,
    grad_l: &Layout,
) -> Result<((CudaStorage, Shape), (CudaStorage, Shape))> {
    let dm = dims(temperature, hidden_l, w_l, t, t_l)?;
    for (what, s, l) in [("logprobs", logprobs, logprobs_l), ("grad", grad, grad_l)] {
        expect_dtype(s, DType::F32, what)?;
        if l.shape().dims1()? != dm.n {
            bail!("token_logprobs backward (cuda): {what} has shape {:?}, expected [{}]", l.shape(), dm.n);
        }
    }
    let inv_t = (1.0 / temperature) as f32;
    let ins = BwdInputs { hidden, hidden_l, w, w_l, t, t_l, logprobs, logprobs_l, grad, grad_l };
    let (gh, gw) = match common_float("token_logprobs", &[hidden.dtype(), w.dtype()])? {
        DType::F32 => bwd_typed::<f32>(dm, inv_t, &ins)?,
        _ => bwd_typed::<half::bf16>(dm, inv_t, &ins)?,
    };
    Ok(((gh, Shape::from((dm.n, dm.d))), (gw, Shape::from((dm.v, dm.d)))))
}

/// The backward's inputs, storage and layout each.
struct BwdInputs<'a> {
    hidden: &'a CudaStorage,
    hidden_l: &'a Layout,
    w: &'a CudaStorage,
    w_l: &'a Layout,
    t: &'a CudaStorage,
    t_l: &'a Layout,
    logprobs: &'a CudaStorage,
    logprobs_l: &'a Layout,
    grad: &'a CudaStorage,
    grad_l: &'a Layout,
}

/// Vocabulary rows per backward chunk: a multiple of the tile, the `[N, C]`
/// f32 scratch within [`DZ_SCRATCH_BYTES`] (at least one tile), at most V.
fn chunk_rows(n: usize, v: usize) -> usize {
    let fit = (DZ_SCRATCH_BYTES / 4 / n) / TILE * TILE;
    fit.max(TILE).min(v)
}

fn bwd_typed<T: KernelFloat>(dm: Dims, inv_t: f32, x: &BwdInputs) -> Result<(CudaStorage, CudaStorage)> {
    let dev = x.hidden.device();
    let h = view::<T>(x.hidden, x.hidden_l, "hidden")?;
    let wv = view::<T>(x.w, x.w_l, "lm_head")?;
    let tv = view::<u32>(x.t, x.t_l, "targets")?;
    let lpv = view::<f32>(x.logprobs, x.logprobs_l, "logprobs")?;
    let gv = view::<f32>(x.grad, x.grad_l, "grad")?;
    let (n, v, d) = (to_i32(dm.n, "N")?, to_i32(dm.v, "V")?, to_i32(dm.d, "d")?);
    // SAFETY: one warp per token writes lse[n] for every n < N.
    let mut lse = unsafe { dev.alloc::<f32>(dm.n)? };
    // SAFETY: tlp_lse_from_logprob_T(const T* h, const T* w, const u32* tgt,
    // const float* logprob, int N, int V, int D, float inv_t, float* lse):
    // sizes checked by `dims`; warps past N return; targets >= V are not read.
    launch!(dev, LOGPROBS, kernel_name::<T>("tlp_lse_from_logprob"), cfg_1d((dm.n * 32).div_ceil(256), 256)?;
        &h, &wv, &tv, &lpv, &n, &v, &d, &inv_t, &mut lse)?;
    let chunk = chunk_rows(dm.n, dm.v);
    // SAFETY: each chunk's dz kernel writes all N * cc entries its two
    // gradient kernels read; grad_w's rows are each written by one chunk.
    let mut dz = unsafe { dev.alloc::<f32>(dm.n * chunk)? };
    let mut gw = unsafe { dev.alloc::<T>(dm.v * dm.d)? };
    let mut gh = dev.alloc_zeros::<f32>(dm.n * dm.d)?;
    let row_blocks = dm.n.div_ceil(TILE);
    let d_blocks = dm.d.div_ceil(TILE);
    for v0 in (0..dm.v).step_by(chunk) {
        let cc = chunk.min(dm.v - v0);
        let (v0_i, cc_i) = (to_i32(v0, "v0")?, to_i32(cc, "chunk")?);
        // SAFETY: tlp_bwd_dz_T(const T* h, const T* w, const u32* tgt,
        // const float* lse, const float* g, int N, int V, int D, float inv_t,
        // int v0, int C, float* dz): dz holds N*chunk >= N*cc; the kernel writes
        // row < N, v0 <= v < v0 + cc only; grid = (row tiles, cc tiles).
        launch!(dev, LOGPROBS, kernel_name::<T>("tlp_bwd_dz"), cfg_2d(row_blocks, cc.div_ceil(TILE), TILE_THREADS)?;
            &h, &wv, &tv, &lse, &gv, &n, &v, &d, &inv_t, &v0_i, &cc_i, &mut dz)?;
        // SAFETY: tlp_bwd_grad_h_T(const float* dz, const T* w, int N, int D,
        // int v0, int C, float* gh): reads dz[N*cc], w rows v0..v0+cc < V,
        // writes gh[N*D] bounds-checked; grid = (row tiles, d tiles).
        launch!(dev, LOGPROBS, kernel_name::<T>("tlp_bwd_grad_h"), cfg_2d(row_blocks, d_blocks, TILE_THREADS)?;
            &dz, &wv, &n, &d, &v0_i, &cc_i, &mut gh)?;
        // SAFETY: tlp_bwd_grad_w_T(const float* dz, const T* h, int N, int D,
        // int v0, int C, T* gw): writes gw rows v0..v0+cc (< V) bounds-checked;
        // grid = (cc tiles, d tiles).
        launch!(dev, LOGPROBS, kernel_name::<T>("tlp_bwd_grad_w"), cfg_2d(cc.div_ceil(TILE), d_blocks, TILE_THREADS)?;
            &dz, &h, &n, &d, &v0_i, &cc_i, &mut gw)?;
    }
    let gh = cast_from_f32::<T>(gh, dm.n * dm.d, dev)?;
    Ok((gh, wrap(gw, dev)))
}

/// An f32 accumulator as a storage of `T` (no copy for f32).
fn cast_from_f32<T: KernelFloat>(acc: CudaSlice<f32>, len: usize, dev: &candle_core::CudaDevice) -> Result<CudaStorage> {
    if T::DTYPE == DType::F32 {
        return Ok(wrap(acc, dev));
    }
    // SAFETY: the cast kernel writes every element < len.
    let mut out = unsafe { dev.alloc::<T>(len)? };
    let len_i = len as i64;
    // SAFETY: tlp_cast_T(const float* src, int64_t n, T* dst): both hold len.
    launch!(dev, LOGPROBS, kernel_name::<T>("tlp_cast"), cfg_1d(len.div_ceil(256), 256)?; &acc, &len_i, &mut out)?;
    Ok(wrap(out, dev))
}
