//! CPU kernels of the attention op (f32, rayon), FlashAttention-2's scheme.
//!
//! Query rows are folded per kv head: the `groups` query heads that share kv
//! head `g` form `groups * t` rows (head-major), cut into blocks of
//! [`BLOCK_Q`] rows, so a decoding step's few queries still fill a block.
//! Keys go in blocks of [`BLOCK_K`]. A (query block, key block) pair that no
//! query of the block can see is skipped (the causal upper triangle, other
//! segments of a packed row); pairs that every query sees entirely skip the
//! per-element mask.
//!
//! Forward: one task per (row, kv head, query block), an online softmax over
//! the key blocks; nothing of size `t x s` exists. Backward: one task per
//! (row, kv head, key chunk): the task owns the dK and dV of its key blocks
//! and accumulates a partial dQ of its query heads, so no two tasks write
//! the same memory; partial dQs are summed in chunk order. The chunk count
//! depends only on the shapes and the thread count, so results are the same
//! bits on every run with the same thread count.

use super::{Dims, View4, Visibility};
use crate::fastmath::{exp, exp_sub_sum};
use crate::matmul::{gemm_f32, Accumulate, Mat, Rhs};
use rayon::prelude::*;

/// Folded query rows per block.
pub(crate) const BLOCK_Q: usize = 64;
/// Keys per block.
pub(crate) const BLOCK_K: usize = 128;

/// One call's inputs.
pub(crate) struct Problem<'a> {
    pub q: View4<'a>,
    pub k: View4<'a>,
    pub v: View4<'a>,
    pub vis: &'a Visibility,
    pub dims: Dims,
    pub scale: f32,
}

/// One forward task: kv head `g` of row `r`, the folded rows of query block
/// `qb`; the block's outputs `[rows, d]` and log-sum-exps.
pub(super) type ForwardTask = fn(&Problem, &Geometry, usize, usize, usize) -> (Vec<f32>, Vec<f32>);

/// What a block of query or key slots holds, for skipping and unmasked blocks.
#[derive(Clone, Copy, Debug)]
pub(super) struct BlockStats {
    /// Smallest and largest position of the non-padding slots.
    pub min_pos: i64,
    pub max_pos: i64,
    /// Smallest and largest segment of the non-padding slots.
    pub min_seg: u32,
    pub max_seg: u32,
    pub any_pad: bool,
    pub any_valid: bool,
}

impl BlockStats {
    fn of(slots: impl Iterator<Item = (i64, u32)>) -> BlockStats {
        let mut s = BlockStats { min_pos: i64::MAX, max_pos: i64::MIN, min_seg: u32::MAX, max_seg: 0, any_pad: false, any_valid: false };
        for (pos, seg) in slots {
            if pos < 0 {
                s.any_pad = true;
                continue;
            }
            s.any_valid = true;
            s.min_pos = s.min_pos.min(pos);
            s.max_pos = s.max_pos.max(pos);
            s.min_seg = s.min_seg.min(seg);
            s.max_seg = s.max_seg.max(seg);
        }
        s
    }
}

/// How a (query block, key block) pair is computed.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pair {
    /// No query of the block sees any key of the block.
    Skip,
    /// Every query sees every key: no per-element mask.
    Full,
    /// Some do: mask per element.
    Masked,
}

fn pair(q: &BlockStats, k: &BlockStats) -> Pair {
    if !q.any_pad {
        let disjoint_segments = k.max_seg < q.min_seg || k.min_seg > q.max_seg;
        if !k.any_valid || !q.any_valid || k.min_pos > q.max_pos || disjoint_segments {
            return Pair::Skip;
        }
    }
    let one_segment = q.min_seg == q.max_seg && k.min_seg == k.max_seg && q.min_seg == k.min_seg;
    if !q.any_pad && !k.any_pad && k.max_pos <= q.min_pos && one_segment {
        Pair::Full
    } else {
        Pair::Masked
    }
}

