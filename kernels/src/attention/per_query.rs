//! The CPU forward at inference for calls of few queries (a decoding step, a checked
//! draft), query by query: every score is the dot product of its own query
//! and key, every output element sums its own query's weighted values in key
//! order, and each query walks the key blocks a call of that query alone
//! walks. Nothing is shared between queries but the reads of the keys and
//! values, so a query's output and log-sum-exp are the same bits whether it
//! is alone in its call or among others: `CausalLm::forward_steps` checks
//! the drafted tokens in one call and gets one-token decoding's bits, while
//! reading the cache once per call instead of once per query.

use super::cpu::{forward_with, gather_q, normalize, softmax_step, BlockStats, Geometry, Problem, BLOCK_K};

/// Calls with at most this many queries per row take this forward.
pub(crate) const MAX_QUERIES: usize = 16;

/// The forward of `cpu::forward`, each query on its own.
pub(crate) fn forward(p: &Problem) -> (Vec<f32>, Vec<f32>) {
    forward_with(p, forward_task)
}

/// One forward task: kv head `g` of row `r`, folded rows of query block
/// `qb`; the block's outputs `[rows, d]` and log-sum-exps, as
/// `cpu::forward_task` returns them.
fn forward_task(p: &Problem, geo: &Geometry, r: usize, g: usize, qb: usize) -> (Vec<f32>, Vec<f32>) {
    let d = p.dims.head_dim;
    let rows = geo.block_rows(qb);
    let n = rows.len();
    let qm = gather_q(&p.q, geo, r, g, rows.clone());
    // Per folded row: its query, and the keys a call of that query alone
    // would hold (up to the last one it sees).
    let queries: Vec<usize> = rows.clone().map(|f| geo.unfold(g, f).1).collect();
    let ends: Vec<usize> = queries.iter().map(|&i| (0..p.dims.keys).rev().find(|&j| p.vis.sees(r, i, j)).map_or(0, |j| j + 1)).collect();
    let mut max = vec![f32::NEG_INFINITY; n];
    let mut sum = vec![0.0f32; n];
    let mut acc = vec![0.0f32; n * d];
    let mut s = vec![0.0f32; BLOCK_K];
    let (kr, vr) = (p.k.strides[2], p.v.strides[2]);
    let last = ends.iter().copied().max().unwrap_or(0);
    // Key blocks outer, so a block's keys and values stay in cache while
    // every query reads them.
    for (kb, start) in (0..last).step_by(BLOCK_K).enumerate() {
        let stats = &geo.key_stats[r * geo.key_blocks + kb];
        for row in 0..n {
            if ends[row] <= start {
                continue;
            }
            let i = queries[row];
            let cols = (ends[row] - start).min(BLOCK_K);
            let s = &mut s[..cols];
            let keys = &p.k.data[p.k.at(r, g, start)..];
            scores(&qm[row * d..(row + 1) * d], keys, kr, s, p.scale);
            if !sees_all(p, stats, r, i) {
                for (c, x) in s.iter_mut().enumerate() {
                    if !p.vis.sees(r, i, start + c) {
                        *x = f32::NEG_INFINITY;
                    }
                }
            }
            let a = &mut acc[row * d..(row + 1) * d];
            if softmax_step(s, &mut max[row], &mut sum[row], a) {
                add_weighted(s, &p.v.data[p.v.at(r, g, start)..], vr, a);
            }
        }
    }
    let lse = normalize(&mut acc, d, &max, &sum);
    (acc, lse)
}

/// Whether query `i` of row `r` sees every slot of the key block `stats`
/// describes (then no per-key mask is needed; masking would change nothing).
fn sees_all(p: &Problem, stats: &BlockStats, r: usize, i: usize) -> bool {
    let vis = p.vis;
    let pos = vis.query_positions[r * vis.queries + i];
    if pos < 0 {
        return true;
    }
    let one_segment = vis.segments.as_ref().is_none_or(|(qs, _)| {
        let seg = qs[r * vis.queries + i];
        stats.min_seg == seg && stats.max_seg == seg
    });
    !stats.any_pad && stats.max_pos <= pos && one_segment
}

