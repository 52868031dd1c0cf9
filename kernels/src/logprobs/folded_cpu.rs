//! CPU kernel of the folded log-prob loss ([`super::folded`]): for each chunk
//! of tokens, the chunk's logits over the whole vocabulary are computed once
//! into a buffer (about [`BUFFER_BYTES`]), turned in place into `e^(s - max)`
//! per vocabulary block, merged into each token's log-sum-exp, and then into
//! the gradient of the weighted sum, which two more products carry to
//! `hidden` and `lm_head`. Three matrix-product passes in all, where the
//! unfolded op needs four (it recomputes the logits in its backward because
//! its forward does not know the upstream gradient).

use super::cpu::{Problem, BWD_TASKS_PER_THREAD};
use crate::fastmath;
use crate::matmul::{gemm_f32, Accumulate, Mat, Rhs};
use rayon::prelude::*;

/// Vocabulary entries per block (one product, one set of statistics).
const BLOCK: usize = 512;
/// Target size of the `[tokens, vocab]` logits buffer of one chunk: 512
/// tokens at Qwen3's vocabulary (311 MB, 5% of what the unfused path's
/// `[N, V]` temporaries take at N = 1,024; with half of it, 256 tokens, the
/// lm_head gradient is accumulated in twice as many passes: 13.1 s against
/// 12.7 s there, one run each).
pub(crate) const BUFFER_BYTES: usize = 320 << 20;
/// Most tokens per chunk (small vocabularies would otherwise take all).
const MAX_CHUNK: usize = 1024;
/// Fewest tokens per chunk (the products get thin below this).
const MIN_CHUNK: usize = 16;

/// What the folded forward returns: per-token statistics and both gradients
/// of `sum_i w_i log p_i` (with the temperature's `1/T` folded in).
pub(crate) struct Folded {
    /// Row-major `[n, 4]`: `[log p(target), lse, entropy, w * log p]`.
    pub stats: Vec<f32>,
    /// `[n, d]`.
    pub grad_hidden: Vec<f32>,
    /// `[v, d]`.
    pub grad_lm_head: Vec<f32>,
}

/// Softmax statistics of one token over one vocabulary block, after the
/// block's logits were replaced by `e^(s - max)`.
#[derive(Clone, Copy)]
struct BlockStats {
    max: f32,
    /// `sum e^(s - max)`.
    sum: f32,
    /// `sum e^(s - max) * s`.
    sum_s: f32,
    /// The target's logit `s`, when the target is in the block.
    target: Option<f32>,
}

/// Tokens per chunk: as many as fit [`BUFFER_BYTES`], evened out over the
/// chunks `n` needs.
pub(crate) fn chunk_tokens(n: usize, v: usize) -> usize {
    let most = (BUFFER_BYTES / (4 * v.max(1))).clamp(MIN_CHUNK, MAX_CHUNK);
    let chunks = n.div_ceil(most).max(1);
    n.div_ceil(chunks).max(1)
}

/// The largest working memory of [`forward`] besides its outputs: the
/// logits buffer of the largest chunk and one partial hidden gradient per
/// gradient task.
pub(crate) fn workspace_bytes(v: usize, d: usize, threads: usize) -> usize {
    let rows = (BUFFER_BYTES / (4 * v.max(1))).clamp(MIN_CHUNK, MAX_CHUNK);
    4 * rows * (v + BWD_TASKS_PER_THREAD * threads.max(1) * d)
}

/// The folded forward for targets `targets` and weights `weights` (both `[n]`).
pub(crate) fn forward(p: &Problem, targets: &[u32], weights: &[f32]) -> Folded {
    let mut out = Folded { stats: vec![0.0; p.n * 4], grad_hidden: vec![0.0; p.n * p.d], grad_lm_head: vec![0.0; p.v * p.d] };
    if p.n == 0 {
        return out;
    }
    let rows_most = chunk_tokens(p.n, p.v);
    let mut buffer = vec![0.0f32; rows_most * p.v];
    for t0 in (0..p.n).step_by(rows_most) {
        let rows = rows_most.min(p.n - t0);
        let chunk = Chunk { t0, rows, targets: &targets[t0..t0 + rows], weights: &weights[t0..t0 + rows] };
        let buf = &mut buffer[..rows * p.v];
        let blocks = exp_logits(p, &chunk, buf);
        let lse = finish_rows(&blocks, &chunk, &mut out.stats[t0 * 4..(t0 + rows) * 4]);
        let grad_h = gradients(p, &chunk, buf, &blocks, &lse, &mut out.grad_lm_head);
        out.grad_hidden[t0 * p.d..(t0 + rows) * p.d].copy_from_slice(&grad_h);
    }
    out
}

/// One chunk of tokens `t0..t0 + rows`.
struct Chunk<'a> {
    t0: usize,
    rows: usize,
    targets: &'a [u32],
    weights: &'a [f32],
}

