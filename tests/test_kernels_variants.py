"""Every attention the rules produce, through rlx_rules.attention and the fused block, against the float64 reference on every SIMD path: keep masks of every rank, additive bias, causal (Sq != Sk too), both fully-masked-row semantics, GQA/MQA, full and partial RoPE, logit soft-cap, sliding window, V heads of their own size; plus the interpreter's semantics and argument errors (misaligned arrays included)."""

from __future__ import annotations

import numpy as np
import pytest

import test_kernels_reference as ref
from rlx_rules import FusedAttentionBlock, attention, fused_attention_block
from rlx_rules.errors import KernelError
from rlx_rules.interpret import attention as interpret_attention
from rlx_rules.interpret import rope as interpret_rope
from test_kernels import RTOL, ATOL, make_block, make_mask, simd  # noqa: F401  (simd is a fixture)


def qkv(rng, b, sq, sk, nh, d, kv_heads=None):
    kv = nh if kv_heads is None else kv_heads
    return (rng.standard_normal((b, sq, nh * d), dtype=np.float32),
            rng.standard_normal((b, sk, kv * d), dtype=np.float32),
            rng.standard_normal((b, sk, kv * d), dtype=np.float32))


def keep_mask(rng, shape, fully_masked_row=True):
    """A random 0/1 keep mask of ``shape`` whose first row (batch 0, first query) is fully masked when asked."""
    m = (rng.random(shape) > 0.35).astype(np.float32)
    if fully_masked_row:
        m[(0,) * (m.ndim - 1)] = 0.0
    return m


# (B, Sq, Sk, heads, kv_heads, head_dim): Sq != Sk both ways, S=1, head_dim not a multiple of 8, GQA, MQA.
SHAPES = [
    (1, 1, 1, 1, 1, 8),
    (2, 5, 9, 4, 4, 5),
    (2, 9, 4, 2, 2, 13),
    (1, 70, 70, 8, 2, 16),
    (2, 33, 130, 6, 1, 12),
    (1, 130, 67, 4, 4, 24),
]
MASKS = ["none", "keys", "rows", "rows3", "heads", "broadcast"]


def mask_of(kind, rng, b, nh, sq, sk):
    shapes = {"keys": (b, sk), "rows": (b, 1, sq, sk), "rows3": (b, sq, sk), "heads": (b, nh, sq, sk), "broadcast": (1, 1, sq, sk)}
    return None if kind == "none" else keep_mask(rng, shapes[kind])


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("masked_rows", ["uniform", "zero"])
def test_keep_masks_causal_and_gqa(simd, shape, mask, masked_rows):
    b, sq, sk, nh, kv, d = shape
    rng = np.random.default_rng(sum(shape) + len(mask))
    q, k, v = qkv(rng, b, sq, sk, nh, d, kv)
    m = mask_of(mask, rng, b, nh, sq, sk)
    for mask_kind in (["none", "causal"] if m is None else ["custom", "causal"]):
        want = ref.attention(q, k, v, m, num_heads=nh, mask_kind=mask_kind, masked_rows=masked_rows)
        for threads in (1, 2):
            got = attention(q, k, v, m, num_heads=nh, mask_kind=mask_kind, masked_rows=masked_rows, threads=threads)
            np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=f"{mask_kind} threads={threads}")


@pytest.mark.parametrize("shape", SHAPES[1:], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("bias_kind", ["alibi", "relative", "additive_mask"])
@pytest.mark.parametrize("masked_rows", ["uniform", "zero"])
def test_additive_bias(simd, shape, bias_kind, masked_rows):
    b, sq, sk, nh, kv, d = shape
    rng = np.random.default_rng(sum(shape))
    q, k, v = qkv(rng, b, sq, sk, nh, d, kv)
    if bias_kind == "alibi":  # [1, H, Sq, Sk]: -slope·distance
        slopes = 2.0 ** (-8.0 * np.arange(1, nh + 1) / nh)
        dist = np.abs(np.arange(sq)[:, None] + sk - sq - np.arange(sk)[None, :])
        bias = (-slopes[:, None, None] * dist)[None].astype(np.float32)
    elif bias_kind == "relative":  # [B, H, Sq, Sk]
        bias = rng.standard_normal((b, nh, sq, sk), dtype=np.float32)
    else:  # [B, 1, Sq, Sk] of 0 / -inf, one row all -inf
        bias = np.where(keep_mask(rng, (b, 1, sq, sk)) > 0.5, 0.0, -np.inf).astype(np.float32)
    for mask_kind, m in [("custom", None), ("causal", None), ("custom", keep_mask(rng, (b, sk), False))]:
        want = ref.attention(q, k, v, m, num_heads=nh, mask_kind=mask_kind, bias=bias, masked_rows=masked_rows)
        got = attention(q, k, v, m, num_heads=nh, mask_kind=mask_kind, bias=bias, masked_rows=masked_rows, threads=2)
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=mask_kind)


