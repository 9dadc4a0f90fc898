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

/// A `[B, H, Sq, Sk]` tensor of per-score values read through strides (0 broadcasts a dimension),
/// contiguous along the keys: element `(b, h, q, k)` is `data[b·batch_stride + h·head_stride + q·row_stride + k]`.
#[derive(Clone, Copy, Debug)]
pub struct ScoreTensor<'a> {
    pub data: &'a [f32],
    pub batch_stride: usize,
    pub head_stride: usize,
    pub row_stride: usize,
}

impl<'a> ScoreTensor<'a> {
    /// A `[B, Sk]` tensor: one value per key, the same for every head and query.
    pub fn per_key(data: &'a [f32], seq_k: usize) -> Self {
        ScoreTensor { data, batch_stride: seq_k, head_stride: 0, row_stride: 0 }
    }

    /// Whether the values depend on the key (and batch) only.
    fn is_per_key(&self) -> bool {
        self.head_stride == 0 && self.row_stride == 0
    }

    /// Whether every `(b, h, q, k)` of `[batch, heads, seq_q, seq_k]` lies inside `data`.
    pub fn covers(&self, batch: usize, heads: usize, seq_q: usize, seq_k: usize) -> bool {
        batch == 0
            || heads == 0
            || seq_q == 0
            || seq_k == 0
            || (batch - 1) * self.batch_stride + (heads - 1) * self.head_stride + (seq_q - 1) * self.row_stride + seq_k <= self.data.len()
    }

    /// Pointer to `(b, h, q, k0)`.
    #[inline(always)]
    unsafe fn at(&self, b: usize, h: usize, q: usize, k0: usize) -> *const f32 {
        self.data.as_ptr().add(b * self.batch_stride + h * self.head_stride + q * self.row_stride + k0)
    }
}

/// What a query row whose every key is masked gives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MaskedRows {
    /// RLX: a masked key scores −1e9, so a fully masked row is the plain mean of V.
    #[default]
    Uniform,
    /// PyTorch SDPA with a −inf fill and its NaN guard: a masked key scores −inf, and a row whose
    /// every score is −inf is zero.
    Zero,
}

impl MaskedRows {
    /// The score a masked key gets.
    pub fn masked_score(self) -> f32 {
        match self {
            MaskedRows::Uniform => MASKED_SCORE,
            MaskedRows::Zero => f32::NEG_INFINITY,
        }
    }
}

/// Which keys each query sees and what is added to its scores:
/// `s = scale·q·kᵀ + bias`, then `s = masked score` where `keep < 0.5` or causal hides the key.
#[derive(Clone, Copy, Debug, Default)]
pub struct Masking<'a> {
    /// Keep mask: key `k` is masked for `(b, h, q)` where the value is `< 0.5`.
    pub keep: Option<ScoreTensor<'a>>,
    /// Added to the scores (relative position bias, ALiBi, an additive −inf mask).
    pub bias: Option<ScoreTensor<'a>>,
    /// Key `j` is masked for query `i` when `j > i + Sk − Sq` (the queries are the last `Sq` positions).
    pub causal: bool,
    pub masked_rows: MaskedRows,
}

impl<'a> Masking<'a> {
    /// A `[B, Sk]` keep mask alone.
    pub fn keep_keys(mask: &'a [f32], seq_k: usize) -> Self {
        Masking { keep: Some(ScoreTensor::per_key(mask, seq_k)), ..Masking::default() }
    }

    /// The keep mask when it is per key (kept as per-key flags), else `None`.
    fn per_key_keep(&self) -> Option<ScoreTensor<'a>> {
        self.keep.filter(ScoreTensor::is_per_key)
    }

    /// The keep mask when it varies by head or query row.
    fn row_keep(&self) -> Option<ScoreTensor<'a>> {
        self.keep.filter(|t| !t.is_per_key())
    }
}

