//! CPU kernels of the fused token log-probs: logits are produced one
//! `[tokens x vocab]` block at a time by a single-threaded matrix product into
//! a per-task buffer, and consumed at once (online log-sum-exp forward,
//! gradient contributions backward). Tasks run on rayon; nothing of size
//! `[N, V]` is ever allocated.

use super::{Stats, STATS};
use crate::matmul::{gemm_f32, Accumulate, Mat, Rhs};
use rayon::prelude::*;

/// Tokens per forward block (rows of one logits block).
pub(crate) const FWD_TOKENS: usize = 256;
/// Vocabulary entries per forward block (columns of one logits block).
pub(crate) const FWD_VOCAB: usize = 512;
/// Tokens per backward pass: every vocabulary block is recomputed for this
/// many tokens at once, and each task keeps a `[BWD_TOKENS, d]` partial
/// hidden-state gradient.
pub(crate) const BWD_TOKENS: usize = 1024;
/// Backward tasks per thread: more tasks than threads keep every core busy
/// when the machine is shared (each task holds a partial hidden gradient).
pub(crate) const BWD_TASKS_PER_THREAD: usize = 4;
/// Vocabulary entries per backward block.
pub(crate) const BWD_VOCAB: usize = 1024;

/// The problem's inputs as dense row-major f32 slices.
pub(crate) struct Problem<'a> {
    /// Hidden states `[n, d]`.
    pub hidden: &'a [f32],
    /// Output projection `[v, d]`.
    pub lm_head: &'a [f32],
    pub n: usize,
    pub d: usize,
    pub v: usize,
    /// `1 / temperature`.
    pub inv_t: f32,
}

/// Online softmax statistics of one token over part of the vocabulary, in
/// units of the temperature-scaled logits `s`.
#[derive(Clone, Copy)]
struct Partial {
    /// Running maximum of `s`.
    max: f32,
    /// `sum exp(s - max)`.
    sum: f32,
    /// `sum exp(s - max) * s` (for the entropy).
    sum_s: f32,
    /// The target's `s`, when the target lies in the part seen.
    target: Option<f32>,
}

impl Partial {
    const EMPTY: Partial = Partial { max: f32::NEG_INFINITY, sum: 0.0, sum_s: 0.0, target: None };

    /// Folds in another part of the vocabulary.
    fn merge(self, o: Partial) -> Partial {
        let max = self.max.max(o.max);
        if max == f32::NEG_INFINITY {
            return Partial { target: self.target.or(o.target), ..self };
        }
        let (a, b) = ((self.max - max).exp(), (o.max - max).exp());
        Partial {
            max,
            sum: self.sum * a + o.sum * b,
            sum_s: self.sum_s * a + o.sum_s * b,
            target: self.target.or(o.target),
        }
    }

    /// Folds in the logits `s` of vocabulary entries `v0..v0 + s.len()`.
    fn absorb(self, s: &[f32], v0: usize, target: usize) -> Partial {
        let block_max = s.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let max = self.max.max(block_max);
        let rescale = (self.max - max).exp();
        let (mut sum, mut sum_s) = (0.0f32, 0.0f32);
        for &x in s {
            let e = (x - max).exp();
            sum += e;
            sum_s += e * x;
        }
        let hit = target.checked_sub(v0).filter(|&j| j < s.len()).map(|j| s[j]);
        Partial {
            max,
            sum: self.sum * rescale + sum,
            sum_s: self.sum_s * rescale + sum_s,
            target: self.target.or(hit),
        }
    }

    /// `(log p(target), log-sum-exp, entropy)`.
    fn finish(self) -> [f32; STATS] {
        let lse = self.max + self.sum.ln();
        let entropy = lse - self.sum_s / self.sum;
        [self.target.unwrap_or(f32::NAN) - lse, lse, entropy]
    }
}

/// Forward: per token `[log p(target), lse, entropy]`, row-major `[n, 3]`.
///
/// Tasks are (token block, vocabulary range) pairs: token blocks alone when
/// there are enough of them to keep every thread busy, else the vocabulary is
/// split too and the partial statistics are merged in a fixed order.
pub(crate) fn forward(p: &Problem, targets: &[u32]) -> Vec<f32> {
    if p.n == 0 {
        return Vec::new();
    }
    let token_blocks = p.n.div_ceil(FWD_TOKENS);
    let vocab_blocks = p.v.div_ceil(FWD_VOCAB);
    let want = 4 * rayon::current_num_threads();
    let splits = want.div_ceil(token_blocks).clamp(1, vocab_blocks.max(1));
    let blocks_per_split = vocab_blocks.div_ceil(splits);
    let tasks: Vec<(usize, usize)> = (0..token_blocks).flat_map(|t| (0..splits).map(move |s| (t, s))).collect();
    let partials: Vec<Vec<Partial>> = tasks
        .par_iter()
        .map_init(
            || vec![0.0f32; FWD_TOKENS * FWD_VOCAB],
            |buf, &(tb, split)| {
                let v_start = (split * blocks_per_split * FWD_VOCAB).min(p.v);
                let v_end = ((split + 1) * blocks_per_split * FWD_VOCAB).min(p.v);
                forward_task(p, targets, tb * FWD_TOKENS, v_start..v_end, buf)
            },
        )
        .collect();
    let mut out = vec![0.0f32; p.n * STATS];
    for tb in 0..token_blocks {
        let parts = &partials[tb * splits..(tb + 1) * splits];
        for (i, row) in out[tb * FWD_TOKENS * STATS..].chunks_mut(STATS).take(parts[0].len()).enumerate() {
            let merged = parts.iter().fold(Partial::EMPTY, |acc, part| acc.merge(part[i]));
            row.copy_from_slice(&merged.finish());
        }
    }
    out
}