@pytest.mark.parametrize("style", ["neox", "gptj"])
@pytest.mark.parametrize("rotary", ["full", "partial"])
def test_rope_on_q_and_k(simd, style, rotary):
    for b, sq, sk, nh, kv, d in [(2, 7, 7, 4, 2, 16), (1, 3, 20, 2, 1, 10), (1, 1, 1, 2, 2, 4), (1, 65, 130, 3, 3, 24)]:
        rng = np.random.default_rng(d + sq)
        q, k, v = qkv(rng, b, sq, sk, nh, d, kv)
        rot = d if rotary == "full" else max(2, (d // 2) & ~1)
        rope = ref.rope_tables(sk, rot)
        for mask_kind in ("none", "causal"):
            want = ref.attention(q, k, v, num_heads=nh, mask_kind=mask_kind, rope=rope, rope_style=style)
            got = attention(q, k, v, num_heads=nh, mask_kind=mask_kind, rope=rope, rope_style=style, threads=2)
            np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=f"{(b, sq, sk, nh, kv, d)} {mask_kind}")


def test_zero_rows_are_exactly_zero_and_uniform_rows_the_mean():
    rng = np.random.default_rng(11)
    q, k, v = qkv(rng, 2, 4, 6, 2, 8)
    m = np.ones((2, 1, 4, 6), np.float32)
    m[1, 0, 2] = 0.0  # batch 1, query 2: every key masked
    zero = attention(q, k, v, m, num_heads=2, masked_rows="zero")
    assert not zero[1, 2].any()
    uniform = attention(q, k, v, m, num_heads=2)
    np.testing.assert_allclose(uniform[1, 2], v[1].mean(axis=0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(zero[0], uniform[0], rtol=1e-6, atol=1e-6)
    # causal with more queries than keys: the first Sq - Sk queries see no key
    q2 = rng.standard_normal((1, 9, 16), dtype=np.float32)
    out = attention(q2, k[:1], v[:1], num_heads=2, mask_kind="causal", masked_rows="zero")
    assert not out[0, :3].any() and out[0, 3:].all()


def test_block_masked_rows_and_partial_rope(simd):
    rng = np.random.default_rng(12)
    x, qkv_w, out_w, qkv_b, out_b = make_block(3, 9, 48, rng)
    mask = make_mask("fully_masked", 3, 9, rng)
    rope = ref.rope_tables(9, 8)  # rotary_dim 8 of head_dim 16
    block = FusedAttentionBlock(qkv_w, out_w, qkv_b, out_b, num_heads=3)
    for masked_rows in ("uniform", "zero"):
        for r in (None, rope):
            want = ref.fused_attention_block(x, qkv_w, out_w, mask, qkv_b, out_b, num_heads=3, rope=r, masked_rows=masked_rows)
            for threads in (1, 2):
                got = fused_attention_block(x, qkv_w, out_w, mask, qkv_b, out_b, num_heads=3, rope=r,
                                            masked_rows=masked_rows, threads=threads)
                np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
                got = block(x, mask, rope=r, masked_rows=masked_rows, threads=threads)
                np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    # batch 0 is fully masked: with "zero" its context is 0, so the block gives the output bias
    got = fused_attention_block(x, qkv_w, out_w, mask, qkv_b, out_b, num_heads=3, masked_rows="zero")
    np.testing.assert_allclose(got[0], np.broadcast_to(out_b, (9, 48)), rtol=1e-6, atol=1e-6)


# ---- the interpreter's Attention and Rope semantics (RLX), independently of the reference above ----

@pytest.mark.parametrize("masked_rows", ["uniform", "zero"])
@pytest.mark.parametrize("case", ["custom4d", "custom3d", "bias", "bias_inf", "causal_kv_cache", "causal_more_queries",
                                  "gqa_custom", "none"])
def test_matches_the_interpreter_attention_op(case, masked_rows):
    rng = np.random.default_rng(len(case))
    b, sq, sk, nh, d = 2, 5, 11, 4, 8
    if case == "causal_more_queries":  # the first Sq - Sk queries see no key
        sq, sk = 11, 5
    kv = 2 if case == "gqa_custom" else nh
    q, k, v = qkv(rng, b, sq, sk, nh, d, kv)
    kind, mask, kwargs = {
        "custom4d": ("Custom", keep_mask(rng, (b, 1, sq, sk)), {}),
        "custom3d": ("Custom", keep_mask(rng, (b, sq, sk)), {}),
        "bias": ("Bias", rng.standard_normal((1, nh, sq, sk)).astype(np.float32), {}),
        "bias_inf": ("Bias", np.where(keep_mask(rng, (b, 1, sq, sk)) > 0.5, 0.0, -np.inf).astype(np.float32), {}),
        "causal_kv_cache": ("Causal", None, {}),
        "causal_more_queries": ("Causal", None, {}),
        "gqa_custom": ("Custom", keep_mask(rng, (b, sk)), {}),
        "none": ("None", None, {"scale": 0.3}),
    }[case]
    with np.errstate(invalid="ignore"):  # uniform rows of only -inf bias are NaN, as numpy's softmax gives
        want = interpret_attention(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64),
                                   None if mask is None else mask.astype(np.float64), nh, d, kind, kwargs.get("scale"),
                                   masked_rows=masked_rows)
    got = attention(q, k, v, None if kind == "Bias" else mask, bias=mask if kind == "Bias" else None, num_heads=nh,
                    mask_kind={"Bias": "custom"}.get(kind, kind.lower()), masked_rows=masked_rows, **kwargs)
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


# name: (Sq, Sk, kv heads, RLX mask kind, window, soft-cap, v_head_dim)
VARIANTS = {
    "softcap": (9, 9, 4, "None", None, 1.2, None),
    "softcap-causal-gqa": (7, 12, 2, "Causal", None, 0.5, None),
    "window": (140, 140, 4, "SlidingWindow", 6, None, None),
    "window-0": (9, 9, 4, "SlidingWindow", 0, None, None),
    "window-kv-cache-mqa": (3, 100, 1, "SlidingWindow", 40, None, None),
    "window-more-queries": (11, 5, 4, "SlidingWindow", 2, None, None),
    "v-wider": (9, 13, 4, "None", None, None, 20),
    "v-narrower-gqa": (70, 70, 2, "Causal", None, None, 3),
    "all-three": (66, 66, 2, "SlidingWindow", 9, 2.0, 12),
}


@pytest.mark.parametrize("masked_rows", ["uniform", "zero"])
@pytest.mark.parametrize("case", VARIANTS)
def test_variants_match_the_interpreter_attention_op(simd, case, masked_rows):
    sq, sk, kv, kind, window, cap, vd = VARIANTS[case]
    rng = np.random.default_rng(len(case) + sq)
    b, nh, d = 2, 4, 8
    q, k, _ = qkv(rng, b, sq, sk, nh, d, kv)
    q *= 2.0  # scores of a few units: the soft-caps bite
    v = rng.standard_normal((b, sk, kv * (vd or d)), dtype=np.float32)
    want = interpret_attention(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64), None, nh, d, kind,
                               window=window, softcap=cap, v_head_dim=vd, masked_rows=masked_rows)
    for threads in (1, 2):
        got = attention(q, k, v, num_heads=nh, mask_kind={"SlidingWindow": "causal"}.get(kind, kind.lower()),
                        softcap=cap, window=window, masked_rows=masked_rows, threads=threads)
        assert got.shape == (b, sq, nh * (vd or d))
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=f"threads={threads}")


