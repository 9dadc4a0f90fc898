//! Runtime SIMD dispatch: instruction-set detection, the `RLX_RULES_SIMD` override, and the vector-ops trait the kernels are generic over.
//!
//! Every kernel is written once, generic over [`Simd`], with `#[inline(always)]` bodies. A thin
//! `#[target_feature]` entry point per instruction set instantiates it, so the compiler emits
//! AVX-512, AVX2+FMA or NEON code for that body while the rest of the binary stays baseline. The
//! choice is made at run time by [`Isa::select`].

use std::fmt;

/// Environment variable that forces a SIMD path: `scalar`, `avx2`, `avx512` or `neon`.
pub const SIMD_ENV: &str = "RLX_RULES_SIMD";

/// An instruction-set path of the kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Isa {
    /// Portable Rust, no explicit intrinsics (the compiler may still use baseline SSE2/NEON).
    Scalar,
    /// x86-64 AVX2 with FMA, 8 lanes.
    Avx2,
    /// x86-64 AVX-512F, 16 lanes.
    Avx512,
    /// aarch64 Advanced SIMD, 4 lanes.
    Neon,
}

impl fmt::Display for Isa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Isa {
    /// All paths, slowest first.
    pub const ALL: [Isa; 4] = [Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Neon];

    /// The name used by `RLX_RULES_SIMD` and the Python API.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
            Isa::Neon => "neon",
        }
    }

    /// Parses a path name (case-insensitive); `None` for an unknown name.
    pub fn parse(name: &str) -> Option<Isa> {
        let name = name.trim().to_ascii_lowercase();
        Isa::ALL.into_iter().find(|isa| isa.name() == name)
    }

    /// Whether this CPU can run the path.
    pub fn is_available(self) -> bool {
        match self {
            Isa::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => is_x86_feature_detected!("avx512f"),
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => std::arch::is_aarch64_feature_detected!("neon"),
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// The paths this CPU can run, slowest first.
    pub fn available() -> Vec<Isa> {
        Isa::ALL.into_iter().filter(|isa| isa.is_available()).collect()
    }

    /// The fastest path this CPU can run.
    pub fn best() -> Isa {
        *Isa::available().iter().max().unwrap_or(&Isa::Scalar)
    }

    /// The path a call uses: an explicit request, else `RLX_RULES_SIMD`, else the fastest.
    ///
    /// A request for a path the CPU lacks (or an unknown name in the environment) falls back to
    /// the fastest available path that is not faster than the one requested, so a forced path
    /// never executes an illegal instruction.
    pub fn select(requested: Option<Isa>) -> Isa {
        let wanted = requested.or_else(|| std::env::var(SIMD_ENV).ok().and_then(|v| Isa::parse(&v)));
        match wanted {
            Some(isa) if isa.is_available() => isa,
            Some(isa) => Isa::available().into_iter().filter(|a| *a <= isa).max().unwrap_or(Isa::Scalar),
            None => Isa::best(),
        }
    }
}

/// Asks the CPU to bring the cache line holding `p` into L1 (a hint: never faults, whatever `p`
/// points to). A no-op off x86-64, whose stable Rust has no prefetch intrinsic elsewhere.
#[inline(always)]
pub(crate) fn prefetch(p: *const f32) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `prefetcht0` is baseline x86-64 (SSE) and does not access memory architecturally.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast::<i8>())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Vector operations over `f32` lanes. `max`/`min` follow x86 semantics: when either operand is
/// NaN the *second* operand is returned, so `max(lo, x)` keeps a NaN `x`.
///
/// # Safety
/// Implementations use CPU features that the caller must have checked ([`Isa::is_available`]);
/// pointer arguments must be valid for the lanes read or written.
pub(crate) trait Simd: Copy + 'static {
    type V: Copy;
    const LANES: usize;
    /// Rows per projection micro-kernel tile (sized to the register file: on AVX-512, 12 rows ×
    /// 2 vectors of accumulators, 2 weight vectors and a broadcast fill 27 of 32 registers; a
    /// projection of up to 12 rows then reads each weight panel once).
    const GEMM_MR: usize;
    /// Vectors per row of an attention register tile (4 rows × this many accumulators, plus
    /// operands, must fit the register file: 16 registers on AVX2, 32 on AVX-512 and NEON).
    const ATTN_VECS: usize;
    unsafe fn zero() -> Self::V;
    unsafe fn splat(x: f32) -> Self::V;
    unsafe fn load(p: *const f32) -> Self::V;
    unsafe fn store(p: *mut f32, v: Self::V);
    /// Loads `n < LANES` floats, the rest zero; never touches memory past `p + n`.
    unsafe fn load_partial(p: *const f32, n: usize) -> Self::V;
    /// Stores the first `n < LANES` lanes; never touches memory past `p + n`.
    unsafe fn store_partial(p: *mut f32, v: Self::V, n: usize);
    unsafe fn add(a: Self::V, b: Self::V) -> Self::V;
    unsafe fn sub(a: Self::V, b: Self::V) -> Self::V;
    unsafe fn mul(a: Self::V, b: Self::V) -> Self::V;
    /// `a / b`, correctly rounded.
    unsafe fn div(a: Self::V, b: Self::V) -> Self::V;
    /// `a * b + c`.
    unsafe fn fmadd(a: Self::V, b: Self::V, c: Self::V) -> Self::V;
    unsafe fn max(a: Self::V, b: Self::V) -> Self::V;
    unsafe fn min(a: Self::V, b: Self::V) -> Self::V;
    /// Round to nearest integer (ties to even), as a float.
    unsafe fn round(a: Self::V) -> Self::V;
    /// `2^n` for integral `n` in `[-126, 127]`.
    unsafe fn pow2i(n: Self::V) -> Self::V;
    /// Lane-wise `if a < b { x } else { y }` (false when either is NaN).
    unsafe fn select_lt(a: Self::V, b: Self::V, x: Self::V, y: Self::V) -> Self::V;
    unsafe fn hsum(a: Self::V) -> f32;
    unsafe fn hmax(a: Self::V) -> f32;

    /// Vectorized `exp`: Cephes-style range reduction and a degree-6 polynomial, relative error
    /// about 2e-7; exactly 0 below -87.3, NaN in gives NaN out.
    #[inline(always)]
    unsafe fn exp(x: Self::V) -> Self::V {
        let xc = Self::max(Self::splat(-87.3), Self::min(Self::splat(88.0), x));
        let n = Self::round(Self::mul(xc, Self::splat(std::f32::consts::LOG2_E)));
        let r = Self::fmadd(n, Self::splat(-(355.0 / 512.0)), xc);
        let r = Self::fmadd(n, Self::splat(2.121_944_4e-4), r);
        let mut p = Self::splat(1.987_569_1e-4);
        p = Self::fmadd(p, r, Self::splat(1.398_199_9e-3));
        p = Self::fmadd(p, r, Self::splat(8.333_452e-3));
        p = Self::fmadd(p, r, Self::splat(4.166_579_6e-2));
        p = Self::fmadd(p, r, Self::splat(1.666_666_5e-1));
        p = Self::fmadd(p, r, Self::splat(0.5));
        let r2 = Self::mul(r, r);
        let y = Self::add(Self::fmadd(p, r2, r), Self::splat(1.0));
        let y = Self::mul(y, Self::pow2i(n));
        Self::select_lt(x, Self::splat(-87.3), Self::zero(), y)
    }

    /// Vectorized `tanh`: an odd Taylor polynomial (to x⁹) below |x| = 0.25, `(1 − e)/(1 + e)`
    /// with `e = exp(−2|x|)` above; relative error below 1e-6, exactly ±1 from |x| ≈ 9.1 on,
    /// NaN in gives NaN out.
    #[inline(always)]
    unsafe fn tanh(x: Self::V) -> Self::V {
        let (zero, one) = (Self::zero(), Self::splat(1.0));
        let ax = Self::max(x, Self::sub(zero, x));
        let e = Self::exp(Self::mul(ax, Self::splat(-2.0)));
        let big = Self::div(Self::sub(one, e), Self::add(one, e));
        let x2 = Self::mul(x, x);
        let mut p = Self::splat(62.0 / 2835.0);
        p = Self::fmadd(p, x2, Self::splat(-17.0 / 315.0));
        p = Self::fmadd(p, x2, Self::splat(2.0 / 15.0));
        p = Self::fmadd(p, x2, Self::splat(-1.0 / 3.0));
        let small = Self::fmadd(Self::mul(p, x2), ax, ax);
        let t = Self::select_lt(ax, Self::splat(0.25), small, big);
        Self::select_lt(x, zero, Self::sub(zero, t), t)
    }
}

