//! `x @ w^T` for few rows of `x` (decoding: one row per sequence) without
//! packing `w`.
//!
//! A general matrix product packs the right-hand side into panels before
//! multiplying; with 16 rows of `x` that packing reads and writes all of `w`
//! for as little arithmetic as it saves, and in a profile of decoding it was
//! half of the step (`perf`: `gemm_common::...::imp_fastcall` 34-47% against
//! 20-28% in the microkernels). Here every output `(r, j)` is the dot product
//! of row `r` of `x` with row `j` of `w`, both contiguous: `w` is streamed
//! once per call, in blocks of 4 rows kept in L1 while every pair of `x` rows
//! passes over them (AVX2 + FMA, 8 accumulators, a horizontal-add tree into
//! one vector per block; scalar elsewhere). Columns are split into rayon
//! tasks.
//!
//! - [`linear_few_rows`]: differentiable in both inputs (backward by stock
//!   matrix products), f32 on the CPU; others use the reference.
//! - [`linear_reference`], the reference: `x.matmul(w.t())`.

use crate::storage::{contiguous_slice, f32_slice};
use candle_core::{CpuStorage, CustomOp2, DType, Layout, Result, Shape, Tensor};
use rayon::prelude::*;
use std::mem::MaybeUninit;

/// Rows of `x` up to which [`linear_few_rows`] beats the packed product
/// (`fusegrpo bench decode`: 16 and 64 rows; training uses hundreds).
pub const MAX_ROWS: usize = 64;

/// Multiply-adds per rayon task, at least: smaller calls stay on one thread.
const TASK_MACS: usize = 1 << 16;

/// `x @ w^T` for `x` `[m, k]` and `w` `[n, k]`, both f32: the kernel on the
/// CPU, the reference elsewhere or for other dtypes.
pub fn linear_few_rows(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    let (_, k) = x.dims2()?;
    let (_, kw) = w.dims2()?;
    if k != kw {
        candle_core::bail!("linear: x is {:?}, w is {:?}", x.dims(), w.dims());
    }
    if !x.device().is_cpu() || x.dtype() != DType::F32 || w.dtype() != DType::F32 {
        return linear_reference(x, w);
    }
    x.contiguous()?.apply_op2(&w.contiguous()?, FewRowsLinear)
}

/// `x @ w^T` from stock (differentiable) ops.
pub fn linear_reference(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    x.matmul(&w.t()?)
}

/// The op: `(x [m, k], w [n, k])` -> `[m, n]`.
#[derive(Clone, Copy, Debug)]
pub struct FewRowsLinear;

impl CustomOp2 for FewRowsLinear {
    fn name(&self) -> &'static str {
        "linear-few-rows"
    }

    fn cpu_fwd(&self, s1: &CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout) -> Result<(CpuStorage, Shape)> {
        let (m, k) = l1.shape().dims2()?;
        let (n, _) = l2.shape().dims2()?;
        let x = contiguous_slice(f32_slice(s1, "x")?, l1, "x")?;
        let w = contiguous_slice(f32_slice(s2, "w")?, l2, "w")?;
        // Every element is written by the kernel: no zeroing pass first
        // (a tenth of the lm_head's time at Qwen3's vocabulary).
        let mut out = Vec::with_capacity(m * n);
        rows_times_transposed(x, m, k, w, n, &mut out.spare_capacity_mut()[..m * n]);
        // SAFETY: `rows_times_transposed` wrote all m * n elements.
        unsafe { out.set_len(m * n) };
        Ok((CpuStorage::F32(out), Shape::from((m, n))))
    }

    fn bwd(&self, x: &Tensor, w: &Tensor, _res: &Tensor, grad: &Tensor) -> Result<(Option<Tensor>, Option<Tensor>)> {
        Ok((Some(grad.matmul(w)?), Some(grad.t()?.matmul(x)?)))
    }
}

/// The output pointer shared by tasks that write disjoint columns.
#[derive(Clone, Copy)]
struct Out(*mut f32);
// SAFETY: tasks write disjoint column ranges of the output (see
// `rows_times_transposed`), so sharing the pointer across threads is sound.
unsafe impl Send for Out {}
unsafe impl Sync for Out {}

/// Which blocks the kernel multiplies in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Path {
    /// 4 x 4 blocks in 8-lane registers, 32 of them (AVX-512VL).
    Avx512Vl,
    /// 2 x 4 blocks (AVX2 + FMA, 16 registers).
    Avx2,
    Scalar,
}

