"""Plain numpy float64 reference of the fused attention block and of attention (used by the kernel tests), with a self-check against explicit loops."""

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


def _rotate(x, cos, sin):
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def attention_heads(q, k, v, keep, scale):
    """``softmax(where(keep, scale·q kᵀ, -1e9)) v`` over ``[B, nh, S, d]``; ``keep`` broadcasts to scores."""
    with np.errstate(invalid="ignore", over="ignore"):
        s = q @ k.swapaxes(-1, -2) * scale
        if keep is not None:
            s = np.where(keep, s, MASKED_SCORE)
        s = s - s.max(axis=-1, keepdims=True)
        p = np.exp(s)
        p = p / p.sum(axis=-1, keepdims=True)
        return p @ v


def attention(q, k, v, mask=None, *, num_heads, mask_kind="custom", scale=None):
    """Reference of ``rlx_rules.kernels.attention`` in float64."""
    q64, k64, v64 = (np.asarray(t, np.float64) for t in (q, k, v))
    d = q64.shape[-1] // num_heads
    scale = d**-0.5 if scale is None else scale
    keep = None
    if mask is not None:
        keep = (np.asarray(mask, np.float64) >= 0.5)[:, None, None, :]
    if mask_kind == "causal":
        sq, sk = q64.shape[1], k64.shape[1]
        causal = (np.arange(sk)[None, :] <= np.arange(sq)[:, None])[None, None]
        keep = causal if keep is None else (keep & causal)
    out = attention_heads(_heads(q64, num_heads), _heads(k64, num_heads), _heads(v64, num_heads), keep, scale)
    return _merge(out)


def fused_attention_block(hidden, qkv_w, out_w, mask, qkv_b=None, out_b=None, *, num_heads, rope=None):
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
        ctx = _merge(attention_heads(q, k, v, keep, d**-0.5))
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
