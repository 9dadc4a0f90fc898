"""Tests of rlx_rules.kernels against the float64 numpy reference: shapes, masks, bias, RoPE, threads, every SIMD path, input errors, NaN/Inf."""

from __future__ import annotations

import concurrent.futures

import numpy as np
import pytest

import test_kernels_reference as ref
from rlx_rules import kernels as K
from rlx_rules import FusedAttentionBlock, attention, fused_attention_block

PATHS = K.simd_paths()
RTOL = ATOL = 1e-4


@pytest.fixture(params=PATHS)
def simd(request, monkeypatch):
    """Forces each SIMD path this CPU has through RLX_RULES_SIMD."""
    monkeypatch.setenv("RLX_RULES_SIMD", request.param)
    assert K.selected_simd() == request.param
    return request.param


def make_mask(kind: str, b: int, s: int, rng) -> np.ndarray | None:
    if kind == "none":
        return None
    if kind == "ones":
        return np.ones((b, s), np.float32)
    if kind == "padded":  # tails padded, different lengths per batch
        lengths = [max(1, s - (i * 3) % max(s, 1)) for i in range(b)]
        return (np.arange(s)[None, :] < np.array(lengths)[:, None]).astype(np.float32)
    if kind == "fully_masked":  # batch 0 has every key masked
        m = np.ones((b, s), np.float32)
        m[0] = 0.0
        return m
    if kind == "random":  # values straddling the 0.5 threshold
        return rng.choice(np.array([0.0, 0.45, 0.5, 0.55, 1.0], np.float32), size=(b, s))
    raise AssertionError(kind)


def make_block(b, s, h, rng, bias=True):
    x = rng.standard_normal((b, s, h), dtype=np.float32)
    qkv_w = (rng.standard_normal((h, 3 * h)) * (1.5 / np.sqrt(h))).astype(np.float32)
    out_w = (rng.standard_normal((h, h)) / np.sqrt(h)).astype(np.float32)
    qkv_b = (rng.standard_normal(3 * h) * 0.3).astype(np.float32) if bias else None
    out_b = (rng.standard_normal(h) * 0.3).astype(np.float32) if bias else None
    return x, qkv_w, out_w, qkv_b, out_b


# (B, S, H, heads): B and S of 1, odd sizes, head_dim 1, 16, 64, 80, S up to 512.
SHAPES = [
    (1, 1, 16, 1),
    (1, 1, 64, 4),
    (2, 1, 8, 8),  # head_dim 1
    (1, 7, 48, 3),  # head_dim 16
    (3, 5, 64, 1),  # head_dim 64
    (2, 9, 160, 2),  # head_dim 80
    (1, 64, 128, 2),
    (4, 16, 96, 6),
    (2, 20, 64, 2),  # key blocks narrower than 64 keys (2 vectors on AVX-512)
    (2, 33, 80, 1),  # head_dim 80, odd S past one key block (AVX2), 3 vectors wide (AVX-512)
    (1, 130, 64, 4),
    (1, 512, 64, 1),  # long sequence, several query and key blocks
]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("mask_kind", ["ones", "padded", "fully_masked", "random"])
def test_block_matches_reference(simd, shape, mask_kind):
    b, s, h, nh = shape
    rng = np.random.default_rng(hash((shape, mask_kind)) % 2**32)
    x, qkv_w, out_w, qkv_b, out_b = make_block(b, s, h, rng)
    mask = make_mask(mask_kind, b, s, rng)
    want = ref.fused_attention_block(x, qkv_w, out_w, mask, qkv_b, out_b, num_heads=nh)
    for threads in (1, None):
        got = fused_attention_block(x, qkv_w, out_w, mask, qkv_b, out_b, num_heads=nh, threads=threads)
        assert got.dtype == np.float32 and got.shape == (b, s, h)
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=f"threads={threads}")