impl Visibility {
    fn segment_of_query(&self, r: usize, i: usize) -> u32 {
        self.segments.as_ref().map_or(0, |(qs, _)| qs[r * self.queries + i])
    }

    fn segment_of_key(&self, r: usize, j: usize) -> u32 {
        self.segments.as_ref().map_or(0, |(_, ks)| ks[r * self.keys + j])
    }
}

/// The shapes and block geometry shared by forward and backward.
pub(super) struct Geometry {
    dims: Dims,
    groups: usize,
    /// Folded rows per (row, kv head): `groups * t`.
    folded: usize,
    query_blocks: usize,
    pub key_blocks: usize,
    /// `[batch * key_blocks]`.
    pub key_stats: Vec<BlockStats>,
}

impl Geometry {
    fn new(p: &Problem) -> Geometry {
        let dims = p.dims;
        let groups = dims.groups();
        let folded = groups * dims.queries;
        let key_blocks = dims.keys.div_ceil(BLOCK_K);
        let key_stats = (0..dims.batch)
            .flat_map(|r| (0..key_blocks).map(move |kb| (r, kb)))
            .map(|(r, kb)| {
                let js = kb * BLOCK_K..((kb + 1) * BLOCK_K).min(dims.keys);
                BlockStats::of(js.map(|j| (p.vis.key_positions[r * dims.keys + j], p.vis.segment_of_key(r, j))))
            })
            .collect();
        Geometry { dims, groups, folded, query_blocks: folded.div_ceil(BLOCK_Q), key_blocks, key_stats }
    }

    /// (query head, query index) of folded row `f` of kv head `g`.
    pub(super) fn unfold(&self, g: usize, f: usize) -> (usize, usize) {
        let t = self.dims.queries;
        (g * self.groups + f / t, f % t)
    }

    /// Folded rows of query block `qb`.
    pub(super) fn block_rows(&self, qb: usize) -> std::ops::Range<usize> {
        qb * BLOCK_Q..((qb + 1) * BLOCK_Q).min(self.folded)
    }

    /// Keys of key block `kb`.
    fn block_keys(&self, kb: usize) -> std::ops::Range<usize> {
        kb * BLOCK_K..((kb + 1) * BLOCK_K).min(self.dims.keys)
    }

    fn query_stats(&self, p: &Problem, r: usize, g: usize, qb: usize) -> BlockStats {
        BlockStats::of(self.block_rows(qb).map(|f| {
            let (_, i) = self.unfold(g, f);
            (p.vis.query_positions[r * self.dims.queries + i], p.vis.segment_of_query(r, i))
        }))
    }
}

/// Rows `j0..` of kv head `g` of row `r` of `x` as a matrix of `cols` rows.
fn key_rows<'a>(x: &View4<'a>, d: usize, r: usize, g: usize, j0: usize, rows: usize) -> Mat<'a> {
    Mat { data: &x.data[x.at(r, g, j0)..], rows, cols: d, row_stride: x.strides[2] }
}

/// Writes -inf over the scores `s` (`[rows, cols]`) of keys the queries do not see.
fn mask_block(p: &Problem, geo: &Geometry, s: &mut [f32], r: usize, g: usize, rows: std::ops::Range<usize>, keys: std::ops::Range<usize>) {
    let cols = keys.len();
    for (f, row) in rows.zip(s.chunks_mut(cols)) {
        let (_, i) = geo.unfold(g, f);
        for (x, j) in row.iter_mut().zip(keys.clone()) {
            if !p.vis.sees(r, i, j) {
                *x = f32::NEG_INFINITY;
            }
        }
    }
}

/// Forward: the output `[b, t, heads * d]` and each query's log-sum-exp
/// `[b, heads, t]` (-inf for a query that sees no key; its output is 0).
pub(crate) fn forward(p: &Problem) -> (Vec<f32>, Vec<f32>) {
    forward_with(p, forward_task)
}

