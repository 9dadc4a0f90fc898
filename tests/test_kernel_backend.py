"""`run(..., backend="kernels")`: every Attention variant and FusedAttentionBlock the rules produce runs through the
Rust kernels and matches the numpy backend within 1e-4; what the kernels cannot do falls back to numpy, visibly
(`Interpreter.kernel_fallbacks`, with the reason). On the ONNX corpus (RLX_CORPUS_SAMPLE=N: every N-th file), every
fused graph's attention runs in Rust and its outputs match numpy's."""
from __future__ import annotations

import numpy as np
import pytest

import rlx_rules
from rlx_rules.graph import Graph
from rlx_rules.interpret import Interpreter, run
from test_interpret import B, attn_attrs  # noqa: E402 - tests/: the tiny graph builder
from test_corpus_fusion import CORPUS, ENTRIES, FUSED  # noqa: E402 - tests/: the corpus and its sampling

ATOL = 1e-4
RNG = np.random.default_rng(17)
BATCH, HEADS, D = 2, 4, 8


def rand(*shape):
    return RNG.standard_normal(shape)


def both(graph: dict, feeds: dict, params: dict | None = None):
    """Runs `graph` with both backends; returns the kernel run's Interpreter after checking the values agree."""
    params = params or {}
    it = Interpreter(graph, backend="kernels")
    got = it.run(feeds, params)
    want = run(graph, feeds, params)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=0, atol=ATOL)  # NaN where numpy has NaN (a row of -inf biases)
    return it


def attention_graph(arrays: dict, kind: str, **extra):
    """One Attention node on Inputs q, k, v (and mask when given)."""
    b = B()
    ids = [b.input(name, np.shape(a)) for name, a in arrays.items()]
    out = b.add("Attention", *ids, **{**attn_attrs(HEADS, D, kind), **extra})
    return b.graph(out), out


def causal_and_padding(sq: int, sk: int) -> np.ndarray:
    """A [B, 1, Sq, Sk] keep mask: causal, the second sequence padded, its first query row fully masked."""
    keep = np.tril(np.ones((sq, sk)), sk - sq)[None, None].repeat(BATCH, 0)
    keep[1, 0, :, :2] = 0.0
    return keep


def bias_tensor(sq: int, sk: int) -> np.ndarray:
    """An ALiBi-like [B, H, Sq, Sk] additive bias with a -1e9 padding band."""
    slopes = 2.0 ** -np.arange(1, HEADS + 1)
    dist = np.arange(sk)[None, :] - (np.arange(sq)[:, None] + sk - sq)
    bias = (slopes[:, None, None] * dist)[None].repeat(BATCH, 0)
    bias[1, :, :, -2:] = -1e9
    return bias


