//! Element-wise math the CPU kernels run over whole blocks: a branch-free
//! `exp` that the compiler vectorizes (libm's `expf` is a scalar call per
//! element, the largest cost of a softmax over a block).

/// `e^x` for f32, relative error below 2e-7 on `[-87, 88]` (Cephes' expf
/// scheme: `x = n ln2 + r`, a degree-6 polynomial for `e^r`, `2^n` by
/// exponent bits). Inputs below -87.3 give 0 (so `-inf` gives 0), above
/// 88.3 they give e^88.3 (softmax inputs, max-shifted, are <= 0). NaN propagates.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // Adding and subtracting 1.5 * 2^23 rounds to the nearest integer in
    // plain f32 arithmetic (`f32::round` and `mul_add` are library calls
    // on the baseline x86-64 target, which this code is built for).
    const ROUND: f32 = 12_582_912.0;
    let under = x < -87.3;
    let xc = x.clamp(-87.3, 88.3);
    let rounded = xc * LOG2E + ROUND;
    let n = rounded - ROUND;
    // The integer n sits in the low mantissa bits of `rounded` (|n| < 2^22):
    // an integer subtraction, where `n as i32` (saturating) does not vectorize.
    let ni = rounded.to_bits().wrapping_sub(ROUND.to_bits()) as i32;
    let r = (xc - n * LN2_HI) - n * LN2_LO;
    let mut p = 1.987_569_1e-4f32;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 5.000_000_1e-1;
    let e_r = (p * r * r + r) + 1.0;
    let scale = f32::from_bits(((ni + 127) as u32) << 23);
    let y = e_r * scale;
    if under {
        0.0
    } else if x.is_nan() {
        x
    } else {
        y
    }
}

/// Writes `e^(x - shift)` over every `x` of `xs` and returns their sum (f32
/// lanes, summed into f64 every 64 elements). AVX2+FMA where the CPU has
/// it (checked at run time), else the scalar [`exp`].
pub fn exp_sub_sum(xs: &mut [f32], shift: f32) -> f64 {
    #[cfg(target_arch = "x86_64")]
    if avx512::available() {
        // SAFETY: the CPU supports AVX-512F, AVX2 and FMA (checked just
        // above); the pointer covers `xs.len()` elements this call may write.
        return unsafe { avx512::exp_sub_sum(xs.as_mut_ptr(), xs.len(), shift, true) };
    }
    #[cfg(target_arch = "x86_64")]
    if avx2::available() {
        // SAFETY: the CPU supports AVX2 and FMA (checked just above); the
        // pointer covers `xs.len()` elements this call may write.
        return unsafe { avx2::exp_sub_sum(xs.as_mut_ptr(), xs.len(), shift, true) };
    }
    scalar_sum(xs, shift)
}

/// `sum e^(x - shift)` over `xs`, leaving `xs` as it is (see [`exp_sub_sum`]).
pub fn sum_exp_sub(xs: &[f32], shift: f32) -> f64 {
    #[cfg(target_arch = "x86_64")]
    if avx512::available() {
        // SAFETY: AVX-512F, AVX2 and FMA are available; with `write = false`
        // the elements are only read through the pointer.
        return unsafe { avx512::exp_sub_sum(xs.as_ptr() as *mut f32, xs.len(), shift, false) };
    }
    #[cfg(target_arch = "x86_64")]
    if avx2::available() {
        // SAFETY: AVX2 and FMA are available; with `write = false` the
        // elements are only read through the pointer.
        return unsafe { avx2::exp_sub_sum(xs.as_ptr() as *mut f32, xs.len(), shift, false) };
    }
    let mut total = 0.0f64;
    for chunk in xs.chunks(64) {
        total += lanes_sum(chunk.iter().map(|&x| exp(x - shift)));
    }
    total
}

fn scalar_sum(xs: &mut [f32], shift: f32) -> f64 {
    let mut total = 0.0f64;
    for chunk in xs.chunks_mut(64) {
        chunk.iter_mut().for_each(|x| *x = exp(*x - shift));
        total += lanes_sum(chunk.iter().copied());
    }
    total
}

/// A chunk's sum the way the AVX2 path adds it: eight f32 lanes, then f64.
fn lanes_sum(values: impl Iterator<Item = f32>) -> f64 {
    let mut lanes = [0.0f32; 8];
    for (i, e) in values.enumerate() {
        lanes[i % 8] += e;
    }
    lanes.iter().map(|&l| l as f64).sum()
}

