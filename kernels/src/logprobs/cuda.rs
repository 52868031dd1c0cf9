//! CUDA path of the fused token log-probs (`kernels/cuda/logprobs.cu`), with
//! the contract of `TokenLogprobsOp` / `TokenLogprobsBackward` (their CPU
//! paths in `logprobs/cpu.rs`):
//!
//! - forward: hidden `[N, d]`, lm_head `[V, d]`, targets `[N]` (u32) ->
//!   stats `[N, 3]` f32 = (log p(target), log-sum-exp, entropy) of
//!   `softmax(hidden lm_head^T / T)`, without an `[N, V]` logits buffer: an
//!   online log-sum-exp per token over split-vocabulary tiles, then a combine;
//! - backward: hidden, lm_head and aux `[N, 4]` f32 = (target, lse, grad of
//!   logp, grad of lse) -> `[N + V, d]` = grad_hidden over grad_lm_head, in
//!   the inputs' dtype; the logits are recomputed one vocabulary chunk at a
//!   time (an `[N, C]` f32 scratch of at most [`DZ_SCRATCH_BYTES`]).
//!
//! f32 and bf16 inputs (one dtype), f32 accumulation.

use crate::cuda_util::{cfg_1d, cfg_2d, common_float, expect_dtype, kernel_name, launch, to_i32, view, wrap, KernelFloat, LOGPROBS};
use candle_core::backend::BackendStorage;
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
/// Columns of the forward's output (logp, lse, entropy).
const STATS: usize = 3;
/// Columns of the backward's per-token input (target, lse, grad logp, grad lse).
const AUX: usize = 4;

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

type In<'a> = (&'a CudaStorage, &'a Layout);

fn fwd_typed<T: KernelFloat>(dm: Dims, inv_t: f32, [hidden, w]: [In; 2], t: In) -> Result<CudaStorage> {
    let dev = hidden.0.device();
    let h = view::<T>(hidden.0, hidden.1, "hidden")?;
    let wv = view::<T>(w.0, w.1, "lm_head")?;
    let tv = view::<u32>(t.0, t.1, "targets")?;
    let row_blocks = dm.n.div_ceil(TILE);
    let v_tiles = dm.v.div_ceil(TILE);
    let per_split = v_tiles.div_ceil(TARGET_BLOCKS.div_ceil(row_blocks).clamp(1, v_tiles));
    let splits = v_tiles.div_ceil(per_split);
    let (n, v, d) = (to_i32(dm.n, "N")?, to_i32(dm.v, "V")?, to_i32(dm.d, "d")?);
    let (per_split_i, splits_i) = (to_i32(per_split, "tiles per split")?, to_i32(splits, "splits")?);
    // SAFETY: uninitialized; the partial kernel writes all 3 values of every
    // (split, row < N) (each split owns at least one vocabulary tile) before
    // the combine reads them.
    let mut part = unsafe { dev.alloc::<f32>(splits * dm.n * 3)? };
    let mut zt = dev.alloc_zeros::<f32>(dm.n)?;
    // SAFETY: tlp_fwd_partial_T(const T* h, const T* w, const u32* tgt, int N,
    // int V, int D, float inv_t, int tiles_per_split, float* part, float* zt):
    // h holds N*D, w V*D, tgt N contiguous elements (checked by `dims` and
    // `view`), part splits*N*3, zt N; the kernel bounds-checks rows < N and
    // vocabulary < V; grid = (row tiles, splits).
    launch!(dev, LOGPROBS, kernel_name::<T>("tlp_fwd_partial"), cfg_2d(row_blocks, splits, TILE_THREADS)?;
        &h, &wv, &tv, &n, &v, &d, &inv_t, &per_split_i, &mut part, &mut zt)?;
    // SAFETY: the combine kernel writes all 3 values of every token.
    let mut stats = unsafe { dev.alloc::<f32>(dm.n * STATS)? };
    // SAFETY: tlp_fwd_combine(const float* part, const float* zt, const u32* tgt,
    // int N, int V, int splits, float* stats): sizes as allocated above;
    // threads with n >= N return.
    launch!(dev, LOGPROBS, "tlp_fwd_combine", cfg_1d(dm.n.div_ceil(256), 256)?;
        &part, &zt, &tv, &n, &v, &splits_i, &mut stats)?;
    Ok(wrap(stats, dev))
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
    let ins = [(hidden, hidden_l), (w, w_l), (aux, aux_l)];
    let grads = match common_float("token_logprobs backward", &[hidden.dtype(), w.dtype()])? {
        DType::F32 => bwd_typed::<f32>(dm, inv_t, ins)?,
        _ => bwd_typed::<half::bf16>(dm, inv_t, ins)?,
    };
    Ok((grads, Shape::from((dm.n + dm.v, dm.d))))
}

