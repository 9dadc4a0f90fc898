"""Plain numpy float64 reference of the fused attention block and of attention with every mask, bias, GQA and RoPE variant (used by the kernel tests), with self-checks against explicit loops."""

from __future__ import annotations

import numpy as np

MASKED_SCORE = -1e9


def rope_tables(seq: int, head_dim: int, base: float = 10000.0):
    """NeoX cos/sin tables ``[seq, head_dim/2]`` as float32."""
    half = head_dim // 2
    inv = base ** (-np.arange(half, dtype=np.float64) / max(half, 1))
    theta = np.arange(seq, dtype=np.float64)[:, None] * inv[None, :]
    return np.cos(theta).astype(np.float32), np.sin(theta).astype(np.float32)


def _heads(t, num_heads):
    b, s, h = t.shape
    return t.reshape(b, s, num_heads, h // num_heads).transpose(0, 2, 1, 3)


def _merge(t):
    b, nh, s, d = t.shape
    return t.transpose(0, 2, 1, 3).reshape(b, s, nh * d)


def _rotate(x, cos, sin, style="neox"):
    """RoPE of the first ``2·cos.shape[-1]`` dims of each head of ``x`` ``[..., S, d]``; the rest pass through."""
    rot = 2 * cos.shape[-1]
    out = x.copy()
    if style == "neox":
        i1, i2 = slice(0, rot // 2), slice(rot // 2, rot)
    else:
        i1, i2 = slice(0, rot, 2), slice(1, rot, 2)
    x1, x2 = x[..., i1], x[..., i2]
    out[..., i1] = x1 * cos - x2 * sin
    out[..., i2] = x2 * cos + x1 * sin
    return out


def _scores4(t, shape):
    """A mask or bias ``[B, Sk]``, ``[B, Sq, Sk]`` or ``[B, H, Sq, Sk]`` broadcast to the scores ``shape``."""
    t = np.asarray(t, np.float64)
    t = t[:, None, None, :] if t.ndim == 2 else t[:, None] if t.ndim == 3 else t
    return np.broadcast_to(t, shape)


def attention_heads(q, k, v, keep, scale, bias=None, masked_rows="uniform"):
    """``softmax(where(keep, scale·q kᵀ + bias, masked)) v`` over ``[B, nh, S, d]``; ``keep`` broadcasts to
    the scores. ``masked`` is -1e9 (uniform: a fully masked row averages v) or -inf (zero: a row with no score
    above -inf is 0, as PyTorch SDPA's NaN guard gives)."""
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        s = q @ k.swapaxes(-1, -2) * scale
        if bias is not None:
            s = s + bias
        if keep is not None:
            s = np.where(keep, s, MASKED_SCORE if masked_rows == "uniform" else -np.inf)
        mx = s.max(axis=-1, keepdims=True)
        dead = mx == -np.inf
        p = np.exp(s - np.where(dead & (masked_rows == "zero"), 0.0, mx))
        p = p / p.sum(axis=-1, keepdims=True)
        if masked_rows == "zero":
            p = np.where(dead, 0.0, p)
        return p @ v


def attention(q, k, v, mask=None, *, num_heads, mask_kind="custom", scale=None, bias=None, masked_rows="uniform",
              rope=None, rope_style="neox"):
    """Reference of ``rlx_rules.kernels.attention`` in float64 (k and v may have fewer heads: GQA)."""
    q64, k64, v64 = (np.asarray(t, np.float64) for t in (q, k, v))
    d = q64.shape[-1] // num_heads
    kv_heads = k64.shape[-1] // d
    scale = d**-0.5 if scale is None else scale
    b, sq, sk = q64.shape[0], q64.shape[1], k64.shape[1]
    shape = (b, num_heads, sq, sk)
    keep = None
    if mask is not None:
        keep = _scores4(mask, shape) >= 0.5
    if mask_kind == "causal":
        causal = (np.arange(sk)[None, :] <= np.arange(sq)[:, None] + sk - sq)[None, None]
        keep = causal if keep is None else (keep & causal)
    qh, kh, vh = _heads(q64, num_heads), _heads(k64, kv_heads), _heads(v64, kv_heads)
    if rope is not None:
        cos, sin = (np.asarray(t, np.float64) for t in rope)
        qh = _rotate(qh, cos[sk - sq:], sin[sk - sq:], rope_style)
        kh = _rotate(kh, cos, sin, rope_style)
    kh, vh = (np.repeat(t, num_heads // kv_heads, axis=1) for t in (kh, vh))
    out = attention_heads(qh, kh, vh, keep, scale, None if bias is None else _scores4(bias, shape), masked_rows)
    return _merge(out)


def sdpa_zero_rows(q, k, v, keep, scale):
    """PyTorch SDPA's semantics written out, per (batch, head, query): masked_fill(-inf), softmax, NaN → 0."""
    b, nh, sq, _ = q.shape
    out = np.zeros(q.shape[:3] + (v.shape[-1],))
    for i in np.ndindex(b, nh, sq):
        s = np.where(keep[i], k[i[:2]] @ q[i] * scale, -np.inf)
        with np.errstate(invalid="ignore"):
            p = np.exp(s - s.max())
            p = np.nan_to_num(p / p.sum(), nan=0.0)
        out[i] = p @ v[i[:2]]
    return out


def fused_attention_block(hidden, qkv_w, out_w, mask, qkv_b=None, out_b=None, *, num_heads, rope=None,
                          masked_rows="uniform"):
    """Reference of ``rlx_rules.kernels.fused_attention_block`` in float64."""
    x = np.asarray(hidden, np.float64)
    b, s, h = x.shape
    d = h // num_heads
    with np.errstate(invalid="ignore", over="ignore"):
        qkv = x @ np.asarray(qkv_w, np.float64)
        if qkv_b is not None:
            qkv = qkv + np.asarray(qkv_b, np.float64)
        q, k, v = (_heads(qkv[..., i * h : (i + 1) * h], num_heads) for i in range(3))
        if rope is not None:
            cos, sin = (np.asarray(t, np.float64)[None, None] for t in rope)
            q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        keep = None if mask is None else (np.asarray(mask, np.float64) >= 0.5)[:, None, None, :]
        ctx = _merge(attention_heads(q, k, v, keep, d**-0.5, masked_rows=masked_rows))
        out = ctx @ np.asarray(out_w, np.float64)
        if out_b is not None:
            out = out + np.asarray(out_b, np.float64)
    return out


def test_reference_agrees_with_explicit_loops():
    """The vectorized reference equals a loop-by-loop reading of the semantics."""
    rng = np.random.default_rng(3)
    b, s, h, nh = 2, 3, 4, 2
    d = h // nh
    x = rng.standard_normal((b, s, h))
    wq, wo = rng.standard_normal((h, 3 * h)), rng.standard_normal((h, h))
    bq, bo = rng.standard_normal(3 * h), rng.standard_normal(h)
    mask = np.array([[1, 0, 1], [0, 0, 0]], np.float32)
    cos, sin = rope_tables(s, d)
    got = fused_attention_block(x, wq, wo, mask, bq, bo, num_heads=nh, rope=(cos, sin))
    want = np.zeros((b, s, h))
    for bi in range(b):
        qkv = [x[bi, si] @ wq + bq for si in range(s)]
        ctx = np.zeros((s, h))
        for hd in range(nh):
            def part(vec, blk, si):
                piece = vec[blk * h + hd * d : blk * h + hd * d + d].copy()
                if blk < 2:
                    half = d // 2
                    c, sn = cos[si].astype(np.float64), sin[si].astype(np.float64)
                    x1, x2 = piece[:half].copy(), piece[half:].copy()
                    piece[:half], piece[half:] = x1 * c - x2 * sn, x2 * c + x1 * sn
                return piece
            for qi in range(s):
                scores = []
                for ki in range(s):
                    sc = part(qkv[qi], 0, qi) @ part(qkv[ki], 1, ki) / np.sqrt(d)
                    scores.append(sc if mask[bi, ki] >= 0.5 else -1e9)
                p = np.exp(np.array(scores) - max(scores))
                p /= p.sum()
                ctx[qi, hd * d : hd * d + d] = sum(p[ki] * part(qkv[ki], 2, ki) for ki in range(s))
        want[bi] = ctx @ wo + bo
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    # batch 1 has every key masked: each head's context is the plain mean of V.
    assert np.isfinite(got).all()


def test_zero_rows_reference_agrees_with_sdpa_semantics():
    """masked_rows="zero" of the vectorized reference equals SDPA's fill-softmax-guard written out, fully masked rows included."""
    rng = np.random.default_rng(4)
    q, k, v = (rng.standard_normal((2, 3, 5, 4)) for _ in range(3))
    keep = rng.random((2, 3, 5, 5)) > 0.5
    keep[1, 2, 0] = False
    got = attention_heads(q, k, v, keep, 0.4, masked_rows="zero")
    np.testing.assert_allclose(got, sdpa_zero_rows(q, k, v, keep, 0.4), rtol=1e-12, atol=1e-12)
    assert not got[1, 2, 0].any()
