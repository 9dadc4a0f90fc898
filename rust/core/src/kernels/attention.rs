//! Multi-head attention, FlashAttention-style: query and key blocks, online softmax, vectorized `exp`; Q, K and V read in place from strided row views, memory independent of S².
//!
//! Work is split into items of (batch, head, range of `BQ`-row query blocks), run in parallel;
//! a head is split only when there are too few heads for the threads. Each item first copies its
//! head's K, transposed block by block to `[d, NV·LANES]`, and V, zero-padded, into per-thread
//! scratch (linear in S); a key block is `NV = ATTN_VECS` vectors wide (4 on AVX-512 and NEON, 2
//! on AVX2, whose 16 registers hold no more), fewer for short sequences. Then, for each query
//! block, key block and group of `ROW_GROUP` (4) query rows, it computes the `4 × NV·LANES`
//! score tile, masks it with vector selects, folds it into the running max, sum and output of each
//! row (online softmax), and finally divides by the sum. Nothing is `S × S`.

use super::gemm::SendPtr;
use super::par::Par;
use super::simd::{dispatch, Isa, Simd};
use std::cell::RefCell;

/// Query rows per work item.
const BQ: usize = 64;
/// Query rows that go through scores, softmax and `P·V` together, while their key block is in L1.
const ROW_GROUP: usize = 4;
/// Largest key block (`ATTN_VECS` vectors of the widest path).
const BC_MAX: usize = 64;
/// Score given to a masked key, as in RLX: a fully masked row comes out uniform, not NaN.
pub const MASKED_SCORE: f32 = -1.0e9;

/// Rows of a `[B, S, ·]` buffer: element `(b, s, col)` is at
/// `offset + b·batch_stride + s·row_stride + col`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RowsView<'a> {
    pub data: &'a [f32],
    pub offset: usize,
    pub row_stride: usize,
    pub batch_stride: usize,
}

impl RowsView<'_> {
    /// Whether `batch × seq` rows of `width` columns lie inside `data`.
    fn covers(&self, batch: usize, seq: usize, width: usize) -> bool {
        batch == 0
            || seq == 0
            || width == 0
            || (self.offset + (batch - 1) * self.batch_stride + (seq - 1) * self.row_stride + width) <= self.data.len()
    }
}

/// Which keys each query may see.
#[derive(Clone, Copy, Debug)]
pub enum MaskRef<'a> {
    /// Every key.
    None,
    /// A keep mask `[B, S_k]`: key `k` of batch `b` is masked where `mask[b, k] < 0.5`.
    Keep(&'a [f32]),
    /// Key `k` is masked for query `q` when `k > q`; optionally also by a keep mask `[B, S_k]`.
    Causal(Option<&'a [f32]>),
}

impl<'a> MaskRef<'a> {
    fn keep(&self) -> Option<&'a [f32]> {
        match *self {
            MaskRef::None | MaskRef::Causal(None) => None,
            MaskRef::Keep(m) | MaskRef::Causal(Some(m)) => Some(m),
        }
    }
}

/// Sizes of one attention call.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AttnShape {
    pub batch: usize,
    pub seq_q: usize,
    pub seq_k: usize,
    pub num_heads: usize,
    pub head_dim: usize,
}

/// Per-thread scratch of one work item.
#[derive(Default)]
struct ItemScratch {
    kt: Vec<f32>,
    vb: Vec<f32>,
    scores: Vec<f32>,
    acc: Vec<f32>,
    row_max: Vec<f32>,
    row_sum: Vec<f32>,
    block_keep: Vec<f32>,
    block_pad: Vec<f32>,
}

thread_local! {
    static ITEM_SCRATCH: RefCell<ItemScratch> = RefCell::new(ItemScratch::default());
}

