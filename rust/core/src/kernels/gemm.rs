//! Projections `C = A·B + bias`: a register-blocked SIMD micro-kernel over 32-column weight panels, read in place from row-major `[K, N]` weights or from weights packed once into contiguous panels.
//!
//! In the regime the fused block targets (few rows, B·S ≤ 64) a projection reads every weight once
//! and does only `2·M` flops per weight, so it is bound by cache bandwidth (M of a few rows) or by
//! the FMA units: the kernel streams each packed panel exactly once, with an `MR × 32` tile of
//! accumulators in registers and the rows of A broadcast from L1 (with many rows, once per group
//! of rows that stays in L2). Threads split the panels: one (row group, panel) per task for packed
//! weights, numbered so that every thread streams its own contiguous stretch; contiguous ranges of
//! panels for row-major weights.

use super::gemm_rows::{project_ksplit, project_rows, KOUTER_MAX_ROWS};
pub(crate) use super::gemm_rows::projection_phases;
use super::par::Par;
use super::simd::{dispatch, prefetch, Isa};

/// Width in floats of one weight panel, the same on every SIMD path so a packed matrix works with
/// any of them.
pub const NR: usize = 32;

/// Weight rows ahead of the current one whose panel row the micro-kernel prefetches when it
/// streams packed panels (4 KiB ahead): the hardware prefetcher stops at every 4 KiB page, and
/// on a mesh-L3 Xeon (Emerald Rapids) an 8-row projection then waits on L3 latency; prefetching
/// made K=768, N=2304 at 8 rows 1.10× (quiet machine) to 1.30× (contended L3) faster there (see
/// docs/kernels.md).
const PREFETCH_ROWS: usize = 32;

/// Fewest rows of a tile that prefetches. A tile of 1–3 rows does little work per panel row and is
/// bound by streaming the weights, which the hardware prefetcher then serves better alone: on
/// AMD Zen 4, prefetching made M = 1 and 2 1.2× slower (and gained nothing at M = 1 on Emerald
/// Rapids).
const PREFETCH_MIN_ROWS: usize = 4;

/// Rows of A that one pass over the packed panels covers. With more rows, a projection walks the
/// panels once per group of rows, so that the group's rows of A (576 KiB at K = 768) stay in L2
/// while every panel passes over them, instead of all of A (3 MiB at M = 1024) being streamed
/// once per panel: 1.1× faster at M = 1024 on Emerald Rapids, the same at M ≤ 192 (one group).
const GROUP_ROWS: usize = 192;

/// Sixteen floats aligned to a 64-byte cache line (one AVX-512 vector).
#[derive(Clone, Copy, Debug)]
#[repr(C, align(64))]
struct CacheLine([f32; 16]);

/// A float buffer that starts on a cache-line boundary, so that no vector load of a panel row
/// straddles two cache lines (a plain `Vec<f32>` of this size starts 16 bytes past a page).
#[derive(Clone, Debug, Default)]
pub(crate) struct AlignedFloats {
    lines: Vec<CacheLine>,
    len: usize,
}

impl AlignedFloats {
    pub fn zeroed(len: usize) -> Self {
        AlignedFloats { lines: vec![CacheLine([0.0; 16]); len.div_ceil(16)], len }
    }