/// [`forward`] with `task` computing each (row, kv head, query block).
pub(super) fn forward_with(p: &Problem, task: ForwardTask) -> (Vec<f32>, Vec<f32>) {
    let geo = Geometry::new(p);
    let Dims { batch, heads, kv_heads, queries: t, head_dim: d, .. } = p.dims;
    let tasks: Vec<(usize, usize, usize)> = (0..batch)
        .flat_map(|r| (0..kv_heads).flat_map(move |g| (0..geo.query_blocks).map(move |qb| (r, g, qb))))
        .collect();
    let mut out = vec![0.0f32; batch * t * heads * d];
    let mut lse = vec![0.0f32; batch * heads * t];
    let (out_w, lse_w) = (Scatter::new(&mut out), Scatter::new(&mut lse));
    tasks.par_iter().for_each(|&(r, g, qb)| {
        let (o, l) = task(p, &geo, r, g, qb);
        for (n, f) in geo.block_rows(qb).enumerate() {
            let (h, i) = geo.unfold(g, f);
            // SAFETY: (row r, head h, query i) belongs to this task alone
            // (tasks partition rows x kv heads x folded-row blocks), and
            // both offsets lie inside the buffers sized above.
            unsafe {
                out_w.write((r * t + i) * heads * d + h * d, &o[n * d..(n + 1) * d]);
                lse_w.write((r * heads + h) * t + i, &l[n..n + 1]);
            }
        }
    });
    (out, lse)
}

/// A buffer that parallel tasks write at disjoint offsets (the kernels'
/// task partitions guarantee it; every write states why).
struct Scatter {
    ptr: *mut f32,
    len: usize,
}

// SAFETY: only `write` touches the buffer, at offsets its callers own.
unsafe impl Sync for Scatter {}

impl Scatter {
    fn new(buf: &mut [f32]) -> Scatter {
        Scatter { ptr: buf.as_mut_ptr(), len: buf.len() }
    }

    /// Copies `src` to `at..at + src.len()`.
    ///
    /// # Safety
    /// No other task reads or writes that range while the buffer is shared.
    unsafe fn write(&self, at: usize, src: &[f32]) {
        assert!(at + src.len() <= self.len, "scatter out of bounds");
        std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.add(at), src.len());
    }

    /// Adds `src` into `at..at + src.len()` (same contract as [`Self::write`]).
    unsafe fn add(&self, at: usize, src: &[f32]) {
        assert!(at + src.len() <= self.len, "scatter out of bounds");
        let dst = std::slice::from_raw_parts_mut(self.ptr.add(at), src.len());
        dst.iter_mut().zip(src).for_each(|(x, y)| *x += y);
    }
}

/// Gathers the rows of `x` (`[b, heads, t, d]` strided) of folded rows
/// `rows` of kv head `g` into a dense `[rows, d]` block.
pub(super) fn gather_q(x: &View4, geo: &Geometry, r: usize, g: usize, rows: std::ops::Range<usize>) -> Vec<f32> {
    let d = geo.dims.head_dim;
    let mut out = Vec::with_capacity(rows.len() * d);
    for f in rows {
        let (h, i) = geo.unfold(g, f);
        let at = x.at(r, h, i);
        out.extend_from_slice(&x.data[at..at + d]);
    }
    out
}

/// Gathers the rows of a dense `[b, t, heads * d]` tensor for folded rows `rows` of kv head `g`.
fn gather_merged(x: &[f32], geo: &Geometry, r: usize, g: usize, rows: std::ops::Range<usize>) -> Vec<f32> {
    let Dims { heads, queries: t, head_dim: d, .. } = geo.dims;
    let mut out = Vec::with_capacity(rows.len() * d);
    for f in rows {
        let (h, i) = geo.unfold(g, f);
        let at = (r * t + i) * heads * d + h * d;
        out.extend_from_slice(&x[at..at + d]);
    }
    out
}