/// `out[b, s, h·d..] = softmax(mask(scale · q_h k_hᵀ)) v_h` for every batch, query row and head.
///
/// `out` holds `batch × seq_q` rows of stride `out_row_stride`; head `h` writes columns
/// `[h·d, (h+1)·d)`. Panics (never reads out of bounds) if a view or the mask is too short.
#[allow(clippy::too_many_arguments)]
pub(crate) fn attention(
    isa: Isa,
    par: &Par,
    shape: AttnShape,
    q: RowsView<'_>,
    k: RowsView<'_>,
    v: RowsView<'_>,
    mask: MaskRef<'_>,
    scale: f32,
    out: &mut [f32],
    out_row_stride: usize,
) {
    let AttnShape { batch, seq_q, seq_k, num_heads, head_dim } = shape;
    let width = num_heads * head_dim;
    if batch == 0 || seq_q == 0 || width == 0 {
        return;
    }
    assert!(q.covers(batch, seq_q, width) && k.covers(batch, seq_k, width) && v.covers(batch, seq_k, width), "attention view out of bounds");
    assert!(out_row_stride >= width && out.len() >= (batch * seq_q - 1) * out_row_stride + width, "attention output too short");
    if let Some(m) = mask.keep() {
        assert!(m.len() >= batch * seq_k, "mask too short");
    }
    if let MaskRef::Causal(_) = mask {
        assert_eq!(seq_q, seq_k, "causal attention needs seq_q == seq_k");
    }
    let q_blocks = seq_q.div_ceil(BQ);
    // Each item packs K and V of its head once, so prefer whole heads; split the query blocks
    // only when there are too few heads to keep every thread busy.
    let heads_total = batch * num_heads;
    let chunks = if par.parallel { (2 * par.threads).div_ceil(heads_total).clamp(1, q_blocks) } else { 1 };
    let n_items = heads_total * chunks;
    let out_ptr = SendPtr(out.as_mut_ptr());
    // Each thread on its own stretch of items, so neighbouring heads (whose output columns can
    // share a cache line) are not written by two threads at once.
    par.for_each_spread(n_items, |item| {
        let chunk = item % chunks;
        let h = (item / chunks) % num_heads;
        let b = item / (chunks * num_heads);
        let (qb0, qb1) = (chunk * q_blocks / chunks, (chunk + 1) * q_blocks / chunks);
        let job = Item { shape, b, h, qb0, qb1, q, k, v, mask, scale, out: out_ptr, out_row_stride };
        ITEM_SCRATCH.with(|cell| match cell.try_borrow_mut() {
            Ok(mut scratch) => job.run(isa, &mut scratch),
            Err(_) => job.run(isa, &mut ItemScratch::default()),
        });
    });
}

/// One (batch, head, range of query blocks) of an attention call.
#[derive(Clone, Copy)]
struct Item<'a> {
    shape: AttnShape,
    b: usize,
    h: usize,
    qb0: usize,
    qb1: usize,
    q: RowsView<'a>,
    k: RowsView<'a>,
    v: RowsView<'a>,
    mask: MaskRef<'a>,
    scale: f32,
    out: SendPtr,
    out_row_stride: usize,
}