    /// Grows the buffer to at least `len` floats (new floats are zero).
    pub fn grow(&mut self, len: usize) {
        if len > self.len {
            self.lines.resize(len.div_ceil(16), CacheLine([0.0; 16]));
            self.len = len;
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn as_slice(&self) -> &[f32] {
        // SAFETY: `CacheLine` is `repr(C)` over `[f32; 16]` with size 64, so the lines are
        // `16 * lines.len() >= len` contiguous, initialised floats.
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr().cast::<f32>(), self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [f32] {
        // SAFETY: as in `as_slice`, and `&mut self` makes the borrow unique.
        unsafe { std::slice::from_raw_parts_mut(self.lines.as_mut_ptr().cast::<f32>(), self.len) }
    }
}

/// Weights `[K, N]` packed once into `ceil(N / NR)` panels, each `K × NR` contiguous and
/// zero-padded on the right, plus the bias padded to the same width. The panels start on a cache
/// line, and each panel row is two whole cache lines.
#[derive(Clone, Debug)]
pub struct PackedWeights {
    k: usize,
    n: usize,
    panels: AlignedFloats,
    bias: Option<Vec<f32>>,
}

impl PackedWeights {
    /// Packs row-major `[k, n]` weights; columns `[0, scaled_cols)` of the weights and bias are
    /// multiplied by `scale` (used to fold the attention score scale into the Q projection).
    pub fn pack(weights: &[f32], bias: Option<&[f32]>, k: usize, n: usize, scaled_cols: usize, scale: f32) -> Self {
        assert_eq!(weights.len(), k * n, "weights length must be k*n");
        let n_panels = n.div_ceil(NR);
        let mut panels = AlignedFloats::zeroed(n_panels * k * NR);
        for p in 0..n_panels {
            let col0 = p * NR;
            let width = NR.min(n - col0);
            let dst = &mut panels.as_mut_slice()[p * k * NR..(p + 1) * k * NR];
            for row in 0..k {
                let src = &weights[row * n + col0..row * n + col0 + width];
                for (j, &x) in src.iter().enumerate() {
                    dst[row * NR + j] = if col0 + j < scaled_cols { x * scale } else { x };
                }
            }
        }
        let bias = bias.map(|b| {
            assert_eq!(b.len(), n, "bias length must be n");
            let mut padded = vec![0.0f32; n_panels * NR];
            for (j, &x) in b.iter().enumerate() {
                padded[j] = if j < scaled_cols { x * scale } else { x };
            }
            padded
        });
        PackedWeights { k, n, panels, bias }
    }

    pub fn k(&self) -> usize {
        self.k
    }

    pub fn n(&self) -> usize {
        self.n
    }

    /// Bytes held by the packed panels and bias.
    pub fn nbytes(&self) -> usize {
        4 * (self.panels.len() + self.bias.as_ref().map_or(0, Vec::len))
    }

    pub(crate) fn as_ref(&self) -> WeightsRef<'_> {
        WeightsRef { k: self.k, n: self.n, data: self.panels.as_slice(), packed: true, bias: self.bias.as_deref() }
    }
}

/// A weight matrix as the kernel reads it: row-major `[k, n]`, or packed panels; with an optional
/// bias of length `n` (row-major) or padded to whole panels (packed).
#[derive(Clone, Copy, Debug)]
pub(crate) struct WeightsRef<'a> {
    pub k: usize,
    pub n: usize,
    pub data: &'a [f32],
    pub packed: bool,
    pub bias: Option<&'a [f32]>,
}

impl<'a> WeightsRef<'a> {
    pub fn row_major(data: &'a [f32], bias: Option<&'a [f32]>, k: usize, n: usize) -> Self {
        debug_assert_eq!(data.len(), k * n);
        WeightsRef { k, n, data, packed: false, bias }
    }

    /// Rows `[r0, r1)` of row-major weights, with the bias only when `r0 == 0`.
    pub fn rows(&self, r0: usize, r1: usize) -> Self {
        debug_assert!(!self.packed && r0 <= r1 && r1 <= self.k);
        WeightsRef { k: r1 - r0, n: self.n, data: &self.data[r0 * self.n..r1 * self.n], packed: false, bias: if r0 == 0 { self.bias } else { None } }
    }

    pub fn n_panels(&self) -> usize {
        self.n.div_ceil(NR)
    }

