//! The public entry of the attention variants (logit soft-cap, sliding window, a V head size other than Q's and K's): arguments checked, then the flash attention.

use super::attention::{flash, AttentionVariant, AttnShape, Masking, RowsView, ScoreTensor};
use super::block::{attention, AttentionShape, RunOptions};
use super::par::{resolve_threads, Par};
use super::rope::Rope;
use super::simd::Isa;
use super::KernelError;

/// [`attention`] with a [`AttentionVariant`]: `out = softmax(mask(softcap(scale·Q Kᵀ) + bias)) V`
/// per head, the window hiding keys more than `window` positions before each query. Q and K have
/// heads of `shape.head_dim`, V and `out` heads of `variant.v_head_dim` (default `head_dim`):
/// `v` is `[batch, seq_k, kv_heads·dv]`, `out` `[batch, seq_q, num_heads·dv]`. The default variant
/// is exactly [`attention`]; RoPE is taken with the default variant only.
#[allow(clippy::too_many_arguments)]
pub fn attention_variant(shape: AttentionShape, variant: &AttentionVariant, q: &[f32], k: &[f32], v: &[f32], mask: &Masking<'_>, rope: Option<Rope<'_>>, scale: Option<f32>, opts: RunOptions, out: &mut [f32]) -> Result<(), KernelError> {
    if *variant == AttentionVariant::default() {
        return attention(shape, q, k, v, mask, rope, scale, opts, out);
    }
    let fail = |msg: String| Err(KernelError(msg));
    if rope.is_some() {
        return fail("rope is taken without a soft-cap, a window or a separate v_head_dim (apply it to q and k first)".into());
    }
    if let Some(c) = variant.softcap.filter(|c| !(c.is_finite() && *c > 0.0)) {
        return fail(format!("the soft-cap must be finite and positive, got {c}"));
    }
    let AttentionShape { batch: b, seq_q, seq_k, num_heads, kv_heads, head_dim: d } = shape;
    let dv = variant.v_head_dim.unwrap_or(d);
    if num_heads == 0 || kv_heads == 0 || !num_heads.is_multiple_of(kv_heads) {
        return fail(format!("k and v have {kv_heads} heads, which must divide q's num_heads={num_heads}"));
    }
    if dv == 0 {
        return fail("v_head_dim must be positive".into());
    }
    for (name, got, seq, width) in [("q", q.len(), seq_q, num_heads * d), ("k", k.len(), seq_k, kv_heads * d), ("v", v.len(), seq_k, kv_heads * dv), ("out", out.len(), seq_q, num_heads * dv)] {
        if got != b * seq * width {
            return fail(format!("{name} must have {} elements ([{b}, {seq}, {width}]), got {got}", b * seq * width));
        }
    }
    for (name, t) in [("mask", &mask.keep), ("bias", &mask.bias)] {
        if let Some(t) = t.filter(|t: &ScoreTensor<'_>| !t.covers(b, num_heads, seq_q, seq_k)) {
            return fail(format!("{name} has {} elements, too few for its strides over the scores [B, H, Sq, Sk] = [{b}, {num_heads}, {seq_q}, {seq_k}]", t.data.len()));
        }
    }
    if b * seq_q == 0 {
        return Ok(());
    }
    if seq_k == 0 {
        return fail("attention needs at least one key (k has sequence length 0)".into());
    }
    let scale = scale.unwrap_or((d as f32).powf(-0.5));
    let isa = Isa::select(opts.isa);
    let seen = variant.window.map_or(seq_k, |w| (w + 1).min(seq_k));
    let flops = 2.0 * (b * seq_q * seen * num_heads * (d + dv)) as f64;
    let view = |data, seq: usize, width: usize| RowsView { data, offset: 0, row_stride: width, batch_stride: seq * width };
    let attn_shape = AttnShape { batch: b, seq_q, seq_k, num_heads, kv_heads, head_dim: d };
    let (qv, kv, vv) = (view(q, seq_q, num_heads * d), view(k, seq_k, kv_heads * d), view(v, seq_k, kv_heads * dv));
    Par::run(resolve_threads(opts.threads), flops, |par| flash(isa, &par, attn_shape, variant, qv, kv, vv, mask, scale, out, num_heads * dv));
    Ok(())
}