/// Pass 1: the chunk's scaled logits, block by block (block `b` is the dense
/// `[rows, cols]` at `b * rows * BLOCK` of `buf`), each replaced by
/// `e^(s - max)` of its row within the block. Returns `[block][row]` statistics.
fn exp_logits(p: &Problem, c: &Chunk, buf: &mut [f32]) -> Vec<Vec<BlockStats>> {
    let h = Mat::dense(p.hidden, p.n, p.d).rows(c.t0, c.rows);
    let w = Mat::dense(p.lm_head, p.v, p.d);
    buf.par_chunks_mut(c.rows * BLOCK)
        .enumerate()
        .map(|(b, block)| {
            let (v0, cols) = (b * BLOCK, block.len() / c.rows);
            gemm_f32(block, h, false, w.rows(v0, cols), Rhs::Transposed, p.inv_t, Accumulate::Overwrite);
            block
                .chunks_mut(cols)
                .zip(c.targets)
                .map(|(row, &t)| {
                    let target = (t as usize).checked_sub(v0).filter(|&j| j < cols).map(|j| row[j]);
                    let (max, sum, sum_s) = exp_row(row);
                    BlockStats { max, sum, sum_s, target }
                })
                .collect()
        })
        .collect()
}

/// Merges each row's block statistics (in block order) into
/// `[log p, lse, entropy, w * log p]` rows of `stats`; returns the lse.
fn finish_rows(blocks: &[Vec<BlockStats>], c: &Chunk, stats: &mut [f32]) -> Vec<f32> {
    let mut lse = Vec::with_capacity(c.rows);
    for (r, row) in stats.chunks_mut(4).enumerate() {
        let max = blocks.iter().map(|b| b[r].max).fold(f32::NEG_INFINITY, f32::max);
        let (mut sum, mut sum_s, mut target) = (0.0f64, 0.0f64, f32::NAN);
        for b in blocks {
            let scale = ((b[r].max - max) as f64).exp();
            sum += b[r].sum as f64 * scale;
            sum_s += b[r].sum_s as f64 * scale;
            if let Some(t) = b[r].target {
                target = t;
            }
        }
        let l = max + sum.ln() as f32;
        let logp = target - l;
        row.copy_from_slice(&[logp, l, l - (sum_s / sum) as f32, c.weights[r] * logp]);
        lse.push(l);
    }
    lse
}

/// Passes 2 and 3: each block of `e^(s - max)` becomes
/// `dL/d logit = (w / T) (1[v = t] - p)` in place, then adds
/// `dS^T @ h` to its rows of `grad_lm_head` and `dS @ W_block` to its
/// task's partial hidden gradient. The vocabulary is cut into a fixed
/// number of contiguous tasks (each alone owns its `grad_lm_head` rows); the
/// partial hidden gradients are summed in task order. Returns the chunk's
/// hidden gradient `[rows, d]`.
fn gradients(p: &Problem, c: &Chunk, buf: &mut [f32], blocks: &[Vec<BlockStats>], lse: &[f32], grad_lm_head: &mut [f32]) -> Vec<f32> {
    let d = p.d;
    let h = Mat::dense(p.hidden, p.n, d).rows(c.t0, c.rows);
    let w = Mat::dense(p.lm_head, p.v, d);
    let tasks = (BWD_TASKS_PER_THREAD * rayon::current_num_threads()).clamp(1, blocks.len());
    let per_task = blocks.len().div_ceil(tasks);
    let partial: Vec<Vec<f32>> = buf
        .par_chunks_mut(per_task * c.rows * BLOCK)
        .zip(grad_lm_head.par_chunks_mut(per_task * BLOCK * d))
        .enumerate()
        .map(|(task, (bufs, gw))| {
            let mut gh = vec![0.0f32; c.rows * d];
            for (i, block) in bufs.chunks_mut(c.rows * BLOCK).enumerate() {
                let b = task * per_task + i;
                let (v0, cols) = (b * BLOCK, block.len() / c.rows);
                to_gradient(block, cols, v0, c, &blocks[b], lse, p.inv_t);
                let ds = Mat::dense(block, c.rows, cols);
                gemm_f32(&mut gw[i * BLOCK * d..(i * BLOCK + cols) * d], ds, true, h, Rhs::AsIs, 1.0, Accumulate::Add);
                gemm_f32(&mut gh, ds, false, w.rows(v0, cols), Rhs::AsIs, 1.0, Accumulate::Add);
            }
            gh
        })
        .collect();
    let mut parts = partial.into_iter();
    let mut grad_h = parts.next().unwrap_or_else(|| vec![0.0; c.rows * d]);
    for part in parts {
        grad_h.iter_mut().zip(&part).for_each(|(g, x)| *g += x);
    }
    grad_h
}