fn forward_task(p: &Problem, geo: &Geometry, r: usize, g: usize, qb: usize) -> (Vec<f32>, Vec<f32>) {
    let d = p.dims.head_dim;
    let rows = geo.block_rows(qb);
    let n = rows.len();
    let qs = geo.query_stats(p, r, g, qb);
    let qm = gather_q(&p.q, geo, r, g, rows.clone());
    let qmat = Mat::dense(&qm, n, d);
    let mut max = vec![f32::NEG_INFINITY; n];
    let mut sum = vec![0.0f32; n];
    let mut acc = vec![0.0f32; n * d];
    let mut s = vec![0.0f32; n * BLOCK_K];
    for kb in 0..geo.key_blocks {
        let kind = pair(&qs, &geo.key_stats[r * geo.key_blocks + kb]);
        if kind == Pair::Skip {
            continue;
        }
        let keys = geo.block_keys(kb);
        let cols = keys.len();
        let s = &mut s[..n * cols];
        gemm_f32(s, qmat, false, key_rows(&p.k, d, r, g, keys.start, cols), Rhs::Transposed, p.scale, Accumulate::Overwrite);
        if kind == Pair::Masked {
            mask_block(p, geo, s, r, g, rows.clone(), keys.clone());
        }
        for (row, ((m, l), a)) in s.chunks_mut(cols).zip(max.iter_mut().zip(sum.iter_mut()).zip(acc.chunks_mut(d))) {
            if !softmax_step(row, m, l, a) {
                row.fill(0.0);
            }
        }
        gemm_f32(&mut acc, Mat::dense(s, n, cols), false, key_rows(&p.v, d, r, g, keys.start, cols), Rhs::AsIs, 1.0, Accumulate::Add);
    }
    let lse = normalize(&mut acc, d, &max, &sum);
    (acc, lse)
}

/// One key block of a query's online softmax: with the block's scores
/// `row`, the running max `m`, sum `l` and output `a` (rescaled to the new
/// max), `row` left holding the block's weights. False, with nothing
/// changed, when the query sees no key of the block (every score -inf).
pub(super) fn softmax_step(row: &mut [f32], m: &mut f32, l: &mut f32, a: &mut [f32]) -> bool {
    let new_max = row.iter().copied().fold(*m, f32::max);
    if new_max == f32::NEG_INFINITY {
        return false;
    }
    let alpha = exp(*m - new_max);
    let block_sum = exp_sub_sum(row, new_max) as f32;
    *l = *l * alpha + block_sum;
    if alpha != 1.0 {
        a.iter_mut().for_each(|x| *x *= alpha);
    }
    *m = new_max;
    true
}

/// Divides each query's output (`acc`, `d` per query) by its softmax sum;
/// returns the log-sum-exps (-inf, the output 0, for a query that saw no key).
pub(super) fn normalize(acc: &mut [f32], d: usize, max: &[f32], sum: &[f32]) -> Vec<f32> {
    let mut lse = vec![f32::NEG_INFINITY; max.len()];
    for ((a, (&m, &l)), out) in acc.chunks_mut(d).zip(max.iter().zip(sum)).zip(lse.iter_mut()) {
        if l > 0.0 {
            let inv = 1.0 / l;
            a.iter_mut().for_each(|x| *x *= inv);
            *out = m + l.ln();
        }
    }
    lse
}

/// The gradients of q `[b, heads, t, d]`, k and v `[b, kv_heads, s, d]`.
pub(crate) struct Grads {
    pub q: Vec<f32>,
    pub k: Vec<f32>,
    pub v: Vec<f32>,
}

/// One backward task's results: the dK and dV rows of its key blocks (in
/// block order) and its partial dQ over every folded row of its kv head.
struct TaskGrads {
    dk: Vec<f32>,
    dv: Vec<f32>,
    dq: Vec<f32>,
}

