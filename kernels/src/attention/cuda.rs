//! CUDA path of the attention op (`kernels/cuda/attention.cu`), with the
//! contract of [`super::AttentionOp`] (CPU path in `cpu.rs`):
//!
//! - forward: q `[b, heads, t, d]`, k, v `[b, kv_heads, s, d]` (strided, last
//!   dimension contiguous) -> out `[b, t, heads * d]` in the inputs' dtype and
//!   lse `[b, heads, t]` f32;
//! - backward: q, k, v, out, the output's gradient (contiguous, the inputs'
//!   dtype) and lse -> dq `[b, heads, t, d]`, dk and dv `[b, kv_heads, s, d]`
//!   (contiguous, the inputs' dtype): `D = rowsum(dO * O)`, then dK/dV per key
//!   tile and dQ per query tile, each element written once (no atomics).
//!
//! f32 and bf16 (one dtype), f32 accumulation, head dims 64 and 128. The
//! visibility's slots go to the device once per device
//! ([`Visibility::slot_table`]).

use super::{Dims, Visibility};
use crate::cuda_util::{cfg_1d, cfg_2d, common_float, kernel_name, launch, to_i32, wrap, KernelFloat, ATTENTION};
use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::CudaView;
use candle_core::cuda_backend::{CudaDType, CudaStorage};
use candle_core::{bail, DType, Device, Layout, Result, Storage, Tensor};

/// Threads per block of the tiled kernels (`ATTN_THREADS`).
const THREADS: u32 = 128;
/// Head dims the kernels are instantiated for.
const HEAD_DIMS: [usize; 2] = [64, 128];

/// Query rows and keys per tile for head dim `d` (`AttnTile<D>::B`).
fn tile(d: usize) -> usize {
    2048 / d
}

pub(super) type In<'a> = (&'a CudaStorage, &'a Layout);

impl Visibility {
    /// The slots as one i64 tensor on `device`: query positions `[b * t]`,
    /// key positions `[b * s]`, query segments, key segments (0 without
    /// segments); made once per device.
    fn slot_table(&self, device: &Device) -> Result<Tensor> {
        if let Some(t) = self.slots.get().filter(|t| t.device().same_device(device)) {
            return Ok(t.clone());
        }
        let mut data = Vec::with_capacity(2 * (self.query_positions.len() + self.key_positions.len()));
        data.extend_from_slice(&self.query_positions);
        data.extend_from_slice(&self.key_positions);
        match &self.segments {
            Some((qs, ks)) => data.extend(qs.iter().chain(ks).map(|&x| x as i64)),
            None => data.resize(data.len() * 2, 0),
        }
        let table = Tensor::from_vec(data, self.query_positions.len() * 2 + self.key_positions.len() * 2, device)?;
        Ok(self.slots.get_or_init(|| table.clone()).clone())
    }
}

/// The four slot arrays of [`Visibility::slot_table`] as device views.
struct Slots<'a> {
    qpos: CudaView<'a, i64>,
    kpos: CudaView<'a, i64>,
    qseg: CudaView<'a, i64>,
    kseg: CudaView<'a, i64>,
}

impl<'a> Slots<'a> {
    fn of(table: &'a Storage, dims: Dims) -> Result<Slots<'a>> {
        let Storage::Cuda(s) = table else {
            bail!("attention (cuda): the slot table is not on a CUDA device");
        };
        let all = s.as_cuda_slice::<i64>()?;
        let (nq, nk) = (dims.batch * dims.queries, dims.batch * dims.keys);
        if all.len() != 2 * (nq + nk) {
            bail!("attention (cuda): slot table of {} entries for {nq} queries and {nk} keys", all.len());
        }
        let at = [0, nq, nq + nk, 2 * nq + nk, 2 * (nq + nk)];
        Ok(Slots {
            qpos: all.slice(at[0]..at[1]),
            kpos: all.slice(at[1]..at[2]),
            qseg: all.slice(at[2]..at[3]),
            kseg: all.slice(at[3]..at[4]),
        })
    }
}

/// A strided rank-4 operand: its storage from the layout's start offset to
/// its last element, and the strides of the first three dimensions.
pub(super) struct Strided<'a, T> {
    pub data: CudaView<'a, T>,
    pub strides: [i64; 3],
}

pub(super) fn strided<'a, T: CudaDType>((s, l): In<'a>, what: &str) -> Result<Strided<'a, T>> {
    let (dims, st) = (l.dims(), l.stride());
    if dims.len() != 4 || (st[3] != 1 && dims[3] > 1) {
        bail!("attention (cuda): {what} must be rank 4 with a contiguous last dimension, got {dims:?} strides {st:?}");
    }
    let slice = s.as_cuda_slice::<T>()?;
    let start = l.start_offset();
    let end = start + 1 + dims.iter().zip(st).map(|(n, s)| (n - 1) * s).sum::<usize>();
    if end > slice.len() {
        bail!("attention (cuda): {what}'s layout reaches element {end} of a {}-element storage", slice.len());
    }
    let stride = |i: usize| i64::try_from(st[i]).or_else(|_| bail!("attention (cuda): {what} stride {} too large", st[i]));
    Ok(Strided { data: slice.slice(start..end), strides: [stride(0)?, stride(1)?, stride(2)?] })
}

