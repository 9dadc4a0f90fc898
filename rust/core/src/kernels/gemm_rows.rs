//! Projections on row-major `[K, N]` weights (the one-shot form): few rows k-group by k-group (panels shifted to start on a cache line) or split along K over the threads, more rows packed on the fly.

use super::gemm::{micro, project_panels, SendPtr, WeightsRef, NR};
use super::par::Par;
use super::simd::{dispatch, prefetch, Isa};

thread_local! {
    /// The other threads' partial products of a K-split projection, kept between calls.
    static KSPLIT_SCRATCH: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// `project` of few rows on row-major weights over several threads, split along K: thread `t`
/// multiplies A's columns and W's rows `[k_t, k_{t+1})` (one contiguous block of the weights,
/// streamed in the same order as by a single thread) into C (thread 0, with the bias) or into a
/// partial product, which a second phase adds into C. Splitting N instead (contiguous panel
/// ranges, 4 tasks per thread) gave each thread short runs of every weight row, and 2 threads were
/// slower than 1: K=768, N=2304, weights hot, medians of 200 calls on AMD EPYC (Zen 4), 1 thread
/// against N-split against K-split: 8 rows 306 / 368 / 169 µs, 16 rows 737 / 800 / 442 µs,
/// 1 row 88 / 135 / 103 µs.
#[allow(clippy::too_many_arguments)]
pub(super) fn project_ksplit(isa: Isa, par: &Par, m: usize, a: &[f32], lda: usize, w: WeightsRef<'_>, c: &mut [f32], ldc: usize) {
    let (k, n, t) = (w.k, w.n, par.threads);
    let kchunk = k.div_ceil(t).div_ceil(KGROUP) * KGROUP;
    let n_panels = w.n_panels();
    let cptr = SendPtr(c.as_mut_ptr());
    KSPLIT_SCRATCH.with(|cell| {
        let mut guard = cell.try_borrow_mut().ok();
        let mut fresh = Vec::new();
        let partial: &mut Vec<f32> = guard.as_deref_mut().unwrap_or(&mut fresh);
        partial.resize((t - 1) * m * n, 0.0);
        let pptr = SendPtr(partial.as_mut_ptr());
        par.for_each(t, |task| {
            let (k0, k1) = ((task * kchunk).min(k), ((task + 1) * kchunk).min(k));
            // Thread 0 writes C (stride ldc) with the bias; the others their partial [m, n].
            // SAFETY: each task writes its own buffer; lengths checked by `project`.
            let (out, ld) = if task == 0 { (cptr, ldc) } else { (SendPtr(unsafe { pptr.add((task - 1) * m * n) }), n) };
            if k0 >= k1 {
                for r in 0..m {
                    // SAFETY: as above.
                    unsafe { std::ptr::write_bytes(out.add(r * ld), 0, n) };
                }
                return;
            }
            let sub = w.rows(k0, k1);
            let a_sub = &a[k0..];
            // SAFETY: `a_sub` holds m rows of stride lda with k1 - k0 columns; `out` m rows of n.
            unsafe { project_rows(isa, m, a_sub, lda, &sub, 0, n_panels, out, ld) };
        });
        // C += the partial products, columns split over the threads.
        let partial = &*partial;
        let cols = n.div_ceil(t);
        par.for_each(t, |task| {
            let (c0, c1) = ((task * cols).min(n), ((task + 1) * cols).min(n));
            for r in 0..m {
                for p in 0..t - 1 {
                    let src = &partial[p * m * n + r * n..][c0..c1];
                    // SAFETY: tasks own disjoint columns of C.
                    let dst = unsafe { std::slice::from_raw_parts_mut(cptr.add(r * ldc + c0), c1.saturating_sub(c0)) };
                    for (d, s) in dst.iter_mut().zip(src) {
                        *d += s;
                    }
                }
            }
        });
    });
}

/// Up to this many rows, row-major weights are read k-group by k-group across all of a task's
/// panels (sequential streams the prefetcher follows), with C kept in L2 between groups.
pub(super) const KOUTER_MAX_ROWS: usize = 16;

/// Parallel phases (hand-offs between the threads) of one projection of `m` rows: two for
/// row-major weights split along K (the partial products, then their sum), else one.
pub(crate) fn projection_phases(m: usize, w: &WeightsRef<'_>) -> usize {
    if !w.packed && m <= KOUTER_MAX_ROWS {
        2
    } else {
        1
    }
}
/// Weight rows per k-group of the k-outer order. Each group reads and writes C once, so a larger
/// group moves less C per weight; 16 rows against 8 on AMD Zen 4 (medians of eight alternating
/// probe runs): 1.1–1.2× faster on AVX-512 and 1.2–1.7× on AVX2 for M = 1 to 16, while 32 rows
/// (32 streams at once) was slower than 16.
const KGROUP: usize = 16;

/// Panels ahead whose k-group rows the k-group order prefetches, and the fewest weight bytes for
/// which it does. On the 2-core AMD EPYC (Zen 4) guest, BERT-base's one-shot block (6.75 and 2.25
/// MiB of weights) ran 1.06-1.19x faster at 1x8 and 1x16 with 2 panels (4 about the same), while
/// H = 384's (1.7 and 0.6 MiB, hot in L2 and L3) ran 0-3% slower (calls alternating in one
/// process, shared machine).
const PREFETCH_PANELS: usize = 2;
const PREFETCH_MIN_BYTES: usize = 2 << 20;

/// Environment variable that, set to `0`, keeps the k-group order's panels at multiples of 32
/// columns whatever the weights' alignment (read on every call, for A/B measurements).
pub(crate) const ALIGN_ENV: &str = "RLX_RULES_ALIGN_PANELS";

/// Panels `[p0, p1)` of row-major weights for all `m` rows: for `m <= KOUTER_MAX_ROWS`, k-group by
/// k-group ([`project_kouter`]; the partial panel copied), for more, packed on the fly.
///
/// # Safety
/// As [`project_panels`].
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn project_rows(isa: Isa, m: usize, a: &[f32], lda: usize, w: &WeightsRef<'_>, p0: usize, p1: usize, c: SendPtr, ldc: usize) {
    if m > KOUTER_MAX_ROWS {
        return project_panels(isa, m, a, lda, w, p0, p1, c, ldc);
    }
    if p0 == 0 && p1 == w.n_panels() {
        if let Some(shift) = misaligned_columns(w) {
            return project_kouter_shifted(isa, m, a, lda, w, shift, c, ldc);
        }
    }
    let full_panels = w.n / NR;
    let cols = |p: usize| p * NR;
    let panels: Vec<Panel> = (p0..p1.min(full_panels)).map(|p| Panel { col: cols(p), dst: c.add(cols(p)), ld: ldc }).collect();
    project_kouter(isa, m, a, lda, w, &panels);
    project_panels(isa, m, a, lda, w, p0.max(full_panels), p1, c, ldc);
}

/// Columns before the first 64-byte boundary of every weight row, when the rows are not aligned
/// to one but all start at the same offset from one (the row stride a multiple of 64 bytes, as
/// in every hidden size that is a multiple of 16). numpy puts large arrays 16 bytes past a page
/// boundary, so each 32-column panel row read in place spans three cache lines and half of the
/// vector loads straddle two; shifting the panels to start on a line boundary made the k-group
/// order ~1.4x faster at K=768, N=2304, 8 and 16 rows (docs/kernels.md).
fn misaligned_columns(w: &WeightsRef<'_>) -> Option<usize> {
    let offset = w.data.as_ptr() as usize % 64;
    let shift = (64 - offset) % 64 / 4;
    let aligned_rows = (4 * w.n).is_multiple_of(64);
    let on = std::env::var_os(ALIGN_ENV).is_none_or(|v| v != "0");
    (on && offset.is_multiple_of(4) && shift > 0 && aligned_rows && w.n >= NR + shift).then_some(shift)
}

/// Full panels of row-major weights whose columns start at `shift` (so each panel row starts on a
/// cache line), k-outer order; the columns before `shift` and after the last full panel come from
/// two 32-column windows read in place at the matrix's edges (columns `[0, 32)` and `[n - 32, n)`,
/// inside every row) into small tiles, of which only those columns are kept.
#[allow(clippy::too_many_arguments)]
unsafe fn project_kouter_shifted(isa: Isa, m: usize, a: &[f32], lda: usize, w: &WeightsRef<'_>, shift: usize, c: SendPtr, ldc: usize) {
    let n = w.n;
    let full = (n - shift) / NR;
    let tail = n - shift - full * NR;
    let mut lead_tile = [0.0f32; KOUTER_MAX_ROWS * NR];
    let mut tail_tile = [0.0f32; KOUTER_MAX_ROWS * NR];
    let mut panels: Vec<Panel> = (0..full).map(|p| Panel { col: shift + p * NR, dst: c.add(shift + p * NR), ld: ldc }).collect();
    panels.push(Panel { col: 0, dst: lead_tile.as_mut_ptr(), ld: NR });
    if tail > 0 {
        panels.push(Panel { col: n - NR, dst: tail_tile.as_mut_ptr(), ld: NR });
    }
    project_kouter(isa, m, a, lda, w, &panels);
    for r in 0..m {
        std::ptr::copy_nonoverlapping(lead_tile.as_ptr().add(r * NR), c.add(r * ldc), shift);
        std::ptr::copy_nonoverlapping(tail_tile.as_ptr().add(r * NR + NR - tail), c.add(r * ldc + n - tail), tail);
    }
}

/// One 32-column panel of the k-outer order: weight (and bias) columns from `col`, results to
/// `dst` with row stride `ld`.
#[derive(Clone, Copy)]
struct Panel {
    col: usize,
    dst: *mut f32,
    ld: usize,
}

/// Full panels of row-major weights, k-outer order: k-group by k-group, every panel's tile of C
/// read and written once per group (the first group starts from the bias).
unsafe fn project_kouter(isa: Isa, m: usize, a: &[f32], lda: usize, w: &WeightsRef<'_>, panels: &[Panel]) {
    if panels.is_empty() {
        return;
    }
    debug_assert!(m <= KOUTER_MAX_ROWS && panels.iter().all(|p| p.col + NR <= w.n));
    let (k, ldb) = (w.k, w.n);
    let b = w.data.as_ptr();
    let bias: *const f32 = w.bias.map_or(std::ptr::null(), |x| x.as_ptr());
    let a = a.as_ptr();
    dispatch!(isa, |S| (m: usize, k: usize, a: *const f32, lda: usize, b: *const f32, ldb: usize, bias: *const f32, panels: &[Panel]) {
        match (S::LANES, S::GEMM_MR) {
            (16, 12) => kouter::<S, 12, 2>(m, k, a, lda, b, ldb, bias, panels),
            (8, 3) => kouter::<S, 3, 4>(m, k, a, lda, b, ldb, bias, panels),
            (4, 3) => kouter::<S, 3, 8>(m, k, a, lda, b, ldb, bias, panels),
            _ => kouter::<S, 2, { NR / 8 }>(m, k, a, lda, b, ldb, bias, panels),
        }
    });
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn kouter<S: super::simd::Simd, const MR: usize, const NV: usize>(m: usize, k: usize, a: *const f32, lda: usize, b: *const f32, ldb: usize, bias: *const f32, panels: &[Panel]) {
    let ahead = if 4 * k * ldb >= PREFETCH_MIN_BYTES { PREFETCH_PANELS * NR } else { 0 };
    let mut k0 = 0;
    while k0 < k {
        let kg = KGROUP.min(k - k0);
        let first = k0 == 0;
        for panel in panels {
            if ahead > 0 {
                // The group's rows two panels on: each row's part crosses a 4 KiB page every 32
                // panels, where the hardware prefetcher stops. (A prefetch never faults.)
                let next = b.wrapping_add(k0 * ldb + panel.col + ahead);
                for r in 0..kg {
                    prefetch(next.wrapping_add(r * ldb));
                    prefetch(next.wrapping_add(r * ldb + 16));
                }
            }
            let bias_p = if bias.is_null() || !first { std::ptr::null() } else { bias.add(panel.col) };
            let mut r0 = 0;
            while r0 < m {
                let rows = MR.min(m - r0);
                let (a_r, b_k, c_r) = (a.add(r0 * lda + k0), b.add(k0 * ldb + panel.col), panel.dst.add(r0 * panel.ld));
                macro_rules! rows_case {
                    ($($r:literal)*) => {
                        match rows {
                            $($r if $r <= MR => micro::<S, $r, NV>(kg, a_r, lda, b_k, ldb, bias_p, !first, false, c_r, panel.ld),)*
                            _ => unreachable!(),
                        }
                    };
                }
                rows_case!(1 2 3 4 5 6 7 8 9 10 11 12);
                r0 += rows;
            }
        }
        k0 += kg;
    }
}