/// `out[c] = scale * (q . k_c)` for the `out.len()` keys `k_c` at
/// `keys[c * stride..]`, each `q.len()` long.
fn scores(q: &[f32], keys: &[f32], stride: usize, out: &mut [f32], scale: f32) {
    let d = q.len();
    assert!(out.is_empty() || keys.len() >= (out.len() - 1) * stride + d, "attention: keys slice too short");
    #[cfg(target_arch = "x86_64")]
    if crate::fastmath::has_avx2_fma() {
        let last = out.len().saturating_sub(1);
        for c0 in (0..out.len()).step_by(4) {
            // A short last group repeats its last key: every key's sum is
            // the one the same four-key routine gives it.
            let at = |c: usize| keys[(c0 + c).min(last) * stride..].as_ptr();
            // SAFETY: AVX2 and FMA were detected; each pointer has `d`
            // readable floats (asserted above: keys c0..=last lie in `keys`).
            let dots = unsafe { avx2::dots4(q.as_ptr(), [at(0), at(1), at(2), at(3)], d) };
            for (c, x) in dots.iter().enumerate().take(out.len() - c0) {
                out[c0 + c] = x * scale;
            }
        }
        return;
    }
    for (c, o) in out.iter_mut().enumerate() {
        let k = &keys[c * stride..c * stride + d];
        *o = q.iter().zip(k).fold(0.0f32, |acc, (a, b)| acc + a * b) * scale;
    }
}

/// `acc += sum_c p[c] * v_c` over the `p.len()` values `v_c` at
/// `values[c * stride..]`, each `acc.len()` long, in the order of `c`.
fn add_weighted(p: &[f32], values: &[f32], stride: usize, acc: &mut [f32]) {
    let d = acc.len();
    assert!(p.is_empty() || values.len() >= (p.len() - 1) * stride + d, "attention: values slice too short");
    #[cfg(target_arch = "x86_64")]
    if crate::fastmath::has_avx2_fma() {
        // SAFETY: AVX2 and FMA were detected; every value row has `d`
        // readable floats (asserted above) and `acc` holds `d`.
        unsafe { avx2::add_weighted(p, values.as_ptr(), stride, acc.as_mut_ptr(), d) };
        return;
    }
    for (c, &w) in p.iter().enumerate() {
        let v = &values[c * stride..c * stride + d];
        acc.iter_mut().zip(v).for_each(|(a, x)| *a += w * x);
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    /// The dot products of `q` with the four rows `k`, all `d` long: one
    /// 8-lane accumulator per key, summed lanes-pairwise then by halves.
    ///
    /// # Safety
    /// AVX2 and FMA available; `d` floats readable at `q` and at each `k`.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn dots4(q: *const f32, k: [*const f32; 4], d: usize) -> [f32; 4] {
        let mut a = [_mm256_setzero_ps(); 4];
        let full = d / 8 * 8;
        for i in (0..full).step_by(8) {
            let qv = _mm256_loadu_ps(q.add(i));
            for c in 0..4 {
                a[c] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k[c].add(i)), a[c]);
            }
        }
        let quads = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
        let sums = _mm_add_ps(_mm256_castps256_ps128(quads), _mm256_extractf128_ps::<1>(quads));
        let mut out = [0.0f32; 4];
        _mm_storeu_ps(out.as_mut_ptr(), sums);
        for i in full..d {
            for c in 0..4 {
                out[c] += *q.add(i) * *k[c].add(i);
            }
        }
        out
    }

    /// `acc[..d] += sum_c p[c] * values[c * stride..][..d]`, `c` in order.
    ///
    /// # Safety
    /// AVX2 and FMA available; `d` floats readable at `values + c * stride`
    /// for every `c < p.len()`, and writable at `acc`.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn add_weighted(p: &[f32], values: *const f32, stride: usize, acc: *mut f32, d: usize) {
        let full = d / 8 * 8;
        for i0 in (0..full).step_by(64) {
            let width = (full - i0).min(64) / 8;
            let mut a = [_mm256_setzero_ps(); 8];
            for (x, slot) in a.iter_mut().enumerate().take(width) {
                *slot = _mm256_loadu_ps(acc.add(i0 + 8 * x));
            }
            for (c, &w) in p.iter().enumerate() {
                let wv = _mm256_set1_ps(w);
                let v = values.add(c * stride + i0);
                for (x, slot) in a.iter_mut().enumerate().take(width) {
                    *slot = _mm256_fmadd_ps(wv, _mm256_loadu_ps(v.add(8 * x)), *slot);
                }
            }
            for (x, slot) in a.iter().enumerate().take(width) {
                _mm256_storeu_ps(acc.add(i0 + 8 * x), *slot);
            }
        }
        for i in full..d {
            for (c, &w) in p.iter().enumerate() {
                *acc.add(i) += w * *values.add(c * stride + i);
            }
        }
    }
}