/// Backward, given the forward's output `out` and log-sum-exp `lse` and the
/// output's gradient `grad_out` (all dense, the forward's layouts).
pub(crate) fn backward(p: &Problem, out: &[f32], grad_out: &[f32], lse: &[f32]) -> Grads {
    let geo = Geometry::new(p);
    let Dims { batch, heads, kv_heads, queries: t, keys: s, head_dim: d } = p.dims;
    // D = rowsum(dO * O) per query and head, laid out like `lse`.
    let delta: Vec<f32> = (0..batch * t * heads)
        .into_par_iter()
        .map(|n| {
            let (r, rest) = (n / (t * heads), n % (t * heads));
            let (h, i) = (rest / t, rest % t);
            let at = (r * t + i) * heads * d + h * d;
            out[at..at + d].iter().zip(&grad_out[at..at + d]).map(|(o, g)| o * g).sum()
        })
        .collect();
    let per_head = batch * kv_heads;
    let chunks = (2 * rayon::current_num_threads()).div_ceil(per_head.max(1)).clamp(1, geo.key_blocks.max(1));
    let tasks: Vec<(usize, usize, usize)> = (0..batch)
        .flat_map(|r| (0..kv_heads).flat_map(move |g| (0..chunks).map(move |c| (r, g, c))))
        .collect();
    let ctx = BackwardInputs { grad_out, lse, delta: &delta };
    let mut grads = Grads { q: vec![0.0; batch * heads * t * d], k: vec![0.0; batch * kv_heads * s * d], v: vec![0.0; batch * kv_heads * s * d] };
    let (qw, kw, vw) = (Scatter::new(&mut grads.q), Scatter::new(&mut grads.k), Scatter::new(&mut grads.v));
    // dK and dV are written by their task; dQ directly when one task covers
    // all keys of a (row, kv head), else as partials summed in chunk order.
    let partial_dq: Vec<Vec<f32>> = tasks
        .par_iter()
        .map(|&(r, g, c)| {
            let res = backward_task(p, &geo, &ctx, r, g, c, chunks);
            let mut at = 0;
            for kb in (c..geo.key_blocks).step_by(chunks) {
                let len = geo.block_keys(kb).len() * d;
                let dst = ((r * kv_heads + g) * s + geo.block_keys(kb).start) * d;
                // SAFETY: key block kb of (row r, kv head g) is owned by the
                // task with chunk kb % chunks alone.
                unsafe {
                    kw.write(dst, &res.dk[at..at + len]);
                    vw.write(dst, &res.dv[at..at + len]);
                }
                at += len;
            }
            if chunks > 1 {
                return res.dq;
            }
            for f in 0..geo.folded {
                let (h, i) = geo.unfold(g, f);
                // SAFETY: with one chunk, the query heads of kv head g of row
                // r are this task's alone.
                unsafe { qw.write(((r * heads + h) * t + i) * d, &res.dq[f * d..(f + 1) * d]) };
            }
            Vec::new()
        })
        .collect();
    if chunks > 1 {
        for (&(r, g, _), dq) in tasks.iter().zip(&partial_dq) {
            for f in 0..geo.folded {
                let (h, i) = geo.unfold(g, f);
                // SAFETY: no task runs any more; this loop is the only user.
                unsafe { qw.add(((r * heads + h) * t + i) * d, &dq[f * d..(f + 1) * d]) };
            }
        }
    }
    drop((qw, kw, vw));
    grads
}

/// Per-query inputs of the backward beside the problem.
struct BackwardInputs<'a> {
    grad_out: &'a [f32],
    lse: &'a [f32],
    delta: &'a [f32],
}