#[path = "simd_scalar.rs"]
mod scalar;
pub(crate) use scalar::Scalar;

#[cfg(target_arch = "x86_64")]
pub(crate) use x86::{Avx2, Avx512};

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::Simd;
    use std::arch::x86_64::*;

    /// AVX2 + FMA, 8 lanes.
    #[derive(Clone, Copy)]
    pub(crate) struct Avx2;

    #[inline(always)]
    unsafe fn avx2_tail_mask(n: usize) -> __m256i {
        const IDX: [i32; 8] = [0, 1, 2, 3, 4, 5, 6, 7];
        let idx = _mm256_loadu_si256(IDX.as_ptr() as *const __m256i);
        _mm256_cmpgt_epi32(_mm256_set1_epi32(n as i32), idx)
    }

    impl Simd for Avx2 {
        type V = __m256;
        const LANES: usize = 8;
        const GEMM_MR: usize = 3;
        const ATTN_VECS: usize = 2;
        #[inline(always)]
        unsafe fn zero() -> __m256 {
            _mm256_setzero_ps()
        }
        #[inline(always)]
        unsafe fn splat(x: f32) -> __m256 {
            _mm256_set1_ps(x)
        }
        #[inline(always)]
        unsafe fn load(p: *const f32) -> __m256 {
            _mm256_loadu_ps(p)
        }
        #[inline(always)]
        unsafe fn store(p: *mut f32, v: __m256) {
            _mm256_storeu_ps(p, v)
        }
        #[inline(always)]
        unsafe fn load_partial(p: *const f32, n: usize) -> __m256 {
            _mm256_maskload_ps(p, avx2_tail_mask(n))
        }
        #[inline(always)]
        unsafe fn store_partial(p: *mut f32, v: __m256, n: usize) {
            _mm256_maskstore_ps(p, avx2_tail_mask(n), v)
        }
        #[inline(always)]
        unsafe fn add(a: __m256, b: __m256) -> __m256 {
            _mm256_add_ps(a, b)
        }
        #[inline(always)]
        unsafe fn sub(a: __m256, b: __m256) -> __m256 {
            _mm256_sub_ps(a, b)
        }
        #[inline(always)]
        unsafe fn mul(a: __m256, b: __m256) -> __m256 {
            _mm256_mul_ps(a, b)
        }
        #[inline(always)]
        unsafe fn div(a: __m256, b: __m256) -> __m256 {
            _mm256_div_ps(a, b)
        }
        #[inline(always)]
        unsafe fn fmadd(a: __m256, b: __m256, c: __m256) -> __m256 {
            _mm256_fmadd_ps(a, b, c)
        }
        #[inline(always)]
        unsafe fn max(a: __m256, b: __m256) -> __m256 {
            _mm256_max_ps(a, b)
        }
        #[inline(always)]
        unsafe fn min(a: __m256, b: __m256) -> __m256 {
            _mm256_min_ps(a, b)
        }
        #[inline(always)]
        unsafe fn round(a: __m256) -> __m256 {
            _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(a)
        }
        #[inline(always)]
        unsafe fn pow2i(n: __m256) -> __m256 {
            let i = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
            _mm256_castsi256_ps(_mm256_slli_epi32::<23>(i))
        }
        #[inline(always)]
        unsafe fn select_lt(a: __m256, b: __m256, x: __m256, y: __m256) -> __m256 {
            _mm256_blendv_ps(y, x, _mm256_cmp_ps::<_CMP_LT_OQ>(a, b))
        }
        #[inline(always)]
        unsafe fn hsum(a: __m256) -> f32 {
            let s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps::<1>(a));
            let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
            let s = _mm_add_ss(s, _mm_shuffle_ps::<0b01>(s, s));
            _mm_cvtss_f32(s)
        }
        #[inline(always)]
        unsafe fn hmax(a: __m256) -> f32 {
            let s = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps::<1>(a));
            let s = _mm_max_ps(s, _mm_movehl_ps(s, s));
            let s = _mm_max_ss(s, _mm_shuffle_ps::<0b01>(s, s));
            _mm_cvtss_f32(s)
        }
    }

    /// AVX-512F, 16 lanes.
    #[derive(Clone, Copy)]
    pub(crate) struct Avx512;

    #[inline(always)]
    fn tail_mask16(n: usize) -> __mmask16 {
        ((1u32 << n) - 1) as __mmask16
    }

    impl Simd for Avx512 {
        type V = __m512;
        const LANES: usize = 16;
        const GEMM_MR: usize = 12;
        const ATTN_VECS: usize = 4;
        #[inline(always)]
        unsafe fn zero() -> __m512 {
            _mm512_setzero_ps()
        }
        #[inline(always)]
        unsafe fn splat(x: f32) -> __m512 {
            _mm512_set1_ps(x)
        }
        #[inline(always)]
        unsafe fn load(p: *const f32) -> __m512 {
            _mm512_loadu_ps(p)
        }
        #[inline(always)]
        unsafe fn store(p: *mut f32, v: __m512) {
            _mm512_storeu_ps(p, v)
        }
        #[inline(always)]
        unsafe fn load_partial(p: *const f32, n: usize) -> __m512 {
            _mm512_maskz_loadu_ps(tail_mask16(n), p)
        }
        #[inline(always)]
        unsafe fn store_partial(p: *mut f32, v: __m512, n: usize) {
            _mm512_mask_storeu_ps(p, tail_mask16(n), v)
        }
        #[inline(always)]
        unsafe fn add(a: __m512, b: __m512) -> __m512 {
            _mm512_add_ps(a, b)
        }
        #[inline(always)]
        unsafe fn sub(a: __m512, b: __m512) -> __m512 {
            _mm512_sub_ps(a, b)
        }
        #[inline(always)]
        unsafe fn mul(a: __m512, b: __m512) -> __m512 {
            _mm512_mul_ps(a, b)
        }
        #[inline(always)]
        unsafe fn div(a: __m512, b: __m512) -> __m512 {
            _mm512_div_ps(a, b)
        }
        #[inline(always)]
        unsafe fn fmadd(a: __m512, b: __m512, c: __m512) -> __m512 {
            _mm512_fmadd_ps(a, b, c)
        }
        #[inline(always)]
        unsafe fn max(a: __m512, b: __m512) -> __m512 {
            _mm512_max_ps(a, b)
        }
        #[inline(always)]
        unsafe fn min(a: __m512, b: __m512) -> __m512 {
            _mm512_min_ps(a, b)
        }
        #[inline(always)]
        unsafe fn round(a: __m512) -> __m512 {
            _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(a)
        }
        #[inline(always)]
        unsafe fn pow2i(n: __m512) -> __m512 {
            let i = _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127));
            _mm512_castsi512_ps(_mm512_slli_epi32::<23>(i))
        }
        #[inline(always)]
        unsafe fn select_lt(a: __m512, b: __m512, x: __m512, y: __m512) -> __m512 {
            _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_LT_OQ>(a, b), y, x)
        }
        #[inline(always)]
        unsafe fn hsum(a: __m512) -> f32 {
            _mm512_reduce_add_ps(a)
        }
        #[inline(always)]
        unsafe fn hmax(a: __m512) -> f32 {
            let lo = _mm512_castps512_ps256(a);
            let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(a)));
            let s = _mm256_max_ps(lo, hi);
            let s = _mm_max_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps::<1>(s));
            let s = _mm_max_ps(s, _mm_movehl_ps(s, s));
            let s = _mm_max_ss(s, _mm_shuffle_ps::<0b01>(s, s));
            _mm_cvtss_f32(s)
        }
    }
}