impl Path {
    /// The fastest path this CPU has (detected once).
    fn detect() -> Path {
        #[cfg(target_arch = "x86_64")]
        {
            if avx2::has_avx512vl() {
                return Path::Avx512Vl;
            }
            if crate::fastmath::has_avx2_fma() {
                return Path::Avx2;
            }
        }
        Path::Scalar
    }
}

/// `out [m, n] = x [m, k] @ w [n, k]^T`, all dense row-major; every element
/// of `out[..m * n]` is written.
pub(crate) fn rows_times_transposed(x: &[f32], m: usize, k: usize, w: &[f32], n: usize, out: &mut [MaybeUninit<f32>]) {
    rows_times_transposed_on(Path::detect(), x, m, k, w, n, out)
}

/// [`rows_times_transposed`] on a given path (which the CPU must have).
fn rows_times_transposed_on(path: Path, x: &[f32], m: usize, k: usize, w: &[f32], n: usize, out: &mut [MaybeUninit<f32>]) {
    assert!(x.len() >= m * k && w.len() >= n * k && out.len() >= m * n, "linear: slices too short");
    if m == 0 || n == 0 {
        return;
    }
    let per_col = (m * k).max(1);
    let cols = TASK_MACS.div_ceil(per_col).max(n.div_ceil(4 * rayon::current_num_threads())).next_multiple_of(4);
    let dst = Out(out.as_mut_ptr().cast::<f32>());
    (0..n.div_ceil(cols)).into_par_iter().for_each(|t| {
        let j0 = t * cols;
        let j1 = (j0 + cols).min(n);
        // SAFETY: task `t` writes only columns j0..j1 of each of the m rows of
        // `out` (asserted long enough above); the ranges of tasks are disjoint.
        unsafe { columns(path, x, m, k, w, n, j0..j1, dst) }
    });
}

/// Columns `cols` of the product, written through `out` (row stride `n`).
///
/// # Safety
/// The CPU has `path`; `out` must point to `m * n` writable floats, and no
/// other thread may touch columns `cols` of it during the call.
#[allow(clippy::too_many_arguments)]
unsafe fn columns(path: Path, x: &[f32], m: usize, k: usize, w: &[f32], n: usize, cols: std::ops::Range<usize>, out: Out) {
    let mut j = cols.start;
    #[cfg(target_arch = "x86_64")]
    if path == Path::Avx512Vl {
        let end = cols.start + (cols.end - cols.start) / 4 * 4;
        let rows4 = m / 4 * 4;
        // SAFETY: rows 0..rows4 of x and j..end of w lie in their slices,
        // `out` is the caller's (columns j..end are this call's alone);
        // AVX-512VL (with AVX2 and FMA) was detected.
        avx2::columns_4x4(x.as_ptr(), rows4, k, w.as_ptr(), j..end, out.0, n);
        // The 1-3 rows past the last multiple of 4 (a batch of 13 live
        // sequences, or the last few of a rollout) in 2 x 4 blocks: in
        // scalar dot products they were two thirds of a rollout's time.
        rows_2x4(x, rows4..m, k, w, n, j..end, out);
        j = end;
    }
    #[cfg(target_arch = "x86_64")]
    if path == Path::Avx2 {
        let end = cols.start + (cols.end - cols.start) / 4 * 4;
        rows_2x4(x, 0..m, k, w, n, j..end, out);
        j = end;
    }
    for j in j..cols.end {
        let wj = &w[j * k..(j + 1) * k];
        for r in 0..m {
            *out.0.add(r * n + j) = dot(&x[r * k..(r + 1) * k], wj);
        }
    }
}

/// Rows `rows` and columns `cols` (a multiple of 4 long) of the product in
/// AVX2 2 x 4 blocks (a lone last row is paired with itself).
///
/// # Safety
/// AVX2 and FMA available; as [`columns`] for `out`.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
unsafe fn rows_2x4(x: &[f32], rows: std::ops::Range<usize>, k: usize, w: &[f32], n: usize, cols: std::ops::Range<usize>, out: Out) {
    for j in cols.step_by(4) {
        for r in rows.clone().step_by(2) {
            let two = r + 1 < rows.end;
            // SAFETY: rows r (and r + 1 when `two`) of x and rows j..j+4 of
            // w lie in their slices (the caller's ranges); AVX2 and FMA were
            // detected.
            let sums = avx2::block_2x4(x.as_ptr().add(r * k), x.as_ptr().add((r + two as usize) * k), w.as_ptr().add(j * k), k);
            std::ptr::copy_nonoverlapping(sums.as_ptr(), out.0.add(r * n + j), 4);
            if two {
                std::ptr::copy_nonoverlapping(sums.as_ptr().add(4), out.0.add((r + 1) * n + j), 4);
            }
        }
    }
}

