"""ONNX export (rlx_rules.onnx.export, `rlx-rules export --format onnx`, `rlx-rules optimize`): each mapping against the
interpreter in ONNX Runtime (the contrib ops' semantics are checked here, not assumed), and the corpus end to end."""
from __future__ import annotations

import json
import os
import zlib
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import rlx_rules  # noqa: E402
from rlx_rules.cli.app import main  # noqa: E402
from rlx_rules.graph_builder import GraphBuilder  # noqa: E402
from rlx_rules.interpret import random_values  # noqa: E402
from rlx_rules.errors import ExportError  # noqa: E402
from rlx_rules.onnx.export import EXPORTS, export_onnx, optimize_onnx, to_onnx  # noqa: E402

from onnx_models import Dims, bert_attention, llama_attention  # noqa: E402 - tests/: the shared ONNX model builders

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "corpus"
ATOL = 1e-4
ort.set_default_logger_severity(3)


def session(model):
    data = model if isinstance(model, (str, Path)) else model.SerializeToString()
    return ort.InferenceSession(str(data) if isinstance(data, Path) else data, providers=["CPUExecutionProvider"])


def ort_run(model, feed):
    s = session(model)
    return s.run(None, {i.name: feed[i.name] for i in s.get_inputs()})


def as_feed(graph, inputs):
    types = {n.name: n.dtype for n in graph.nodes if n.op == "Input"}
    np_types = {"f32": np.float32, "i64": np.int64, "i32": np.int32, "bool": np.bool_}
    return {k: np.asarray(v).astype(np_types[types[k]]) for k, v in inputs.items() if k in types}


def check(graph_dict, seed=0, atol=ATOL, inputs=None):
    """Export the graph, run it in ONNX Runtime, compare every output with the interpreter (float64)."""
    graph = rlx_rules.load_graph(graph_dict)
    rand_in, params = random_values(graph, seed=seed, scale=0.5)
    rand_in.update(inputs or {})
    feed = as_feed(graph, rand_in)
    params = {k: np.asarray(v, dtype=np.float32) for k, v in params.items()}
    want = rlx_rules.run(graph, {k: v.astype(np.float64) if v.dtype.kind == "f" else v for k, v in feed.items()},
                         params)
    model = to_onnx(graph, params)
    onnx.checker.check_model(model)
    got = ort_run(model, feed)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        np.testing.assert_allclose(np.asarray(a, dtype=np.float64), b, atol=atol, rtol=1e-4)
    return model


def ops_of(model):
    return {(n.domain or "", n.op_type) for n in model.graph.node}


# ---- attention: MultiHeadAttention with RLX's mask kinds -----------------------------------------------------------
def attention_graph(kind="None", b=2, sq=5, sk=5, heads=2, hd=4, kv_heads=None, mask_shape=None, mask_dtype="bool",
                    layout="bsh", **attrs):
    g = GraphBuilder("attn", default_dtype="f32")
    kvh = kv_heads or heads
    shapes = {"bsh": ([b, sq, heads * hd], [b, sk, kvh * hd]), "bshd": ([b, sq, heads, hd], [b, sk, kvh, hd]),
              "bhsd": ([b, heads, sq, hd], [b, kvh, sk, hd])}[layout]
    q = g.add("Input", shape=shapes[0], name="q")
    k = g.add("Input", shape=shapes[1], name="k")
    v = g.add("Input", shape=shapes[1], name="v")
    ins = [q, k, v]
    if mask_shape is not None:
        ins.append(g.add("Input", shape=mask_shape, name="mask", dtype=mask_dtype))
    a = g.add("Attention", ins, {"num_heads": heads, "head_dim": hd, "mask_kind": kind, "score_scale": None,
                                 "attn_logit_softcap": None, **attrs}, shapes[0])
    return g.graph([a])


def keep_mask(shape, seed=1, dead_row=True):
    rng = np.random.default_rng(seed)
    keep = rng.random(shape) > 0.4
    keep[..., 0] = True
    if dead_row:
        keep[(0,) * (len(shape) - 1)] = False  # a fully masked row (the first query of batch 0)
    return keep


@pytest.mark.parametrize("mask_shape", [[2, 1, 5, 5], [2, 5], [2, 5, 5], [2, 2, 5, 5], [1, 1, 5, 5]])
def test_attention_custom_mask_with_a_fully_masked_row_is_uniform(mask_shape):
    keep = keep_mask(mask_shape)
    model = check(attention_graph("Custom", mask_shape=mask_shape), inputs={"mask": keep})
    assert ("com.microsoft", "MultiHeadAttention") in ops_of(model)