impl Item<'_> {
    fn run(&self, isa: Isa, scratch: &mut ItemScratch) {
        let d = self.shape.head_dim;
        let d_pad = d.div_ceil(16) * 16;
        let k_pad = self.shape.seq_k.div_ceil(BC_MAX) * BC_MAX;
        let grow = |buf: &mut Vec<f32>, len: usize| {
            if buf.len() < len {
                buf.resize(len, 0.0);
            }
        };
        grow(&mut scratch.kt, d * k_pad);
        grow(&mut scratch.vb, k_pad * d_pad);
        grow(&mut scratch.scores, ROW_GROUP * BC_MAX);
        grow(&mut scratch.acc, BQ * d_pad);
        grow(&mut scratch.row_max, BQ);
        grow(&mut scratch.row_sum, BQ);
        grow(&mut scratch.block_keep, k_pad);
        grow(&mut scratch.block_pad, k_pad);
        let item = *self;
        let scratch: *mut ItemScratch = scratch;
        dispatch!(isa, |S| (item: Item<'_>, scratch: *mut ItemScratch) {
            item.run_simd::<S>(&mut *scratch)
        });
    }

    /// The whole item on one SIMD path, with key blocks of `NV` vectors: `S::ATTN_VECS`, or fewer
    /// when the sequence is short (at 8 keys a 64-key block would be mostly padding).
    #[inline(always)]
    unsafe fn run_simd<S: Simd>(&self, sc: &mut ItemScratch) {
        match self.shape.seq_k.div_ceil(S::LANES).min(S::ATTN_VECS) {
            0 | 1 => self.run_blocks::<S, 1>(sc),
            2 => self.run_blocks::<S, 2>(sc),
            3 => self.run_blocks::<S, 3>(sc),
            _ => self.run_blocks::<S, 4>(sc),
        }
    }

    #[inline(always)]
    unsafe fn run_blocks<S: Simd, const NV: usize>(&self, sc: &mut ItemScratch) {
        let AttnShape { seq_q, seq_k, head_dim: d, .. } = self.shape;
        let lanes = S::LANES;
        let bc = NV * lanes; // keys per block: NV vectors of scores per row
        let d_vecs = d.div_ceil(lanes);
        let d_pad = d_vecs * lanes;
        let col = self.h * d;
        let k_base = self.k.offset + self.b * self.k.batch_stride + col;
        let v_base = self.v.offset + self.b * self.v.batch_stride + col;
        let keep = self.mask.keep().map(|m| &m[self.b * seq_k..(self.b + 1) * seq_k]);
        let causal = matches!(self.mask, MaskRef::Causal(_));
        let k_blocks = seq_k.div_ceil(bc);

        // The head's K, transposed block by block to [d, bc], and V as [keys, d_pad], both
        // zero-padded; per key, keep flag (1 keep, 0 masked) and padding flag (1 = not a key).
        for kb in 0..k_blocks {
            let kt = &mut sc.kt[kb * d * bc..(kb + 1) * d * bc];
            let real = bc.min(seq_k - kb * bc);
            if real < bc {
                kt.fill(0.0);
            }
            // Row dd of the block holds element dd of each key: written in order, read across
            // the keys' rows (which stay in L1 for the whole block).
            let key0 = kb * bc;
            for (dd, kt_row) in kt.chunks_exact_mut(bc).enumerate() {
                for (j, x) in kt_row[..real].iter_mut().enumerate() {
                    *x = self.k.data[k_base + (key0 + j) * self.k.row_stride + dd];
                }
            }
            for j in 0..bc {
                let key = key0 + j;
                if j < real {
                    let vrow = &self.v.data[v_base + key * self.v.row_stride..][..d];
                    sc.vb[key * d_pad..key * d_pad + d].copy_from_slice(vrow);
                    sc.vb[key * d_pad + d..(key + 1) * d_pad].fill(0.0);
                }
                sc.block_keep[key] = match keep {
                    Some(keep) if j < real => keep[key],
                    _ => 1.0,
                };
                sc.block_pad[key] = if j < real { 0.0 } else { 1.0 };
            }
        }
        for qb in self.qb0..self.qb1 {
            let q0 = qb * BQ;
            let rows = BQ.min(seq_q - q0);
            self.query_block::<S, NV>(sc, q0, rows, d_vecs, d_pad, k_blocks, keep.is_some(), causal);
        }
    }

    /// Rows `[q0, q0 + rows)` against every key block, then normalized into `out`.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn query_block<S: Simd, const NV: usize>(&self, sc: &mut ItemScratch, q0: usize, rows: usize, d_vecs: usize, d_pad: usize, k_blocks: usize, has_keep: bool, causal: bool) {
        let AttnShape { seq_q, seq_k, head_dim: d, .. } = self.shape;
        let lanes = S::LANES;
        let bc = NV * lanes;
        let col = self.h * d;
        let q_base = self.q.offset + self.b * self.q.batch_stride + q0 * self.q.row_stride + col;
        sc.row_max[..rows].fill(f32::NEG_INFINITY);
        sc.row_sum[..rows].fill(0.0);
        sc.acc[..rows * d_pad].fill(0.0);
        for kb in 0..k_blocks {
            let k0 = kb * bc;
            let nk = bc.min(seq_k - k0);
            let kt_ptr = sc.kt[kb * d * bc..].as_ptr();
            let vb_off = k0 * d_pad;
            let (kp, pp) = (sc.block_keep[k0..].as_ptr(), sc.block_pad[k0..].as_ptr());
            // ROW_GROUP query rows at a time (while the key block stays in L1): scores, then the
            // online-softmax update of each row, then acc += P · V.
            let mut r0 = 0;
            while r0 < rows {
                let take = if rows - r0 >= ROW_GROUP { ROW_GROUP } else { 1 };
                let qp = self.q.data[q_base + r0 * self.q.row_stride..].as_ptr();
                let sp = sc.scores.as_mut_ptr();
                if take == ROW_GROUP {
                    score_rows::<S, ROW_GROUP, NV>(qp, self.q.row_stride, kt_ptr, bc, d, self.scale, sp);
                } else {
                    score_rows::<S, 1, NV>(qp, self.q.row_stride, kt_ptr, bc, d, self.scale, sp);
                }
                // Causal masks, then the online-softmax update of every row.
                if causal {
                    for r in r0..r0 + take {
                        let qpos = q0 + r;
                        if k0 + nk > qpos + 1 {
                            let srow = &mut sc.scores[(r - r0) * bc..(r - r0) * bc + nk];
                            for (j, s) in srow.iter_mut().enumerate() {
                                if k0 + j > qpos {
                                    *s = MASKED_SCORE;
                                }
                            }
                        }
                    }
                }
                let (sp, mp, sump, ap) = (sc.scores.as_mut_ptr(), sc.row_max[r0..].as_mut_ptr(), sc.row_sum[r0..].as_mut_ptr(), sc.acc[r0 * d_pad..].as_mut_ptr());
                let keep_pad = (has_keep.then_some(kp), (nk < bc).then_some(pp));
                if take == ROW_GROUP {
                    softmax_rows::<S, ROW_GROUP, NV>(sp, keep_pad, mp, sump, ap, d_pad, d_vecs);
                } else {
                    softmax_rows::<S, 1, NV>(sp, keep_pad, mp, sump, ap, d_pad, d_vecs);
                }
                // acc += P · V for these rows, head_dim ATTN_VECS vectors at a time.
                let mut c0 = 0;
                while c0 < d_vecs {
                    let g = S::ATTN_VECS.min(d_vecs - c0);
                    let pp = sc.scores.as_ptr();
                    let vp = sc.vb[vb_off + c0 * lanes..].as_ptr();
                    let ap = sc.acc[r0 * d_pad + c0 * lanes..].as_mut_ptr();
                    macro_rules! pv {
                        ($R:expr) => {
                            match g {
                                4 => pv_rows::<S, $R, 4>(pp, bc, vp, d_pad, nk, ap, d_pad),
                                3 => pv_rows::<S, $R, 3>(pp, bc, vp, d_pad, nk, ap, d_pad),
                                2 => pv_rows::<S, $R, 2>(pp, bc, vp, d_pad, nk, ap, d_pad),
                                _ => pv_rows::<S, $R, 1>(pp, bc, vp, d_pad, nk, ap, d_pad),
                            }
                        };
                    }
                    if take == ROW_GROUP {
                        pv!(ROW_GROUP)
                    } else {
                        pv!(1)
                    }
                    c0 += g;
                }
                r0 += take;
            }
        }
        // Normalize and write out.
        for r in 0..rows {
            let inv = S::splat(1.0 / sc.row_sum[r]);
            let ap = sc.acc[r * d_pad..].as_ptr();
            let op = self.out.add((self.b * seq_q + q0 + r) * self.out_row_stride + col);
            for c in 0..d_vecs {
                let x = S::mul(S::load(ap.add(c * lanes)), inv);
                let n = d - c * lanes;
                if n >= lanes {
                    S::store(op.add(c * lanes), x);
                } else {
                    S::store_partial(op.add(c * lanes), x, n);
                }
            }
        }
    }
}