#[allow(clippy::too_many_arguments)]
fn backward_task(p: &Problem, geo: &Geometry, ctx: &BackwardInputs, r: usize, g: usize, chunk: usize, chunks: usize) -> TaskGrads {
    let Dims { heads, queries: t, head_dim: d, .. } = p.dims;
    let owned: Vec<usize> = (chunk..geo.key_blocks).step_by(chunks).collect();
    let offsets: Vec<usize> = owned.iter().scan(0, |at, &kb| {
        let o = *at;
        *at += geo.block_keys(kb).len() * d;
        Some(o)
    }).collect();
    let total: usize = owned.iter().map(|&kb| geo.block_keys(kb).len() * d).sum();
    let (mut dk, mut dv) = (vec![0.0f32; total], vec![0.0f32; total]);
    let mut dq = vec![0.0f32; geo.folded * d];
    let mut sbuf = vec![0.0f32; BLOCK_Q * BLOCK_K];
    let mut dpbuf = vec![0.0f32; BLOCK_Q * BLOCK_K];
    for qb in 0..geo.query_blocks {
        let qs = geo.query_stats(p, r, g, qb);
        let kinds: Vec<Pair> = owned.iter().map(|&kb| pair(&qs, &geo.key_stats[r * geo.key_blocks + kb])).collect();
        if kinds.iter().all(|&k| k == Pair::Skip) {
            continue;
        }
        let rows = geo.block_rows(qb);
        let n = rows.len();
        let qm = gather_q(&p.q, geo, r, g, rows.clone());
        let dom = gather_merged(ctx.grad_out, geo, r, g, rows.clone());
        let (lse, delta): (Vec<f32>, Vec<f32>) = rows
            .clone()
            .map(|f| {
                let (h, i) = geo.unfold(g, f);
                let at = (r * heads + h) * t + i;
                (ctx.lse[at], ctx.delta[at])
            })
            .unzip();
        let (qmat, domat) = (Mat::dense(&qm, n, d), Mat::dense(&dom, n, d));
        let dqb = &mut dq[rows.start * d..rows.end * d];
        for ((&kb, &kind), &off) in owned.iter().zip(&kinds).zip(&offsets) {
            if kind == Pair::Skip {
                continue;
            }
            let keys = geo.block_keys(kb);
            let cols = keys.len();
            let (kmat, vmat) = (key_rows(&p.k, d, r, g, keys.start, cols), key_rows(&p.v, d, r, g, keys.start, cols));
            let s = &mut sbuf[..n * cols];
            gemm_f32(s, qmat, false, kmat, Rhs::Transposed, p.scale, Accumulate::Overwrite);
            if kind == Pair::Masked {
                mask_block(p, geo, s, r, g, rows.clone(), keys.clone());
            }
            for (row, &l) in s.chunks_mut(cols).zip(&lse) {
                if l == f32::NEG_INFINITY {
                    row.fill(0.0);
                } else {
                    exp_sub_sum(row, l);
                }
            }
            let pmat = Mat::dense(s, n, cols);
            let dvb = &mut dv[off..off + cols * d];
            gemm_f32(dvb, pmat, true, domat, Rhs::AsIs, 1.0, Accumulate::Add);
            let dp = &mut dpbuf[..n * cols];
            gemm_f32(dp, domat, false, vmat, Rhs::Transposed, 1.0, Accumulate::Overwrite);
            // dS = P * (dP - D), written over dP.
            for ((dprow, prow), &dl) in dp.chunks_mut(cols).zip(s.chunks(cols)).zip(&delta) {
                dprow.iter_mut().zip(prow).for_each(|(x, &pv)| *x = pv * (*x - dl));
            }
            let dsmat = Mat::dense(dp, n, cols);
            let dkb = &mut dk[off..off + cols * d];
            gemm_f32(dkb, dsmat, true, qmat, Rhs::AsIs, p.scale, Accumulate::Add);
            gemm_f32(dqb, dsmat, false, kmat, Rhs::AsIs, p.scale, Accumulate::Add);
        }
    }
    TaskGrads { dk, dv, dq }
}