/// Sizes of one attention call; K and V have `kv_heads` heads (dividing `num_heads`: grouped-query
/// attention, each K/V head serving `num_heads / kv_heads` query heads).
#[derive(Clone, Copy, Debug)]
pub(crate) struct AttnShape {
    pub batch: usize,
    pub seq_q: usize,
    pub seq_k: usize,
    pub num_heads: usize,
    pub kv_heads: usize,
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

/// `out[b, s, h·d..] = softmax(mask(scale · q_h k_gᵀ + bias)) v_g` for every batch, query row and
/// head `h`, with `g = h / (num_heads / kv_heads)` its K/V head.
///
/// `out` holds `batch × seq_q` rows of stride `out_row_stride`; head `h` writes columns
/// `[h·d, (h+1)·d)`. Panics (never reads out of bounds) if a view, the mask or the bias is too short.
#[allow(clippy::too_many_arguments)]
pub(crate) fn attention(
    isa: Isa,
    par: &Par,
    shape: AttnShape,
    q: RowsView<'_>,
    k: RowsView<'_>,
    v: RowsView<'_>,
    mask: &Masking<'_>,
    scale: f32,
    out: &mut [f32],
    out_row_stride: usize,
) {
    let AttnShape { batch, seq_q, seq_k, num_heads, kv_heads, head_dim } = shape;
    let width = num_heads * head_dim;
    if batch == 0 || seq_q == 0 || width == 0 {
        return;
    }
    assert!(kv_heads > 0 && num_heads.is_multiple_of(kv_heads), "kv_heads must divide num_heads");
    let kv_width = kv_heads * head_dim;
    assert!(q.covers(batch, seq_q, width) && k.covers(batch, seq_k, kv_width) && v.covers(batch, seq_k, kv_width), "attention view out of bounds");
    assert!(out_row_stride >= width && out.len() >= (batch * seq_q - 1) * out_row_stride + width, "attention output too short");
    for t in [mask.keep, mask.bias].into_iter().flatten() {
        assert!(t.covers(batch, num_heads, seq_q, seq_k), "mask or bias too short");
    }
    let q_blocks = seq_q.div_ceil(BQ);
    let group = num_heads / kv_heads;
    // Units of work per K/V head: (query head of its group, query block). Each item packs K and V
    // of its K/V head once, so prefer whole K/V heads; split their units only when there are too
    // few to keep every thread busy.
    let units = group * q_blocks;
    let kv_total = batch * kv_heads;
    let chunks = if par.parallel { (2 * par.threads).div_ceil(kv_total).clamp(1, units) } else { 1 };
    let n_items = kv_total * chunks;
    let out_ptr = SendPtr(out.as_mut_ptr());
    let mask = *mask;
    // Each thread on its own stretch of items, so neighbouring heads (whose output columns can
    // share a cache line) are not written by two threads at once.
    par.for_each_spread(n_items, |item| {
        let chunk = item % chunks;
        let g = (item / chunks) % kv_heads;
        let b = item / (chunks * kv_heads);
        let (u0, u1) = (chunk * units / chunks, (chunk + 1) * units / chunks);
        let job = Item { shape, b, g, u0, u1, q, k, v, mask, scale, out: out_ptr, out_row_stride };
        ITEM_SCRATCH.with(|cell| match cell.try_borrow_mut() {
            Ok(mut scratch) => job.run(isa, &mut scratch),
            Err(_) => job.run(isa, &mut ItemScratch::default()),
        });
    });
}

/// One (batch, K/V head `g`, range `[u0, u1)` of its (query head, query block) units) of an attention call.
#[derive(Clone, Copy)]
struct Item<'a> {
    shape: AttnShape,
    b: usize,
    g: usize,
    u0: usize,
    u1: usize,
    q: RowsView<'a>,
    k: RowsView<'a>,
    v: RowsView<'a>,
    mask: Masking<'a>,
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
        let AttnShape { seq_q, seq_k, num_heads, kv_heads, head_dim: d, .. } = self.shape;
        let lanes = S::LANES;
        let bc = NV * lanes; // keys per block: NV vectors of scores per row
        let d_vecs = d.div_ceil(lanes);
        let d_pad = d_vecs * lanes;
        let col = self.g * d;
        let k_base = self.k.offset + self.b * self.k.batch_stride + col;
        let v_base = self.v.offset + self.b * self.v.batch_stride + col;
        let keep = self.mask.per_key_keep().map(|t| &t.data[self.b * t.batch_stride..][..seq_k]);
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
        let q_blocks = seq_q.div_ceil(BQ);
        let group = num_heads / kv_heads;
        for u in self.u0..self.u1 {
            let h = self.g * group + u / q_blocks;
            let q0 = (u % q_blocks) * BQ;
            let rows = BQ.min(seq_q - q0);
            self.query_block::<S, NV>(sc, h, q0, rows, d_vecs, d_pad, k_blocks, keep.is_some());
        }
    }

    /// Rows `[q0, q0 + rows)` of query head `h` against every key block, then normalized into `out`.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn query_block<S: Simd, const NV: usize>(&self, sc: &mut ItemScratch, h: usize, q0: usize, rows: usize, d_vecs: usize, d_pad: usize, k_blocks: usize, has_keep: bool) {
        let AttnShape { seq_q, seq_k, head_dim: d, .. } = self.shape;
        let lanes = S::LANES;
        let bc = NV * lanes;
        let col = h * d;
        let q_base = self.q.offset + self.b * self.q.batch_stride + q0 * self.q.row_stride + col;
        let Masking { bias, causal, masked_rows, .. } = self.mask;
        let row_keep = self.mask.row_keep();
        let masked = masked_rows.masked_score();
        sc.row_max[..rows].fill(f32::NEG_INFINITY);
        sc.row_sum[..rows].fill(0.0);
        sc.acc[..rows * d_pad].fill(0.0);
        // Causal: keys from `visible_end` on are masked for every row of this block.
        let visible_end = if causal { (q0 + rows + seq_k).saturating_sub(seq_q).min(seq_k) } else { seq_k };
        for kb in 0..k_blocks {
            let k0 = kb * bc;
            if k0 >= visible_end && self.rest_is_masked_out(sc, rows) {
                break;
            }
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
                // Per-row bias, keep mask and causal mask, then the online-softmax update.
                for r in r0..r0 + take {
                    let qpos = q0 + r;
                    let srow = sp.add((r - r0) * bc);
                    if let Some(t) = bias {
                        add_row::<S>(srow, t.at(self.b, h, qpos, k0), nk);
                    }
                    if let Some(t) = row_keep {
                        keep_row::<S>(srow, t.at(self.b, h, qpos, k0), nk, masked);
                    }
                    // Key j is hidden when j > qpos + seq_k - seq_q.
                    if causal && k0 + nk + seq_q > qpos + seq_k + 1 {
                        let first_hidden = (qpos + seq_k + 1).saturating_sub(seq_q).max(k0) - k0;
                        for j in first_hidden..nk {
                            *srow.add(j) = masked;
                        }
                    }
                }
                let (sp, mp, sump, ap) = (sc.scores.as_mut_ptr(), sc.row_max[r0..].as_mut_ptr(), sc.row_sum[r0..].as_mut_ptr(), sc.acc[r0 * d_pad..].as_mut_ptr());
                let keep_pad = (has_keep.then_some(kp), (nk < bc).then_some(pp));
                if take == ROW_GROUP {
                    softmax_rows::<S, ROW_GROUP, NV>(sp, keep_pad, masked, mp, sump, ap, d_pad, d_vecs);
                } else {
                    softmax_rows::<S, 1, NV>(sp, keep_pad, masked, mp, sump, ap, d_pad, d_vecs);
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
        // Normalize and write out; a row with no score above −inf is zero when asked (its sum is
        // 0, so it would be NaN, as numpy's softmax gives).
        for r in 0..rows {
            let zero_row = masked_rows == MaskedRows::Zero && sc.row_max[r] == f32::NEG_INFINITY;
            let inv = if zero_row { S::zero() } else { S::splat(1.0 / sc.row_sum[r]) };
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

    /// Whether the key blocks still to come, causally masked for every row of the block, would
    /// change nothing: with −inf masking they add exact zeros; with −1e9 they do when every row
    /// already has a score far above −1e9 (`exp(−1e9 − max)` is then exactly 0).
    #[inline(always)]
    fn rest_is_masked_out(&self, sc: &ItemScratch, rows: usize) -> bool {
        match self.mask.masked_rows {
            MaskedRows::Zero => true,
            MaskedRows::Uniform => sc.row_max[..rows].iter().all(|&m| m > MASKED_SCORE + 1.0e3),
        }
    }
}

/// `s[j] += bias[j]` for `j < n`.
#[inline(always)]
unsafe fn add_row<S: Simd>(s: *mut f32, bias: *const f32, n: usize) {
    let lanes = S::LANES;
    let mut j = 0;
    while j + lanes <= n {
        S::store(s.add(j), S::add(S::load(s.add(j)), S::load(bias.add(j))));
        j += lanes;
    }
    if j < n {
        let m = n - j;
        S::store_partial(s.add(j), S::add(S::load_partial(s.add(j), m), S::load_partial(bias.add(j), m)), m);
    }
}

/// `s[j] = masked` where `keep[j] < 0.5`, for `j < n`.
#[inline(always)]
unsafe fn keep_row<S: Simd>(s: *mut f32, keep: *const f32, n: usize, masked: f32) {
    let (lanes, half, mv) = (S::LANES, S::splat(0.5), S::splat(masked));
    let mut j = 0;
    while j + lanes <= n {
        S::store(s.add(j), S::select_lt(S::load(keep.add(j)), half, mv, S::load(s.add(j))));
        j += lanes;
    }
    if j < n {
        let m = n - j;
        S::store_partial(s.add(j), S::select_lt(S::load_partial(keep.add(j), m), half, mv, S::load_partial(s.add(j), m)), m);
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
    masked: f32,
    row_max: *mut f32,
    row_sum: *mut f32,
    acc: *mut f32,
    acc_stride: usize,
    d_vecs: usize,
) {
    let lanes = S::LANES;
    let bc = NV * lanes;
    let (half, masked, neg_inf) = (S::splat(0.5), S::splat(masked), S::splat(f32::NEG_INFINITY));
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
        // A row with nothing above −inf yet subtracts 0 (its exps are then 0, not NaN).
        let m = S::splat(if new_max[r] == f32::NEG_INFINITY { 0.0 } else { new_max[r] });
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