/// Vocabulary rows per backward chunk: a multiple of the tile, the `[N, C]`
/// f32 scratch within [`DZ_SCRATCH_BYTES`] (at least one tile), at most V.
fn chunk_rows(n: usize, v: usize) -> usize {
    let fit = (DZ_SCRATCH_BYTES / 4 / n) / TILE * TILE;
    fit.max(TILE).min(v)
}

fn bwd_typed<T: KernelFloat>(dm: Dims, inv_t: f32, [hidden, w, aux]: [In; 3]) -> Result<CudaStorage> {
    let dev = hidden.0.device();
    let h = view::<T>(hidden.0, hidden.1, "hidden")?;
    let wv = view::<T>(w.0, w.1, "lm_head")?;
    let av = view::<f32>(aux.0, aux.1, "aux")?;
    let (n, v, d) = (to_i32(dm.n, "N")?, to_i32(dm.v, "V")?, to_i32(dm.d, "d")?);
    let chunk = chunk_rows(dm.n, dm.v);
    let (nd, vd) = (dm.n * dm.d, dm.v * dm.d);
    // SAFETY: uninitialized; each chunk's dz kernel writes all N * cc entries
    // its two gradient kernels then read.
    let mut dz = unsafe { dev.alloc::<f32>(dm.n * chunk)? };
    // grad_hidden rows [0, N) accumulate over chunks (f32, zeroed); the
    // grad_lm_head rows [N, N + V) are each written once by one chunk.
    let mut gh = dev.alloc_zeros::<f32>(nd)?;
    // SAFETY: every element is written: the first N*d by the final cast (or,
    // for f32, by accumulating into a zeroed copy), the last V*d by grad_w.
    let mut out = unsafe { dev.alloc::<T>(nd + vd)? };
    let row_blocks = dm.n.div_ceil(TILE);
    let d_blocks = dm.d.div_ceil(TILE);
    {
        let mut gw = out.slice_mut(nd..nd + vd);
        for v0 in (0..dm.v).step_by(chunk) {
            let cc = chunk.min(dm.v - v0);
            let (v0_i, cc_i) = (to_i32(v0, "v0")?, to_i32(cc, "chunk")?);
            // SAFETY: tlp_bwd_dz_T(const T* h, const T* w, const float* aux,
            // int N, int V, int D, float inv_t, int v0, int C, float* dz): aux
            // holds N*4; dz holds N*chunk >= N*cc; the kernel writes rows < N,
            // v0 <= v < v0 + cc only; grid = (row tiles, cc tiles).
            launch!(dev, LOGPROBS, kernel_name::<T>("tlp_bwd_dz"), cfg_2d(row_blocks, cc.div_ceil(TILE), TILE_THREADS)?;
                &h, &wv, &av, &n, &v, &d, &inv_t, &v0_i, &cc_i, &mut dz)?;
            // SAFETY: tlp_bwd_grad_h_T(const float* dz, const T* w, int N, int D,
            // int v0, int C, float* gh): reads dz[N*cc] and w rows v0..v0+cc < V,
            // writes gh[N*D] bounds-checked; grid = (row tiles, d tiles).
            launch!(dev, LOGPROBS, kernel_name::<T>("tlp_bwd_grad_h"), cfg_2d(row_blocks, d_blocks, TILE_THREADS)?;
                &dz, &wv, &n, &d, &v0_i, &cc_i, &mut gh)?;
            // SAFETY: tlp_bwd_grad_w_T(const float* dz, const T* h, int N, int D,
            // int v0, int C, T* gw): gw is the V*d tail of `out`; writes rows
            // v0..v0+cc (< V) bounds-checked; grid = (cc tiles, d tiles).
            launch!(dev, LOGPROBS, kernel_name::<T>("tlp_bwd_grad_w"), cfg_2d(cc.div_ceil(TILE), d_blocks, TILE_THREADS)?;
                &dz, &h, &n, &d, &v0_i, &cc_i, &mut gw)?;
        }
    }
    let mut head = out.slice_mut(0..nd);
    let nd_i = nd as i64;
    // SAFETY: tlp_cast_T(const float* src, int64_t n, T* dst): gh holds N*d,
    // head is the first N*d elements of `out`; threads past n return.
    launch!(dev, LOGPROBS, kernel_name::<T>("tlp_cast"), cfg_1d(nd.div_ceil(256), 256)?; &gh, &nd_i, &mut head)?;
    Ok(wrap(out, dev))
}