@pytest.mark.parametrize("shape", [(1, 1, 16, 8), (2, 7, 48, 3), (1, 33, 160, 2), (2, 100, 128, 2), (1, 512, 64, 4)], ids=str)
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
def test_block_with_rope_and_prepared_form(simd, shape, bias):
    b, s, h, nh = shape
    d = h // nh
    rng = np.random.default_rng(b * 1000 + s + bias)
    x, qkv_w, out_w, qkv_b, out_b = make_block(b, s, h, rng, bias=bias)
    mask = make_mask("padded", b, s, rng)
    rope = ref.rope_tables(s, d)
    prepared = FusedAttentionBlock(qkv_w, out_w, qkv_b, out_b, num_heads=nh)
    for use_rope in (None, rope):
        want = ref.fused_attention_block(x, qkv_w, out_w, mask, qkv_b, out_b, num_heads=nh, rope=use_rope)
        for threads in (1, 2):
            got = fused_attention_block(x, qkv_w, out_w, mask, qkv_b, out_b, num_heads=nh, rope=use_rope, threads=threads)
            np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
            got = prepared(x, mask, rope=use_rope, threads=threads)
            np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def test_every_path_agrees_with_scalar(monkeypatch):
    rng = np.random.default_rng(11)
    x, qkv_w, out_w, qkv_b, out_b = make_block(2, 37, 160, rng)
    mask = make_mask("random", 2, 37, rng)
    rope = ref.rope_tables(37, 80)
    outs = {}
    for path in PATHS:
        monkeypatch.setenv("RLX_RULES_SIMD", path)
        outs[path] = fused_attention_block(x, qkv_w, out_w, mask, qkv_b, out_b, num_heads=2, rope=rope)
    for path, out in outs.items():
        np.testing.assert_allclose(out, outs["scalar"], rtol=2e-5, atol=2e-5, err_msg=path)


def test_forcing_an_unknown_path_falls_back_to_the_default(monkeypatch):
    monkeypatch.setenv("RLX_RULES_SIMD", "no-such-path")
    assert K.selected_simd() == PATHS[-1]


def test_threads_env_var_sets_the_default(monkeypatch):
    monkeypatch.setenv("RLX_RULES_THREADS", "3")
    assert K.default_threads() == 3
    rng = np.random.default_rng(2)
    x, qkv_w, out_w, qkv_b, out_b = make_block(2, 40, 64, rng)
    want = ref.fused_attention_block(x, qkv_w, out_w, None, qkv_b, out_b, num_heads=4)
    np.testing.assert_allclose(fused_attention_block(x, qkv_w, out_w, None, qkv_b, out_b, num_heads=4), want, rtol=RTOL, atol=ATOL)


ATTENTION_CASES = [
    (shape, kind)
    for shape in [(1, 1, 1, 16, 2), (2, 9, 9, 48, 3), (2, 70, 5, 64, 1), (1, 200, 200, 80, 1)]
    for kind in ["custom", "none", "causal"]  # causal with Sq != Sk: the queries are the last positions
]


@pytest.mark.parametrize("shape, mask_kind", ATTENTION_CASES, ids=str)
def test_attention_matches_reference(simd, shape, mask_kind):
    b, sq, sk, h, nh = shape
    rng = np.random.default_rng(sq * 7 + sk)
    q = rng.standard_normal((b, sq, h), dtype=np.float32)
    k = rng.standard_normal((b, sk, h), dtype=np.float32)
    v = rng.standard_normal((b, sk, h), dtype=np.float32)
    mask = make_mask("random", b, sk, rng) if mask_kind != "none" else None
    for scale in (None, 0.7):
        want = ref.attention(q, k, v, mask, num_heads=nh, mask_kind=mask_kind, scale=scale)
        for threads in (1, 2):
            got = attention(q, k, v, mask, num_heads=nh, mask_kind=mask_kind, scale=scale, threads=threads)
            np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def test_fully_masked_rows_are_uniform_not_nan():
    rng = np.random.default_rng(4)
    q, k, v = (rng.standard_normal((1, 6, 8), dtype=np.float32) for _ in range(3))
    out = attention(q, k, v, np.zeros((1, 6), np.float32), num_heads=2)
    np.testing.assert_allclose(out, np.broadcast_to(v.mean(axis=1, keepdims=True), out.shape), rtol=1e-5, atol=1e-6)


def test_mask_of_other_dtypes_is_accepted():
    rng = np.random.default_rng(5)
    x, qkv_w, out_w, qkv_b, out_b = make_block(2, 5, 32, rng)
    m = np.array([[1, 1, 1, 0, 0], [1, 0, 1, 1, 1]])
    want = ref.fused_attention_block(x, qkv_w, out_w, m, qkv_b, out_b, num_heads=2)
    for mask in (m.astype(bool), m.astype(np.int64), m.astype(np.float64)):
        got = fused_attention_block(x, qkv_w, out_w, mask, qkv_b, out_b, num_heads=2)
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def test_nan_and_inf_propagate_like_numpy(simd):
    rng = np.random.default_rng(6)
    x, qkv_w, out_w, qkv_b, out_b = make_block(3, 6, 32, rng)
    mask = make_mask("padded", 3, 6, rng)
    x[1, 2, 5] = np.nan
    x[2, 0, :] = np.inf
    want = ref.fused_attention_block(x, qkv_w, out_w, mask, qkv_b, out_b, num_heads=4)
    got = fused_attention_block(x, qkv_w, out_w, mask, qkv_b, out_b, num_heads=4)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isfinite(got), np.isfinite(want))
    np.testing.assert_allclose(got[0], want[0], rtol=RTOL, atol=ATOL)