@pytest.mark.parametrize("style", ["NeoX", "GptJ"])
def test_rope_matches_the_interpreter_rope_op(style):
    rng = np.random.default_rng(5)
    b, s, nh, d, n_rot = 2, 6, 2, 12, 8
    q, k, v = qkv(rng, b, s, s, nh, d)
    cos, sin = ref.rope_tables(s, n_rot)
    qr, kr = (interpret_rope(t.astype(np.float64), cos, sin, d, n_rot, style) for t in (q, k))
    want = interpret_attention(qr, kr, v.astype(np.float64), None, nh, d, "Causal")
    got = attention(q, k, v, num_heads=nh, mask_kind="causal", rope=(cos, sin), rope_style=style.lower())
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


# ---- argument errors: typed, naming the argument; never a panic ----

def misaligned(a: np.ndarray) -> np.ndarray:
    """A copy of ``a`` whose data starts one byte into its buffer (not aligned to 4 bytes)."""
    out = np.ndarray(a.shape, a.dtype, buffer=bytearray(a.nbytes + 1), offset=1)
    out[...] = a
    return out


def test_misaligned_arrays_are_refused_by_every_entry_point():
    rng = np.random.default_rng(13)
    x, qkv_w, out_w, qkv_b, out_b = make_block(2, 3, 16, rng)
    q, k, v = qkv(rng, 2, 3, 3, 2, 8)
    rope = ref.rope_tables(3, 8)
    block = FusedAttentionBlock(qkv_w, out_w, qkv_b, out_b, num_heads=2)
    calls = {
        "hidden": lambda: fused_attention_block(misaligned(x), qkv_w, out_w, None, num_heads=2),
        "qkv_w": lambda: fused_attention_block(x, misaligned(qkv_w), out_w, None, num_heads=2),
        "out_b": lambda: fused_attention_block(x, qkv_w, out_w, None, qkv_b, misaligned(out_b), num_heads=2),
        "rope cos": lambda: fused_attention_block(x, qkv_w, out_w, None, num_heads=2, rope=(misaligned(rope[0]), rope[1])),
        "out_w": lambda: FusedAttentionBlock(qkv_w, misaligned(out_w), num_heads=2),
        "hidden ": lambda: block(misaligned(x)),
        "q": lambda: attention(misaligned(q), k, v, num_heads=2, mask_kind="none"),
        "v": lambda: attention(q, k, misaligned(v), num_heads=2, mask_kind="none"),
        "bias": lambda: attention(q, k, v, num_heads=2, bias=misaligned(np.zeros((2, 3), np.float32))),
    }
    for name, call in calls.items():
        with pytest.raises(KernelError, match=f"{name.strip()} .*not aligned to 4 bytes") as info:
            call()
        assert isinstance(info.value, ValueError) and info.value.kind == "layout"
    # a mask is cast to float32 anyway: a misaligned one is copied and works
    m = keep_mask(rng, (2, 3), False)
    np.testing.assert_array_equal(attention(q, k, v, misaligned(m), num_heads=2), attention(q, k, v, m, num_heads=2))


