//! The sampling op on the CPU. Three parallel passes over (row, block)
//! pairs, so a few rows still spread over every thread: each block's first
//! largest logit, each block's `sum exp(x / T - max)` (f32 lanes, f64 per
//! block), then per row the pick: the walk to `u * total` inside the one
//! block that holds it, or the kept set of top-k / top-p (a partial sort)
//! and the walk over it in index order. The logits are read in place; bf16
//! and scaled blocks go through one block-sized buffer per task.

use super::{Pick, SampleMode};
use crate::fastmath;
use half::bf16;
use rayon::prelude::*;
use std::ops::Range;

/// Logits per block: a multiple of 64 (the exp sums' chunk); 19 blocks at
/// Qwen3's vocabulary of 151,936.
const BLOCK: usize = 8192;

/// The logits' storage, read in place.
#[derive(Clone, Copy)]
pub(crate) enum Logits<'a> {
    F32(&'a [f32]),
    Bf16(&'a [bf16]),
}

impl<'a> Logits<'a> {
    /// Row `r` of a `[_, vocab]` matrix.
    fn row(&self, r: usize, vocab: usize) -> Logits<'a> {
        let span = r * vocab..(r + 1) * vocab;
        match self {
            Logits::F32(x) => Logits::F32(&x[span]),
            Logits::Bf16(x) => Logits::Bf16(&x[span]),
        }
    }

    fn len(&self) -> usize {
        match self {
            Logits::F32(x) => x.len(),
            Logits::Bf16(x) => x.len(),
        }
    }

    fn get(&self, i: usize) -> f32 {
        match self {
            Logits::F32(x) => x[i],
            Logits::Bf16(x) => x[i].to_f32(),
        }
    }

    /// The elements `range` divided by `t`: the storage itself for f32 at
    /// `t == 1`, else converted into `buf`.
    fn block<'b>(self, range: Range<usize>, t: f32, buf: &'b mut Vec<f32>) -> &'b [f32]
    where
        'a: 'b,
    {
        buf.clear();
        match self {
            Logits::F32(x) if t == 1.0 => return &x[range],
            Logits::F32(x) => buf.extend(x[range].iter().map(|&v| v / t)),
            Logits::Bf16(x) => buf.extend(x[range].iter().map(|v| v.to_f32() / t)),
        }
        buf
    }
}

/// One row's statistics: the first largest logit (unscaled) and where, the
/// scaled maximum, the per-block exp sums and their total.
struct RowStats<'s> {
    argmax: usize,
    max_scaled: f32,
    sums: &'s [f64],
    total: f64,
}

/// Sample every row of `logits` (`[uniforms.len(), vocab]`).
pub(crate) fn sample(logits: &Logits<'_>, vocab: usize, uniforms: &[f64], mode: SampleMode) -> Vec<Pick> {
    let rows = uniforms.len();
    let t = mode.temperature() as f32;
    let blocks = vocab.div_ceil(BLOCK);
    let span = |b: usize| b * BLOCK..((b + 1) * BLOCK).min(vocab);
    let maxima: Vec<(f32, usize)> = (0..rows * blocks)
        .into_par_iter()
        .map_init(Vec::new, |buf, k| {
            let (r, b) = (k / blocks, k % blocks);
            let xs = logits.row(r, vocab).block(span(b), 1.0, buf);
            let i = fastmath::argmax(xs);
            (xs[i], b * BLOCK + i)
        })
        .collect();
    // First largest over the blocks in order: a later block wins only when larger.
    let heads: Vec<(f32, usize)> =
        maxima.chunks(blocks).map(|c| c.iter().fold((f32::NEG_INFINITY, 0), |a, &m| if m.0 > a.0 { m } else { a })).collect();
    // Division by T > 0 is monotone in f32 too: the scaled maximum is the maximum's quotient.
    let sums: Vec<f64> = (0..rows * blocks)
        .into_par_iter()
        .map_init(Vec::new, |buf, k| {
            let (r, b) = (k / blocks, k % blocks);
            fastmath::sum_exp_sub(logits.row(r, vocab).block(span(b), t, buf), heads[r].0 / t)
        })
        .collect();
    (0..rows)
        .into_par_iter()
        .map(|r| {
            let row_sums = &sums[r * blocks..(r + 1) * blocks];
            let stats = RowStats { argmax: heads[r].1, max_scaled: heads[r].0 / t, sums: row_sums, total: row_sums.iter().sum() };
            pick(logits.row(r, vocab), &stats, uniforms[r], mode)
        })
        .collect()
}

/// The token of one row and its log-prob under `softmax(x / T)`.
fn pick(row: Logits<'_>, s: &RowStats<'_>, u: f64, mode: SampleMode) -> Pick {
    let t = mode.temperature() as f32;
    let token = match mode {
        SampleMode::Greedy => s.argmax,
        SampleMode::Softmax { .. } => walk_blocks(row, s, t, u * s.total),
        SampleMode::Truncated { top_k, top_p, .. } => draw_kept(&kept_set(row, s, t, top_k, top_p), u),
    };
    let lse = s.max_scaled + s.total.ln() as f32;
    Pick { token: token as u32, logprob: row.get(token) / t - lse }
}

