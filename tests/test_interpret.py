"""Reference interpreter: every op against hand-computed results, fused ops against their expansions, kernels vs numpy, errors."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import rlx_rules
from rlx_rules import interpret
from rlx_rules.interpret import Interpreter, erf, erfc, gelu, random_values, run

RNG = np.random.default_rng(1234)


class B:
    """A tiny graph builder: Inputs by name, one op per call, shapes only where a test wants them."""

    def __init__(self):
        self.nodes: list[dict] = []

    def add(self, op_name, *inputs, shape=None, name=None, dtype="f32", **attrs) -> int:
        node = {"id": len(self.nodes), "op": op_name}
        if name:
            node["name"] = name
        if inputs:
            node["inputs"] = list(inputs)
        if attrs:
            node["attrs"] = attrs
        if shape is not None:
            node["shape"] = list(shape)
        node["dtype"] = dtype
        self.nodes.append(node)
        return node["id"]

    def input(self, name, shape, dtype="f32"):
        return self.add("Input", name=name, shape=shape, dtype=dtype)

    def param(self, name, shape, dtype="f32"):
        return self.add("Param", name=name, shape=shape, dtype=dtype)

    def graph(self, *outputs, **extra) -> dict:
        return {"format": "rlx-graph", "version": 1, "nodes": self.nodes, "outputs": list(outputs), **extra}


def ev(op_name, *arrays, backend="numpy", **attrs):
    """Runs one `op_name` node on `arrays` (Inputs x0, x1, …) and returns its value."""
    b = B()
    ids = [b.input(f"x{i}", np.shape(a)) for i, a in enumerate(arrays)]
    out = b.add(op_name, *ids, **attrs)
    return run(b.graph(out), {f"x{i}": a for i, a in enumerate(arrays)}, {}, backend=backend)[0]


def rand(*shape):
    return RNG.standard_normal(shape)


# ── numerics ───────────────────────────────────────────────────────────────────

def test_erf_and_erfc_match_math_to_1e_14():
    x = np.concatenate([np.linspace(-30, 30, 60001), np.linspace(-2.01, 2.01, 4001), [0.0, 1e-300, 2.0, -2.0]])
    np.testing.assert_allclose(erf(x), [math.erf(v) for v in x], rtol=0, atol=1e-14)
    np.testing.assert_allclose(erfc(x), [math.erfc(v) for v in x], rtol=1e-12, atol=1e-300)
    assert erf(np.array([np.inf, -np.inf])).tolist() == [1.0, -1.0]
    assert np.isnan(erf(np.array([np.nan])))[0]


def test_gelu_is_exact_erf_not_tanh():
    x = np.linspace(-9, 9, 1001)
    exact = [0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x]
    np.testing.assert_allclose(gelu(x), exact, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(ev("Gelu", x), exact, rtol=1e-13, atol=1e-15)
    tanh_form = [0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3))) for v in x]
    np.testing.assert_allclose(ev("GeluApprox", x), tanh_form, rtol=1e-13, atol=1e-15)
    assert np.max(np.abs(ev("Gelu", x) - ev("GeluApprox", x))) > 1e-4  # the two GELUs really differ


UNARY = {
    "Silu": lambda v: v / (1 + math.exp(-v)), "Relu": lambda v: max(v, 0.0),
    "Sigmoid": lambda v: 1 / (1 + math.exp(-v)), "Tanh": math.tanh, "Exp": math.exp,
    "Log": lambda v: math.log(abs(v)), "Sqrt": lambda v: math.sqrt(abs(v)), "Rsqrt": lambda v: 1 / math.sqrt(abs(v)),
    "Neg": lambda v: -v, "Abs": abs, "Sin": math.sin, "Cos": math.cos, "Tan": math.tan, "Atan": math.atan,
    "StopGradient": lambda v: v,
}


@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary_ops(op):
    x = np.linspace(-3.3, 3.1, 37)
    if op in ("Log", "Sqrt", "Rsqrt"):
        x = np.abs(x) + 0.1
    np.testing.assert_allclose(ev(op, x), [UNARY[op](v) for v in x], rtol=1e-13, atol=1e-15)


def test_round_is_half_to_even_and_sigmoid_does_not_overflow():
    assert ev("Round", np.array([0.5, 1.5, 2.5, -0.5, -1.5, 2.4])).tolist() == [0, 2, 2, -0, -2, 2]
    assert ev("Sigmoid", np.array([-1000.0, 1000.0])).tolist() == [0.0, 1.0]


def test_binary_compare_where_fma_broadcast():
    a, b = rand(2, 3), rand(3)
    for op, fn in {"Add": float.__add__, "Sub": float.__sub__, "Mul": float.__mul__, "Div": float.__truediv__,
                   "Max": max, "Min": min}.items():
        expect = [[fn(float(a[i, j]), float(b[j])) for j in range(3)] for i in range(2)]
        np.testing.assert_allclose(ev(op, a, b), expect, rtol=1e-15)
    np.testing.assert_allclose(ev("Pow", np.abs(a), b), [[abs(a[i, j]) ** b[j] for j in range(3)] for i in range(2)])
    x, y = np.array([1.0, 2.0, 3.0]), np.array([2.0, 2.0, 2.0])
    assert ev("Lt", x, y).tolist() == [1, 0, 0] and ev("Le", x, y).tolist() == [1, 1, 0]
    assert ev("Gt", x, y).tolist() == [0, 0, 1] and ev("Ge", x, y).tolist() == [0, 1, 1]
    assert ev("Eq", x, y).tolist() == [0, 1, 0] and ev("Ne", x, y).tolist() == [1, 0, 1]
    assert ev("Where", np.array([1.0, 0.0, 2.0]), x, y).tolist() == [1.0, 2.0, 3.0]
    assert ev("Fma", x, y, np.array([0.5])).tolist() == [2.5, 4.5, 6.5]


def test_matmul_broadcasts_batch_dims():
    a, b = rand(2, 1, 3, 4), rand(5, 4, 2)
    out = ev("MatMul", a, b)
    assert out.shape == (2, 5, 3, 2)
    for i in range(2):
        for j in range(5):
            for m in range(3):
                for n in range(2):
                    assert out[i, j, m, n] == pytest.approx(sum(a[i, 0, m, k] * b[j, k, n] for k in range(4)), rel=1e-12)


def test_grouped_and_lora_matmul():
    x, w, idx = rand(4, 3), rand(3, 3, 2), np.array([2.0, 0.0, 2.0, 1.0])
    out = ev("GroupedMatMul", x, w, idx)
    for i in range(4):
        np.testing.assert_allclose(out[i], x[i] @ w[int(idx[i])], rtol=1e-13)
    x, w, a, b = rand(2, 3), rand(3, 4), rand(3, 2), rand(2, 4)
    out = ev("LoraMatMul", x, w, a, b, scale=0.5)
    expect = [[sum(x[i, k] * w[k, j] for k in range(3))
               + 0.5 * sum(x[i, k] * a[k, r] * b[r, j] for k in range(3) for r in range(2)) for j in range(4)]
              for i in range(2)]
    np.testing.assert_allclose(out, expect, rtol=1e-12)


# ── normalization ──────────────────────────────────────────────────────────────

def _row_ln(row, g, b, eps):
    mean = sum(row) / len(row)
    var = sum((v - mean) ** 2 for v in row) / len(row)
    return [(v - mean) / math.sqrt(var + eps) * gi + bi for v, gi, bi in zip(row, g, b)]


def test_layer_norm_last_axis_and_other_axis():
    x, g, b = rand(2, 3, 5), rand(5), rand(5)
    out = ev("LayerNorm", x, g, b, axis=-1, eps=1e-5)
    for i in range(2):
        for j in range(3):
            np.testing.assert_allclose(out[i, j], _row_ln(list(x[i, j]), g, b, 1e-5), rtol=1e-12)
    g1, b1 = rand(3), rand(3)
    out = ev("LayerNorm", x, g1, b1, axis=1, eps=1e-5)
    for i in range(2):
        for k in range(5):
            np.testing.assert_allclose(out[i, :, k], _row_ln(list(x[i, :, k]), g1, b1, 1e-5), rtol=1e-12)


def test_rms_norm_has_a_beta():
    x, g, b = rand(3, 6), rand(6), rand(6)
    out = ev("RmsNorm", x, g, b, axis=-1, eps=1e-6)
    for i in range(3):
        rms = math.sqrt(sum(v * v for v in x[i]) / 6 + 1e-6)
        np.testing.assert_allclose(out[i], [v / rms * gi + bi for v, gi, bi in zip(x[i], g, b)], rtol=1e-12)


def test_layer_norm_2d_group_norm_batch_norm():
    x, g, b = rand(2, 4, 3, 3), rand(4), rand(4)
    out = ev("LayerNorm2d", x, g, b, eps=1e-5)
    for n in range(2):
        for i in range(3):
            for j in range(3):
                np.testing.assert_allclose(out[n, :, i, j], _row_ln(list(x[n, :, i, j]), g, b, 1e-5), rtol=1e-12)
    out = ev("GroupNorm", x, g, b, num_groups=2, eps=1e-5)
    for n in range(2):
        for grp in range(2):
            vals = x[n, 2 * grp:2 * grp + 2].ravel()
            mean, var = vals.sum() / vals.size, ((vals - vals.sum() / vals.size) ** 2).sum() / vals.size
            for c in range(2 * grp, 2 * grp + 2):
                np.testing.assert_allclose(out[n, c], (x[n, c] - mean) / math.sqrt(var + 1e-5) * g[c] + b[c], rtol=1e-12)
    x, mean, var = rand(3, 4), rand(4), np.abs(rand(4)) + 0.5
    out = ev("BatchNormInference", x, g, b, mean, var, eps=1e-3)
    for i in range(3):
        for c in range(4):
            assert out[i, c] == pytest.approx((x[i, c] - mean[c]) / math.sqrt(var[c] + 1e-3) * g[c] + b[c], rel=1e-12)


def test_softmax_along_an_axis():
    x = rand(3, 4)
    out = ev("Softmax", x, axis=0)
    for j in range(4):
        e = [math.exp(v) for v in x[:, j]]
        np.testing.assert_allclose(out[:, j], [v / sum(e) for v in e], rtol=1e-13)


# ── attention and rope ─────────────────────────────────────────────────────────

def ref_attention(q, k, v, heads, kind, mask=None, scale=None, window=None, softcap=None):
    """Loops over batch, head, query and key, with math.exp: no shared code with the interpreter."""
    bsz, sq, width = q.shape
    sk, d = k.shape[1], width // heads
    scale = d ** -0.5 if scale is None else scale
    out = np.zeros_like(q)
    for b in range(bsz):
        for h in range(heads):
            cols = slice(h * d, (h + 1) * d)
            for i in range(sq):
                pos = i + sk - sq
                scores = []
                for j in range(sk):
                    s = float(np.dot(q[b, i, cols], k[b, j, cols])) * scale
                    if softcap is not None:
                        s = softcap * math.tanh(s / softcap)
                    if kind == "Bias":
                        s += mask[b, h, i, j]
                    if (kind in ("Causal", "SlidingWindow") and j > pos) or \
                            (kind == "SlidingWindow" and j < pos - window) or (kind == "Custom" and mask[b, j] < 0.5):
                        s = -1e9
                    scores.append(s)
                m = max(scores)
                e = [math.exp(s - m) for s in scores]
                out[b, i, cols] = sum(w / sum(e) * v[b, j, cols] for j, w in enumerate(e))
    return out


def attn_attrs(heads, d, kind, **extra):
    return dict(num_heads=heads, head_dim=d, mask_kind=kind, score_scale=None, attn_logit_softcap=None, **extra)


@pytest.mark.parametrize("kind", ["None", "Causal", "SlidingWindow", "Custom", "Bias"])
def test_attention_every_mask_kind(kind):
    heads, d = 2, 3
    q, k, v = rand(2, 5, 6), rand(2, 5, 6), rand(2, 5, 6)
    extra, mask = {}, None
    if kind == "SlidingWindow":
        extra["window"] = 1
    if kind == "Custom":
        mask = np.array([[1, 1, 0.4, 1, 0], [1, 0, 1, 1, 1.0]])
    if kind == "Bias":
        mask = rand(2, heads, 5, 5)
    arrays = (q, k, v) if mask is None else (q, k, v, mask)
    out = ev("Attention", *arrays, **attn_attrs(heads, d, kind, **extra))
    np.testing.assert_allclose(out, ref_attention(q, k, v, heads, kind, mask, window=1), rtol=1e-12, atol=1e-14)


def test_attention_masks_really_change_the_result():
    q, k, v = rand(1, 4, 4), rand(1, 4, 4), rand(1, 4, 4)
    outs = {kind: ev("Attention", q, k, v, **attn_attrs(2, 2, kind, **({"window": 1} if kind == "SlidingWindow" else {})))
            for kind in ("None", "Causal", "SlidingWindow")}
    assert not np.allclose(outs["None"], outs["Causal"]) and not np.allclose(outs["Causal"], outs["SlidingWindow"])
    np.testing.assert_allclose(outs["Causal"][0, 0], v[0, 0], rtol=1e-13)  # query 0 sees key 0 only


def test_attention_score_scale_softcap_and_kv_cache_causal():
    q, k, v = rand(1, 2, 4), rand(1, 5, 4), rand(1, 5, 4)  # 2 queries at the end of 5 keys
    attrs = attn_attrs(2, 2, "Causal")
    attrs.update(score_scale=0.3, attn_logit_softcap=0.8)
    out = ev("Attention", q, k, v, **attrs)
    np.testing.assert_allclose(out, ref_attention(q, k, v, 2, "Causal", scale=0.3, softcap=0.8), rtol=1e-12)


def test_attention_fully_masked_row_is_uniform_and_layouts_agree():
    q, k, v = rand(1, 3, 4), rand(1, 3, 4), rand(1, 3, 4)
    out = ev("Attention", q, k, v, np.zeros((1, 3)), **attn_attrs(2, 2, "Custom"))
    np.testing.assert_allclose(out[0], np.broadcast_to(v[0].mean(axis=0), (3, 4)), rtol=1e-12)
    flat = ev("Attention", q, k, v, **attn_attrs(2, 2, "None"))
    bshd = ev("Attention", *(t.reshape(1, 3, 2, 2) for t in (q, k, v)), **attn_attrs(2, 2, "None"))
    bhsd = ev("Attention", *(t.reshape(1, 3, 2, 2).transpose(0, 2, 1, 3) for t in (q, k, v)),
              **attn_attrs(2, 2, "None"))
    np.testing.assert_allclose(bshd.reshape(1, 3, 4), flat, rtol=1e-13)
    np.testing.assert_allclose(bhsd.transpose(0, 2, 1, 3).reshape(1, 3, 4), flat, rtol=1e-13)


def ref_rope(x, cos, sin, d, n_rot, style):
    out = x.copy()
    bsz, s, width = x.shape
    for b in range(bsz):
        for t in range(s):
            for h in range(width // d):
                base = h * d
                for i in range(n_rot // 2):
                    a, c = (base + i, base + i + n_rot // 2) if style == "NeoX" else (base + 2 * i, base + 2 * i + 1)
                    out[b, t, a] = x[b, t, a] * cos[t, i] - x[b, t, c] * sin[t, i]
                    out[b, t, c] = x[b, t, c] * cos[t, i] + x[b, t, a] * sin[t, i]
    return out


@pytest.mark.parametrize("style, n_rot", [("NeoX", 4), ("NeoX", 2), ("GptJ", 4)])
def test_rope(style, n_rot):
    x = rand(2, 3, 8)  # two heads of 4
    angles = np.arange(7)[:, None] * np.array([1.0, 0.1])[None]  # 7 positions >= seq 3 (not B·S: per-token)
    cos, sin = np.cos(angles), np.sin(angles)
    out = ev("Rope", x, cos, sin, head_dim=4, n_rot=n_rot, style=style)
    np.testing.assert_allclose(out, ref_rope(x, cos, sin, 4, n_rot, style), rtol=1e-13)
    if n_rot < 4:
        np.testing.assert_array_equal(out[..., 2:4], x[..., 2:4])  # dims past n_rot are copied


def test_rope_per_token_tables():
    x = rand(2, 3, 4)
    angles = rand(6, 2)  # one row per (batch, position)
    out = ev("Rope", x, np.cos(angles), np.sin(angles), head_dim=4, n_rot=4)
    for b in range(2):
        a = angles[3 * b:3 * b + 3]
        np.testing.assert_allclose(out[b:b + 1], ref_rope(x[b:b + 1], np.cos(a), np.sin(a), 4, 4, "NeoX"), rtol=1e-13)


# ── shapes and indexing ────────────────────────────────────────────────────────

def test_shape_ops():
    x = np.arange(24.0).reshape(2, 3, 4)
    assert ev("Reshape", x, new_shape=[4, -1]).shape == (4, 6)
    assert ev("Reshape", x, new_shape=[-1]).tolist() == list(range(24))
    assert ev("Transpose", x, perm=[2, 0, 1])[3, 1, 2] == x[1, 2, 3]
    assert ev("Narrow", x, axis=2, start=1, len=2).tolist() == [[[r * 4 + 1 + c for c in range(2)]
                                                                 for r in range(i * 3, i * 3 + 3)] for i in range(2)]
    assert ev("Slice", np.arange(10.0), axis=0, start=1, len=3, step=3).tolist() == [1, 4, 7]
    assert ev("Concat", x, x[:, :1], axis=1).shape == (2, 4, 4)
    assert ev("Concat", x, x[:, :1], axis=1)[:, 3].tolist() == x[:, 0].tolist()
    e = ev("Expand", np.array([[1.0], [2.0]]), target_shape=[3, 2, -1])
    assert e.shape == (3, 2, 1) and e[2, 1, 0] == 2.0
    e = ev("Expand", np.array([[1.0], [2.0]]), target_shape=[2, 3])
    assert e.tolist() == [[1, 1, 1], [2, 2, 2]]
    assert ev("Reverse", x, axes=[0, 2])[0, 0].tolist() == [15, 14, 13, 12]


def test_gather_scatter_add():
    table = np.arange(12.0).reshape(4, 3)
    assert ev("Gather", table, np.array([[3.0, 0.0], [-1.0, 1.0]]), axis=0).tolist() == \
        [[[9, 10, 11], [0, 1, 2]], [[9, 10, 11], [3, 4, 5]]]
    assert ev("Gather", table, np.array([2.0]), axis=1).tolist() == [[2], [5], [8], [11]]
    b = B()
    u, i = b.input("u", [3, 2]), b.input("i", [3])
    out = b.add("ScatterAdd", u, i, shape=[4, 2])
    got = run(b.graph(out), {"u": np.array([[1.0, 2], [3, 4], [5, 6]]), "i": np.array([2.0, 0, 2])}, {})[0]
    assert got.tolist() == [[3, 4], [0, 0], [6, 8], [0, 0]]


def test_reductions_and_index_ops():
    x = np.array([[3.0, 1.0, 3.0], [-2.0, 5.0, 0.5]])
    assert ev("Reduce", x, op="Sum", axes=[1], keep_dim=False).tolist() == [7.0, 3.5]
    assert ev("Reduce", x, op="Mean", axes=[0], keep_dim=True).tolist() == [[0.5, 3.0, 1.75]]
    assert ev("Reduce", x, op="Max", axes=[0, 1], keep_dim=False) == 5.0
    assert ev("Reduce", x, op="Min", axes=[1], keep_dim=False).tolist() == [1.0, -2.0]
    assert ev("Reduce", x, op="Prod", axes=[1], keep_dim=False).tolist() == [9.0, -5.0]
    assert ev("Cumsum", x, axis=1, exclusive=False).tolist() == [[3, 4, 7], [-2, 3, 3.5]]
    assert ev("Cumsum", x, axis=1, exclusive=True).tolist() == [[0, 3, 4], [0, -2, 3]]
    assert ev("ArgMax", x, axis=1, keep_dim=False).tolist() == [0, 1]  # the first of tied maxima
    assert ev("ArgMin", x, axis=0, keep_dim=True).tolist() == [[1, 0, 1]]
    assert ev("TopK", np.array([[1.0, 4.0, 4.0, 2.0]]), k=3).tolist() == [[1, 2, 3]]


def test_cast():
    assert ev("Cast", np.array([1 + 2 ** -12]), to="f16").tolist() == [1.0]
    assert ev("Cast", np.array([1 + 2 ** -30]), to="f32").tolist() == [1.0]
    assert ev("Cast", np.array([1 + 2 ** -30]), to="f64").tolist() == [1 + 2 ** -30]
    assert ev("Cast", np.array([1 + 2 ** -8, 1 + 3 * 2 ** -8, 1 + 2 ** -7]), to="bf16").tolist() == \
        [1.0, 1 + 2 ** -6, 1 + 2 ** -7]  # ties to even, then exact
    assert ev("Cast", np.array([2.7, -2.7, 300.0, np.nan]), to="i8").tolist() == [2, -2, 127, 0]
    assert ev("Cast", np.array([0.0, -0.5, 3.0]), to="bool").tolist() == [0, 1, 1]


def test_conv_pool_resize():
    x, w = rand(1, 4, 5, 5), rand(4, 2, 3, 3)
    out = ev("Conv", x, w, kernel_size=[3, 3], stride=[2, 1], padding=[1, 0], dilation=[1, 2], groups=2)
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (0, 0)))
    assert out.shape == (1, 4, 3, 1)
    for co in range(4):
        g = co // 2
        for oh in range(3):
            for ow in range(1):
                ref = sum(xp[0, g * 2 + ci, oh * 2 + i, ow + 2 * j] * w[co, ci, i, j]
                          for ci in range(2) for i in range(3) for j in range(3))
                assert out[0, co, oh, ow] == pytest.approx(ref, rel=1e-12)
    x = np.arange(16.0).reshape(1, 1, 4, 4)
    assert ev("Pool", x, kind="Max", kernel_size=[2, 2], stride=[2, 2], padding=[0, 0])[0, 0].tolist() == \
        [[5, 7], [13, 15]]
    mean = ev("Pool", x, kind="Mean", kernel_size=[2, 2], stride=[2, 2], padding=[1, 1])[0, 0]
    assert mean[0, 0] == 0 / 4 and mean[1, 1] == (5 + 6 + 9 + 10) / 4  # padding counts in the mean
    assert ev("ResizeNearest2x", x)[0, 0, :2, :4].tolist() == [[0, 0, 1, 1], [0, 0, 1, 1]]


def test_sample():
    logits = np.array([[0.1, 3.0, -1.0, 2.9], [5.0, 0.0, 0.0, 0.0]])
    greedy = ev("Sample", logits, top_k=1, top_p=1.0, temperature=1.0, seed=7)
    assert greedy.tolist() == [1, 0]
    draws = {tuple(ev("Sample", logits, top_k=2, top_p=1.0, temperature=1.0, seed=s)) for s in range(20)}
    assert all(a in (1, 3) and b in (0, 1, 2, 3) for a, b in draws) and len({a for a, _ in draws}) == 2
    once = ev("Sample", logits, top_k=0, top_p=0.9, temperature=0.7, seed=3)
    assert ev("Sample", logits, top_k=0, top_p=0.9, temperature=0.7, seed=3).tolist() == once.tolist()


# ── fused ops equal their expansions ───────────────────────────────────────────

def both(fused: dict, unfused: dict, seed=0, atol=1e-12, backend="numpy"):
    inputs, params = random_values(fused, seed=seed, scale=0.5)
    a = run(fused, inputs, params, backend=backend)
    b = run(unfused, inputs, params)
    for x, y in zip(a, b):
        np.testing.assert_allclose(x, y, rtol=atol, atol=atol)
    return a


@pytest.mark.parametrize("act", [None, "Gelu", "Silu", "Tanh"])
def test_fused_matmul_bias_act(act):
    graphs = []
    for fused in (True, False):
        b = B()
        x, w, bias = b.input("x", [2, 3, 4]), b.param("w", [4, 5]), b.param("b", [5])
        if fused:
            out = b.add("FusedMatMulBiasAct", x, w, bias, activation=act)
        else:
            out = b.add("Add", b.add("MatMul", x, w), bias)
            out = b.add(act, out) if act else out
        graphs.append(b.graph(out))
    both(*graphs)


@pytest.mark.parametrize("op, norm", [("FusedResidualLN", "LayerNorm"), ("FusedResidualRmsNorm", "RmsNorm")])
@pytest.mark.parametrize("has_bias", [False, True])
def test_fused_residual_norms(op, norm, has_bias):
    graphs = []
    for fused in (True, False):
        b = B()
        x, r = b.input("x", [2, 3, 6]), b.input("r", [2, 3, 6])
        bias = b.param("bias", [6]) if has_bias else None
        g, beta = b.param("g", [6]), b.param("beta", [6])
        if fused:
            ins = [x, r, bias, g, beta] if has_bias else [x, r, g, beta]
            out = b.add(op, *ins, has_bias=has_bias, eps=1e-5)
        else:
            s = b.add("Add", x, r)
            s = b.add("Add", s, bias) if has_bias else s
            out = b.add(norm, s, g, beta, axis=-1, eps=1e-5)
        graphs.append(b.graph(out))
    both(*graphs)


@pytest.mark.parametrize("gate_first", [False, True, None])
def test_fused_swiglu_halves(gate_first):
    graphs = []
    for fused in (True, False):
        b = B()
        x = b.input("x", [3, 8])
        if fused:
            out = b.add("FusedSwiGLU", x, **({} if gate_first is None else {"gate_first": gate_first}))
        else:
            low, high = b.add("Narrow", x, axis=1, start=0, len=4), b.add("Narrow", x, axis=1, start=4, len=4)
            gate, up = (low, high) if gate_first else (high, low)
            out = b.add("Mul", up, b.add("Silu", gate))
        graphs.append(b.graph(out))
    both(*graphs)


def block_graphs(bsz=2, s=5, heads=4, d=8, has_bias=True, has_rope=False):
    """A FusedAttentionBlock graph and its unfused expansion (MatMul, Add, Narrow x3, Rope x2, Attention, …)."""
    h = heads * d
    graphs = []
    for fused in (True, False):
        b = B()
        x, mask = b.input("hidden", [bsz, s, h]), b.input("mask", [bsz, s])
        qkv_w, out_w = b.param("qkv_w", [h, 3 * h]), b.param("out_w", [h, h])
        qkv_b, out_b = (b.param("qkv_b", [3 * h]), b.param("out_b", [h])) if has_bias else (None, None)
        cos, sin = (b.param("cos", [s + 2, d // 2]), b.param("sin", [s + 2, d // 2])) if has_rope else (None, None)
        if fused:
            ins = [x, qkv_w, out_w, mask] + ([qkv_b, out_b] if has_bias else []) + ([cos, sin] if has_rope else [])
            out = b.add("FusedAttentionBlock", *ins, num_heads=heads, head_dim=d, has_bias=has_bias,
                        has_rope=has_rope)
        else:
            qkv = b.add("MatMul", x, qkv_w)
            qkv = b.add("Add", qkv, qkv_b) if has_bias else qkv
            q, k, v = (b.add("Narrow", qkv, axis=2, start=j * h, len=h) for j in range(3))
            if has_rope:
                q, k = (b.add("Rope", t, cos, sin, head_dim=d, n_rot=d) for t in (q, k))
            out = b.add("MatMul", b.add("Attention", q, k, v, mask, **attn_attrs(heads, d, "Custom")), out_w)
            out = b.add("Add", out, out_b) if has_bias else out
        graphs.append(b.graph(out))
    return graphs


@pytest.mark.parametrize("has_bias, has_rope", [(True, False), (False, False), (True, True), (False, True)])
def test_fused_attention_block_equals_its_expansion(has_bias, has_rope):
    both(*block_graphs(has_bias=has_bias, has_rope=has_rope))


def layer_graphs(has_bias=True, act="Gelu", bsz=2, s=4, heads=2, d=8, inter=24):
    """A FusedTransformerLayer and its expansion into FusedAttentionBlock, FusedResidualLN and two FFN matmuls."""
    h = heads * d
    graphs = []
    for fused in (True, False):
        b = B()
        x, mask = b.input("hidden", [bsz, s, h]), b.input("mask", [bsz, s])
        p = {n: b.param(n, shape) for n, shape in [("qkv_w", [h, 3 * h]), ("qkv_b", [3 * h]), ("out_w", [h, h]),
                                                   ("out_b", [h]), ("ln1_g", [h]), ("ln1_b", [h]),
                                                   ("fc1_w", [h, inter]), ("fc1_b", [inter]), ("fc2_w", [inter, h]),
                                                   ("fc2_b", [h]), ("ln2_g", [h]), ("ln2_b", [h])]
             if has_bias or not n.endswith(("qkv_b", "out_b", "fc1_b", "fc2_b"))}
        if fused:
            order = ["qkv_w", "qkv_b", "out_w", "out_b", "ln1_g", "ln1_b", "fc1_w", "fc1_b", "fc2_w", "fc2_b",
                     "ln2_g", "ln2_b"]
            out = b.add("FusedTransformerLayer", x, *(p[n] for n in order if n in p), mask, num_heads=heads,
                        head_dim=d, intermediate_size=inter, eps1=1e-5, eps2=1e-6, activation=act, has_bias=has_bias)
        else:
            blk = [x, p["qkv_w"], p["out_w"], mask] + ([p["qkv_b"], p["out_b"]] if has_bias else [])
            attn = b.add("FusedAttentionBlock", *blk, num_heads=heads, head_dim=d, has_bias=has_bias, has_rope=False)
            h1 = b.add("FusedResidualLN", attn, x, p["ln1_g"], p["ln1_b"], has_bias=False, eps=1e-5)
            if has_bias:
                up = b.add("FusedMatMulBiasAct", h1, p["fc1_w"], p["fc1_b"], activation=act)
                down = b.add("FusedMatMulBiasAct", up, p["fc2_w"], p["fc2_b"], activation=None)
            else:
                up = b.add(act, b.add("MatMul", h1, p["fc1_w"]))
                down = b.add("MatMul", up, p["fc2_w"])
            out = b.add("FusedResidualLN", down, h1, p["ln2_g"], p["ln2_b"], has_bias=False, eps=1e-6)
        graphs.append(b.graph(out))
    return graphs


@pytest.mark.parametrize("has_bias, act", [(True, "Gelu"), (False, "Relu")])
def test_fused_transformer_layer_equals_its_expansion(has_bias, act):
    both(*layer_graphs(has_bias=has_bias, act=act))


def test_fused_expansions_depend_on_the_weights():
    """A control: the expansions above are not trivially equal (changing one weight changes the output)."""
    fused, _ = layer_graphs()
    inputs, params = random_values(fused, seed=1, scale=0.5)
    before = run(fused, inputs, params)[0]
    params["fc2_w"] = params["fc2_w"] * 1.5
    assert not np.allclose(run(fused, inputs, params)[0], before)


# ── kernels vs numpy ───────────────────────────────────────────────────────────

@pytest.mark.parametrize("has_bias, has_rope", [(True, False), (False, True), (True, True)])
def test_attention_block_kernel_agrees_with_numpy(has_bias, has_rope):
    fused, unfused = block_graphs(bsz=2, s=6, heads=4, d=8, has_bias=has_bias, has_rope=has_rope)
    it = Interpreter(fused, backend="kernels")
    inputs, params = random_values(fused, seed=5, scale=0.3)
    inputs["mask"][1, 2] = 0.0
    got = it.run(inputs, params)[0]
    assert it.kernel_nodes == [max(n["id"] for n in fused["nodes"])]
    np.testing.assert_allclose(got, run(unfused, inputs, params)[0], rtol=2e-4, atol=2e-5)
    np.testing.assert_allclose(got, run(fused, inputs, params)[0], rtol=2e-4, atol=2e-5)


def test_transformer_layer_kernel_agrees_with_numpy():
    fused, unfused = layer_graphs()
    it = Interpreter(fused, backend="kernels")
    inputs, params = random_values(fused, seed=6, scale=0.3)
    got = it.run(inputs, params)[0]
    assert len(it.kernel_nodes) == 1
    np.testing.assert_allclose(got, run(unfused, inputs, params)[0], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kind", ["None", "Causal", "Custom"])
def test_attention_kernel_agrees_with_numpy_and_falls_back_when_ineligible(kind):
    q, k, v = rand(2, 5, 8), rand(2, 5, 8), rand(2, 5, 8)
    mask = np.array([[1, 1, 0, 1, 1], [1, 1, 1, 1, 0.0]])
    arrays = (q, k, v, mask) if kind == "Custom" else (q, k, v)
    b = B()
    ids = [b.input(f"x{i}", a.shape) for i, a in enumerate(arrays)]
    out = b.add("Attention", *ids, **attn_attrs(2, 4, kind))
    soft = b.add("Attention", *ids, **{**attn_attrs(2, 4, kind), "attn_logit_softcap": 5.0})
    # a negative cap means the same in numpy (c·tanh(s/c) is even in c); the kernel takes positive ones only
    negative = b.add("Attention", *ids, **{**attn_attrs(2, 4, kind), "attn_logit_softcap": -5.0})
    graph = b.graph(out, soft, negative)
    feeds = {f"x{i}": a for i, a in enumerate(arrays)}
    it = Interpreter(graph, backend="kernels")
    got = it.run(feeds, {})
    assert it.kernel_nodes == [out, soft]  # the negative cap has no kernel: numpy ran it
    assert "softcap must be finite and positive" in it.kernel_fallbacks[negative]
    want = run(graph, feeds, {})
    np.testing.assert_allclose(got[0], ref_attention(q, k, v, 2, kind, mask), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got[2], want[2], rtol=1e-13)


# ── parameters: npz next to the graph, inline constants ────────────────────────

def weight_graph(**extra):
    b = B()
    x, w = b.input("x", [2, 3]), b.param("w", [3, 2])
    c = b.add("Constant", name="c", shape=[2], value=[10.0, 20.0])
    s = b.add("Constant", name="s", shape=[2, 2], value=0.5)
    n = b.add("Constant", name="from_npz", shape=[2])
    out = b.add("Mul", b.add("Add", b.add("Add", b.add("MatMul", x, w), c), n), s)
    return b.graph(out, **extra)


def test_weights_npz_next_to_the_graph(tmp_path):
    sub = tmp_path / "model"
    sub.mkdir()
    w, n, x = rand(3, 2), np.array([1.0, 2.0]), rand(2, 3)
    np.savez(sub / "weights.npz", w=w, from_npz=n)
    (sub / "graph.json").write_text(json.dumps(weight_graph(weights="weights.npz")))
    expect = (x @ w + [10.0, 20.0] + n) * 0.5
    np.testing.assert_allclose(run(str(sub / "graph.json"), {"x": x})[0], expect, rtol=1e-14)
    graph = rlx_rules.load_graph(sub / "graph.json")
    assert graph.source_path == str(sub / "graph.json")
    np.testing.assert_allclose(run(graph, {"x": x})[0], expect, rtol=1e-14)
    assert sorted(interpret.load_weights(graph)) == ["from_npz", "w"]
    # explicit params win over the file (and are then the only source)
    np.testing.assert_allclose(run(graph, {"x": x}, {"w": w * 2, "from_npz": n})[0],
                               (x @ (w * 2) + [10.0, 20.0] + n) * 0.5, rtol=1e-14)


def test_weights_errors(tmp_path):
    with pytest.raises(rlx_rules.GraphError, match="not loaded from a file"):
        run(weight_graph(weights="w.npz"), {"x": rand(2, 3)})
    (tmp_path / "g.json").write_text(json.dumps(weight_graph(weights="missing.npz")))
    with pytest.raises(rlx_rules.GraphError, match="cannot read the weights file .*missing.npz"):
        run(str(tmp_path / "g.json"), {"x": rand(2, 3)})
    with pytest.raises(rlx_rules.GraphError, match=r"node 4 \('from_npz', Constant\).*inline \"value\""):
        run(weight_graph(), {"x": rand(2, 3)}, {"w": rand(3, 2)})


# ── errors ─────────────────────────────────────────────────────────────────────

def small():
    b = B()
    x, w = b.input("x", ["batch", 3]), b.param("w", [3, 2])
    y = b.input("y", ["batch", 2])
    return b.graph(b.add("Add", b.add("MatMul", x, w, shape=["batch", 2]), y, name="sum"))


def test_missing_and_misshapen_values_name_the_node():
    ok = {"x": rand(4, 3), "y": rand(4, 2)}
    assert run(small(), ok, {"w": rand(3, 2)})[0].shape == (4, 2)
    with pytest.raises(rlx_rules.GraphError, match=r"node 0 \('x', Input\): no value for 'x' in inputs"):
        run(small(), {"y": rand(4, 2)}, {"w": rand(3, 2)})
    with pytest.raises(rlx_rules.GraphError, match=r"node 1 \('w', Param\): no value for 'w' in params"):
        run(small(), ok, {})
    with pytest.raises(rlx_rules.GraphError, match=r"'w'.*shape \[2, 3\], but the graph declares \[3, 2\]"):
        run(small(), ok, {"w": rand(2, 3)})
    with pytest.raises(rlx_rules.GraphError, match=r"'y'.*shape \[5, 2\], but the graph declares \['batch', 2\]"):
        run(small(), {"x": rand(4, 3), "y": rand(5, 2)}, {"w": rand(3, 2)})
    with pytest.raises(rlx_rules.GraphError, match=r"'w'.*not a tensor of numbers"):
        run(small(), ok, {"w": np.array([["a", "b"]] * 3)})
    b = B()
    i = b.input("i", [2], dtype="i32")
    with pytest.raises(rlx_rules.GraphError, match="expected i32 values, got non-integer floats"):
        run(b.graph(b.add("Neg", i)), {"i": np.array([1.5, 2.0])}, {})


def test_wrong_computed_shape_and_bad_attributes_name_the_node():
    b = B()
    x = b.input("x", [2, 3])
    bad = b.add("Reshape", x, new_shape=[3, 2], shape=[2, 3], name="r")
    with pytest.raises(rlx_rules.GraphError, match=r"node 1 \('r', Reshape\): computed shape \[3, 2\]"):
        run(b.graph(bad), {"x": rand(2, 3)}, {})
    for attrs, msg in [({"new_shape": [-1, -1]}, "one -1"), ({"new_shape": [4, -1]}, "cannot infer")]:
        b = B()
        out = b.add("Reshape", b.input("x", [2, 3]), **attrs)
        with pytest.raises(rlx_rules.GraphError, match=rf"node 1 \(Reshape\): .*{msg}"):
            run(b.graph(out), {"x": rand(2, 3)}, {})
    b = B()
    out = b.add("Narrow", b.input("x", [2, 3]), axis=1, start=2, len=2)
    with pytest.raises(rlx_rules.GraphError, match=r"node 1 \(Narrow\): \[2, 4\) is outside axis 1 of size 3"):
        run(b.graph(out), {"x": rand(2, 3)}, {})
    b = B()
    ids = [b.input(n, [1, 2, 4]) for n in "qkv"]
    out = b.add("Attention", *ids, **attn_attrs(2, 2, "Custom"))
    with pytest.raises(rlx_rules.GraphError, match=r"node 3 \(Attention\): mask_kind Custom needs a 4th input"):
        run(b.graph(out), {n: rand(1, 2, 4) for n in "qkv"}, {})


def test_an_op_without_semantics_is_a_clear_error():
    b = B()
    out = b.add("MyCustomOp", b.input("x", [2]), name="mine")
    with pytest.raises(interpret.UnsupportedOpError, match=r"node 1 \('mine', MyCustomOp\): .*no semantics for op"):
        run(b.graph(out), {"x": rand(2)}, {})
    with pytest.raises(ValueError, match="backend"):
        run(b.graph(out), {"x": rand(2)}, {}, backend="torch")


def test_every_rlx_op_of_the_registry_has_semantics():
    import pathlib
    ops = json.loads((pathlib.Path(rlx_rules.__file__).parent / "data" / "ops.json").read_text())["ops"]
    rlx_ops = {name for name, spec in ops.items() if not str(spec.get("rlx", "")).startswith("ONNX-only")}
    assert len(rlx_ops) >= 72
    assert sorted(rlx_ops - set(interpret.supported_ops())) == []


def test_onnx_only_ops_load_their_semantics_on_first_use():
    """A fresh process runs an imported graph's ONNX-only ops (here Erf) without importing rlx_rules.onnx.ops."""
    import subprocess
    import sys

    code = ("import json, rlx_rules\n"
            "g = {'format': 'rlx-graph', 'version': 1, 'nodes': [\n"
            "  {'id': 0, 'op': 'Input', 'name': 'x', 'shape': [3], 'dtype': 'f32'},\n"
            "  {'id': 1, 'op': 'Erf', 'inputs': [0], 'shape': [3], 'dtype': 'f32'}], 'outputs': [1]}\n"
            "(y,) = rlx_rules.run(g, {'x': [0.0, 1.0, -1.0]})\n"
            "print(json.dumps([round(float(v), 6) for v in y]))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[0.0, 0.842701, -0.842701]"
