//! The masks of the flash attention on a transposed score tile (soft-cap, bias, keep masks, causal, sliding window), and when the key blocks a query block skips can change nothing.

use super::{AttnShape, Item, MaskedRows, Masking, MASKED_SCORE};
use crate::kernels::simd::Simd;

impl Item<'_> {
    /// Soft-cap, bias, keep masks, the causal mask and the window on the transposed scores
    /// `st[j][r]` of keys `[k0, k0 + nk)` and rows `[q0, q0 + rows)`: `s = cap·tanh(s)` (the tile
    /// holds `s / cap`), `s += bias`, then the masked score where a key is hidden. Rows past `rows`
    /// (padding lanes) get the per-key and causal masks only.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn mask_block<S: Simd, const RV: usize>(&self, st: *mut f32, h: usize, q0: usize, rows: usize, k0: usize, nk: usize) {
        let AttnShape { seq_q, seq_k, .. } = self.shape;
        let (lanes, qb) = (S::LANES, RV * S::LANES);
        let Masking { bias, causal, masked_rows, .. } = self.mask;
        let masked = masked_rows.masked_score();
        if let Some(cap) = self.variant.softcap {
            let cv = S::splat(cap);
            for j in 0..nk {
                for c in 0..RV {
                    let sp = st.add(j * qb + c * lanes);
                    S::store(sp, S::mul(cv, S::tanh(S::load(sp))));
                }
            }
        }
        if let Some(t) = bias {
            for r in 0..rows {
                let bp = t.at(self.b, h, q0 + r, k0);
                for j in 0..nk {
                    *st.add(j * qb + r) += *bp.add(j);
                }
            }
        }
        if let Some(t) = self.mask.row_keep() {
            for r in 0..rows {
                let kp = t.at(self.b, h, q0 + r, k0);
                for j in 0..nk {
                    if *kp.add(j) < 0.5 {
                        *st.add(j * qb + r) = masked;
                    }
                }
            }
        }
        if let Some(t) = self.mask.per_key_keep() {
            let kp = t.at(self.b, 0, 0, k0);
            for j in 0..nk {
                if *kp.add(j) < 0.5 {
                    for c in 0..RV {
                        S::store(st.add(j * qb + c * lanes), S::splat(masked));
                    }
                }
            }
        }
        // Key k0 + j is hidden from row r when k0 + j > q0 + r + seq_k − seq_q, i.e. r < first.
        if causal {
            let mv = S::splat(masked);
            for j in 0..nk {
                let first = (k0 + j + seq_q) as isize - (q0 + seq_k) as isize;
                if first <= 0 {
                    continue;
                }
                let fv = S::splat(first.min(qb as isize) as f32);
                for c in 0..RV {
                    let sp = st.add(j * qb + c * lanes);
                    S::store(sp, S::select_lt(row_index::<S>(c), fv, mv, S::load(sp)));
                }
            }
        }
        // Key k0 + j is before row r's window when k0 + j < q0 + r + seq_k − seq_q − window,
        // i.e. r >= last; padding lanes keep their scores (they must not end up all masked).
        if let Some(w) = self.variant.window {
            let (mv, rv) = (S::splat(masked), S::splat(rows as f32));
            for j in 0..nk {
                let last = (k0 + j + seq_q + w) as isize + 1 - (q0 + seq_k) as isize;
                if last >= rows as isize {
                    continue;
                }
                let lv = S::splat(last.max(0) as f32);
                for c in 0..RV {
                    let (sp, idx) = (st.add(j * qb + c * lanes), row_index::<S>(c));
                    let s = S::load(sp);
                    S::store(sp, S::select_lt(idx, lv, s, S::select_lt(idx, rv, mv, s)));
                }
            }
        }
    }

    /// Whether the key blocks still to come, causally masked for every row of the block, would
    /// change nothing: with −inf masking they add exact zeros; with −1e9 they do when every row
    /// already has a score far above −1e9 (`exp(−1e9 − max)` is then exactly 0). The padding lanes
    /// past the block's rows count too: they see every key a real row sees (causal: a superset),
    /// under the same per-key mask and no row mask, so they pass whenever the real rows do.
    #[inline(always)]
    pub(super) unsafe fn rest_is_masked_out<S: Simd, const RV: usize>(&self, m: &[S::V; RV]) -> bool {
        match self.mask.masked_rows {
            MaskedRows::Zero => true,
            MaskedRows::Uniform => {
                let lowest = m.iter().fold(S::splat(f32::INFINITY), |a, &x| S::min(a, x));
                -S::hmax(S::sub(S::zero(), lowest)) > MASKED_SCORE + 1.0e3
            }
        }
    }
}

/// Lane `i` of vector `c` holds the row index `c·LANES + i`, as a float.
#[inline(always)]
unsafe fn row_index<S: Simd>(c: usize) -> S::V {
    const IDX: [f32; 64] = {
        let mut a = [0.0f32; 64];
        let mut i = 0;
        while i < 64 {
            a[i] = i as f32;
            i += 1;
        }
        a
    };
    S::load(IDX.as_ptr().add(c * S::LANES))
}