/// `e^(x / t - max)` of token `i`, as the walk spends it.
fn weight(row: Logits<'_>, i: usize, t: f32, max_scaled: f32) -> f64 {
    fastmath::exp(row.get(i) / t - max_scaled) as f64
}

/// The token where `target` (in `[0, total)`) falls, tokens in index
/// order: the block by its sum, then token by token inside it.
fn walk_blocks(row: Logits<'_>, s: &RowStats<'_>, t: f32, mut target: f64) -> usize {
    for (b, &sum) in s.sums.iter().enumerate() {
        if target < sum {
            let start = b * BLOCK;
            let mut last = start;
            for i in start..(start + BLOCK).min(row.len()) {
                let w = weight(row, i, t, s.max_scaled);
                if target < w {
                    return i;
                }
                target -= w;
                if w > 0.0 {
                    last = i;
                }
            }
            // The block's own sum rounded above its tokens' weights.
            return last;
        }
        target -= sum;
    }
    last_positive(row, s, t)
}

/// The last token with positive weight (where rounding outlived the total).
fn last_positive(row: Logits<'_>, s: &RowStats<'_>, t: f32) -> usize {
    (0..row.len()).rev().find(|&i| weight(row, i, t, s.max_scaled) > 0.0).unwrap_or(s.argmax)
}

/// The kept tokens with their weights, in index order: the `top_k` largest
/// (0 = all; ties lower index first), then the smallest prefix of them
/// whose mass renormalized over the top-k reaches `top_p`. Without top-k
/// the prefix is searched in the top 64, 512, ... (it is almost always short).
fn kept_set(row: Logits<'_>, s: &RowStats<'_>, t: f32, top_k: usize, top_p: f64) -> Vec<(usize, f64)> {
    let vocab = row.len();
    let mut n = if top_k > 0 { top_k.min(vocab) } else { 64.min(vocab) };
    loop {
        let order = descending(row, n);
        let weights: Vec<f64> = order.iter().map(|&i| weight(row, i as usize, t, s.max_scaled)).collect();
        let mass = if top_k > 0 { weights.iter().sum() } else { s.total };
        let mut acc = 0.0;
        let reached = if top_p >= 1.0 {
            None
        } else {
            weights.iter().position(|w| {
                acc += w / mass;
                acc >= top_p
            })
        };
        if reached.is_some() || top_k > 0 || n == vocab {
            let keep = reached.map_or(order.len(), |p| p + 1);
            let mut kept: Vec<(usize, f64)> = order[..keep].iter().map(|&i| i as usize).zip(weights).collect();
            kept.sort_unstable_by_key(|&(i, _)| i);
            return kept;
        }
        n = (n * 8).min(vocab);
    }
}

/// The kept token where `u * kept mass` falls, in index order.
fn draw_kept(kept: &[(usize, f64)], u: f64) -> usize {
    let mut target = u * kept.iter().map(|&(_, w)| w).sum::<f64>();
    for &(i, w) in kept {
        if target < w {
            return i;
        }
        target -= w;
    }
    kept.iter().rev().find(|&&(_, w)| w > 0.0).unwrap_or(&kept[kept.len() - 1]).0
}

/// The `n` largest logits' indices, largest first (ties: lower index
/// first), exactly the first `n` of a full sort.
fn descending(row: Logits<'_>, n: usize) -> Vec<u32> {
    let cmp = |a: &u32, b: &u32| row.get(*b as usize).total_cmp(&row.get(*a as usize)).then(a.cmp(b));
    let mut order: Vec<u32> = (0..row.len() as u32).collect();
    if n < order.len() {
        order.select_nth_unstable_by(n, cmp);
        order.truncate(n);
    }
    order.sort_unstable_by(cmp);
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The partial sort gives exactly the full sort's first n, ties included.
    #[test]
    fn descending_is_a_prefix_of_the_full_sort() {
        let xs: Vec<f32> = (0..5000).map(|i| ((i * 7919) % 97) as f32 * 0.25).collect();
        let row = Logits::F32(&xs);
        let full = descending(row, xs.len());
        for n in [1, 64, 512, 4999, 5000] {
            assert_eq!(descending(row, n), full[..n]);
        }
        assert!(full.windows(2).all(|w| {
            let (a, b) = (xs[w[0] as usize], xs[w[1] as usize]);
            a > b || (a == b && w[0] < w[1])
        }));
    }

    /// A block's walk that rounding lets run past its tokens picks the
    /// block's last positive token, and a target past the total the row's.
    #[test]
    fn rounding_past_the_mass_picks_the_last_positive_token() {
        let mut xs = vec![0.0f32; 3 * BLOCK / 2];
        let last = xs.len() - 1;
        xs[last] = f32::NEG_INFINITY;
        let row = Logits::F32(&xs);
        let sums = [BLOCK as f64, (BLOCK / 2) as f64];
        let s = RowStats { argmax: 0, max_scaled: 0.0, sums: &sums, total: sums.iter().sum() };
        assert_eq!(walk_blocks(row, &s, 1.0, s.total + 1.0), last - 1);
        let inflated = [BLOCK as f64 + 4.0, 1.0];
        let s = RowStats { sums: &inflated, ..s };
        assert_eq!(walk_blocks(row, &s, 1.0, BLOCK as f64 + 2.0), BLOCK - 1);
    }
}