@pytest.mark.parametrize(
    "change, exc, words",
    [
        (dict(mask=np.ones((2, 5), np.float32)), ValueError, ["mask must have shape [2, 4]", "[2, 2, 3, 4]", "got [2, 5]"]),
        (dict(mask=np.ones((2, 3, 3, 4), np.float32)), ValueError, ["mask", "[2, 3, 3, 4]"]),
        (dict(mask=np.ones((4,), np.float32)), ValueError, ["mask", "got [4]"]),
        (dict(bias=np.ones((2, 2, 3, 5), np.float32)), ValueError, ["bias", "[2, 2, 3, 4]", "[2, 2, 3, 5]"]),
        (dict(bias=np.ones((2, 4), np.float64)), TypeError, ["bias", "float64"]),
        (dict(k=np.zeros((2, 4, 12), np.float32), v=np.zeros((2, 4, 12), np.float32)), ValueError, ["k must have shape [2, 4, 8]", "H_kv"]),
        (dict(v=np.zeros((2, 4, 3), np.float32)), ValueError, ["v must have shape [2, 4, 8]", "H_kv·v_head_dim"]),
        (dict(v=np.zeros((2, 5, 8), np.float32)), ValueError, ["v must have shape [2, 4, 8]"]),
        (dict(softcap=0.0), ValueError, ["softcap must be finite and positive, got 0"]),
        (dict(softcap=float("nan")), ValueError, ["softcap must be finite and positive"]),
        (dict(window=-1), ValueError, ["window must be >= 0, got -1"]),
        (dict(softcap=3.0, rope=(np.ones((4, 2), np.float32),) * 2), ValueError, ["rope is taken without softcap"]),
        (dict(masked_rows="nan"), ValueError, ["masked_rows", "'uniform'", "'zero'"]),
        (dict(rope_style="llama"), ValueError, ["rope_style", "neox", "gptj"]),
        (dict(rope=(np.ones((4, 3), np.float32),) * 2), ValueError, ["rotary_dim", "head_dim=4"]),
        (dict(rope=(np.ones((3, 2), np.float32),) * 2), ValueError, ["rope cos", "[4, 2]", "[3, 2]"]),
        (dict(num_heads=True), ValueError, ["num_heads must be a positive integer, got True"]),
        (dict(threads=-1), ValueError, ["threads must be a positive integer or None, got -1"]),
    ],
)
def test_attention_argument_errors(change, exc, words):
    x = np.zeros((2, 3, 8), np.float32)
    args = dict(q=x, k=np.zeros((2, 4, 8), np.float32), v=np.zeros((2, 4, 8), np.float32), num_heads=2, mask_kind="custom",
                mask=np.ones((2, 4), np.float32))
    args.update(change)
    with pytest.raises(exc) as info:
        attention(**args)
    if exc is ValueError:
        assert isinstance(info.value, KernelError)
    for w in words:
        assert w in str(info.value), (w, str(info.value))