/// `e^(s - max)` of one block (`[rows, cols]`, vocabulary from `v0`) into
/// `(w / T) (1[v = t] - p)`, with `p = e^(s - max) e^(max - lse)`.
fn to_gradient(block: &mut [f32], cols: usize, v0: usize, c: &Chunk, stats: &[BlockStats], lse: &[f32], inv_t: f32) {
    for (r, row) in block.chunks_mut(cols).enumerate() {
        let coef = c.weights[r] * inv_t;
        let scale = -coef * (stats[r].max - lse[r]).exp();
        row.iter_mut().for_each(|x| *x *= scale);
        if let Some(j) = (c.targets[r] as usize).checked_sub(v0).filter(|&j| j < cols) {
            row[j] += coef;
        }
    }
}

/// Replaces every `s` of `row` by `e^(s - max)` and returns
/// `(max, sum e^(s - max), sum e^(s - max) s)`; vectorized for the CPU's
/// widest path (checked at run time).
fn exp_row(row: &mut [f32]) -> (f32, f32, f32) {
    let max = fastmath::max(row);
    if max == f32::NEG_INFINITY {
        row.fill(0.0);
        return (max, 0.0, 0.0);
    }
    #[cfg(target_arch = "x86_64")]
    if fastmath::has_avx512() {
        // SAFETY: the CPU has AVX-512F, AVX2 and FMA (checked just above).
        let (sum, sum_s) = unsafe { exp_row_avx512(row, max) };
        return (max, sum, sum_s);
    }
    #[cfg(target_arch = "x86_64")]
    if fastmath::has_avx2_fma() {
        // SAFETY: the CPU has AVX2 and FMA (checked just above).
        let (sum, sum_s) = unsafe { exp_row_avx2(row, max) };
        return (max, sum, sum_s);
    }
    let (sum, sum_s) = exp_row_lanes(row, max);
    (max, sum, sum_s)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn exp_row_avx512(row: &mut [f32], max: f32) -> (f32, f32) {
    exp_row_lanes(row, max)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn exp_row_avx2(row: &mut [f32], max: f32) -> (f32, f32) {
    exp_row_lanes(row, max)
}

/// The loop the wrappers above compile for their target features: 16
/// independent lanes so the compiler can vectorize the sums.
#[inline(always)]
fn exp_row_lanes(row: &mut [f32], max: f32) -> (f32, f32) {
    const LANES: usize = 16;
    let (mut sum, mut sum_s) = ([0.0f32; LANES], [0.0f32; LANES]);
    let mut chunks = row.chunks_exact_mut(LANES);
    for chunk in &mut chunks {
        for k in 0..LANES {
            let s = chunk[k];
            let e = fastmath::exp(s - max);
            sum[k] += e;
            sum_s[k] += e * s;
            chunk[k] = e;
        }
    }
    for (k, x) in chunks.into_remainder().iter_mut().enumerate() {
        let e = fastmath::exp(*x - max);
        sum[k] += e;
        sum_s[k] += e * *x;
        *x = e;
    }
    (sum.iter().sum(), sum_s.iter().sum())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_row_matches_the_scalar_sums() {
        let mut row: Vec<f32> = (0..1000).map(|i| ((i * 37 % 101) as f32) * 0.13 - 6.0).collect();
        let orig = row.clone();
        let (max, sum, sum_s) = exp_row(&mut row);
        let want_max = orig.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        assert_eq!(max, want_max);
        let want_sum: f64 = orig.iter().map(|&s| ((s - max) as f64).exp()).sum();
        let want_sum_s: f64 = orig.iter().map(|&s| ((s - max) as f64).exp() * s as f64).sum();
        assert!(((sum as f64) - want_sum).abs() < 1e-5 * want_sum, "{sum} vs {want_sum}");
        assert!(((sum_s as f64) - want_sum_s).abs() < 1e-5 * want_sum_s.abs().max(1.0), "{sum_s} vs {want_sum_s}");
        for (e, &s) in row.iter().zip(&orig) {
            assert!((*e as f64 - ((s - max) as f64).exp()).abs() < 1e-6, "{e} vs e^({s} - {max})");
        }
    }

    #[test]
    fn chunks_fit_the_buffer_and_even_out() {
        assert_eq!(chunk_tokens(1024, 151_936), 512);
        assert!(chunk_tokens(1024, 151_936) * 151_936 * 4 <= BUFFER_BYTES);
        assert_eq!(chunk_tokens(2046, 49_152), 1023);
        assert_eq!(chunk_tokens(4096, 151_936), 512);
        assert_eq!(chunk_tokens(5, 100), 5);
        assert_eq!(chunk_tokens(3000, 100), 1000);
        // Qwen3's head: at most 552 rows of logits, 8 partial [552, 2560] gradients on 2 threads.
        assert_eq!(workspace_bytes(151_936, 2560, 2), 4 * 552 * (151_936 + 8 * 2560));
    }
}