#[cfg(target_arch = "aarch64")]
pub(crate) use arm::Neon;

#[cfg(target_arch = "aarch64")]
mod arm {
    use super::Simd;
    use std::arch::aarch64::*;

    /// aarch64 Advanced SIMD, 4 lanes. Compiled on aarch64 only; not exercised by this
    /// repository's x86-64 CI.
    #[derive(Clone, Copy)]
    pub(crate) struct Neon;

    impl Simd for Neon {
        type V = float32x4_t;
        const LANES: usize = 4;
        const GEMM_MR: usize = 3;
        const ATTN_VECS: usize = 4;
        #[inline(always)]
        unsafe fn zero() -> float32x4_t {
            vdupq_n_f32(0.0)
        }
        #[inline(always)]
        unsafe fn splat(x: f32) -> float32x4_t {
            vdupq_n_f32(x)
        }
        #[inline(always)]
        unsafe fn load(p: *const f32) -> float32x4_t {
            vld1q_f32(p)
        }
        #[inline(always)]
        unsafe fn store(p: *mut f32, v: float32x4_t) {
            vst1q_f32(p, v)
        }
        #[inline(always)]
        unsafe fn load_partial(p: *const f32, n: usize) -> float32x4_t {
            let mut tmp = [0.0f32; 4];
            std::ptr::copy_nonoverlapping(p, tmp.as_mut_ptr(), n);
            vld1q_f32(tmp.as_ptr())
        }
        #[inline(always)]
        unsafe fn store_partial(p: *mut f32, v: float32x4_t, n: usize) {
            let mut tmp = [0.0f32; 4];
            vst1q_f32(tmp.as_mut_ptr(), v);
            std::ptr::copy_nonoverlapping(tmp.as_ptr(), p, n);
        }
        #[inline(always)]
        unsafe fn add(a: float32x4_t, b: float32x4_t) -> float32x4_t {
            vaddq_f32(a, b)
        }
        #[inline(always)]
        unsafe fn sub(a: float32x4_t, b: float32x4_t) -> float32x4_t {
            vsubq_f32(a, b)
        }
        #[inline(always)]
        unsafe fn mul(a: float32x4_t, b: float32x4_t) -> float32x4_t {
            vmulq_f32(a, b)
        }
        #[inline(always)]
        unsafe fn div(a: float32x4_t, b: float32x4_t) -> float32x4_t {
            vdivq_f32(a, b)
        }
        #[inline(always)]
        unsafe fn fmadd(a: float32x4_t, b: float32x4_t, c: float32x4_t) -> float32x4_t {
            vfmaq_f32(c, a, b)
        }
        #[inline(always)]
        unsafe fn max(a: float32x4_t, b: float32x4_t) -> float32x4_t {
            // NEON's max returns NaN when either input is NaN, which also keeps NaN flowing.
            vmaxq_f32(a, b)
        }
        #[inline(always)]
        unsafe fn min(a: float32x4_t, b: float32x4_t) -> float32x4_t {
            vminq_f32(a, b)
        }
        #[inline(always)]
        unsafe fn round(a: float32x4_t) -> float32x4_t {
            vrndnq_f32(a)
        }
        #[inline(always)]
        unsafe fn pow2i(n: float32x4_t) -> float32x4_t {
            let i = vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127));
            vreinterpretq_f32_s32(vshlq_n_s32::<23>(i))
        }
        #[inline(always)]
        unsafe fn select_lt(a: float32x4_t, b: float32x4_t, x: float32x4_t, y: float32x4_t) -> float32x4_t {
            vbslq_f32(vcltq_f32(a, b), x, y)
        }
        #[inline(always)]
        unsafe fn hsum(a: float32x4_t) -> f32 {
            vaddvq_f32(a)
        }
        #[inline(always)]
        unsafe fn hmax(a: float32x4_t) -> f32 {
            vmaxvq_f32(a)
        }
    }
}