/// The index of the first largest element (0 for an empty slice; NaNs are
/// never the largest).
pub fn argmax(xs: &[f32]) -> usize {
    let max = max(xs);
    #[cfg(target_arch = "x86_64")]
    if avx2::available() {
        // SAFETY: the CPU supports AVX2 (checked just above).
        return unsafe { avx2::first_equal(xs, max) }.unwrap_or(0);
    }
    xs.iter().position(|&x| x == max).unwrap_or(0)
}

/// The largest element (NaNs ignored; -inf for an empty slice), AVX2 where
/// the CPU has it.
pub fn max(xs: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if avx2::available() {
        // SAFETY: the CPU supports AVX2 (checked just above).
        return unsafe { avx2::max(xs) };
    }
    xs.iter().copied().fold(f32::NEG_INFINITY, |a, b| if b > a { b } else { a })
}

/// Whether the CPU has AVX2 and FMA (detected once), the paths of this
/// module and of [`crate::linear`].
#[cfg(target_arch = "x86_64")]
pub(crate) fn has_avx2_fma() -> bool {
    avx2::available()
}

/// Whether the CPU has AVX-512F besides AVX2 and FMA (detected once).
#[cfg(target_arch = "x86_64")]
pub(crate) fn has_avx512() -> bool {
    avx512::available()
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;
    use std::sync::OnceLock;

    pub fn available() -> bool {
        static HAS: OnceLock<bool> = OnceLock::new();
        *HAS.get_or_init(|| is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"))
    }

    /// Eight lanes of [`super::exp`] (the same scheme, with FMA).
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn exp8(x: __m256) -> __m256 {
        let lo = _mm256_set1_ps(-87.3);
        let under = _mm256_cmp_ps::<_CMP_LT_OQ>(x, lo);
        let nan = _mm256_cmp_ps::<_CMP_UNORD_Q>(x, x);
        let xc = _mm256_min_ps(_mm256_max_ps(x, lo), _mm256_set1_ps(88.3));
        let round = _mm256_set1_ps(12_582_912.0);
        let rounded = _mm256_fmadd_ps(xc, _mm256_set1_ps(std::f32::consts::LOG2_E), round);
        let n = _mm256_sub_ps(rounded, round);
        let ni = _mm256_sub_epi32(_mm256_castps_si256(rounded), _mm256_castps_si256(round));
        let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693_359_4), xc);
        let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.121_944_4e-4), r);
        let mut p = _mm256_set1_ps(1.987_569_1e-4);
        for c in [1.398_199_9e-3f32, 8.333_452e-3, 4.166_579_6e-2, 1.666_666_5e-1, 5.000_000_1e-1] {
            p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
        }
        let e_r = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0));
        let scale = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(ni, _mm256_set1_epi32(127))));
        let y = _mm256_andnot_ps(under, _mm256_mul_ps(e_r, scale));
        _mm256_blendv_ps(y, x, nan)
    }

    /// See [`super::exp_sub_sum`]: `len` elements at `xs`, overwritten
    /// only when `write`.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn exp_sub_sum(xs: *mut f32, len: usize, shift: f32, write: bool) -> f64 {
        let sh = _mm256_set1_ps(shift);
        let mut total = 0.0f64;
        let full = len / 64 * 64;
        for c in (0..full).step_by(64) {
            let mut acc = _mm256_setzero_ps();
            for i in (c..c + 64).step_by(8) {
                let e = exp8(_mm256_sub_ps(_mm256_loadu_ps(xs.add(i)), sh));
                if write {
                    _mm256_storeu_ps(xs.add(i), e);
                }
                acc = _mm256_add_ps(acc, e);
            }
            let mut lanes = [0.0f32; 8];
            _mm256_storeu_ps(lanes.as_mut_ptr(), acc);
            total += lanes.iter().map(|&l| l as f64).sum::<f64>();
        }
        let rest = std::slice::from_raw_parts(xs.add(full), len - full);
        let rest_sum = super::lanes_sum(rest.iter().map(|&x| super::exp(x - shift)));
        if write {
            let rest = std::slice::from_raw_parts_mut(xs.add(full), len - full);
            rest.iter_mut().for_each(|x| *x = super::exp(*x - shift));
        }
        total + rest_sum
    }

    /// The index of the first element equal to `value` (a scalar scan was
    /// a tenth of a decoding step at Qwen3's vocabulary).
    #[target_feature(enable = "avx2")]
    pub unsafe fn first_equal(xs: &[f32], value: f32) -> Option<usize> {
        let v = _mm256_set1_ps(value);
        let mut chunks = xs.chunks_exact(8);
        for (c, eight) in (&mut chunks).enumerate() {
            let hits = _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_EQ_OQ>(_mm256_loadu_ps(eight.as_ptr()), v));
            if hits != 0 {
                return Some(c * 8 + hits.trailing_zeros() as usize);
            }
        }
        let done = xs.len() - chunks.remainder().len();
        chunks.remainder().iter().position(|&x| x == value).map(|i| done + i)
    }

    /// The largest element (NaNs ignored; -inf for an empty slice).
    #[target_feature(enable = "avx2")]
    pub unsafe fn max(xs: &[f32]) -> f32 {
        let mut acc = _mm256_set1_ps(f32::NEG_INFINITY);
        let mut chunks = xs.chunks_exact(8);
        for eight in &mut chunks {
            // max_ps returns its second operand when either is NaN: the running max.
            acc = _mm256_max_ps(_mm256_loadu_ps(eight.as_ptr()), acc);
        }
        let mut lanes = [0.0f32; 8];
        _mm256_storeu_ps(lanes.as_mut_ptr(), acc);
        lanes.iter().chain(chunks.remainder()).copied().fold(f32::NEG_INFINITY, |a, b| if b > a { b } else { a })
    }
}