def test_block_argument_errors_are_kernel_errors():
    rng = np.random.default_rng(14)
    x, qkv_w, out_w, qkv_b, out_b = make_block(2, 3, 16, rng)
    with pytest.raises(KernelError, match="masked_rows"):
        fused_attention_block(x, qkv_w, out_w, None, num_heads=2, masked_rows="ones")
    with pytest.raises(KernelError, match="rope cos must have shape \\[3, 4\\]"):
        fused_attention_block(x, qkv_w, out_w, None, num_heads=2, rope=(np.ones((5, 4), np.float32),) * 2)
    with pytest.raises(KernelError, match="num_heads=5"):
        FusedAttentionBlock(qkv_w, out_w, num_heads=5)


def test_parallel_paths_under_concurrent_python_threads(monkeypatch):
    """With the small-work thresholds off, the few-row one-shot projections (split along K over the pool) and
    attention with RoPE (per-thread rotated copies) stay exact while four Python threads call them at once."""
    import concurrent.futures

    monkeypatch.setenv("RLX_RULES_PARALLEL_MIN_FLOPS", "0")
    rng = np.random.default_rng(15)
    blocks = [make_block(1, s, 96, rng) for s in (1, 5, 8, 16)]
    block_want = [ref.fused_attention_block(x, w, o, None, qb, ob, num_heads=3) for x, w, o, qb, ob in blocks]
    atts = [qkv(rng, 1, s, s + 3, 4, 8, 2) for s in (2, 9, 33, 64)]
    ropes = [ref.rope_tables(s + 3, 6) for s in (2, 9, 33, 64)]
    att_want = [ref.attention(q, k, v, num_heads=4, mask_kind="causal", rope=r) for (q, k, v), r in zip(atts, ropes)]

    def run(i):
        x, w, o, qb, ob = blocks[i]
        q, k, v = atts[i]
        return [(fused_attention_block(x, w, o, None, qb, ob, num_heads=3, threads=2),
                 attention(q, k, v, num_heads=4, mask_kind="causal", rope=ropes[i], threads=2)) for _ in range(5)]

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(run, range(4)))
    for i, rounds in enumerate(results):
        for got_block, got_att in rounds:
            np.testing.assert_allclose(got_block, block_want[i], rtol=RTOL, atol=ATOL)
            np.testing.assert_allclose(got_att, att_want[i], rtol=RTOL, atol=ATOL)
