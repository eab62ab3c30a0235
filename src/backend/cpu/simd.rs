//! Element-wise maths written so LLVM vectorises it, compiled three times:
//! for the baseline target, with AVX2+FMA and with AVX-512F, the widest the
//! CPU has picked at run time. The hot
//! loops call `exp`/`erf` per element, so these are branch-free polynomial
//! forms rather than libm calls.

use std::sync::OnceLock;

pub fn has_avx2_fma() -> bool {
    static DETECTED: OnceLock<bool> = OnceLock::new();
    *DETECTED.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    })
}

/// AVX-512F, which the attention tiles and (inside the `gemm` crate) the
/// GEMMs use where present.
pub fn has_avx512() -> bool {
    static DETECTED: OnceLock<bool> = OnceLock::new();
    *DETECTED.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            std::is_x86_feature_detected!("avx512f") && has_avx2_fma()
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    })
}

/// Defines `pub fn $name(args)` that runs `$body` compiled with AVX-512F or
/// AVX2+FMA when the CPU has them, else the baseline build of the same body.
macro_rules! multiversion {
    ($(#[$meta:meta])* $vis:vis fn $name:ident($($arg:ident : $ty:ty),* $(,)?) $body:block) => {
        $(#[$meta])*
        $vis fn $name($($arg: $ty),*) {
            #[inline(always)]
            fn body($($arg: $ty),*) $body

            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,fma")]
            unsafe fn body_avx2($($arg: $ty),*) { body($($arg),*) }

            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx512f,avx2,fma")]
            unsafe fn body_avx512($($arg: $ty),*) { body($($arg),*) }

            #[cfg(target_arch = "x86_64")]
            if $crate::backend::cpu::simd::has_avx512() {
                // SAFETY: the CPU was just checked to support AVX-512F (and AVX2, FMA).
                return unsafe { body_avx512($($arg),*) };
            }
            #[cfg(target_arch = "x86_64")]
            if $crate::backend::cpu::simd::has_avx2_fma() {
                // SAFETY: the CPU was just checked to support AVX2 and FMA.
                return unsafe { body_avx2($($arg),*) };
            }
            body($($arg),*)
        }
    };
}
pub(crate) use multiversion;

/// Multiply-add. Inside the AVX2+FMA build this is one FMA instruction; the
/// baseline build (CPUs from before 2013) pays for a libm call instead.
#[inline(always)]
pub fn fma(a: f32, b: f32, c: f32) -> f32 {
    a.mul_add(b, c)
}

/// e^x with about 2 ulp error on [-87, 88]; inputs outside are clamped
/// (softmax and GELU only ever need that range).
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    // Adding 1.5 * 2^23 rounds to the nearest integer and leaves it in the low
    // mantissa bits, so n needs no float->int conversion (which, with Rust's
    // saturating `as`, would not vectorise).
    const ROUND: f32 = 12_582_912.0;
    let x = x.clamp(-87.0, 88.0);
    let shifted = fma(x, LOG2E, ROUND);
    let n = shifted - ROUND;
    // r = x - n*ln2 in two steps keeps r exact to f32 precision.
    let r = fma(-n, LN2_LO, fma(-n, LN2_HI, x));
    let mut p = 1.0 / 5040.0;
    p = fma(p, r, 1.0 / 720.0);
    p = fma(p, r, 1.0 / 120.0);
    p = fma(p, r, 1.0 / 24.0);
    p = fma(p, r, 1.0 / 6.0);
    p = fma(p, r, 0.5);
    p = fma(p, r, 1.0);
    p = fma(p, r, 1.0);
    let n_bits = shifted.to_bits().wrapping_sub(ROUND.to_bits());
    let scale = f32::from_bits(n_bits.wrapping_add(127) << 23);
    p * scale
}

/// erf(x) by Abramowitz & Stegun 7.1.26 (|error| <= 1.5e-7).
#[inline(always)]
pub fn erf(x: f32) -> f32 {
    let a = x.abs();
    let t = 1.0 / fma(0.327_591_1, a, 1.0);
    let mut p = 1.061_405_4;
    p = fma(p, t, -1.453_152_1);
    p = fma(p, t, 1.421_413_8);
    p = fma(p, t, -0.284_496_74);
    p = fma(p, t, 0.254_829_6);
    let y = 1.0 - p * t * exp(-a * a);
    y.copysign(x)
}

/// GELU, exact (erf) form as HF SegFormer uses.
#[inline(always)]
pub fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2))
}

/// Lanes for reductions: eight independent partial results let LLVM keep a
/// whole vector register of them, which a single running total forbids.
const LANES: usize = 8;

#[inline(always)]
pub fn sum_lanes(xs: &[f32]) -> f32 {
    let mut acc = [0.0f32; LANES];
    let chunks = xs.chunks_exact(LANES);
    let tail = chunks.remainder();
    for c in chunks {
        for i in 0..LANES {
            acc[i] += c[i];
        }
    }
    acc.iter().sum::<f32>() + tail.iter().sum::<f32>()
}

#[inline(always)]
pub fn sum_sq_dev_lanes(xs: &[f32], mean: f32) -> f32 {
    let mut acc = [0.0f32; LANES];
    let chunks = xs.chunks_exact(LANES);
    let tail = chunks.remainder();
    for c in chunks {
        for i in 0..LANES {
            let d = c[i] - mean;
            acc[i] = fma(d, d, acc[i]);
        }
    }
    acc.iter().sum::<f32>() + tail.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>()
}

#[inline(always)]
pub fn max_lanes(xs: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; LANES];
    let chunks = xs.chunks_exact(LANES);
    let tail = chunks.remainder();
    for c in chunks {
        for i in 0..LANES {
            acc[i] = if c[i] > acc[i] { c[i] } else { acc[i] };
        }
    }
    let m = acc.iter().fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m });
    tail.iter().fold(m, |m, &v| if v > m { v } else { m })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_matches_std() {
        let mut worst = 0.0f32;
        let mut x = -80.0f32;
        while x < 80.0 {
            let rel = (exp(x) - x.exp()).abs() / x.exp();
            worst = worst.max(rel);
            x += 0.0137;
        }
        assert!(worst < 1e-6, "worst relative error {worst}");
    }

    #[test]
    fn gelu_matches_reference_values() {
        // torch.nn.functional.gelu on these inputs (approximate="none").
        let cases = [(-3.0f32, -0.004_049_7), (-1.0, -0.158_655_25), (0.0, 0.0), (0.5, 0.345_731_3), (2.0, 1.954_5)];
        for (x, want) in cases {
            assert!((gelu(x) - want).abs() < 2e-5, "gelu({x}) = {} want {want}", gelu(x));
        }
    }
}