/// AVX-512F: sixteen lanes of the same exp, summed in the AVX2 path's order
/// (so every path gives the same bits).
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;
    use std::sync::OnceLock;

    pub fn available() -> bool {
        static HAS: OnceLock<bool> = OnceLock::new();
        *HAS.get_or_init(|| super::avx2::available() && is_x86_feature_detected!("avx512f"))
    }

    /// Sixteen lanes of [`super::exp`] (the scheme of the AVX2 `exp8`).
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn exp16(x: __m512) -> __m512 {
        let lo = _mm512_set1_ps(-87.3);
        let under = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, lo);
        let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(x, x);
        let xc = _mm512_min_ps(_mm512_max_ps(x, lo), _mm512_set1_ps(88.3));
        let round = _mm512_set1_ps(12_582_912.0);
        let rounded = _mm512_fmadd_ps(xc, _mm512_set1_ps(std::f32::consts::LOG2_E), round);
        let n = _mm512_sub_ps(rounded, round);
        let ni = _mm512_sub_epi32(_mm512_castps_si512(rounded), _mm512_castps_si512(round));
        let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693_359_4), xc);
        let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.121_944_4e-4), r);
        let mut p = _mm512_set1_ps(1.987_569_1e-4);
        for c in [1.398_199_9e-3f32, 8.333_452e-3, 4.166_579_6e-2, 1.666_666_5e-1, 5.000_000_1e-1] {
            p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
        }
        let e_r = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0));
        let scale = _mm512_castsi512_ps(_mm512_slli_epi32::<23>(_mm512_add_epi32(ni, _mm512_set1_epi32(127))));
        let y = _mm512_maskz_mov_ps(!under, _mm512_mul_ps(e_r, scale));
        _mm512_mask_blend_ps(nan, y, x)
    }

    /// See [`super::exp_sub_sum`]. The eight f32 accumulators of the AVX2
    /// path take the low then the high half of each 16 exps: lane i adds
    /// elements i, i + 8, i + 16, .. in the same order there and here.
    #[target_feature(enable = "avx512f,avx2,fma")]
    pub unsafe fn exp_sub_sum(xs: *mut f32, len: usize, shift: f32, write: bool) -> f64 {
        let sh = _mm512_set1_ps(shift);
        let mut total = 0.0f64;
        let full = len / 64 * 64;
        for c in (0..full).step_by(64) {
            let mut acc = _mm256_setzero_ps();
            for i in (c..c + 64).step_by(16) {
                let e = exp16(_mm512_sub_ps(_mm512_loadu_ps(xs.add(i)), sh));
                if write {
                    _mm512_storeu_ps(xs.add(i), e);
                }
                acc = _mm256_add_ps(acc, _mm512_castps512_ps256(e));
                acc = _mm256_add_ps(acc, _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(e))));
            }
            let mut lanes = [0.0f32; 8];
            _mm256_storeu_ps(lanes.as_mut_ptr(), acc);
            total += lanes.iter().map(|&l| l as f64).sum::<f64>();
        }
        let rest = std::slice::from_raw_parts(xs.add(full), len - full);
        let rest_sum = super::lanes_sum(rest.iter().map(|&x| super::exp(x - shift)));
        if write {
            let rest = std::slice::from_raw_parts_mut(xs.add(full), len - full);
            rest.iter_mut().for_each(|x| *x = super::exp(*x - shift));
        }
        total + rest_sum
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn exp_matches_f64_within_2e_7_relative() {
        let mut worst = 0.0f64;
        let mut x = -87.0f32;
        while x < 88.0 {
            let got = super::exp(x) as f64;
            let want = (x as f64).exp();
            worst = worst.max(((got - want) / want).abs());
            x += 0.001_37;
        }
        assert!(worst < 2e-7, "worst relative error {worst}");
        assert_eq!(super::exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(super::exp(-100.0), 0.0);
        assert_eq!(super::exp(0.0), 1.0);
        assert!(super::exp(f32::NAN).is_nan());
    }

    #[test]
    fn exp_sub_sum_matches_f64_on_every_path() {
        // 1,000 values (a remainder after the 64-chunks), over the whole range.
        let xs: Vec<f32> = (0..1000).map(|i| -90.0 + i as f32 * 0.179).collect();
        let shift = 3.5f32;
        let want: Vec<f64> = xs.iter().map(|&x| ((x - shift) as f64).exp()).collect();
        let check = |got: &[f32], sum: f64, what: &str| {
            for (g, w) in got.iter().zip(&want) {
                let ok = if *w < 1e-37 { g.abs() < 1e-37 } else { ((*g as f64 - w) / w).abs() < 3e-7 };
                assert!(ok, "{what}: {g} vs {w}");
            }
            let total: f64 = want.iter().filter(|w| **w >= 1e-37).sum();
            assert!(((sum - total) / total).abs() < 1e-6, "{what}: sum {sum} vs {total}");
        };
        let mut a = xs.clone();
        let sum = super::exp_sub_sum(&mut a, shift);
        check(&a, sum, "dispatched");
        assert_eq!(super::sum_exp_sub(&xs, shift), sum, "read-only sum equals the writing one");
        let mut b = xs.clone();
        let sum = super::scalar_sum(&mut b, shift);
        check(&b, sum, "scalar");
    }

    /// The AVX-512 path gives the AVX2 path's bits, values and sum (where
    /// the CPU has both), NaN and both ends of the range included. (The
    /// scalar path rounds a few values 1 ulp apart: see the test above.)
    #[test]
    fn avx512_gives_the_avx2_bits() {
        #[cfg(target_arch = "x86_64")]
        if super::avx512::available() {
            let mut xs: Vec<f32> = (0..1003).map(|i| -95.0 + i as f32 * 0.187).collect();
            xs[17] = f32::NAN;
            xs[500] = f32::NEG_INFINITY;
            let shift = -1.25f32;
            let (mut a, mut b) = (xs.clone(), xs.clone());
            // SAFETY: AVX-512F, AVX2 and FMA detected; the pointers cover a and b.
            let (sa, sb) = unsafe {
                (
                    super::avx2::exp_sub_sum(a.as_mut_ptr(), a.len(), shift, true),
                    super::avx512::exp_sub_sum(b.as_mut_ptr(), b.len(), shift, true),
                )
            };
            let differ = a.iter().zip(&b).filter(|(x, y)| x.to_bits() != y.to_bits()).count();
            assert_eq!(differ, 0, "{differ} of {} values differ", a.len());
            assert_eq!(sa.to_bits(), sb.to_bits(), "sums {sa} and {sb}");
        } else {
            println!("no AVX-512 here: nothing to compare");
        }
    }

    #[test]
    fn argmax_takes_the_first_largest() {
        let mut xs: Vec<f32> = (0..1003).map(|i| ((i * 7919) % 1000) as f32).collect();
        assert_eq!(super::argmax(&xs), xs.iter().position(|&x| x == 999.0).unwrap());
        xs[1001] = 5000.0;
        xs[1002] = 5000.0;
        xs[3] = f32::NAN;
        assert_eq!(super::argmax(&xs), 1001);
        assert_eq!(super::argmax(&[]), 0);
        let mut ties = vec![-1.0f32; 40];
        ties[9] = 7.0;
        ties[12] = 7.0;
        ties[33] = 7.0;
        assert_eq!(super::argmax(&ties), 9, "the first of tied maxima inside the vector chunks");
    }
}
