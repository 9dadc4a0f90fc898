"""Hypothesis property tests of rlx_rules.kernels over random shapes, masks (every rank), additive bias, GQA, RoPE, fully-masked-row semantics and thread counts, against the float64 numpy reference."""

from __future__ import annotations

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import test_kernels_reference as ref  # noqa: E402
from rlx_rules import FusedAttentionBlock, attention, fused_attention_block  # noqa: E402

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)


@st.composite
def block_cases(draw):
    b = draw(st.integers(1, 3))
    s = draw(st.integers(1, 70))
    nh = draw(st.integers(1, 4))
    use_rope = draw(st.booleans())
    d = draw(st.integers(1, 12).map(lambda x: 2 * x) if use_rope else st.integers(1, 24))
    bias = draw(st.booleans())
    mask_kind = draw(st.sampled_from(["none", "random", "zeros"]))
    threads = draw(st.sampled_from([1, 2, None]))
    seed = draw(st.integers(0, 2**32 - 1))
    return b, s, nh, d, use_rope, bias, mask_kind, threads, seed


def _inputs(b, s, h, bias, mask_kind, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((b, s, h), dtype=np.float32)
    qkv_w = (rng.standard_normal((h, 3 * h)) / np.sqrt(h)).astype(np.float32)
    out_w = (rng.standard_normal((h, h)) / np.sqrt(h)).astype(np.float32)
    qkv_b = rng.standard_normal(3 * h).astype(np.float32) if bias else None
    out_b = rng.standard_normal(h).astype(np.float32) if bias else None
    mask = {
        "none": None,
        "random": (rng.random((b, s)) < 0.7).astype(np.float32),
        "zeros": np.zeros((b, s), np.float32),
    }[mask_kind]
    return x, qkv_w, out_w, qkv_b, out_b, mask


@SETTINGS
@given(block_cases())
def test_block_and_prepared_match_reference(case):
    b, s, nh, d, use_rope, bias, mask_kind, threads, seed = case
    h = nh * d
    x, qkv_w, out_w, qkv_b, out_b, mask = _inputs(b, s, h, bias, mask_kind, seed)
    rope = ref.rope_tables(s, d) if use_rope else None
    want = ref.fused_attention_block(x, qkv_w, out_w, mask, qkv_b, out_b, num_heads=nh, rope=rope)
    got = fused_attention_block(x, qkv_w, out_w, mask, qkv_b, out_b, num_heads=nh, rope=rope, threads=threads)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    prepared = FusedAttentionBlock(qkv_w, out_w, qkv_b, out_b, num_heads=nh)
    np.testing.assert_allclose(prepared(x, mask, rope=rope, threads=threads), want, rtol=1e-4, atol=1e-4)


@SETTINGS
@given(
    b=st.integers(1, 3),
    sq=st.integers(1, 90),
    sk=st.integers(1, 90),
    nh=st.integers(1, 3),
    d=st.integers(1, 40),
    kind=st.sampled_from(["custom", "none", "causal"]),
    scale=st.one_of(st.none(), st.floats(0.01, 2.0)),
    seed=st.integers(0, 2**32 - 1),
)
def test_attention_matches_reference(b, sq, sk, nh, d, kind, scale, seed):
    h = nh * d
    rng = np.random.default_rng(seed)
    q, k = rng.standard_normal((b, sq, h), dtype=np.float32), rng.standard_normal((b, sk, h), dtype=np.float32)
    v = rng.standard_normal((b, sk, h), dtype=np.float32)
    mask = (rng.random((b, sk)) < 0.6).astype(np.float32) if kind == "custom" else None
    want = ref.attention(q, k, v, mask, num_heads=nh, mask_kind=kind, scale=scale)
    got = attention(q, k, v, mask, num_heads=nh, mask_kind=kind, scale=scale)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@SETTINGS
@given(
    s=st.integers(1, 30),
    d=st.integers(1, 16),
    seed=st.integers(0, 2**32 - 1),
)
def test_softmax_rows_are_convex_combinations_of_v(s, d, seed):
    """Each output row lies within the per-column range of V (softmax weights are a convex combination)."""
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((1, s, d), dtype=np.float32) * 3 for _ in range(3))
    out = attention(q, k, v, num_heads=1, mask_kind="none")
    assert np.all(out <= v.max(axis=1, keepdims=True) + 1e-5)
    assert np.all(out >= v.min(axis=1, keepdims=True) - 1e-5)


@st.composite
def variant_cases(draw):
    b, sq, sk = draw(st.integers(1, 2)), draw(st.integers(1, 70)), draw(st.integers(1, 70))
    kv = draw(st.integers(1, 3))
    nh = kv * draw(st.integers(1, 3))
    rot = draw(st.sampled_from([0, 2, 4]))
    d = draw(st.integers(max(rot, 1), 20))
    mask_shape = draw(st.sampled_from([None, (b, sk), (b, sq, sk), (b, 1, sq, sk), (b, nh, sq, sk), (1, nh, 1, sk)]))
    bias_shape = draw(st.sampled_from([None, (b, sk), (1, nh, sq, sk), (b, 1, 1, sk)]))
    kind = draw(st.sampled_from(["causal", "none" if mask_shape is None else "custom"]))
    if kind == "custom" and mask_shape is None and bias_shape is None:
        kind = "none"
    rows = draw(st.sampled_from(["uniform", "zero"]))
    style = draw(st.sampled_from(["neox", "gptj"]))
    return b, sq, sk, nh, kv, d, rot if sq <= sk else 0, mask_shape, bias_shape, kind, rows, style, draw(st.integers(0, 2**32 - 1))


@SETTINGS
@given(variant_cases())
def test_attention_variants_match_reference(case):
    b, sq, sk, nh, kv, d, rot, mask_shape, bias_shape, kind, rows, style, seed = case
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((b, sq, nh * d), dtype=np.float32)
    k, v = (rng.standard_normal((b, sk, kv * d), dtype=np.float32) for _ in range(2))
    mask = None if mask_shape is None else rng.random(mask_shape) < 0.6
    bias = None
    if bias_shape is not None:
        bias = rng.standard_normal(bias_shape).astype(np.float32)
        bias[rng.random(bias_shape) < 0.1] = -np.inf
    rope = ref.rope_tables(sk, rot) if rot else None
    want = ref.attention(q, k, v, mask, num_heads=nh, mask_kind=kind, bias=bias, masked_rows=rows, rope=rope, rope_style=style)
    got = attention(q, k, v, mask, num_heads=nh, mask_kind=kind, bias=bias, masked_rows=rows, rope=rope, rope_style=style)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
