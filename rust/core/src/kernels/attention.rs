//! Multi-head attention, FlashAttention-style: query and key blocks, online softmax, vectorized `exp`; Q, K and V read from strided row views, memory independent of S².
//!
//! Work is split into items of (batch, K/V head, range of (query head, 64-row query block) units),
//! run in parallel; a head is split only when there are too few heads for the threads. Each item
//! first copies its K/V head's keys and values into contiguous per-thread scratch (linear in S).
//! Then, per block of `ATTN_VECS` vectors of query rows (64 on AVX-512) and block of `BK` keys, it
//! computes the transposed score tile `sᵀ[key][row]` with a register-tiled micro-kernel (keys ×
//! row vectors, the query block transposed and pre-scaled), applies the masks,
//! updates every row's running max and sum lane-wise (online softmax with a base-2 `exp`), and adds
//! `P·V` into row-major accumulators; finally it divides by the sum (attention_tile.rs holds the
//! micro-kernels, attention_mask.rs the masks). Nothing is `S × S`.

use super::attention_tile::{exp2_neg, pv_block, qk_tile};
use super::gemm::SendPtr;
use super::par::Par;
use super::simd::{dispatch, Isa, Simd};
use std::cell::RefCell;

#[path = "attention_mask.rs"]
mod mask;

/// Query rows per work unit (each unit runs in blocks of `ATTN_VECS` vectors of rows, at most 64).
const BQ: usize = 64;
/// Keys per block: the transposed score tile of a block is `BK × 64` floats (16 KiB). With lazy
/// rescaling, 64-key blocks ran 0.94-1.00x the time of 32-key ones (median 0.97; 12×64, S = 512,
/// one thread, five alternating runs on a loaded machine; causal S = 2048: 0.99); before it,
/// 32-key blocks with 6-row `P·V` tiles had beaten 64-key blocks with 4-row tiles by 1.05-1.13x.
const BK: usize = 64;
/// Keys per score micro-kernel tile (`KT × ATTN_VECS` accumulators).
const KT: usize = 4;
/// How far (natural units) a block's max may exceed a row's running max before the row is
/// rescaled: its probabilities stay below e^8 (`exp2_neg` is exact up to 2^126).
const MAX_SLACK: f32 = 8.0;
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

/// What some models add to plain attention: a logit soft-cap (Gemma 2), a sliding window
/// (Mistral, Gemma 2), a value head size other than the query/key one (DeepSeek's MLA).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct AttentionVariant {
    /// `s = c·tanh(s / c)` on `scale·q·kᵀ`, before the bias and the masks (`c > 0`).
    pub softcap: Option<f32>,
    /// Key `j` is also masked for query `i` when `j < i + Sk − Sq − window`; with `causal`, RLX's
    /// `SlidingWindow` (each query sees itself and the `window` keys before it). Whole key blocks
    /// outside every row's window are skipped: a long sequence costs `O(S·window)`.
    pub window: Option<usize>,
    /// The head size of V and of the output, when it differs from Q's and K's `head_dim`.
    pub v_head_dim: Option<usize>,
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
    /// The K/V head's keys `[k_pad, d]` and values `[k_pad, dv_pad]`, zero-padded.
    kp: Vec<f32>,
    vp: Vec<f32>,
    /// The query block transposed and pre-scaled, `[d, QB]`.
    qt: Vec<f32>,
    /// Scores, then probabilities, of one key block, transposed: `[BK, QB]`.
    st: Vec<f32>,
    /// Output accumulators `[QB, dv_pad]`, and per row: running max, sum, rescale factor.
    acc: Vec<f32>,
    stats: Vec<f32>,
}

thread_local! {
    static ITEM_SCRATCH: RefCell<ItemScratch> = RefCell::new(ItemScratch::default());
}

/// [`flash`] with no soft-cap, no window and V's head size `head_dim`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn attention(isa: Isa, par: &Par, shape: AttnShape, q: RowsView<'_>, k: RowsView<'_>, v: RowsView<'_>, mask: &Masking<'_>, scale: f32, out: &mut [f32], out_row_stride: usize) {
    flash(isa, par, shape, &AttentionVariant::default(), q, k, v, mask, scale, out, out_row_stride);
}