/// Online-softmax update of `R` rows of scores `s` (stride `NV·LANES`) against one key block:
/// masks (`keep[j] < 0.5`: masked score; `pad[j] >= 0.5`: not a key), each row's new max, its
/// scores replaced by `exp(score - max)`, its running sum and output accumulator rescaled. The
/// rows go through each step together, so their reductions and `exp`s overlap.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn softmax_rows<S: Simd, const R: usize, const NV: usize>(
    s: *mut f32,
    (keep, pad): (Option<*const f32>, Option<*const f32>),
    row_max: *mut f32,
    row_sum: *mut f32,
    acc: *mut f32,
    acc_stride: usize,
    d_vecs: usize,
) {
    let lanes = S::LANES;
    let bc = NV * lanes;
    let (half, masked, neg_inf) = (S::splat(0.5), S::splat(MASKED_SCORE), S::splat(f32::NEG_INFINITY));
    let mut x = [[neg_inf; NV]; R];
    let mut new_max = [0.0f32; R];
    for (r, xr) in x.iter_mut().enumerate() {
        let mut vmax = neg_inf;
        for (c, xc) in xr.iter_mut().enumerate() {
            *xc = S::load(s.add(r * bc + c * lanes));
            if let Some(kp) = keep {
                *xc = S::select_lt(S::load(kp.add(c * lanes)), half, masked, *xc);
            }
            if let Some(pp) = pad {
                *xc = S::select_lt(S::load(pp.add(c * lanes)), half, *xc, neg_inf);
            }
            vmax = S::max(vmax, *xc);
        }
        new_max[r] = max_keep_nan(*row_max.add(r), S::hmax(vmax));
    }
    let mut vsum = [S::zero(); R];
    for (r, xr) in x.iter().enumerate() {
        let m = S::splat(new_max[r]);
        for (c, xc) in xr.iter().enumerate() {
            let p = S::exp(S::sub(*xc, m));
            S::store(s.add(r * bc + c * lanes), p);
            vsum[r] = S::add(vsum[r], p);
        }
    }
    for r in 0..R {
        let old_max = *row_max.add(r);
        // (Skips the exp when the max did not move; NaN rows still go through it.)
        let correction = if old_max == new_max[r] { 1.0 } else { exp_scalar(old_max - new_max[r]) };
        *row_max.add(r) = new_max[r];
        *row_sum.add(r) = *row_sum.add(r) * correction + S::hsum(vsum[r]);
        if correction != 1.0 {
            let cv = S::splat(correction);
            let ap = acc.add(r * acc_stride);
            for c in 0..d_vecs {
                S::store(ap.add(c * lanes), S::mul(S::load(ap.add(c * lanes)), cv));
            }
        }
    }
}