H = HEADS * D
KV = 2 * D  # two key/value heads (GQA) or one (MQA: D)
# name: (q, k, v shapes, mask kind, mask or None, extra attributes)
VARIANTS = {
    "none": ((BATCH, 5, H), (BATCH, 5, H), "None", None, {}),
    "causal": ((BATCH, 5, H), (BATCH, 5, H), "Causal", None, {}),
    "causal-kv-cache": ((BATCH, 3, H), (BATCH, 7, H), "Causal", None, {}),
    "keep-b-sk": ((BATCH, 5, H), (BATCH, 6, H), "Custom", np.array([[1, 1, 0, 1, 1, 1], [1, 1, 1, 1, 0, 0.0]]), {}),
    "keep-b-sq-sk": ((BATCH, 4, H), (BATCH, 4, H), "Custom", (RNG.random((BATCH, 4, 4)) > 0.3) * 1.0, {}),
    "keep-causal-padding": ((BATCH, 5, H), (BATCH, 5, H), "Custom", causal_and_padding(5, 5), {}),
    "keep-causal-padding-zero": ((BATCH, 5, H), (BATCH, 5, H), "Custom", causal_and_padding(5, 5),
                                 {"masked_rows": "zero"}),
    "keep-per-head": ((BATCH, 3, H), (BATCH, 6, H), "Custom", (RNG.random((BATCH, HEADS, 3, 6)) > 0.4) * 1.0,
                      {"masked_rows": "zero"}),
    "bias-alibi": ((BATCH, 4, H), (BATCH, 6, H), "Bias", bias_tensor(4, 6), {}),
    "bias-b-sk": ((BATCH, 4, H), (BATCH, 6, H), "Bias", np.where(RNG.random((BATCH, 6)) > 0.3, 0.0, -1e4), {}),
    "bias-inf-zero": ((BATCH, 4, H), (BATCH, 4, H), "Bias",
                      np.where(np.tril(np.ones((4, 4)))[None, None] > 0, 0.0, -np.inf).repeat(BATCH, 0),
                      {"masked_rows": "zero"}),
    "bias-finfo-min-rows": ((BATCH, 4, H), (BATCH, 6, H), "Bias",  # HF's additive mask: a row of finfo.min
                            np.where(causal_and_padding(4, 6) > 0, 0.0, np.finfo(np.float32).min), {}),
    "bias-inf-row-nan": ((BATCH, 4, H), (BATCH, 4, H), "Bias", np.array([[0.0] * 4, [-np.inf] * 4]), {}),
    "gqa": ((BATCH, 5, H), (BATCH, 5, KV), "Causal", None, {}),
    "mqa-keep": ((BATCH, 4, H), (BATCH, 6, D), "Custom", causal_and_padding(4, 6), {}),
    "scale": ((BATCH, 5, H), (BATCH, 5, H), "Causal", None, {"score_scale": 0.05}),
    "layout-bshd": ((BATCH, 5, HEADS, D), (BATCH, 5, 2, D), "Causal", None, {}),
    "layout-bhsd": ((BATCH, HEADS, 5, D), (BATCH, HEADS, 6, D), "None", None, {}),
    "rank-2": ((5, H), (6, H), "Causal", None, {}),
    "softcap": ((BATCH, 5, H), (BATCH, 5, H), "None", None, {"attn_logit_softcap": 1.5}),
    "softcap-bias": ((BATCH, 4, H), (BATCH, 6, H), "Bias", bias_tensor(4, 6), {"attn_logit_softcap": 2.0}),
    "softcap-keep-zero": ((BATCH, 5, H), (BATCH, 5, H), "Custom", causal_and_padding(5, 5),
                          {"attn_logit_softcap": 0.7, "masked_rows": "zero"}),
    "sliding-window": ((BATCH, 7, H), (BATCH, 7, H), "SlidingWindow", None, {"window": 2}),
    "sliding-window-kv-cache": ((BATCH, 3, H), (BATCH, 9, H), "SlidingWindow", None, {"window": 3}),
    "sliding-window-0-zero": ((BATCH, 5, H), (BATCH, 5, H), "SlidingWindow", None,
                              {"window": 0, "masked_rows": "zero"}),
    "sliding-window-long": ((BATCH, 150, H), (BATCH, 150, KV), "SlidingWindow", None, {"window": 20}),
    "sliding-window-wider-than-s": ((BATCH, 5, H), (BATCH, 5, H), "SlidingWindow", None, {"window": 9}),
    "v-head-dim-wider": ((BATCH, 5, H), (BATCH, 6, H), "None", None, {"v_head_dim": 2 * D}),
    "v-head-dim-narrower-gqa": ((BATCH, 5, H), (BATCH, 5, KV), "Causal", None, {"v_head_dim": D // 2}),
    "v-head-dim-bhsd": ((BATCH, HEADS, 5, D), (BATCH, HEADS, 6, D), "None", None, {"v_head_dim": 3}),
    "gemma2-like": ((BATCH, 6, H), (BATCH, 6, KV), "SlidingWindow", None,  # all three at once
                    {"window": 3, "attn_logit_softcap": 2.0, "v_head_dim": 12}),
}


def v_shape(kv_shape: tuple, extra: dict) -> tuple:
    """V's shape: K's, with heads of `v_head_dim` when the node has one."""
    vd = extra.get("v_head_dim")
    if vd is None:
        return kv_shape
    if len(kv_shape) == 4:  # [B, H, S, D]
        return (*kv_shape[:3], vd)
    return (*kv_shape[:-1], kv_shape[-1] // D * vd)


@pytest.mark.parametrize("name", VARIANTS)
def test_every_attention_variant_runs_in_rust_and_matches_numpy(name):
    q_shape, kv_shape, kind, mask, extra = VARIANTS[name]
    arrays = {"q": rand(*q_shape), "k": rand(*kv_shape), "v": rand(*v_shape(kv_shape, extra))}
    if mask is not None:
        arrays["mask"] = mask
    graph, out = attention_graph(arrays, kind, **extra)
    it = both(graph, arrays)
    assert it.kernel_nodes == [out] and it.kernel_fallbacks == {}


FALLBACKS = {  # what the kernel cannot do: numpy runs the node, and says why
    "sliding-window-negative": ("SlidingWindow", None, {"window": -1}, "window must be >= 0"),
    "softcap-zero": ("None", None, {"attn_logit_softcap": 0.0}, "softcap must be finite and positive"),
    "mask-last-dim-broadcast": ("Custom", np.array([[1.0], [1.0]]), {}, "kernel refused"),
    "bias-swamps-a-row": ("Bias", np.array([[0.0] * 5, [-1e9] * 5]), {}, "float32 loses the scores"),
    "bias-beyond-float32": ("Bias", np.array([[0.0] * 5, [-6.8e38] * 5]), {}, "below float32's range"),
}


@pytest.mark.parametrize("name", FALLBACKS)
def test_what_the_kernel_cannot_do_falls_back_to_numpy_visibly(name):
    kind, mask, extra, reason = FALLBACKS[name]
    arrays = {"q": rand(BATCH, 5, H), "k": rand(BATCH, 5, H), "v": rand(BATCH, 5, H)}
    if mask is not None:
        arrays["mask"] = mask
    graph, out = attention_graph(arrays, kind, **extra)
    it = Interpreter(graph, backend="kernels")
    (got,) = it.run(arrays, {})
    assert it.kernel_nodes == [] and list(it.kernel_fallbacks) == [out]
    assert reason in it.kernel_fallbacks[out]
    np.testing.assert_array_equal(got, run(graph, arrays, {})[0])  # the numpy path itself (NaN rows included)


@pytest.mark.parametrize("backend", ["numpy", "kernels"])
def test_q_with_more_heads_than_num_heads_is_an_error_on_both_backends(backend):
    """Not a kernel run with another head_dim: q [B, S, 6·D] for num_heads 4 of head_dim D is a GraphError."""
    arrays = {"q": rand(BATCH, 5, 6 * D), "k": rand(BATCH, 5, 6 * D), "v": rand(BATCH, 5, 6 * D)}
    graph, _ = attention_graph(arrays, "None")
    with pytest.raises(rlx_rules.GraphError, match="num_heads is 4"):
        run(graph, arrays, {}, backend=backend)


def block_graph(s: int, mask_shape, *, has_bias: bool, table_shape=None):
    """One FusedAttentionBlock on hidden [B, S, H], its weights, a keep mask and optional RoPE tables."""
    b = B()
    ids = [b.input("hidden", [BATCH, s, H]), b.param("qkv_w", [H, 3 * H]), b.param("out_w", [H, H]),
           b.input("mask", mask_shape)]
    if has_bias:
        ids += [b.param("qkv_b", [3 * H]), b.param("out_b", [H])]
    if table_shape:
        ids += [b.input("cos", table_shape), b.input("sin", table_shape)]
    out = b.add("FusedAttentionBlock", *ids, num_heads=HEADS, head_dim=D, has_bias=has_bias,
                has_rope=bool(table_shape))
    return b.graph(out), out


def block_values(s: int, mask: np.ndarray, has_bias: bool, table_shape):
    inputs = {"hidden": rand(BATCH, s, H), "mask": mask}
    params = {"qkv_w": rand(H, 3 * H) * 0.3, "out_w": rand(H, H) * 0.3, "qkv_b": rand(3 * H) * 0.1,
              "out_b": rand(H) * 0.1}
    if table_shape:
        angles = RNG.random(table_shape) * 3
        inputs["cos"], inputs["sin"] = np.cos(angles), np.sin(angles)
    return inputs, params


S = 6
PADDING = np.ones((BATCH, S))
PADDING[1, -2:] = 0.0
BLOCKS = {  # name: (keep mask, has_bias, RoPE table shape)
    "keep-b-s": (PADDING, True, None),
    "keep-b-s-rope": (PADDING, False, (S, D // 2)),
    "rope-tables-longer-and-wider": (PADDING, True, (S + 3, D)),
    "padding-b-1-s-s": (np.broadcast_to(PADDING[:, None, None, :], (BATCH, 1, S, S)).copy(), True, None),
    "causal-padding-b-1-s-s": (causal_and_padding(S, S), True, None),
    "causal-padding-rope": (causal_and_padding(S, S), False, (S, D // 2)),
    "padding-b-s-s": (np.broadcast_to(PADDING[:, None, :], (BATCH, S, S)).copy(), False, None),
}


@pytest.mark.parametrize("name", BLOCKS)
def test_every_attention_block_runs_in_rust_and_matches_numpy(name):
    mask, has_bias, table_shape = BLOCKS[name]
    graph, out = block_graph(S, list(mask.shape), has_bias=has_bias, table_shape=table_shape)
    it = both(graph, *block_values(S, mask, has_bias, table_shape))
    assert it.kernel_nodes == [out] and it.kernel_fallbacks == {}


def test_per_token_rope_tables_fall_back_to_numpy_visibly():
    """Tables with one row per token (B·S rows) are not position tables: the kernels cannot take them."""
    graph, out = block_graph(S, [BATCH, S], has_bias=False, table_shape=(BATCH * S, D // 2))
    inputs, params = block_values(S, PADDING, False, (BATCH * S, D // 2))
    it = Interpreter(graph, backend="kernels")
    (got,) = it.run(inputs, params)
    assert it.kernel_nodes == [] and "RoPE tables" in it.kernel_fallbacks[out]
    np.testing.assert_array_equal(got, run(graph, inputs, params)[0])


# ── the ONNX corpus ────────────────────────────────────────────────────────────

@pytest.fixture(scope="module")
def rules():
    pytest.importorskip("onnx")
    return rlx_rules.load_rules("@onnx")


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["file"][: -len(".onnx")] for e in ENTRIES])
def test_every_corpus_attention_runs_in_rust_and_matches_numpy(entry, rules):
    from rlx_rules.onnx.importer import convert

    stem = entry["file"][: -len(".onnx")]
    with np.load(CORPUS / f"{stem}.inputs.npz") as f:
        feed = dict(f)
    result = convert(str(CORPUS / entry["file"]), input_shapes={k: list(v.shape) for k, v in feed.items()})
    fused, _ = rules.apply(Graph.from_dict(result.graph))
    it = both(fused, feed, result.weights)
    attention = [n.id for n in fused.nodes if n.op in FUSED]
    assert attention, f"{stem}: no attention node to run"
    assert it.kernel_fallbacks == {}, f"{stem}: ran in numpy: {it.kernel_fallbacks}"
    assert sorted(it.kernel_nodes) == attention