/// `out[b, s, h·dv..] = softmax(mask(softcap(scale · q_h k_gᵀ) + bias)) v_g` for every batch, query
/// row and head `h`, with `g = h / (num_heads / kv_heads)` its K/V head and `dv` the variant's V
/// head size (default `head_dim`).
///
/// `out` holds `batch × seq_q` rows of stride `out_row_stride`; head `h` writes columns
/// `[h·dv, (h+1)·dv)`. Panics (never reads out of bounds) if a view, the mask or the bias is too short.
#[allow(clippy::too_many_arguments)]
pub(crate) fn flash(
    isa: Isa,
    par: &Par,
    shape: AttnShape,
    variant: &AttentionVariant,
    q: RowsView<'_>,
    k: RowsView<'_>,
    v: RowsView<'_>,
    mask: &Masking<'_>,
    scale: f32,
    out: &mut [f32],
    out_row_stride: usize,
) {
    let AttnShape { batch, seq_q, seq_k, num_heads, kv_heads, head_dim } = shape;
    let dv = variant.v_head_dim.unwrap_or(head_dim);
    let width = num_heads * dv;
    if batch == 0 || seq_q == 0 || width == 0 {
        return;
    }
    assert!(kv_heads > 0 && num_heads.is_multiple_of(kv_heads), "kv_heads must divide num_heads");
    assert!(q.covers(batch, seq_q, num_heads * head_dim) && k.covers(batch, seq_k, kv_heads * head_dim) && v.covers(batch, seq_k, kv_heads * dv), "attention view out of bounds");
    assert!(out_row_stride >= width && out.len() >= (batch * seq_q - 1) * out_row_stride + width, "attention output too short");
    assert!(variant.softcap.is_none_or(|c| c > 0.0), "the soft-cap must be positive");
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
    let (mask, variant) = (*mask, *variant);
    // Each thread on its own stretch of items, so neighbouring heads (whose output columns can
    // share a cache line) are not written by two threads at once.
    par.for_each_spread(n_items, |item| {
        let chunk = item % chunks;
        let g = (item / chunks) % kv_heads;
        let b = item / (chunks * kv_heads);
        let (u0, u1) = (chunk * units / chunks, (chunk + 1) * units / chunks);
        let job = Item { shape, dv, variant, b, g, u0, u1, q, k, v, mask, scale, out: out_ptr, out_row_stride };
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
    /// V's head size.
    dv: usize,
    variant: AttentionVariant,
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
        let (d, dv_pad) = (self.shape.head_dim, self.dv.div_ceil(16) * 16);
        let k_pad = self.shape.seq_k.div_ceil(BK) * BK;
        let grow = |buf: &mut Vec<f32>, len: usize| {
            if buf.len() < len {
                buf.resize(len, 0.0);
            }
        };
        grow(&mut scratch.kp, k_pad * d);
        grow(&mut scratch.vp, k_pad * dv_pad);
        grow(&mut scratch.qt, d * BQ);
        grow(&mut scratch.st, BK * BQ);
        grow(&mut scratch.acc, BQ * dv_pad);
        grow(&mut scratch.stats, 3 * BQ);
        let item = *self;
        let scratch: *mut ItemScratch = scratch;
        dispatch!(isa, |S| (item: Item<'_>, scratch: *mut ItemScratch) {
            item.run_simd::<S>(&mut *scratch)
        });
    }

    /// Packs the K/V head, then runs every query block of the item with `RV` vectors of query
    /// rows per block (`S::ATTN_VECS`, fewer when the sequence is short).
    #[inline(always)]
    unsafe fn run_simd<S: Simd>(&self, sc: &mut ItemScratch) {
        let AttnShape { seq_q, seq_k, head_dim: d, .. } = self.shape;
        let (dv, dv_pad) = (self.dv, self.dv.div_ceil(16) * 16);
        let k_pad = seq_k.div_ceil(BK) * BK;
        let k_base = self.k.offset + self.b * self.k.batch_stride + self.g * d;
        let v_base = self.v.offset + self.b * self.v.batch_stride + self.g * dv;
        for j in 0..k_pad {
            let (kr, vr) = (&mut sc.kp[j * d..(j + 1) * d], &mut sc.vp[j * dv_pad..(j + 1) * dv_pad]);
            if j < seq_k {
                kr.copy_from_slice(&self.k.data[k_base + j * self.k.row_stride..][..d]);
                vr[..dv].copy_from_slice(&self.v.data[v_base + j * self.v.row_stride..][..dv]);
                vr[dv..].fill(0.0);
            } else {
                kr.fill(0.0);
                vr.fill(0.0);
            }
        }
        match seq_q.min(BQ).div_ceil(S::LANES).min(S::ATTN_VECS) {
            0 | 1 => self.run_blocks::<S, 1>(sc),
            2 => self.run_blocks::<S, 2>(sc),
            3 => self.run_blocks::<S, 3>(sc),
            _ => self.run_blocks::<S, 4>(sc),
        }
    }

    #[inline(always)]
    unsafe fn run_blocks<S: Simd, const RV: usize>(&self, sc: &mut ItemScratch) {
        let AttnShape { seq_q, num_heads, kv_heads, .. } = self.shape;
        let qb = RV * S::LANES;
        let q_blocks = seq_q.div_ceil(BQ);
        let group = num_heads / kv_heads;
        for u in self.u0..self.u1 {
            let h = self.g * group + u / q_blocks;
            let (start, end) = ((u % q_blocks) * BQ, (((u % q_blocks) + 1) * BQ).min(seq_q));
            let mut q0 = start;
            while q0 < end {
                let rows = qb.min(end - q0);
                self.query_block::<S, RV>(sc, h, q0, rows);
                q0 += rows;
            }
        }
    }

    /// Rows `[q0, q0 + rows)` (`rows <= RV·LANES`) of query head `h` against the key blocks, then
    /// normalized into `out`. The blocks some row sees come first; the rest (past the causal end,
    /// before the window's start) only when they could change a row (see `rest_is_masked_out`).
    #[inline(always)]
    unsafe fn query_block<S: Simd, const RV: usize>(&self, sc: &mut ItemScratch, h: usize, q0: usize, rows: usize) {
        let AttnShape { seq_q, seq_k, head_dim: d, .. } = self.shape;
        let lanes = S::LANES;
        let qb = RV * lanes;
        let dv = self.dv;
        let dv_vecs = dv.div_ceil(lanes);
        let dv_pad = dv.div_ceil(16) * 16;
        // Qᵀ, pre-scaled (by scale / cap with a soft-cap, so the tile holds `s / cap`). The scores
        // stay in natural units until `score − max` (an additive mask of float32's lowest value, as
        // Hugging Face models use, times log2 e would overflow to −inf).
        let qscale = self.variant.softcap.map_or(self.scale, |c| self.scale / c);
        let q_base = self.q.offset + self.b * self.q.batch_stride + q0 * self.q.row_stride + h * d;
        // Column by column: the stores run along `Qᵀ`'s rows and the loads over at most 64 rows
        // of q (L1-resident after the first column), where row by row each scalar store went to
        // another line of `Qᵀ` and each load waited on a new row of q (11 % of a call at S = 512).
        // In bounds: the views were checked to cover every row at entry.
        let (qp, qs, qtp) = (self.q.data.as_ptr().add(q_base), self.q.row_stride, sc.qt.as_mut_ptr());
        for dd in 0..d {
            let col = qtp.add(dd * qb);
            for r in 0..rows {
                *col.add(r) = *qp.add(r * qs + dd) * qscale;
            }
            for r in rows..qb {
                *col.add(r) = 0.0;
            }
        }
        sc.acc[..rows * dv_pad].fill(0.0);
        let neg_inf = S::splat(f32::NEG_INFINITY);
        let mut m = [neg_inf; RV];
        let mut l = [S::zero(); RV];
        let t = Tiles { qt: sc.qt.as_ptr(), st: sc.st.as_mut_ptr(), kp: sc.kp.as_ptr(), vp: sc.vp.as_ptr(), acc: sc.acc.as_mut_ptr(), alpha: sc.stats.as_mut_ptr().add(2 * BQ) };
        let (m_arr, l_arr, acc) = (sc.stats.as_mut_ptr(), sc.stats.as_mut_ptr().add(BQ), t.acc);
        // Keys `[lo, hi)` hold every key some row of the block sees: causal hides the keys from
        // `hi` on, the window those before `lo` (the first row's window start), for every row.
        let shift = seq_k as isize - seq_q as isize;
        let hi = if self.mask.causal { (q0 as isize + rows as isize + shift).clamp(0, seq_k as isize) as usize } else { seq_k };
        let lo = self.variant.window.map_or(0, |w| (q0 as isize + shift - w as isize).clamp(0, seq_k as isize) as usize);
        let (first, past) = (lo / BK * BK, hi.div_ceil(BK) * BK);
        for k0 in (first..hi).step_by(BK) {
            self.key_block::<S, RV>(t, h, q0, rows, k0, &mut m, &mut l);
        }
        if !self.rest_is_masked_out::<S, RV>(&m) {
            for k0 in (0..first).step_by(BK).chain((past..seq_k).step_by(BK)) {
                self.key_block::<S, RV>(t, h, q0, rows, k0, &mut m, &mut l);
            }
        }
        // Normalize and write out; a row with no score above −inf is zero when asked (its sum is
        // 0, so it would be NaN, as numpy's softmax gives).
        for c in 0..RV {
            S::store(m_arr.add(c * lanes), m[c]);
            S::store(l_arr.add(c * lanes), l[c]);
        }
        let col = h * dv;
        for r in 0..rows {
            let zero_row = self.mask.masked_rows == MaskedRows::Zero && *m_arr.add(r) == f32::NEG_INFINITY;
            let inv = if zero_row { S::zero() } else { S::splat(1.0 / *l_arr.add(r)) };
            let ap = acc.add(r * dv_pad);
            let op = self.out.add((self.b * seq_q + q0 + r) * self.out_row_stride + col);
            for c in 0..dv_vecs {
                let x = S::mul(S::load(ap.add(c * lanes)), inv);
                let n = dv - c * lanes;
                if n >= lanes {
                    S::store(op.add(c * lanes), x);
                } else {
                    S::store_partial(op.add(c * lanes), x, n);
                }
            }
        }
    }

    /// Keys `[k0, k0 + BK)` (fewer at the end) for the block's rows: scores, masks, the online
    /// softmax update of the running max `m` and sum `l`, and `P·V` into the accumulators.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn key_block<S: Simd, const RV: usize>(&self, t: Tiles, h: usize, q0: usize, rows: usize, k0: usize, m: &mut [S::V; RV], l: &mut [S::V; RV]) {
        let (d, lanes) = (self.shape.head_dim, S::LANES);
        let qb = RV * lanes;
        let (dv_vecs, dv_pad) = (self.dv.div_ceil(lanes), self.dv.div_ceil(16) * 16);
        let (neg_inf, log2e) = (S::splat(f32::NEG_INFINITY), S::splat(std::f32::consts::LOG2_E));
        let Tiles { qt, st, kp, vp, acc, alpha: alpha_arr } = t;
        let seq_k = self.shape.seq_k;
        let nk = BK.min(seq_k - k0);
        let mut j = 0;
        while j < nk {
            qk_tile::<S, KT, RV>(qt, qb, kp.add((k0 + j) * d), d, st.add(j * qb), qb);
            j += KT;
        }
        self.mask_block::<S, RV>(st, h, q0, rows, k0, nk);
        // Online softmax, lane-wise over the rows: block max, new running max (a row with
        // nothing above −inf yet subtracts 0, so its exps are 0, not NaN), probabilities.
        let mut bm = [neg_inf; RV];
        for j in 0..nk {
            for (c, x) in bm.iter_mut().enumerate() {
                *x = S::max(*x, S::load(st.add(j * qb + c * lanes)));
            }
        }
        // Lazy rescaling: a row's running max moves only when the block's exceeds it by more than
        // `MAX_SLACK` (its probabilities are then at most e^8, far inside float32, and the sum and
        // accumulators scale alike), so after the first blocks almost no row needs a rescale.
        let mut m_use = [S::zero(); RV];
        let mut alpha = [S::zero(); RV];
        let mut lowest_alpha = S::splat(1.0);
        for c in 0..RV {
            let m_top = S::max(m[c], bm[c]);
            let m_new = S::select_lt(S::add(m[c], S::splat(MAX_SLACK)), m_top, m_top, m[c]);
            m_use[c] = S::select_lt(m_new, S::splat(f32::MIN), S::zero(), m_new);
            alpha[c] = S::exp(S::sub(m[c], m_use[c]));
            lowest_alpha = S::min(lowest_alpha, alpha[c]);
            m[c] = m_new;
        }
        let mut ls = [S::zero(); RV];
        for j in 0..nk {
            for c in 0..RV {
                let sp = st.add(j * qb + c * lanes);
                let p = exp2_neg::<S>(S::mul(S::sub(S::load(sp), m_use[c]), log2e));
                S::store(sp, p);
                ls[c] = S::add(ls[c], p);
            }
        }
        for c in 0..RV {
            l[c] = S::fmadd(l[c], alpha[c], ls[c]);
            S::store(alpha_arr.add(c * lanes), alpha[c]);
        }
        // Rows whose max moved: rescale their accumulators (skipped where alpha is exactly 1, and
        // altogether when it is for every row).
        let any_moved = S::hmax(S::sub(S::zero(), lowest_alpha)) > -1.0;
        for r in (0..rows).filter(|_| any_moved) {
            let a = *alpha_arr.add(r);
            if a != 1.0 {
                let (av, ap) = (S::splat(a), acc.add(r * dv_pad));
                for c in 0..dv_vecs {
                    S::store(ap.add(c * lanes), S::mul(S::load(ap.add(c * lanes)), av));
                }
            }
        }
        pv_block::<S>(st, qb, vp.add(k0 * dv_pad), dv_pad, nk, rows, dv_vecs, acc, dv_pad);
    }
}

/// Scratch pointers of one query block: `Qᵀ`, the score tile, packed K and V, the accumulators,
/// and the per-row rescale factors.
#[derive(Clone, Copy)]
struct Tiles {
    qt: *const f32,
    st: *mut f32,
    kp: *const f32,
    vp: *const f32,
    acc: *mut f32,
    alpha: *mut f32,
}