/// A contiguous operand of `elems` elements (out, its gradient, lse).
pub(super) fn dense<'a, T: CudaDType>((s, l): In<'a>, elems: usize, what: &str) -> Result<CudaView<'a, T>> {
    match l.contiguous_offsets() {
        Some((start, end)) if end - start == elems => Ok(s.as_cuda_slice::<T>()?.slice(start..end)),
        _ => bail!("attention (cuda): {what} must be contiguous with {elems} elements, got {:?}", l.shape()),
    }
}

/// The kernels' shape arguments: heads, kv_heads, t, s (as `int`).
struct ShapeArgs {
    heads: i32,
    kv_heads: i32,
    t: i32,
    s: i32,
}

/// Checks what the kernels support and returns their shape arguments.
fn shape_args(dims: Dims) -> Result<ShapeArgs> {
    let Dims { batch, heads, kv_heads, queries, keys, head_dim } = dims;
    if !HEAD_DIMS.contains(&head_dim) {
        bail!("attention (cuda): head dim {head_dim} is not supported (the kernels are built for {HEAD_DIMS:?})");
    }
    if batch == 0 || queries == 0 {
        bail!("attention (cuda): empty input (b = {batch}, t = {queries})");
    }
    to_i32(batch * heads * queries * head_dim, "attention q elements")?;
    to_i32(batch * kv_heads * keys * head_dim, "attention k elements")?;
    if batch * kv_heads > 65_535 {
        bail!("attention (cuda): b * kv_heads = {} exceeds the grid's y limit 65535", batch * kv_heads);
    }
    Ok(ShapeArgs { heads: to_i32(heads, "heads")?, kv_heads: to_i32(kv_heads, "kv_heads")?, t: to_i32(queries, "t")?, s: to_i32(keys, "s")? })
}

/// Forward: `(out [b, t, heads * d], lse [b, heads, t] f32)`; the body of
/// `AttentionOp::cuda_fwd`.
pub(crate) fn forward(dims: Dims, scale: f32, vis: &Visibility, q: In, k: In, v: In) -> Result<(CudaStorage, CudaStorage)> {
    match common_float("attention", &[q.0.dtype(), k.0.dtype(), v.0.dtype()])? {
        DType::F32 => fwd_typed::<f32>(dims, scale, vis, [q, k, v]),
        _ => fwd_typed::<half::bf16>(dims, scale, vis, [q, k, v]),
    }
}

fn fwd_typed<T: KernelFloat>(dims: Dims, scale: f32, vis: &Visibility, [q, k, v]: [In; 3]) -> Result<(CudaStorage, CudaStorage)> {
    let sh = shape_args(dims)?;
    let dev = q.0.device();
    let table = vis.slot_table(&Device::Cuda(dev.clone()))?;
    let (table_s, _) = table.storage_and_layout();
    let sl = Slots::of(&table_s, dims)?;
    let (qv, kv, vv) = (strided::<T>(q, "q")?, strided::<T>(k, "k")?, strided::<T>(v, "v")?);
    let [q0, q1, q2] = qv.strides;
    let [k0, k1, k2] = kv.strides;
    let [v0, v1, v2] = vv.strides;
    let Dims { batch, heads, kv_heads, queries, head_dim: d, .. } = dims;
    // SAFETY: uninitialized; the forward writes every (row, query, head, d)
    // of out and every (row, head, query) of lse (the query tiles cover the
    // folded rows of every kv head of every row).
    let mut out = unsafe { dev.alloc::<T>(batch * queries * heads * d)? };
    let mut lse = unsafe { dev.alloc::<f32>(batch * heads * queries)? };
    let cfg = cfg_2d((dims.groups() * queries).div_ceil(tile(d)), batch * kv_heads, THREADS)?;
    // SAFETY: attn_fwd_d{D}_T(const T* q, const T* k, const T* v, const i64*
    // qpos, kpos, qseg, kseg, int heads, int kv_heads, int t, int s, i64 q0,
    // q1, q2, k0, k1, k2, v0, v1, v2, float scale, T* out, float* lse): the
    // strided views reach every element their strides address (checked by
    // `strided`), the slot views hold b*t and b*s entries, out b*t*heads*d,
    // lse b*heads*t; the kernel bounds-checks rows past groups*t and keys
    // past s; grid = (query tiles, b * kv_heads), 128 threads.
    launch!(dev, ATTENTION, kernel_name::<T>(&format!("attn_fwd_d{d}")), cfg;
        &qv.data, &kv.data, &vv.data, &sl.qpos, &sl.kpos, &sl.qseg, &sl.kseg,
        &sh.heads, &sh.kv_heads, &sh.t, &sh.s, &q0, &q1, &q2, &k0, &k1, &k2, &v0, &v1, &v2,
        &scale, &mut out, &mut lse)?;
    Ok((wrap(out, dev), wrap(lse, dev)))
}