/// `max` that keeps a NaN from either side (a NaN score makes its row NaN, as in numpy).
#[inline(always)]
fn max_keep_nan(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() {
        f32::NAN
    } else {
        a.max(b)
    }
}

/// Scalar `exp` for the per-row correction factor; `exp(-inf) = 0`.
#[inline(always)]
fn exp_scalar(x: f32) -> f32 {
    x.exp()
}

/// Scores of `R` query rows against one key block of `NV` vectors: `s[r][j] = scale · Σ_d q[r][d] · kt[d][j]`.
#[inline(always)]
unsafe fn score_rows<S: Simd, const R: usize, const NV: usize>(q: *const f32, q_stride: usize, kt: *const f32, bc: usize, d: usize, scale: f32, s: *mut f32) {
    let lanes = S::LANES;
    let mut acc = [[S::zero(); NV]; R];
    for dd in 0..d {
        let kp = kt.add(dd * bc);
        let mut kv = [S::zero(); NV];
        for (c, x) in kv.iter_mut().enumerate() {
            *x = S::load(kp.add(c * lanes));
        }
        for (r, row) in acc.iter_mut().enumerate() {
            let qv = S::splat(*q.add(r * q_stride + dd));
            for c in 0..NV {
                row[c] = S::fmadd(qv, kv[c], row[c]);
            }
        }
    }
    let sv = S::splat(scale);
    for (r, row) in acc.iter().enumerate() {
        for (c, x) in row.iter().enumerate() {
            S::store(s.add(r * bc + c * lanes), S::mul(*x, sv));
        }
    }
}

/// `acc[r][0..G·LANES] += Σ_{j<nk} p[r][j] · v[j][0..G·LANES]` for `R` rows.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn pv_rows<S: Simd, const R: usize, const G: usize>(
    p: *const f32,
    p_stride: usize,
    v: *const f32,
    v_stride: usize,
    nk: usize,
    acc: *mut f32,
    acc_stride: usize,
) {
    let lanes = S::LANES;
    let mut a = [[S::zero(); G]; R];
    for (r, row) in a.iter_mut().enumerate() {
        for (c, x) in row.iter_mut().enumerate() {
            *x = S::load(acc.add(r * acc_stride + c * lanes));
        }
    }
    for j in 0..nk {
        let vp = v.add(j * v_stride);
        let mut vv = [S::zero(); G];
        for (c, x) in vv.iter_mut().enumerate() {
            *x = S::load(vp.add(c * lanes));
        }
        for (r, row) in a.iter_mut().enumerate() {
            let pj = S::splat(*p.add(r * p_stride + j));
            for c in 0..G {
                row[c] = S::fmadd(pj, vv[c], row[c]);
            }
        }
    }
    for (r, row) in a.iter().enumerate() {
        for (c, x) in row.iter().enumerate() {
            S::store(acc.add(r * acc_stride + c * lanes), *x);
        }
    }
}
