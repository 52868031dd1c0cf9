//! Element-wise math the CPU kernels run over whole blocks: a branch-free
//! `exp` that the compiler vectorizes (libm's `expf` is a scalar call per
//! element, the largest cost of a softmax over a block).

/// `e^x` for f32, relative error below 2e-7 on `[-87, 88]` (Cephes' expf
/// scheme: `x = n ln2 + r`, a degree-6 polynomial for `e^r`, `2^n` by
/// exponent bits). Inputs below -87.3 give 0 (so `-inf` gives 0), above
/// 88.3 they give e^88.3 (softmax inputs, max-shifted, are <= 0). NaN propagates.
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // Adding and subtracting 1.5 * 2^23 rounds to the nearest integer in
    // plain f32 arithmetic (`f32::round` and `mul_add` are library calls
    // on the baseline x86-64 target, which this code is built for).
    const ROUND: f32 = 12_582_912.0;
    let under = x < -87.3;
    let xc = x.clamp(-87.3, 88.3);
    let n = (xc * LOG2E + ROUND) - ROUND;
    let r = (xc - n * LN2_HI) - n * LN2_LO;
    let mut p = 1.987_569_1e-4f32;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 5.000_000_1e-1;
    let e_r = (p * r * r + r) + 1.0;
    let scale = f32::from_bits((((n as i32) + 127) as u32) << 23);
    let y = e_r * scale;
    if under {
        0.0
    } else if x.is_nan() {
        x
    } else {
        y
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
}