def test_attention_custom_float_keep_mask():
    keep = keep_mask([2, 1, 5, 5]).astype(np.float32) * 0.9  # RLX keeps where mask >= 0.5
    check(attention_graph("Custom", mask_shape=[2, 1, 5, 5], mask_dtype="f32"), inputs={"mask": keep})


@pytest.mark.parametrize("mask_shape", [[2, 1, 5, 5], [2, 5], [2, 2, 5, 5]])
def test_attention_masked_rows_zero(mask_shape):
    keep = keep_mask(mask_shape)
    graph = attention_graph("Custom", mask_shape=mask_shape, masked_rows="zero")
    model = check(graph, inputs={"mask": keep})
    (y,) = ort_run(model, as_feed(rlx_rules.load_graph(graph), dict(
        random_values(rlx_rules.load_graph(graph))[0], mask=keep)))
    dead = y[0, 0, :4] if mask_shape == [2, 2, 5, 5] else y[0, 0]  # a per-head mask kills head 0's row only
    assert not np.any(dead) and np.any(y[1])  # the dead row is 0, as in PyTorch's SDPA


def test_attention_bias_mask_and_bias_with_minus_inf_rows_zero():
    rng = np.random.default_rng(3)
    bias = rng.standard_normal((2, 2, 5, 5)).astype(np.float32)
    check(attention_graph("Bias", mask_shape=[2, 2, 5, 5], mask_dtype="f32"), inputs={"mask": bias})
    bias[0, :, 1, :] = -np.inf
    bias[1, 0, 2, 3] = -np.inf
    check(attention_graph("Bias", mask_shape=[2, 2, 5, 5], mask_dtype="f32", masked_rows="zero"),
          inputs={"mask": bias})


@pytest.mark.parametrize("kind,sq,sk,extra", [("None", 5, 5, {}), ("Causal", 5, 5, {}), ("Causal", 3, 7, {}),
                                              ("SlidingWindow", 6, 6, {"window": 2})])
def test_attention_built_in_masks(kind, sq, sk, extra):
    model = check(attention_graph(kind, sq=sq, sk=sk, **extra))
    node = next(n for n in model.graph.node if n.op_type == "MultiHeadAttention")
    uni = [a.i for a in node.attribute if a.name == "unidirectional"]
    assert uni == ([1] if kind == "Causal" and sq == sk else [])  # otherwise an exact constant bias


def test_attention_scale_layouts_and_grouped_query():
    check(attention_graph("None", score_scale=0.3))
    check(attention_graph("Causal", heads=4, kv_heads=2))
    check(attention_graph("Causal", heads=4, kv_heads=1))
    check(attention_graph("None", layout="bshd"))
    check(attention_graph("Causal", layout="bhsd", heads=4))


def dims_at(dims, sizes):
    return None if dims is None else [sizes.get(d, d) for d in dims]


@pytest.mark.parametrize("kind,mask_shape,same_len,extra", [
    ("None", None, False, {}), ("Causal", None, True, {}), ("Causal", None, False, {}),
    ("SlidingWindow", None, True, {"window": 2}), ("Causal", None, False, {"heads": 4, "kv_heads": 2}),
    ("Custom", ["B", "T"], False, {}), ("Custom", ["B", "S", "T"], False, {}),
    ("Custom", ["B", 1, "S", "T"], False, {"masked_rows": "zero"}), ("Custom", ["B", 2, "S", "T"], False, {}),
    ("Custom", ["B", "T"], False, {"masked_rows": "zero", "layout": "bshd", "heads": 4, "kv_heads": 2}),
    ("Bias", ["B", 2, "S", "T"], False, {"masked_rows": "zero"})])
