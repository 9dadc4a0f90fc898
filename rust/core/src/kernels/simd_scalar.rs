//! The portable SIMD path: eight-lane arrays of plain `f32` arithmetic, for CPUs without AVX2 or NEON and as the reference path of the tests.

use super::Simd;

/// Portable path: eight-lane arrays of plain `f32` arithmetic (no fused multiply-add).
#[derive(Clone, Copy)]
pub(crate) struct Scalar;

const SL: usize = 8;

#[inline(always)]
fn lanes<F: Fn(usize) -> f32>(f: F) -> [f32; SL] {
    let mut out = [0.0; SL];
    for (i, o) in out.iter_mut().enumerate() {
        *o = f(i);
    }
    out
}

#[inline(always)]
fn x86_max(a: f32, b: f32) -> f32 {
    if a > b {
        a
    } else {
        b
    }
}

#[inline(always)]
fn x86_min(a: f32, b: f32) -> f32 {
    if a < b {
        a
    } else {
        b
    }
}

impl Simd for Scalar {
    type V = [f32; SL];
    const LANES: usize = SL;
    const GEMM_MR: usize = 2;
    const ATTN_VECS: usize = 2;
    #[inline(always)]
    unsafe fn zero() -> Self::V {
        [0.0; SL]
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> Self::V {
        [x; SL]
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self::V {
        std::ptr::read_unaligned(p as *const [f32; SL])
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: Self::V) {
        std::ptr::write_unaligned(p as *mut [f32; SL], v)
    }
    #[inline(always)]
    unsafe fn load_partial(p: *const f32, n: usize) -> Self::V {
        let mut out = [0.0; SL];
        for (i, o) in out.iter_mut().enumerate().take(n) {
            *o = *p.add(i);
        }
        out
    }
    #[inline(always)]
    unsafe fn store_partial(p: *mut f32, v: Self::V, n: usize) {
        for (i, x) in v.iter().enumerate().take(n) {
            *p.add(i) = *x;
        }
    }
    #[inline(always)]
    unsafe fn add(a: Self::V, b: Self::V) -> Self::V {
        lanes(|i| a[i] + b[i])
    }
    #[inline(always)]
    unsafe fn sub(a: Self::V, b: Self::V) -> Self::V {
        lanes(|i| a[i] - b[i])
    }
    #[inline(always)]
    unsafe fn mul(a: Self::V, b: Self::V) -> Self::V {
        lanes(|i| a[i] * b[i])
    }
    #[inline(always)]
    unsafe fn div(a: Self::V, b: Self::V) -> Self::V {
        lanes(|i| a[i] / b[i])
    }
    #[inline(always)]
    unsafe fn fmadd(a: Self::V, b: Self::V, c: Self::V) -> Self::V {
        lanes(|i| a[i] * b[i] + c[i])
    }
    #[inline(always)]
    unsafe fn max(a: Self::V, b: Self::V) -> Self::V {
        lanes(|i| x86_max(a[i], b[i]))
    }
    #[inline(always)]
    unsafe fn min(a: Self::V, b: Self::V) -> Self::V {
        lanes(|i| x86_min(a[i], b[i]))
    }
    #[inline(always)]
    unsafe fn round(a: Self::V) -> Self::V {
        lanes(|i| a[i].round_ties_even())
    }
    #[inline(always)]
    unsafe fn pow2i(n: Self::V) -> Self::V {
        lanes(|i| f32::from_bits((((n[i] as i32) + 127) as u32) << 23))
    }
    #[inline(always)]
    unsafe fn select_lt(a: Self::V, b: Self::V, x: Self::V, y: Self::V) -> Self::V {
        lanes(|i| if a[i] < b[i] { x[i] } else { y[i] })
    }
    #[inline(always)]
    unsafe fn hsum(a: Self::V) -> f32 {
        ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]))
    }
    #[inline(always)]
    unsafe fn hmax(a: Self::V) -> f32 {
        a.iter().fold(a[0], |m, &x| x86_max(m, x))
    }
}