    /// Start of panel `p` and the row stride within it.
    fn panel(&self, p: usize) -> (*const f32, usize) {
        if self.packed {
            (self.data[p * self.k * NR..].as_ptr(), NR)
        } else {
            (self.data[p * NR..].as_ptr(), self.n)
        }
    }
}

/// Raw pointer that may cross threads; each task writes a disjoint set of elements.
#[derive(Clone, Copy)]
pub(crate) struct SendPtr(pub *mut f32);
unsafe impl Send for SendPtr {}
unsafe impl Sync for SendPtr {}

impl SendPtr {
    /// `self + offset`; a method so closures capture the whole `Send` wrapper.
    ///
    /// # Safety
    /// The offset must stay inside the allocation.
    #[inline(always)]
    pub unsafe fn add(self, offset: usize) -> *mut f32 {
        self.0.add(offset)
    }
}

/// `c[m, n] = a[m, k] · w + bias`, rows of `a` and `c` strided by `lda` / `ldc`.
///
/// Checks every length up front, so the unsafe kernel below never reads or writes out of bounds.
pub(crate) fn project(isa: Isa, par: &Par, m: usize, a: &[f32], lda: usize, w: WeightsRef<'_>, c: &mut [f32], ldc: usize) {
    let (k, n) = (w.k, w.n);
    if m == 0 || n == 0 {
        return;
    }
    assert!(lda >= k && ldc >= n, "strides too small");
    assert!(a.len() >= (m - 1) * lda + k, "A too short");
    assert!(c.len() >= (m - 1) * ldc + n, "C too short");
    let n_panels = w.n_panels();
    if w.packed {
        assert_eq!(w.data.len(), n_panels * k * NR, "packed weights length");
        if let Some(b) = w.bias {
            assert_eq!(b.len(), n_panels * NR, "packed bias length");
        }
    } else {
        assert_eq!(w.data.len(), k * n, "weights length");
        if let Some(b) = w.bias {
            assert_eq!(b.len(), n, "bias length");
        }
    }
    let cptr = SendPtr(c.as_mut_ptr());
    if w.packed {
        // One task per (group of `GROUP_ROWS` rows, panel), each thread on its own stretch of
        // tasks (see `for_each_spread`): the threads end within one task of each other, each
        // streams its weights in order, and two threads never write adjacent panels of C at once
        // (they share a cache line of C when C is not 64-byte aligned).
        let groups = m.div_ceil(GROUP_ROWS);
        par.for_each_spread(groups * n_panels, |task| {
            let (g, p) = (task / n_panels, task % n_panels);
            let (r0, r1) = (g * GROUP_ROWS, ((g + 1) * GROUP_ROWS).min(m));
            // SAFETY: lengths checked above; tasks own disjoint blocks of C.
            unsafe { project_panels(isa, r1 - r0, &a[r0 * lda..], lda, &w, p, p + 1, SendPtr(cptr.add(r0 * ldc)), ldc) };
        });
        return;
    }
    if par.parallel && m <= KOUTER_MAX_ROWS {
        return project_ksplit(isa, par, m, a, lda, w, c, ldc);
    }
    // Row-major weights: contiguous panel ranges (read k-group by k-group across a range when
    // there are few rows), a few per thread so that claiming tasks in turn evens out the load.
    let n_tasks = if par.parallel { n_panels.min(par.threads * 4) } else { 1 };
    par.for_each(n_tasks, |task| {
        let p0 = task * n_panels / n_tasks;
        let p1 = (task + 1) * n_panels / n_tasks;
        // SAFETY: lengths checked above; tasks own disjoint column panels of C.
        unsafe { project_rows(isa, m, a, lda, &w, p0, p1, cptr, ldc) };
    });
}

/// Computes, for all rows, the columns of C under panels `[p0, p1)`.
///
/// Row-major weights are first copied, `PACK_GROUP` panels at a time, into a contiguous,
/// zero-padded buffer that stays in L2 while every row block uses it (each weight row is then read
/// as one contiguous run; a partial panel must be copied anyway, as read in place it would run
/// past the matrix).
///
/// # Safety
/// `a` holds `m` rows of stride `lda` with `w.k` columns, `c` `m` rows of stride `ldc` with the
/// panels' columns; no other thread writes those columns of C.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn project_panels(isa: Isa, m: usize, a: &[f32], lda: usize, w: &WeightsRef<'_>, p0: usize, p1: usize, c: SendPtr, ldc: usize) {
    let k = w.k;
    let mut buf = if w.packed { AlignedFloats::default() } else { PANEL_SCRATCH.with(|cell| cell.take()) };
    let mut g0 = p0;
    while g0 < p1 {
        let g1 = if w.packed { p1 } else { p1.min(g0 + PACK_GROUP) };
        if !w.packed {
            buf.grow(PACK_GROUP * k * NR);
            let buf = buf.as_mut_slice();
            pack_panels(w, g0, g1, buf);
        }
        for p in g0..g1 {
            let col0 = p * NR;
            let width = NR.min(w.n - col0);
            let (bptr, ldb) = if w.packed { w.panel(p) } else { (buf.as_slice()[(p - g0) * k * NR..].as_ptr(), NR) };
            let mut tail_bias = [0.0f32; NR];
            let mut bias_ptr: *const f32 = w.bias.map_or(std::ptr::null(), |b| b[col0..].as_ptr());
            if !w.packed && width < NR {
                if let Some(b) = w.bias {
                    tail_bias[..width].copy_from_slice(&b[col0..col0 + width]);
                    bias_ptr = tail_bias.as_ptr();
                }
            }
            let a = a.as_ptr();
            let c = c.add(col0);
            let stream = w.packed;
            dispatch!(isa, |S| (m: usize, k: usize, a: *const f32, lda: usize, bptr: *const f32, ldb: usize, bias_ptr: *const f32, stream: bool, c: *mut f32, ldc: usize, width: usize) {
                match (S::LANES, S::GEMM_MR) {
                    (16, 12) => panel_rows::<S, 12, 2>(m, k, a, lda, bptr, ldb, bias_ptr, stream, c, ldc, width),
                    (8, 3) => panel_rows::<S, 3, 4>(m, k, a, lda, bptr, ldb, bias_ptr, stream, c, ldc, width),
                    (4, 3) => panel_rows::<S, 3, 8>(m, k, a, lda, bptr, ldb, bias_ptr, stream, c, ldc, width),
                    _ => panel_rows::<S, 2, { NR / 8 }>(m, k, a, lda, bptr, ldb, bias_ptr, stream, c, ldc, width),
                }
            });
        }
        g0 = g1;
    }
    if !w.packed {
        PANEL_SCRATCH.with(|cell| cell.replace(buf));
    }
}