def test_attention_with_symbolic_batch_and_lengths(kind, mask_shape, same_len, extra):
    """One export with symbolic B, S, T, run at two sizes against the interpreter on the same graph made static:
    the causal bias, the mask broadcast and the grouped-query repeat are built from Shape at run time."""
    sym = {"B": "B", "S": "S", "T": "S" if same_len else "T"}
    dtype = "f32" if kind == "Bias" else "bool"
    model = to_onnx(rlx_rules.load_graph(attention_graph(
        kind, b="B", sq="S", sk=sym["T"], mask_shape=dims_at(mask_shape, sym), mask_dtype=dtype, **extra)), {})
    onnx.checker.check_model(model)
    assert [d.dim_param for d in model.graph.input[0].type.tensor_type.shape.dim][:1] == ["B"]
    for b, sq, sk in [(2, 5, 5), (3, 4, 7)] if not same_len else [(2, 5, 5), (3, 7, 7)]:
        sizes = {"B": b, "S": sq, "T": sk}
        graph = rlx_rules.load_graph(attention_graph(kind, b=b, sq=sq, sk=sk, mask_shape=dims_at(mask_shape, sizes),
                                                     mask_dtype=dtype, **extra))
        rand_in = random_values(graph, seed=0, scale=0.5)[0]
        if mask_shape is not None:
            keep = keep_mask(dims_at(mask_shape, sizes))  # with a fully masked row
            rand_in["mask"] = keep if kind == "Custom" else np.where(keep, rand_in["mask"], -np.inf)
        feed = as_feed(graph, rand_in)
        want = rlx_rules.run(graph, {k: v.astype(np.float64) if v.dtype.kind == "f" else v for k, v in feed.items()},
                             {})
        (got,) = ort_run(model, feed)
        np.testing.assert_allclose(np.asarray(got, np.float64), want[0], atol=ATOL, rtol=1e-4)


def test_attention_without_a_faithful_mapping_is_an_export_error():
    graph = rlx_rules.load_graph(attention_graph("None", attn_logit_softcap=30.0))
    with pytest.raises(ExportError, match=r"node 3 .*soft-cap"):
        to_onnx(graph, {})


# ---- RoPE: RotaryEmbedding ------------------------------------------------------------------------------------------
def rope_graph(style="NeoX", b=2, s=5, heads=2, hd=8, n_rot=None, rows=7, width=None, x_rank=3):
    g = GraphBuilder("rope", default_dtype="f32")
    shape = [b, s, heads * hd] if x_rank == 3 else [b, s, heads, hd]
    x = g.add("Input", shape=shape, name="x")
    w = width or (n_rot or hd) // 2
    cos = g.add("Input", shape=[rows, w], name="cos")
    sin = g.add("Input", shape=[rows, w], name="sin")
    y = g.add("Rope", [x, cos, sin], {"head_dim": hd, "n_rot": n_rot or hd, "style": style}, shape)
    return g.graph([y])


@pytest.mark.parametrize("kwargs", [{}, {"style": "GptJ"}, {"n_rot": 4}, {"n_rot": 4, "style": "GptJ"},
                                    {"rows": 10}, {"rows": 5, "s": 5, "width": 6}, {"x_rank": 4},
                                    {"rows": 10, "b": 2, "s": 5}])
def test_rope(kwargs):
    model = check(rope_graph(**kwargs))
    assert ("com.microsoft", "RotaryEmbedding") in ops_of(model)


def test_rope_per_token_tables():
    check(rope_graph(b=3, s=4, rows=12))  # B·S rows: one row per token


# ---- norms, activations, fused ops ---------------------------------------------------------------------------------
def unary_graph(op, shape=(2, 3, 8), attrs=None, extra=()):
    g = GraphBuilder(op, default_dtype="f32")
    x = g.add("Input", shape=list(shape), name="x")
    params = [g.add("Param", shape=list(s), name=f"p{k}") for k, s in enumerate(extra)]
    y = g.add(op, [x, *params], attrs or None, list(shape))
    return g.graph([y])


@pytest.mark.parametrize("op", ["Gelu", "GeluApprox", "Silu", "Rsqrt", "Relu", "Tanh"])
def test_activations(op):
    graph = unary_graph(op)
    x = np.abs(np.random.default_rng(0).standard_normal((2, 3, 8))) + 0.1 if op == "Rsqrt" else None
    check(graph, inputs={"x": x} if x is not None else None)


def test_layer_norm_and_rms_norm():
    check(unary_graph("LayerNorm", attrs={"axis": -1, "eps": 1e-5}, extra=[(8,), (8,)]))
    check(unary_graph("RmsNorm", attrs={"axis": -1, "eps": 1e-6}, extra=[(8,), (8,)]))  # with a β
    g = GraphBuilder("rms", default_dtype="f32")
    x = g.add("Input", shape=[2, 3, 8], name="x")
    gamma = g.add("Param", shape=[8], name="g")
    zero = g.add("Constant", attrs={"value": 0.0}, shape=[])
    y = g.add("RmsNorm", [x, gamma, zero], {"axis": -1, "eps": 1e-6}, [2, 3, 8])
    model = check(g.graph([y]))
    assert sum(n.op_type == "Add" for n in model.graph.node) == 1  # the eps; β = 0 adds nothing