def test_concurrent_calls_from_python_threads_are_correct():
    """The GIL is released; calls from several threads share pools and scratch safely."""
    rng = np.random.default_rng(8)
    blocks = [make_block(2, 20 + i, 64, rng) for i in range(6)]
    prepared = [FusedAttentionBlock(w, o, qb, ob, num_heads=4) for _, w, o, qb, ob in blocks]
    wants = [ref.fused_attention_block(x, w, o, None, qb, ob, num_heads=4) for x, w, o, qb, ob in blocks]

    def run(i):
        x, w, o, qb, ob = blocks[i]
        for _ in range(5):
            a = fused_attention_block(x, w, o, None, qb, ob, num_heads=4, threads=2)
            b = prepared[i](x, threads=1 + i % 2)
        return a, b

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(run, range(len(blocks))))
    for (a, b), want in zip(results, wants):
        np.testing.assert_allclose(a, want, rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(b, want, rtol=RTOL, atol=ATOL)


def test_prepared_block_reports_its_shape():
    rng = np.random.default_rng(9)
    _, qkv_w, out_w, qkv_b, out_b = make_block(1, 1, 48, rng)
    block = FusedAttentionBlock(qkv_w, out_w, qkv_b, out_b, num_heads=3)
    assert (block.hidden, block.num_heads, block.head_dim) == (48, 3, 16)
    assert block.nbytes >= 4 * (48 * 144 + 48 * 48)
    assert "hidden=48" in repr(block)


# ---- input errors: clear TypeError / ValueError naming the argument and shapes ----

def _good(h=16, nh=2):
    rng = np.random.default_rng(0)
    x, qkv_w, out_w, qkv_b, out_b = make_block(2, 3, h, rng)
    return dict(hidden=x, qkv_w=qkv_w, out_w=out_w, mask=np.ones((2, 3), np.float32), qkv_b=qkv_b, out_b=out_b, num_heads=nh)


@pytest.mark.parametrize(
    "change, exc, words",
    [
        (dict(hidden=np.zeros((2, 3, 16))), TypeError, ["hidden", "float64"]),
        (dict(hidden=np.zeros((2, 3, 16), np.int32)), TypeError, ["hidden", "int32"]),
        (dict(hidden=[[[0.0] * 16] * 3] * 2), TypeError, ["hidden", "list"]),
        (dict(hidden=np.zeros((6, 16), np.float32)), ValueError, ["hidden", "3 dimensions", "[6, 16]"]),
        (dict(hidden=np.zeros((2, 3, 32), np.float32)[:, :, ::2]), ValueError, ["hidden", "C-contiguous"]),
        (dict(qkv_w=np.zeros((16, 47), np.float32)), ValueError, ["qkv_w", "[16, 48]", "[16, 47]"]),
        (dict(qkv_w=np.zeros((16, 48), np.float64)), TypeError, ["qkv_w", "float64"]),
        (dict(out_w=np.zeros((16, 16), np.float32).T[:, :], qkv_w=np.zeros((16, 48), np.float32)), None, []),
        (dict(out_w=np.zeros((48, 16), np.float32)[::3]), ValueError, ["out_w", "C-contiguous"]),
        (dict(out_w=np.zeros((16, 15), np.float32)), ValueError, ["out_w", "[16, 16]"]),
        (dict(qkv_b=np.zeros(47, np.float32)), ValueError, ["qkv_b", "[48]", "[47]"]),
        (dict(out_b=np.zeros((1, 16), np.float32)), ValueError, ["out_b", "1 dimensions"]),
        (dict(mask=np.ones((2, 4), np.float32)), ValueError, ["mask", "[2, 3]", "[2, 4]"]),
        (dict(mask=np.array([["a"] * 3] * 2)), TypeError, ["mask"]),
        (dict(num_heads=3), ValueError, ["16", "num_heads=3"]),
        (dict(num_heads=0), ValueError, ["num_heads"]),
        (dict(threads=0), ValueError, ["threads"]),
        (dict(rope=np.zeros((3, 4), np.float32)), TypeError, ["rope"]),
        (dict(rope=(np.zeros((3, 4), np.float32), np.zeros((3, 3), np.float32))), ValueError, ["rope sin", "[3, 4]", "[3, 3]"]),
        (dict(rope=(np.zeros((3, 4), np.float64), np.zeros((3, 4), np.float32))), TypeError, ["rope cos", "float64"]),
        (dict(num_heads=16, rope=(np.zeros((3, 0), np.float32), np.zeros((3, 0), np.float32))), ValueError, ["even rotary_dim", "head_dim=1"]),
    ],
)
def test_block_input_errors(change, exc, words):
    args = _good()
    args.update(change)
    if exc is None:  # a transposed (F-ordered) weight is non-contiguous in C order: refused too
        with pytest.raises(ValueError, match="out_w"):
            fused_attention_block(**args)
        return
    with pytest.raises(exc) as info:
        fused_attention_block(**args)
    for w in words:
        assert w in str(info.value), (w, str(info.value))


def test_native_layer_checks_too():
    """The binding re-checks what the wrapper checks (it never trusts its caller)."""
    from rlx_rules import _native

    a = _good()
    with pytest.raises(TypeError, match="hidden.*float64"):
        _native.fused_attention_block(a["hidden"].astype(np.float64), a["qkv_w"], a["out_w"], num_heads=2)
    with pytest.raises(ValueError, match="qkv_w.*\\[16, 48\\]"):
        _native.fused_attention_block(a["hidden"], a["qkv_w"][:, :40].copy(), a["out_w"], num_heads=2)
    with pytest.raises(ValueError, match="mask.*\\[2, 3\\]"):
        _native.fused_attention_block(a["hidden"], a["qkv_w"], a["out_w"], np.ones((3, 2), np.float32), num_heads=2)
    with pytest.raises(ValueError, match="C-contiguous"):
        _native.attention(a["hidden"][:, ::2], a["hidden"], a["hidden"], num_heads=2, mask_kind="none")
    with pytest.raises(ValueError, match="both the cos and the sin"):
        _native.fused_attention_block(a["hidden"], a["qkv_w"], a["out_w"], num_heads=2, rope_cos=np.zeros((3, 4), np.float32))


def test_prepared_block_input_errors():
    a = _good()
    with pytest.raises(ValueError, match="out_w.*\\[16, 16\\]"):
        FusedAttentionBlock(a["qkv_w"], np.zeros((8, 8), np.float32), num_heads=2)
    with pytest.raises(ValueError, match="num_heads=5"):
        FusedAttentionBlock(a["qkv_w"], a["out_w"], num_heads=5)
    block = FusedAttentionBlock(a["qkv_w"], a["out_w"], a["qkv_b"], a["out_b"], num_heads=2)
    with pytest.raises(ValueError, match="hidden.*\\[batch, seq, 16\\].*\\[2, 3, 8\\]"):
        block(np.zeros((2, 3, 8), np.float32))
    with pytest.raises(ValueError, match="mask.*\\[2, 3\\]"):
        block(a["hidden"], np.ones((2, 2), np.float32))


def test_attention_input_errors():
    x = np.zeros((2, 4, 8), np.float32)
    with pytest.raises(ValueError, match="mask_kind='custom' needs a mask"):
        attention(x, x, x, num_heads=2)
    with pytest.raises(ValueError, match="mask_kind must be"):
        attention(x, x, x, num_heads=2, mask_kind="sliding")
    with pytest.raises(ValueError, match="takes no mask"):
        attention(x, x, x, np.ones((2, 4), np.float32), num_heads=2, mask_kind="none")
    with pytest.raises(ValueError, match="k must have shape \\[2, 4, 8\\].*\\[2, 4, 6\\]"):
        attention(x, np.zeros((2, 4, 6), np.float32), x, num_heads=2, mask_kind="none")
    with pytest.raises(ValueError, match="rope in attention needs seq_q <= seq_k.*4 and 3"):
        y = np.zeros((2, 3, 8), np.float32)
        attention(x, y, y, num_heads=2, mask_kind="causal", rope=(np.ones((3, 2), np.float32),) * 2)
    with pytest.raises(ValueError, match="mask.*\\[2, 4\\]"):
        attention(x, x, x, np.ones((2, 5), np.float32), num_heads=2)


def test_empty_inputs_give_empty_outputs():
    rng = np.random.default_rng(1)
    _, qkv_w, out_w, qkv_b, out_b = make_block(1, 1, 16, rng)
    out = fused_attention_block(np.zeros((0, 4, 16), np.float32), qkv_w, out_w, np.zeros((0, 4), np.float32), num_heads=2)
    assert out.shape == (0, 4, 16)
    out = fused_attention_block(np.zeros((2, 0, 16), np.float32), qkv_w, out_w, None, num_heads=2)
    assert out.shape == (2, 0, 16)
