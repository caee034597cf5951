//! The element-wise passes over a tile's row of scores, written so that the compiler vectorises
//! them, compiled for AVX-512 and AVX2+FMA and chosen at run time.

/// `e^x` for `x <= 0`-ish arguments of a softmax: `2^n e^r` with `n = round(x / ln 2)` and
/// `|r| <= ln 2 / 2` (Cody-Waite), `e^r` by its Taylor series to degree 7 (relative error below
/// 2e-9, under float32's rounding); below -80 exactly 0 (no subnormals, which are slow).
#[inline(always)]
fn exp(x: f32) -> f32 {
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    // 1.5 x 2^23: adding it rounds to an integer, held in the mantissa's low bits.
    const ROUND: f32 = 12_582_912.0;
    let underflow = x < -80.0;
    let x = x.clamp(-80.0, 88.0);
    let t = x * std::f32::consts::LOG2_E + ROUND;
    let n = t - ROUND;
    let n_bits = t.to_bits().wrapping_sub(ROUND.to_bits()) as i32;
    let r = (x - n * LN2_HI) - n * LN2_LO;
    let p = 1.0
        + r * (1.0
            + r * (1.0 / 2.0
                + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r * (1.0 / 5040.0)))))));
    let two_to_n = f32::from_bits((n_bits.wrapping_add(127) as u32) << 23);
    if underflow { 0.0 } else { p * two_to_n }
}

/// Lanes the passes keep apart (one AVX-512 register).
const LANES: usize = 16;

#[inline(always)]
fn exp_minus_sum(row: &mut [f32], max: f32) -> f32 {
    let mut sums = [0.0f32; LANES];
    let mut chunks = row.chunks_exact_mut(LANES);
    for c in &mut chunks {
        for (x, s) in c.iter_mut().zip(&mut sums) {
            *x = exp(*x - max);
            *s += *x;
        }
    }
    let mut sum: f32 = sums.iter().sum();
    for x in chunks.into_remainder() {
        *x = exp(*x - max);
        sum += *x;
    }
    sum
}

#[inline(always)]
fn alibi_scale_max(row: &mut [f32], scale: f32, negative_slope: f32, query: f32, first_key: f32) -> f32 {
    let mut maxes = [f32::NEG_INFINITY; LANES];
    let mut keys = [0.0f32; LANES];
    for (t, k) in keys.iter_mut().enumerate() {
        *k = first_key + t as f32;
    }
    let mut chunks = row.chunks_exact_mut(LANES);
    for c in &mut chunks {
        for ((x, m), k) in c.iter_mut().zip(&mut maxes).zip(&mut keys) {
            *x = *x * scale + negative_slope * (query - *k).abs();
            *m = if *x > *m { *x } else { *m };
            *k += LANES as f32;
        }
    }
    let mut max = maxes.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
    for (x, k) in chunks.into_remainder().iter_mut().zip(keys) {
        *x = *x * scale + negative_slope * (query - k).abs();
        max = max.max(*x);
    }
    max
}

macro_rules! dispatched {
    ($(#[$doc:meta])* pub(crate) fn $name:ident($($arg:ident: $ty:ty),*) -> f32 = $body:ident;) => {
        $(#[$doc])*
        pub(crate) fn $name($($arg: $ty),*) -> f32 {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f")]
                fn avx512($($arg: $ty),*) -> f32 { $body($($arg),*) }
                #[target_feature(enable = "avx2,fma")]
                fn avx2($($arg: $ty),*) -> f32 { $body($($arg),*) }
                if std::arch::is_x86_feature_detected!("avx512f") {
                    // SAFETY: the CPU has AVX-512F (checked above).
                    return unsafe { avx512($($arg),*) };
                }
                if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
                    // SAFETY: the CPU has AVX2 and FMA (checked above).
                    return unsafe { avx2($($arg),*) };
                }
            }
            $body($($arg),*)
        }
    };
}

dispatched! {
    /// `row[c] = e^(row[c] - max)`; returns their sum.
    pub(crate) fn exp_minus(row: &mut [f32], max: f32) -> f32 = exp_minus_sum;
}

dispatched! {
    /// `row[c] = row[c] x scale - slope x |query - (first_key + c)|` (ALiBi's bias, the slope
    /// given negative); returns the row's maximum.
    pub(crate) fn alibi_scores(row: &mut [f32], scale: f32, negative_slope: f32, query: f32, first_key: f32) -> f32 = alibi_scale_max;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_is_within_float_rounding_of_the_library_and_flushes_far_below_zero() {
        let mut worst = 0.0f64;
        for i in 0..=200_000 {
            let x = -80.0 + i as f32 * 0.0004;
            let want = (x as f64).exp();
            worst = worst.max(((exp(x) as f64) - want).abs() / want);
        }
        assert!(worst < 4e-7, "relative error {worst:e}");
        assert_eq!(exp(-80.5), 0.0);
        assert_eq!(exp(-1e30), 0.0);
        assert!(exp(0.0) == 1.0);
    }

    #[test]
    fn the_dispatched_passes_agree_with_their_scalar_forms() {
        // 37 keys: two whole chunks of lanes and a remainder.
        let row: Vec<f32> = (0..37).map(|i| (i as f32 * 0.37).sin() * 4.0).collect();
        let mut fast = row.clone();
        let max = alibi_scores(&mut fast, 0.125, -0.25, 20.0, 3.0);
        let want: Vec<f32> =
            row.iter().enumerate().map(|(c, x)| x * 0.125 - 0.25 * (20.0 - (3.0 + c as f32)).abs()).collect();
        assert_eq!(fast, want);
        assert_eq!(max, want.iter().copied().fold(f32::NEG_INFINITY, f32::max));
        let sum = exp_minus(&mut fast, max);
        let exps: Vec<f64> = want.iter().map(|x| ((x - max) as f64).exp()).collect();
        for (a, b) in fast.iter().zip(&exps) {
            assert!(((*a as f64) - b).abs() <= 4e-7 * b.max(1e-30), "{a} {b}");
        }
        assert!((sum as f64 - exps.iter().sum::<f64>()).abs() < 1e-5);
    }
}