/// Weight rows ahead of the one being copied whose part the packing prefetches: each row's part
/// lies on its own 4 KiB page, where the hardware prefetcher does not follow.
const PACK_PREFETCH_ROWS: usize = 8;

/// Copies panels `[g0, g1)` of row-major weights into `buf` as `(g1 - g0) × k × NR` packed panels
/// (zero-padded past the last column). Full panels are copied as fixed-size rows (vector moves, no
/// call into `memcpy` per 32 floats), prefetching the rows ahead.
fn pack_panels(w: &WeightsRef<'_>, g0: usize, g1: usize, buf: &mut [f32]) {
    let (k, n) = (w.k, w.n);
    let (col0, col1) = (g0 * NR, (g1 * NR).min(n));
    for row in 0..k {
        if row + PACK_PREFETCH_ROWS < k {
            let ahead = &w.data[(row + PACK_PREFETCH_ROWS) * n + col0..(row + PACK_PREFETCH_ROWS) * n + col1];
            for line in (0..ahead.len()).step_by(16) {
                prefetch(ahead[line..].as_ptr());
            }
        }
        let src = &w.data[row * n + col0..row * n + col1];
        for (i, chunk) in src.chunks(NR).enumerate() {
            let dst = &mut buf[(i * k + row) * NR..(i * k + row + 1) * NR];
            match <&[f32; NR]>::try_from(chunk) {
                Ok(full) => <&mut [f32; NR]>::try_from(dst).expect("panel row of NR floats").copy_from_slice(full),
                Err(_) => {
                    dst[..chunk.len()].copy_from_slice(chunk);
                    dst[chunk.len()..].fill(0.0);
                }
            }
        }
    }
}

/// The most rows of any path's micro-kernel tile ([`super::simd::Simd::GEMM_MR`]).
const MAX_MR: usize = 12;