/// Statistics of tokens `t0..t0 + FWD_TOKENS` (clipped) over `vocab`.
fn forward_task(p: &Problem, targets: &[u32], t0: usize, vocab: std::ops::Range<usize>, buf: &mut [f32]) -> Vec<Partial> {
    let rows = FWD_TOKENS.min(p.n - t0);
    let h = Mat::dense(p.hidden, p.n, p.d).rows(t0, rows);
    let w = Mat::dense(p.lm_head, p.v, p.d);
    let mut acc = vec![Partial::EMPTY; rows];
    for v0 in vocab.clone().step_by(FWD_VOCAB) {
        let cols = FWD_VOCAB.min(vocab.end - v0);
        let block = &mut buf[..rows * cols];
        gemm_f32(block, h, false, w.rows(v0, cols), Rhs::Transposed, p.inv_t, Accumulate::Overwrite);
        for (r, a) in acc.iter_mut().enumerate() {
            *a = a.absorb(&block[r * cols..(r + 1) * cols], v0, targets[t0 + r] as usize);
        }
    }
    acc
}

/// Backward: the gradients of hidden `[n, d]` and lm_head `[v, d]`, written
/// into `grad` `[n + v, d]` (hidden rows first).
///
/// Tokens go in passes of [`BWD_TOKENS`]; within a pass the vocabulary is
/// split into a fixed number of contiguous ranges (tasks), so each task alone writes its
/// rows of the lm_head gradient (no atomics) and keeps its own partial hidden
/// gradient, summed in task order afterwards (deterministic for a given
/// thread count).
pub(crate) fn backward(p: &Problem, targets: &[u32], stats: &[Stats]) -> Vec<f32> {
    let mut grad = vec![0.0f32; (p.n + p.v) * p.d];
    let (grad_h, grad_w) = grad.split_at_mut(p.n * p.d);
    let vocab_blocks = p.v.div_ceil(BWD_VOCAB);
    let tasks = (BWD_TASKS_PER_THREAD * rayon::current_num_threads()).clamp(1, vocab_blocks.max(1));
    let blocks_per_task = vocab_blocks.div_ceil(tasks);
    for t0 in (0..p.n).step_by(BWD_TOKENS) {
        let rows = BWD_TOKENS.min(p.n - t0);
        let partial_h: Vec<Vec<f32>> = grad_w
            .par_chunks_mut(blocks_per_task * BWD_VOCAB * p.d)
            .enumerate()
            .map(|(task, gw)| {
                let v_start = task * blocks_per_task * BWD_VOCAB;
                backward_task(p, targets, stats, t0, rows, v_start, gw)
            })
            .collect();
        let gh = &mut grad_h[t0 * p.d..(t0 + rows) * p.d];
        for part in &partial_h {
            gh.iter_mut().zip(part).for_each(|(g, x)| *g += x);
        }
    }
    grad
}

/// One task's share of a backward pass: tokens `t0..t0 + rows`, vocabulary
/// rows `v_start..` covered by `grad_w` (its rows of the lm_head gradient,
/// accumulated into). Returns this range's contribution to the hidden
/// gradient of the pass's tokens, `[rows, d]`.
fn backward_task(p: &Problem, targets: &[u32], stats: &[Stats], t0: usize, rows: usize, v_start: usize, grad_w: &mut [f32]) -> Vec<f32> {
    let d = p.d;
    let h = Mat::dense(p.hidden, p.n, d).rows(t0, rows);
    let w = Mat::dense(p.lm_head, p.v, d);
    let mut block = vec![0.0f32; rows * BWD_VOCAB];
    let mut gh = vec![0.0f32; rows * d];
    let v_rows = grad_w.len() / d;
    for local in (0..v_rows).step_by(BWD_VOCAB) {
        let cols = BWD_VOCAB.min(v_rows - local);
        let v0 = v_start + local;
        let wb = w.rows(v0, cols);
        let s = &mut block[..rows * cols];
        gemm_f32(s, h, false, wb, Rhs::Transposed, p.inv_t, Accumulate::Overwrite);
        logits_to_grad(s, cols, v0, &targets[t0..t0 + rows], &stats[t0..t0 + rows], p.inv_t);
        let s = Mat::dense(s, rows, cols);
        let gw = &mut grad_w[local * d..(local + cols) * d];
        gemm_f32(gw, s, true, h, Rhs::AsIs, 1.0, Accumulate::Add);
        gemm_f32(&mut gh, s, false, wb, Rhs::AsIs, 1.0, Accumulate::Add);
    }
    gh
}

/// Turns a block of scaled logits `s` (`[rows, cols]`, vocabulary from `v0`)
/// into `dL/dlogit_raw = (g_lp * (1[v == t] - p) + g_lse * p) / T`.
fn logits_to_grad(s: &mut [f32], cols: usize, v0: usize, targets: &[u32], stats: &[Stats], inv_t: f32) {
    for ((row, &t), st) in s.chunks_mut(cols).zip(targets).zip(stats) {
        let coef = (st.grad_lse - st.grad_logp) * inv_t;
        for x in row.iter_mut() {
            *x = (*x - st.lse).exp() * coef;
        }
        if let Some(j) = (t as usize).checked_sub(v0).filter(|&j| j < cols) {
            row[j] += st.grad_logp * inv_t;
        }
    }
}
