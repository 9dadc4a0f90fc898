//! Rotary position embedding (NeoX rotate-half), applied in place to the Q and K columns of the fused block's qkv buffer.

use super::gemm::SendPtr;
use super::par::Par;
use super::simd::{dispatch, Isa, Simd};

/// Cosine and sine tables, each `[seq, head_dim / 2]` row-major.
#[derive(Clone, Copy, Debug)]
pub struct Rope<'a> {
    pub cos: &'a [f32],
    pub sin: &'a [f32],
}

/// Rotates, in every row of `buf` (`batch·seq` rows of stride `ld`) and for each of the column
/// ranges starting at `col_offsets`, every head's pairs `(i, i + half)`:
/// `x_i ← x_i·cos − x_{i+half}·sin`, `x_{i+half} ← x_{i+half}·cos + x_i·sin`, with the tables'
/// row `s` used for sequence position `s`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn apply_rope(isa: Isa, par: &Par, buf: &mut [f32], rows: usize, seq: usize, ld: usize, col_offsets: &[usize], num_heads: usize, head_dim: usize, rope: Rope<'_>) {
    let half = head_dim / 2;
    assert_eq!(head_dim % 2, 0, "rope needs an even head_dim");
    assert!(rope.cos.len() >= seq * half && rope.sin.len() >= seq * half, "rope tables too short");
    for &off in col_offsets {
        assert!(off + num_heads * head_dim <= ld, "rope columns outside the row");
    }
    if rows == 0 || half == 0 {
        return;
    }
    assert!(buf.len() >= rows * ld, "rope buffer too short");
    let ptr = SendPtr(buf.as_mut_ptr());
    let n_tasks = if par.parallel { rows.min(par.threads * 4) } else { 1 };
    par.for_each(n_tasks, |task| {
        let r0 = task * rows / n_tasks;
        let r1 = (task + 1) * rows / n_tasks;
        for row in r0..r1 {
            let s = row % seq;
            let cos = rope.cos[s * half..(s + 1) * half].as_ptr();
            let sin = rope.sin[s * half..(s + 1) * half].as_ptr();
            for &off in col_offsets {
                for h in 0..num_heads {
                    // SAFETY: bounds checked above; tasks own disjoint rows.
                    let x = unsafe { ptr.add(row * ld + off + h * head_dim) };
                    rotate(isa, x, cos, sin, half);
                }
            }
        }
    });
}

fn rotate(isa: Isa, x: *mut f32, cos: *const f32, sin: *const f32, half: usize) {
    dispatch!(isa, |S| (x: *mut f32, cos: *const f32, sin: *const f32, half: usize) {
        rotate_simd::<S>(x, cos, sin, half)
    });
}

#[inline(always)]
unsafe fn rotate_simd<S: Simd>(x: *mut f32, cos: *const f32, sin: *const f32, half: usize) {
    let lanes = S::LANES;
    let mut i = 0;
    while i < half {
        let n = lanes.min(half - i);
        let (x1p, x2p) = (x.add(i), x.add(half + i));
        let (x1, x2, c, s) = if n == lanes {
            (S::load(x1p), S::load(x2p), S::load(cos.add(i)), S::load(sin.add(i)))
        } else {
            (S::load_partial(x1p, n), S::load_partial(x2p, n), S::load_partial(cos.add(i), n), S::load_partial(sin.add(i), n))
        };
        let y1 = S::sub(S::mul(x1, c), S::mul(x2, s));
        let y2 = S::fmadd(x1, s, S::mul(x2, c));
        if n == lanes {
            S::store(x1p, y1);
            S::store(x2p, y2);
        } else {
            S::store_partial(x1p, y1, n);
            S::store_partial(x2p, y2, n);
        }
        i += n;
    }
}