/// Panels of row-major weights packed together on the fly (contiguous reads of 4 × 128 bytes).
const PACK_GROUP: usize = 4;

thread_local! {
    /// Weight panels packed on the fly (PACK_GROUP × k × NR floats), reused between panels and calls.
    static PANEL_SCRATCH: std::cell::Cell<AlignedFloats> = std::cell::Cell::new(AlignedFloats::default());
}

/// All rows of one panel, `MR` rows at a time; a partial panel goes through a padded tile.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn panel_rows<S: super::simd::Simd, const MR: usize, const NV: usize>(
    m: usize,
    k: usize,
    a: *const f32,
    lda: usize,
    b: *const f32,
    ldb: usize,
    bias: *const f32,
    stream: bool,
    c: *mut f32,
    ldc: usize,
    width: usize,
) {
    debug_assert_eq!(NV * S::LANES, NR);
    let mut tile = [0.0f32; MAX_MR * NR];
    let mut r0 = 0;
    while r0 < m {
        let rows = MR.min(m - r0);
        let a_r = a.add(r0 * lda);
        let (dst, ld) = if width == NR { (c.add(r0 * ldc), ldc) } else { (tile.as_mut_ptr(), NR) };
        macro_rules! rows_case {
            ($($r:literal)*) => {
                match rows {
                    $($r if $r <= MR => micro::<S, $r, NV>(k, a_r, lda, b, ldb, bias, false, stream, dst, ld),)*
                    _ => unreachable!(),
                }
            };
        }
        rows_case!(1 2 3 4 5 6 7 8 9 10 11 12);
        if width < NR {
            for r in 0..rows {
                std::ptr::copy_nonoverlapping(tile.as_ptr().add(r * NR), c.add((r0 + r) * ldc), width);
            }
        }
        r0 += rows;
    }
}

/// `C[0..MR, 0..NV·LANES] = A[0..MR, 0..k] · B[0..k, panel] + init` with all accumulators in
/// registers; `init` is C itself when `accumulate`, else the bias (or zero when it is null).
/// `stream`: B is a packed panel read from far caches; prefetch it [`PREFETCH_ROWS`] rows ahead
/// (in tiles of at least [`PREFETCH_MIN_ROWS`] rows).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn micro<S: super::simd::Simd, const MR: usize, const NV: usize>(
    k: usize,
    a: *const f32,
    lda: usize,
    b: *const f32,
    ldb: usize,
    bias: *const f32,
    accumulate: bool,
    stream: bool,
    c: *mut f32,
    ldc: usize,
) {
    let mut acc = [[S::zero(); NV]; MR];
    if accumulate {
        for (r, row) in acc.iter_mut().enumerate() {
            for (v, x) in row.iter_mut().enumerate() {
                *x = S::load(c.add(r * ldc + v * S::LANES));
            }
        }
    } else if !bias.is_null() {
        for v in 0..NV {
            let bv = S::load(bias.add(v * S::LANES));
            for row in acc.iter_mut() {
                row[v] = bv;
            }
        }
    }
    for p in 0..k {
        let brow = b.add(p * ldb);
        if stream && MR >= PREFETCH_MIN_ROWS {
            // Addresses past the panel's end are fine: a prefetch never faults.
            let ahead = brow.wrapping_add(PREFETCH_ROWS * ldb);
            for line in (0..NV * S::LANES).step_by(16) {
                prefetch(ahead.wrapping_add(line));
            }
        }
        let mut bv = [S::zero(); NV];
        for (v, x) in bv.iter_mut().enumerate() {
            *x = S::load(brow.add(v * S::LANES));
        }
        for (r, row) in acc.iter_mut().enumerate() {
            let av = S::splat(*a.add(r * lda + p));
            for v in 0..NV {
                row[v] = S::fmadd(av, bv[v], row[v]);
            }
        }
    }
    for (r, row) in acc.iter().enumerate() {
        for (v, x) in row.iter().enumerate() {
            S::store(c.add(r * ldc + v * S::LANES), *x);
        }
    }
}