@pytest.mark.parametrize("op,has_bias", [("FusedResidualLN", False), ("FusedResidualLN", True),
                                         ("FusedResidualRmsNorm", False), ("FusedResidualRmsNorm", True)])
def test_residual_norms_are_skip_norms(op, has_bias):
    g = GraphBuilder(op, default_dtype="f32")
    x = g.add("Input", shape=[2, 3, 8], name="x")
    r = g.add("Input", shape=[2, 3, 8], name="r")
    ps = [g.add("Param", shape=[8], name=f"p{k}") for k in range(3 if has_bias else 2)]
    y = g.add(op, [x, r, *ps], {"has_bias": has_bias, "eps": 1e-5}, [2, 3, 8])
    model = check(g.graph([y]))
    want = "SkipLayerNormalization" if op == "FusedResidualLN" else "SkipSimplifiedLayerNormalization"
    assert ("com.microsoft", want) in ops_of(model)


@pytest.mark.parametrize("act", [None, "Gelu", "GeluApprox", "Relu", "Silu"])
def test_matmul_bias_act(act):
    g = GraphBuilder("mba", default_dtype="f32")
    x = g.add("Input", shape=[2, 3, 8], name="x")
    w = g.add("Param", shape=[8, 6], name="w")
    bias = g.add("Param", shape=[6], name="b")
    y = g.add("FusedMatMulBiasAct", [x, w, bias], {"activation": act}, [2, 3, 6])
    model = check(g.graph([y]))
    if act in ("Gelu", "GeluApprox"):
        assert ("com.microsoft", "BiasGelu" if act == "Gelu" else "FastGelu") in ops_of(model)


@pytest.mark.parametrize("gate_first", [False, True])
def test_swiglu(gate_first):
    g = GraphBuilder("swiglu", default_dtype="f32")
    x = g.add("Input", shape=[2, 3, 8], name="x")
    y = g.add("FusedSwiGLU", [x], {"gate_first": gate_first}, [2, 3, 4])
    check(g.graph([y]))


