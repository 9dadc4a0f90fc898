//! Register-tiled micro-kernels of the flash attention: scores `Kᵀ`-tile × `Qᵀ` with the query rows along the vector lanes, a base-2 `exp`, and `P·V` into row-major accumulators.
//!
//! The score tile of a query block is kept transposed, `sᵀ[key][row]`, so that each row's
//! running max and sum are plain lane-wise vector operations (no horizontal reductions, no
//! per-row scalar code between the two matrix products), and the online softmax runs at the
//! throughput of its `exp`s rather than the latency of a reduction chain per row.

use super::simd::Simd;

/// `2^x` for `x <= 126` (the softmax's `(score − max)·log2 e`, at most `8·log2 e` above 0 with the
/// lazily moved max):
/// round-to-nearest range reduction and a degree-5 polynomial on `[−½, ½]` (constant term 1, so
/// `2^0` is exactly 1), relative error below 2e-7; exactly 0 below −126.5, NaN in gives NaN out.
#[inline(always)]
pub(crate) unsafe fn exp2_neg<S: Simd>(x: S::V) -> S::V {
    // `max(lo, x)` keeps a NaN `x`; n = −127 makes `pow2i` exactly 0.
    let t = S::max(S::splat(-127.0), x);
    let n = S::round(t);
    let f = S::sub(t, n);
    let mut p = S::splat(1.326_471_9e-3);
    p = S::fmadd(p, f, S::splat(9.671_514e-3));
    p = S::fmadd(p, f, S::splat(5.550_734e-2));
    p = S::fmadd(p, f, S::splat(2.402_224_2e-1));
    p = S::fmadd(p, f, S::splat(std::f32::consts::LN_2));
    p = S::fmadd(p, f, S::splat(1.0));
    S::mul(p, S::pow2i(n))
}

/// Scores of `KT` keys against `RV·LANES` query rows: `s[a][r] = Σ_d k[a][d] · qt[d][r]`, stored at
/// `s + a·ld_s`. `k` holds the keys' rows (stride `d`), `qt` the transposed, pre-scaled query block
/// (stride `ld_q`).
#[inline(always)]
pub(crate) unsafe fn qk_tile<S: Simd, const KT: usize, const RV: usize>(qt: *const f32, ld_q: usize, k: *const f32, d: usize, s: *mut f32, ld_s: usize) {
    let lanes = S::LANES;
    let mut acc = [[S::zero(); RV]; KT];
    for dd in 0..d {
        let qp = qt.add(dd * ld_q);
        let mut qv = [S::zero(); RV];
        for (c, x) in qv.iter_mut().enumerate() {
            *x = S::load(qp.add(c * lanes));
        }
        for (a, row) in acc.iter_mut().enumerate() {
            let kv = S::splat(*k.add(a * d + dd));
            for c in 0..RV {
                row[c] = S::fmadd(kv, qv[c], row[c]);
            }
        }
    }
    for (a, row) in acc.iter().enumerate() {
        for (c, x) in row.iter().enumerate() {
            S::store(s.add(a * ld_s + c * lanes), *x);
        }
    }
}

/// `acc[r][0..G·LANES] += Σ_{j<nk} p[j][r] · v[j][0..G·LANES]` for `R` rows: `p` is the transposed
/// probability tile (row `r` of key `j` at `p + j·ld_p + r`), `v` the keys' value rows (stride `ld_v`).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn pv_tile<S: Simd, const R: usize, const G: usize>(p: *const f32, ld_p: usize, v: *const f32, ld_v: usize, nk: usize, acc: *mut f32, ld_acc: usize) {
    let lanes = S::LANES;
    let mut a = [[S::zero(); G]; R];
    for (r, row) in a.iter_mut().enumerate() {
        for (c, x) in row.iter_mut().enumerate() {
            *x = S::load(acc.add(r * ld_acc + c * lanes));
        }
    }
    for j in 0..nk {
        let vp = v.add(j * ld_v);
        let mut vv = [S::zero(); G];
        for (c, x) in vv.iter_mut().enumerate() {
            *x = S::load(vp.add(c * lanes));
        }
        let pp = p.add(j * ld_p);
        for (r, row) in a.iter_mut().enumerate() {
            let pj = S::splat(*pp.add(r));
            for c in 0..G {
                row[c] = S::fmadd(pj, vv[c], row[c]);
            }
        }
    }
    for (r, row) in a.iter().enumerate() {
        for (c, x) in row.iter().enumerate() {
            S::store(acc.add(r * ld_acc + c * lanes), *x);
        }
    }
}

/// `acc[r] += P·V` for rows `[0, rows)` of the block, 6 rows × up to `ATTN_VECS` vectors of the
/// head at a time (24 accumulators on AVX-512, 12 on AVX2), then 4, then single rows.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn pv_block<S: Simd>(p: *const f32, ld_p: usize, v: *const f32, ld_v: usize, nk: usize, rows: usize, d_vecs: usize, acc: *mut f32, ld_acc: usize) {
    let lanes = S::LANES;
    let mut r0 = 0;
    while r0 < rows {
        let take = match rows - r0 {
            6.. => 6,
            4 | 5 => 4,
            _ => 1,
        };
        let mut c0 = 0;
        while c0 < d_vecs {
            let g = S::ATTN_VECS.min(d_vecs - c0);
            let (pp, vp, ap) = (p.add(r0), v.add(c0 * lanes), acc.add(r0 * ld_acc + c0 * lanes));
            macro_rules! pv {
                ($R:expr) => {
                    match g {
                        4 => pv_tile::<S, $R, 4>(pp, ld_p, vp, ld_v, nk, ap, ld_acc),
                        3 => pv_tile::<S, $R, 3>(pp, ld_p, vp, ld_v, nk, ap, ld_acc),
                        2 => pv_tile::<S, $R, 2>(pp, ld_p, vp, ld_v, nk, ap, ld_acc),
                        _ => pv_tile::<S, $R, 1>(pp, ld_p, vp, ld_v, nk, ap, ld_acc),
                    }
                };
            }
            match take {
                6 => pv!(6),
                4 => pv!(4),
                _ => pv!(1),
            }
            c0 += g;
        }
        r0 += take;
    }
}