/// Scalar dot product in four lanes.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 4];
    let mut ca = a.chunks_exact(4);
    let mut cb = b.chunks_exact(4);
    // Plain `+=` of a product: `f32::mul_add` is a library call (`fmaf`)
    // unless the build targets FMA.
    for (x, y) in (&mut ca).zip(&mut cb) {
        for i in 0..4 {
            acc[i] += x[i] * y[i];
        }
    }
    let tail: f32 = ca.remainder().iter().zip(cb.remainder()).map(|(x, y)| x * y).sum();
    (acc[0] + acc[1]) + (acc[2] + acc[3]) + tail
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;
    use std::sync::OnceLock;

    /// AVX-512VL (and AVX2, FMA): 32 vector registers for the 4 x 4 block.
    pub fn has_avx512vl() -> bool {
        static HAS: OnceLock<bool> = OnceLock::new();
        *HAS.get_or_init(|| {
            crate::fastmath::has_avx2_fma() && is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512vl")
        })
    }

    /// Eight 8-lane accumulators to their eight sums, in order: per 128-bit
    /// half the horizontal adds give `[Σv0, Σv1, Σv2, Σv3]` of that half,
    /// then the halves are added.
    #[inline(always)]
    unsafe fn sums8(v: &[__m256; 8]) -> __m256 {
        let lo = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
        let hi = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
        _mm256_add_ps(_mm256_permute2f128_ps::<0x20>(lo, hi), _mm256_permute2f128_ps::<0x31>(lo, hi))
    }

    /// Columns `cols` (a multiple of 4 long) of `out = x @ w^T` for the
    /// first `rows` rows of `x` (a multiple of 4), row stride of `out` `n`:
    /// each block of 4 rows of `w` stays in L1 while every 4 rows of `x`
    /// pass over it.
    ///
    /// # Safety
    /// As [`block_4x4`] for every block; `out` holds `rows * n` floats.
    #[target_feature(enable = "avx2,fma,avx512f,avx512vl")]
    pub unsafe fn columns_4x4(x: *const f32, rows: usize, k: usize, w: *const f32, cols: std::ops::Range<usize>, out: *mut f32, n: usize) {
        for j in cols.step_by(4) {
            for r in (0..rows).step_by(4) {
                let sums = block_4x4(x.add(r * k), k, w.add(j * k), k);
                for i in 0..4 {
                    _mm_storeu_ps(out.add((r + i) * n + j), _mm_loadu_ps(sums.as_ptr().add(4 * i)));
                }
            }
        }
    }

    /// Dot products of four rows of `x` (from `x`, stride `xs`) with four
    /// rows of `w` (from `w`, stride `k`), row-major `[4 x 4]`: 16
    /// accumulators, which the 32 registers of AVX-512VL hold with the
    /// operands.
    ///
    /// # Safety
    /// AVX-512F/VL, AVX2 and FMA available; `k` floats readable at `x +
    /// i * xs` and `w + i * k` for i in 0..4.
    #[inline(always)]
    unsafe fn block_4x4(x: *const f32, xs: usize, w: *const f32, k: usize) -> [f32; 16] {
        let xr = [x, x.add(xs), x.add(2 * xs), x.add(3 * xs)];
        let ws = [w, w.add(k), w.add(2 * k), w.add(3 * k)];
        let mut acc = [[_mm256_setzero_ps(); 8]; 2];
        let full = k / 8 * 8;
        for i in (0..full).step_by(8) {
            let wv = [_mm256_loadu_ps(ws[0].add(i)), _mm256_loadu_ps(ws[1].add(i)), _mm256_loadu_ps(ws[2].add(i)), _mm256_loadu_ps(ws[3].add(i))];
            for r in 0..4 {
                let xv = _mm256_loadu_ps(xr[r].add(i));
                for c in 0..4 {
                    let a = &mut acc[r / 2][(r % 2) * 4 + c];
                    *a = _mm256_fmadd_ps(xv, wv[c], *a);
                }
            }
        }
        let mut out = [0.0f32; 16];
        _mm256_storeu_ps(out.as_mut_ptr(), sums8(&acc[0]));
        _mm256_storeu_ps(out.as_mut_ptr().add(8), sums8(&acc[1]));
        for i in full..k {
            for r in 0..4 {
                let xv = *xr[r].add(i);
                for c in 0..4 {
                    out[4 * r + c] += xv * *ws[c].add(i);
                }
            }
        }
        out
    }

    /// Dot products of two rows of `x` (`x0`, `x1`, length `k`) with four
    /// consecutive rows of `w` (from `w`, stride `k`): `[x0·w0, x0·w1, x0·w2,
    /// x0·w3, x1·w0, .., x1·w3]`.
    ///
    /// # Safety
    /// AVX2 and FMA available; `k` floats readable at `x0`, `x1` and at each
    /// of `w`, `w + k`, `w + 2k`, `w + 3k`.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn block_2x4(x0: *const f32, x1: *const f32, w: *const f32, k: usize) -> [f32; 8] {
        let ws = [w, w.add(k), w.add(2 * k), w.add(3 * k)];
        let mut a = [_mm256_setzero_ps(); 4];
        let mut b = [_mm256_setzero_ps(); 4];
        let full = k / 8 * 8;
        for i in (0..full).step_by(8) {
            let xa = _mm256_loadu_ps(x0.add(i));
            let xb = _mm256_loadu_ps(x1.add(i));
            for c in 0..4 {
                let wv = _mm256_loadu_ps(ws[c].add(i));
                a[c] = _mm256_fmadd_ps(xa, wv, a[c]);
                b[c] = _mm256_fmadd_ps(xb, wv, b[c]);
            }
        }
        let mut out = [0.0f32; 8];
        _mm256_storeu_ps(out.as_mut_ptr(), sums8(&[a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]]));
        for i in full..k {
            let (xa, xb) = (*x0.add(i), *x1.add(i));
            for c in 0..4 {
                let wv = *ws[c].add(i);
                out[c] += xa * wv;
                out[4 + c] += xb * wv;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every path this CPU has gives the scalar dot products within 1e-5
    /// relative, over shapes that reach every block, leftover row and
    /// column, and the tail of `k` past a multiple of 8.
    #[test]
    fn every_path_matches_plain_dot_products() {
        let paths: Vec<Path> = [Path::Avx512Vl, Path::Avx2, Path::Scalar]
            .into_iter()
            .filter(|p| match p {
                #[cfg(target_arch = "x86_64")]
                Path::Avx512Vl => avx2::has_avx512vl(),
                #[cfg(target_arch = "x86_64")]
                Path::Avx2 => crate::fastmath::has_avx2_fma(),
                Path::Scalar => true,
                #[allow(unreachable_patterns)]
                _ => false,
            })
            .collect();
        println!("paths checked: {paths:?}");
        let value = |i: usize, scale: f32| ((i * 7919 % 1009) as f32 / 1009.0 - 0.5) * scale;
        for (m, k, n) in [(1usize, 1usize, 1usize), (3, 7, 5), (4, 8, 4), (5, 67, 9), (16, 64, 131), (7, 300, 6), (64, 33, 70)] {
            let x: Vec<f32> = (0..m * k).map(|i| value(i, 2.0)).collect();
            let w: Vec<f32> = (0..n * k).map(|i| value(i + 17, 1.0)).collect();
            for &path in &paths {
                let mut out: Vec<f32> = Vec::with_capacity(m * n);
                rows_times_transposed_on(path, &x, m, k, &w, n, &mut out.spare_capacity_mut()[..m * n]);
                // SAFETY: every element was written.
                unsafe { out.set_len(m * n) };
                for r in 0..m {
                    for j in 0..n {
                        let want: f64 = (0..k).map(|i| x[r * k + i] as f64 * w[j * k + i] as f64).sum();
                        let got = out[r * n + j] as f64;
                        assert!((got - want).abs() <= 1e-5 * want.abs().max(1.0), "{path:?} m={m} k={k} n={n} ({r}, {j}): {got} vs {want}");
                    }
                }
            }
        }
    }
}