def block_graph(has_bias=True, has_rope=False, mask_shape=(2, 1, 5, 5), heads=2, hd=4, s=5, **attrs):
    g = GraphBuilder("block", default_dtype="f32")
    h = heads * hd
    x = g.add("Input", shape=[2, s, h], name="hidden")
    mask = g.add("Input", shape=list(mask_shape), name="mask", dtype="bool")
    ins = [x, g.add("Param", shape=[h, 3 * h], name="qkv_w"), g.add("Param", shape=[h, h], name="out_w"), mask]
    if has_bias:
        ins += [g.add("Param", shape=[3 * h], name="qkv_b"), g.add("Param", shape=[h], name="out_b")]
    if has_rope:
        ins += [g.add("Input", shape=[s, hd // 2], name="cos"), g.add("Input", shape=[s, hd // 2], name="sin")]
    y = g.add("FusedAttentionBlock", ins, {"num_heads": heads, "head_dim": hd, "has_bias": has_bias,
                                           "has_rope": has_rope, **attrs}, [2, s, h])
    return g.graph([y])


@pytest.mark.parametrize("has_bias,has_rope", [(True, False), (False, False), (True, True), (False, True)])
def test_attention_block(has_bias, has_rope):
    model = check(block_graph(has_bias, has_rope), inputs={"mask": keep_mask([2, 1, 5, 5])})
    want = "MultiHeadAttention" if has_rope else "Attention"
    assert ("com.microsoft", want) in ops_of(model)


def test_transformer_layer_on_the_bundled_example():
    graph = rlx_rules.load_graph(rlx_rules.examples.bert_encoder(layers=1, batch=1, seq=4, hidden=16, heads=2,
                                                                 ffn=32))
    fused, _ = rlx_rules.load_rules("@default").with_params(RLX_ENABLE_FUSE_TRANSFORMER_LAYER=True).apply(graph)
    assert fused.op_counts()["FusedTransformerLayer"] == 1
    check(fused.to_dict())
    check(graph.to_dict())  # and unfused


@pytest.mark.parametrize("op,attrs,shape,out", [
    ("Narrow", {"axis": 1, "start": 1, "len": 2}, [2, 4, 3], [2, 2, 3]),
    ("Slice", {"axis": 1, "start": 1, "len": 2, "step": 2}, [2, 5, 3], [2, 2, 3]),
    ("Reverse", {"axes": [0, 2]}, [2, 4, 3], [2, 4, 3]),
    ("Expand", {"target_shape": [2, -1, 4, 3]}, [1, 4, 3], [2, 1, 4, 3]),
    ("Reduce", {"op": "Mean", "axes": [1], "keep_dim": True}, [2, 4, 3], [2, 1, 3]),
    ("Reduce", {"op": "Max", "axes": [0, 2], "keep_dim": False}, [2, 4, 3], [4]),
    ("Cumsum", {"axis": 1, "exclusive": True}, [2, 4, 3], [2, 4, 3]),
    ("ArgMax", {"axis": 2, "keep_dim": False}, [2, 4, 3], [2, 4]),
    ("TopK", {"k": 2}, [2, 4, 3], [2, 4, 2]),
    ("Softmax", {"axis": 1}, [2, 4, 3], [2, 4, 3]),
    ("Transpose", {"perm": [2, 0, 1]}, [2, 4, 3], [3, 2, 4]),
    ("Reshape", {"new_shape": [4, -1]}, [2, 4, 3], [4, 6]),
])
def test_shape_and_reduction_ops(op, attrs, shape, out):
    if op == "Expand":
        out = [2, 1, 4, 3]
        attrs = {"target_shape": [2, 1, 4, 3]}
    g = GraphBuilder(op, default_dtype="f32")
    x = g.add("Input", shape=shape, name="x")
    y = g.add(op, [x], attrs, out)
    check(g.graph([y]))


@pytest.mark.parametrize("pad", [[1, 1], [0, 1, 2, 1]])
def test_conv_padding_orders(pad):
    g = GraphBuilder("conv", default_dtype="f32")
    x = g.add("Input", shape=[1, 4, 6, 6], name="x")
    w = g.add("Param", shape=[4, 2, 3, 3], name="w")
    full = pad * 2 if len(pad) == 2 else pad
    out = [1, 4, 6 + full[0] + full[2] - 2, 6 + full[1] + full[3] - 2]
    y = g.add("Conv", [x, w], {"kernel_size": [3, 3], "stride": [1, 1], "padding": pad, "dilation": [1, 1],
                               "groups": 2}, out)
    check(g.graph([y]))


def test_compare_where_fma_gather():
    g = GraphBuilder("misc", default_dtype="f32")
    a = g.add("Input", shape=[2, 4], name="a")
    b = g.add("Input", shape=[2, 4], name="b")
    ne = g.add("Ne", [a, b], shape=[2, 4], dtype="f32")
    w = g.add("Where", [ne, a, b], shape=[2, 4])
    f = g.add("Fma", [w, a, b], shape=[2, 4])
    idx = g.add("Constant", attrs={"value": [1.0, 0.0, 1.0]}, shape=[3])
    gat = g.add("Gather", [f, idx], {"axis": 0}, [3, 4])
    check(g.graph([gat, ne]), inputs={"b": np.array([[1, 2, 3, 4], [0, 0, 0, 0.0]]), "a": np.ones((2, 4))})


def test_inputs_kept_and_dead_nodes_dropped():
    g = GraphBuilder("sig", default_dtype="f32")
    x = g.add("Input", shape=[2, 3], name="x")
    g.add("Input", shape=[2, 3], name="unused")
    dead = g.add("Param", shape=[3], name="dead")
    g.add("Add", [x, dead], shape=[2, 3])
    y = g.add("Relu", [x], shape=[2, 3])
    model = to_onnx(rlx_rules.load_graph(g.graph([y])), {"dead": np.ones(3, np.float32)})
    assert [i.name for i in model.graph.input] == ["x", "unused"]  # the caller feeds what it fed the original
    assert not model.graph.initializer and [n.op_type for n in model.graph.node] == ["Relu"]


def test_unmapped_op_is_an_export_error_naming_it():
    g = GraphBuilder("gmm", default_dtype="f32")
    x = g.add("Input", shape=[3, 4], name="x")
    w = g.add("Param", shape=[2, 4, 5], name="w")
    idx = g.add("Input", shape=[3], name="idx")
    y = g.add("GroupedMatMul", [x, w, idx], shape=[3, 5], name="experts")
    with pytest.raises(ExportError, match=r"node 3 \('experts', GroupedMatMul\).*no ONNX mapping"):
        to_onnx(rlx_rules.load_graph(g.graph([y])), {"w": np.zeros((2, 4, 5), np.float32)})
    assert "GroupedMatMul" not in EXPORTS


# ---- whole models ---------------------------------------------------------------------------------------------------
SMALL_MODELS = {
    "bert_where": lambda: bert_attention(Dims(2, 6, 2, 4)),
    "bert_bias": lambda: bert_attention(Dims(2, 6, 2, 4), mask="bias"),
    "bert_sdpa": lambda: bert_attention(Dims(2, 6, 2, 4), sdpa=True),
    "bert_gqa": lambda: bert_attention(Dims(2, 6, 2, 4), gqa=True, mask=None),
    "llama_causal": lambda: llama_attention(Dims(2, 6, 2, 4), rope_on=("q", "k")),
    "llama_padding": lambda: llama_attention(Dims(2, 6, 2, 4), rope_on=("q", "k"), mask="causal_and_padding"),
}


def random_feed(model, seed=0):
    rng = np.random.default_rng(seed)
    feed = {}
    for i in model.graph.input:
        shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
        if i.type.tensor_type.elem_type == onnx.TensorProto.INT64:
            keep = np.ones(shape, np.int64)
            if len(shape) == 2:
                keep[0, -2:] = 0  # right padding
            feed[i.name] = keep
        else:
            feed[i.name] = rng.standard_normal(shape).astype(np.float32)
    return feed


@pytest.mark.parametrize("name", list(SMALL_MODELS))
def test_optimize_small_models_matches_the_original(name, tmp_path):
    model = SMALL_MODELS[name]()
    src = tmp_path / f"{name}.onnx"
    onnx.save(model, str(src))
    fused, report = optimize_onnx(str(src), str(tmp_path / f"{name}.fused.onnx"))
    onnx.checker.check_model(fused)
    feed = random_feed(model)
    for a, b in zip(ort_run(tmp_path / f"{name}.fused.onnx", feed), ort_run(model, feed)):
        np.testing.assert_allclose(a, b, atol=ATOL, rtol=1e-4)
    assert report.data["ops_after"].get("Softmax", 0) == 0, report.data["ops_after"]


def corpus_entries():
    if not (CORPUS / "manifest.json").exists():
        return []
    entries = [e for e in json.loads((CORPUS / "manifest.json").read_text())["files"]
               if e.get("exported") and (CORPUS / e["file"]).exists()]
    if os.environ.get("RLX_RULES_TEST_ALL_CORPUS"):
        return entries
    by_family: dict = {}  # one file per family in CI (the choice rotates with the name, not at random)
    for e in entries:
        by_family.setdefault(e["family"], []).append(e)
    return [group[zlib.crc32(fam.encode()) % len(group)] for fam, group in sorted(by_family.items())]


@pytest.mark.parametrize("entry", corpus_entries(), ids=lambda e: e["file"])
def test_corpus_exports_runs_and_matches(entry, tmp_path):
    """optimize (pinned to the inputs' shapes) -> onnx.checker -> ONNX Runtime, within 1e-4 of the recorded outputs."""
    stem = entry["file"][: -len(".onnx")]
    feed = dict(np.load(CORPUS / f"{stem}.inputs.npz"))
    expected = list(np.load(CORPUS / f"{stem}.expected.npz").values())
    out = tmp_path / f"{stem}.fused.onnx"
    model, _ = optimize_onnx(str(CORPUS / entry["file"]), str(out),
                             input_shapes={k: list(v.shape) for k, v in feed.items()})
    onnx.checker.check_model(model)
    got = ort_run(out, feed)
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        np.testing.assert_allclose(a, b, atol=ATOL, rtol=1e-4, equal_nan=True)


@pytest.mark.parametrize("stem", ["bert.eager.legacy", "llama.sdpa.dynamo", "falcon.sdpa.dynamo"])
def test_optimize_keeps_a_dynamic_model_dynamic(stem, tmp_path):
    """optimize without --input-shape on an encoder, a decoder and a grouped-query decoder with symbolic batch and
    sequence: attention fuses, the dims stay symbolic, and it matches the recorded outputs at two batch sizes."""
    if not (CORPUS / f"{stem}.onnx").exists():
        pytest.skip(f"{stem}.onnx is not in the corpus")
    out = tmp_path / f"{stem}.fused.onnx"
    model, _ = optimize_onnx(str(CORPUS / f"{stem}.onnx"), str(out))
    onnx.checker.check_model(model)
    assert ("com.microsoft", "MultiHeadAttention") in ops_of(model)
    for i in model.graph.input:
        assert all(d.dim_param for d in i.type.tensor_type.shape.dim[:2]), i
    feed = dict(np.load(CORPUS / f"{stem}.inputs.npz"))
    expected = list(np.load(CORPUS / f"{stem}.expected.npz").values())
    for rows in (None, 2):  # the recorded batch, then its first two rows (every row is its own sequence)
        got = ort_run(out, {k: v[:rows] for k, v in feed.items()})
        assert len(got) == len(expected)
        for a, b in zip(got, expected):
            np.testing.assert_allclose(a, b[:rows], atol=ATOL, rtol=1e-4, equal_nan=True)


# ---- files and the command line -------------------------------------------------------------------------------------
def test_external_data_round_trip(tmp_path):
    graph = rlx_rules.load_graph(block_graph(hd=8))
    _, params = random_values(graph, seed=0)
    params = {k: np.asarray(v, np.float32) for k, v in params.items()}
    path = tmp_path / "m.onnx"
    export_onnx(graph, path, weights=params, external_data=True)
    assert (tmp_path / "m.onnx.data").stat().st_size >= sum(v.nbytes for v in params.values() if v.nbytes >= 1024)
    loaded = onnx.load(str(path), load_external_data=False)
    assert any(t.data_location == onnx.TensorProto.EXTERNAL for t in loaded.graph.initializer)
    feed = {"hidden": np.ones((2, 5, 16), np.float32), "mask": keep_mask([2, 1, 5, 5])}
    inline = to_onnx(graph, params)
    for a, b in zip(ort_run(path, feed), ort_run(inline, feed)):
        np.testing.assert_array_equal(a, b)


def test_cli_export_and_optimize(tmp_path, capsys):
    model = SMALL_MODELS["bert_where"]()
    src = tmp_path / "m.onnx"
    onnx.save(model, str(src))
    assert main(["optimize", str(src), "-o", str(tmp_path / "m.fused.onnx")]) == 0
    text = capsys.readouterr().out
    assert "fusion:" in text and "com.microsoft: " in text and "FusedAttentionBlock" in text
    assert main(["optimize", str(src), "-o", str(src)]) == 7  # never over its input
    assert main(["import", str(src), "-o", str(tmp_path / "m.graph.json"), "-q"]) == 0
    assert main(["apply", str(tmp_path / "m.graph.json"), "-r", "@onnx", "-o", str(tmp_path / "f.json"), "-q"]) == 0
    assert main(["export", "--format", "onnx", str(tmp_path / "f.json"), "-o", str(tmp_path / "f.onnx")]) == 0
    feed = random_feed(model)
    for a, b in zip(ort_run(tmp_path / "f.onnx", feed), ort_run(model, feed)):
        np.testing.assert_allclose(a, b, atol=ATOL, rtol=1e-4)
    assert main(["export", "--format", "onnx", str(tmp_path / "f.json"), "-o", str(tmp_path / "f.json")]) == 7


def test_cli_export_refuses_an_unmapped_op(tmp_path, capsys):
    g = GraphBuilder("s", default_dtype="f32")
    x = g.add("Input", shape=[4], name="x")
    y = g.add("Sample", [x], {"top_k": 1, "top_p": 1.0, "temperature": 1.0, "seed": 0}, [1])
    (tmp_path / "g.json").write_text(json.dumps(g.graph([y])))
    assert main(["export", "--format", "onnx", str(tmp_path / "g.json"), "-o", str(tmp_path / "g.onnx")]) == 4
    assert "Sample" in capsys.readouterr().err and not (tmp_path / "g.onnx").exists()


def test_docs_list_every_mapping():
    text = (ROOT / "docs" / "export.md").read_text()
    for op in EXPORTS:
        if not EXPORTS[op].target.endswith("(the ONNX op it came from)"):
            assert f"`{op}`" in text, op