/// Calls `$body` with `$S` bound to the vector type of `$isa`, inside a function compiled for that
/// instruction set. `$body` must be an expression of type `()` that uses only the captured
/// `$arg`s (plain `Copy` values or references).
macro_rules! dispatch {
    ($isa:expr, |$S:ident| ($($arg:ident : $ty:ty),* $(,)?) $body:block) => {{
        #[allow(unused_imports)]
        use $crate::kernels::simd::{Isa, Scalar, Simd};
        #[inline(always)]
        unsafe fn generic<$S: Simd>($($arg: $ty),*) $body
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx512f,avx2,fma")]
        unsafe fn with_avx512($($arg: $ty),*) { generic::<$crate::kernels::simd::Avx512>($($arg),*) }
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2,fma")]
        unsafe fn with_avx2($($arg: $ty),*) { generic::<$crate::kernels::simd::Avx2>($($arg),*) }
        #[cfg(target_arch = "aarch64")]
        #[target_feature(enable = "neon")]
        unsafe fn with_neon($($arg: $ty),*) { generic::<$crate::kernels::simd::Neon>($($arg),*) }
        // SAFETY: `Isa::select` only returns paths the CPU supports.
        unsafe {
            match $isa {
                #[cfg(target_arch = "x86_64")]
                Isa::Avx512 => with_avx512($($arg),*),
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 => with_avx2($($arg),*),
                #[cfg(target_arch = "aarch64")]
                Isa::Neon => with_neon($($arg),*),
                _ => generic::<Scalar>($($arg),*),
            }
        }
    }};
}
pub(crate) use dispatch;