/// Backward: `(dq, dk, dv)` from q, k, v, the forward's output and lse and
/// the output's gradient `dout` (the inputs' dtype); the CUDA half of
/// `AttentionOp::bwd`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn backward(dims: Dims, scale: f32, vis: &Visibility, q: In, k: In, v: In, out: In, dout: In, lse: In) -> Result<[CudaStorage; 3]> {
    let dtype = common_float("attention backward", &[q.0.dtype(), k.0.dtype(), v.0.dtype(), out.0.dtype(), dout.0.dtype()])?;
    if lse.0.dtype() != DType::F32 {
        bail!("attention backward (cuda): lse must be f32, got {:?}", lse.0.dtype());
    }
    match dtype {
        DType::F32 => bwd_typed::<f32>(dims, scale, vis, [q, k, v, out, dout, lse]),
        _ => bwd_typed::<half::bf16>(dims, scale, vis, [q, k, v, out, dout, lse]),
    }
}

fn bwd_typed<T: KernelFloat>(dims: Dims, scale: f32, vis: &Visibility, [q, k, v, out, dout, lse]: [In; 6]) -> Result<[CudaStorage; 3]> {
    let sh = shape_args(dims)?;
    let dev = q.0.device();
    let table = vis.slot_table(&Device::Cuda(dev.clone()))?;
    let (table_s, _) = table.storage_and_layout();
    let sl = Slots::of(&table_s, dims)?;
    let (qv, kv, vv) = (strided::<T>(q, "q")?, strided::<T>(k, "k")?, strided::<T>(v, "v")?);
    let Dims { batch, heads, kv_heads, queries, keys, head_dim: d } = dims;
    let rows = batch * heads * queries;
    let (ov, gv) = (dense::<T>(out, rows * d, "out")?, dense::<T>(dout, rows * d, "the output gradient")?);
    let lv = dense::<f32>(lse, rows, "lse")?;
    let [q0, q1, q2] = qv.strides;
    let [k0, k1, k2] = kv.strides;
    let [v0, v1, v2] = vv.strides;
    // SAFETY: uninitialized; the delta kernel writes all `rows` entries.
    let mut delta = unsafe { dev.alloc::<f32>(rows)? };
    let (rows_i, d_i) = (to_i32(rows, "attention rows")?, to_i32(d, "head dim")?);
    // SAFETY: attn_bwd_delta_T(const T* out, const T* dout, int n, int heads,
    // int t, int D, float* delta): out and dout hold n*D, delta n; threads
    // past n return.
    launch!(dev, ATTENTION, kernel_name::<T>("attn_bwd_delta"), cfg_1d(rows.div_ceil(256), 256)?;
        &ov, &gv, &rows_i, &sh.heads, &sh.t, &d_i, &mut delta)?;
    // SAFETY: uninitialized; dk/dv: every key of every kv head of every row
    // lies in one key tile; dq: every folded row in one query tile.
    let mut dk = unsafe { dev.alloc::<T>(batch * kv_heads * keys * d)? };
    let mut dv = unsafe { dev.alloc::<T>(batch * kv_heads * keys * d)? };
    let mut dq = unsafe { dev.alloc::<T>(rows * d)? };
    // SAFETY: attn_bwd_dkdv_d{D}_T(q, k, v, const T* dout, const float* lse,
    // const float* delta, slots, shape and strides as the forward, float
    // scale, T* dk, T* dv): dout holds b*t*heads*d, lse and delta b*heads*t,
    // dk and dv b*kv_heads*s*d; keys past s are not written; grid = (key
    // tiles, b * kv_heads), 128 threads.
    launch!(dev, ATTENTION, kernel_name::<T>(&format!("attn_bwd_dkdv_d{d}")), cfg_2d(keys.div_ceil(tile(d)), batch * kv_heads, THREADS)?;
        &qv.data, &kv.data, &vv.data, &gv, &lv, &delta, &sl.qpos, &sl.kpos, &sl.qseg, &sl.kseg,
        &sh.heads, &sh.kv_heads, &sh.t, &sh.s, &q0, &q1, &q2, &k0, &k1, &k2, &v0, &v1, &v2,
        &scale, &mut dk, &mut dv)?;
    // SAFETY: attn_bwd_dq_d{D}_T(same inputs, float scale, T* dq): dq holds
    // b*heads*t*d; rows past groups*t are not written; grid = (query tiles,
    // b * kv_heads), 128 threads.
    launch!(dev, ATTENTION, kernel_name::<T>(&format!("attn_bwd_dq_d{d}")), cfg_2d((dims.groups() * queries).div_ceil(tile(d)), batch * kv_heads, THREADS)?;
        &qv.data, &kv.data, &vv.data, &gv, &lv, &delta, &sl.qpos, &sl.kpos, &sl.qseg, &sl.kseg,
        &sh.heads, &sh.kv_heads, &sh.t, &sh.s, &q0, &q1, &q2, &k0, &k1, &k2, &v0, &v1, &v2,
        &scale, &mut dq)?;
    Ok([wrap(dq, dev), wrap(dk, dev), wrap(dv, dev)])
}
