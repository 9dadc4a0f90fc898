//! Rotary position embedding on all or a leading part of each head (NeoX rotate-half or GPT-J interleaved), applied in place to row buffers.

use super::gemm::SendPtr;
use super::par::Par;
use super::simd::{dispatch, Isa, Simd};

/// Cosine and sine tables, each `[positions, rotary_dim / 2]` row-major: the first `rotary_dim`
/// dims of each head rotate, the rest pass through (as RLX's `Rope` with `n_rot = rotary_dim`).
#[derive(Clone, Copy, Debug)]
pub struct Rope<'a> {
    pub cos: &'a [f32],
    pub sin: &'a [f32],
    /// Rotated dims per head (even, at most head_dim).
    pub rotary_dim: usize,
    /// GPT-J style: dim `2i` pairs with `2i + 1`; otherwise NeoX: dim `i` pairs with `i + rotary_dim/2`.
    pub interleaved: bool,
}

impl<'a> Rope<'a> {
    /// NeoX rotation of the whole head: tables `[positions, head_dim / 2]`.
    pub fn neox(cos: &'a [f32], sin: &'a [f32], head_dim: usize) -> Self {
        Rope { cos, sin, rotary_dim: head_dim, interleaved: false }
    }

    /// Positions the tables hold.
    pub fn positions(&self) -> usize {
        self.cos.len() / (self.rotary_dim / 2).max(1)
    }
}

/// Rotates, in every row of `buf` (`rows` rows of stride `ld`, sequence position `row % seq + pos0`)
/// and for each of the column ranges starting at `col_offsets`, the first `rope.rotary_dim` dims of
/// each of `num_heads` heads of `head_dim`: pairs `(x1, x2)` become
/// `(x1·cos − x2·sin, x2·cos + x1·sin)` with the tables' row at that position.
#[allow(clippy::too_many_arguments)]
pub(crate) fn apply_rope(isa: Isa, par: &Par, buf: &mut [f32], rows: usize, seq: usize, pos0: usize, ld: usize, col_offsets: &[usize], num_heads: usize, head_dim: usize, rope: Rope<'_>) {
    let half = rope.rotary_dim / 2;
    assert!(rope.rotary_dim.is_multiple_of(2) && rope.rotary_dim <= head_dim, "rope rotary_dim must be even and at most head_dim");
    assert!(rope.cos.len() == rope.sin.len() && rope.cos.len() >= (seq + pos0) * half, "rope tables too short");
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
            let s = row % seq + pos0;
            let cos = rope.cos[s * half..(s + 1) * half].as_ptr();
            let sin = rope.sin[s * half..(s + 1) * half].as_ptr();
            for &off in col_offsets {
                for h in 0..num_heads {
                    // SAFETY: bounds checked above; tasks own disjoint rows.
                    let x = unsafe { ptr.add(row * ld + off + h * head_dim) };
                    if rope.interleaved {
                        // SAFETY: as above; `2·half <= head_dim` floats from `x`.
                        unsafe { rotate_pairs(x, cos, sin, half) };
                    } else {
                        rotate(isa, x, cos, sin, half);
                    }
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

/// GPT-J rotation of the pairs `(x[2i], x[2i+1])`, `i < half` (scalar: a strided access pattern).
unsafe fn rotate_pairs(x: *mut f32, cos: *const f32, sin: *const f32, half: usize) {
    for i in 0..half {
        let (x1, x2, c, s) = (*x.add(2 * i), *x.add(2 * i + 1), *cos.add(i), *sin.add(i));
        *x.add(2 * i) = x1 * c - x2 * s;
        *x.add(2 * i + 1) = x2 * c + x1 * s;
    }
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
