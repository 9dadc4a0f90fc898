"""ONNX export, the kernel choices made for speed (export_skip.py, export_attention.py): each one against the
interpreter in ONNX Runtime, and the cases where a contrib op's semantics differ, so the exporter does not use it."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from rlx_rules.graph_builder import GraphBuilder  # noqa: E402

from test_onnx_export import attention_graph, check, keep_mask  # noqa: E402 - tests/: the shared checks


def ops(model):
    return [n.op_type for n in model.graph.node]


# ---- residual sums read twice: Skip*Normalization with its sum output ------------------------------------------
@pytest.mark.parametrize("norm", ["LayerNorm", "RmsNorm"])
@pytest.mark.parametrize("projected", [False, True])
def test_a_residual_read_twice_is_one_skip_norm_with_its_sum(norm, projected):
    g = GraphBuilder("pre_norm", default_dtype="f32")
    x = g.add("Input", shape=[2, 3, 8], name="x")
    r = g.add("Input", shape=[2, 3, 8], name="r")
    if projected:  # a projection's bias goes into the skip norm (its MatMul is written alone)
        r = g.add("FusedMatMulBiasAct", [r, g.add("Param", shape=[8, 8], name="w"), g.add("Param", shape=[8], name="bias")],
                  {"activation": None}, [2, 3, 8])
    s = g.add("Add", [x, r], shape=[2, 3, 8])
    gamma, beta = g.add("Param", shape=[8], name="g"), g.add("Param", shape=[8], name="beta")
    y = g.add(norm, [s, gamma, beta], {"axis": -1, "eps": 1e-5}, [2, 3, 8])
    out = g.add("Mul", [s, y], shape=[2, 3, 8])  # the sum read again, as the next residual reads it
    model = check(g.graph([out]))
    kind = "SkipLayerNormalization" if norm == "LayerNorm" else "SkipSimplifiedLayerNormalization"
    skip = next(n for n in model.graph.node if n.op_type == kind)
    assert skip.output[3] and "Add" not in ops(model) or norm == "RmsNorm"  # RmsNorm adds its β after
    assert len(skip.input) == (5 if norm == "LayerNorm" else 4) if projected else True
    assert ("Gemm" not in ops(model)) and ops(model).count("MatMul") == int(projected)


def test_a_norm_over_a_matrix_gamma_stays_two_kernels():
    """SkipLayerNormalization takes vector γ and β only: a [3, 8] γ keeps the Add and LayerNormalization."""
    g = GraphBuilder("matrix_gamma", default_dtype="f32")
    x, r = g.add("Input", shape=[2, 3, 8], name="x"), g.add("Input", shape=[2, 3, 8], name="r")
    s = g.add("Add", [x, r], shape=[2, 3, 8])
    y = g.add("LayerNorm", [s, g.add("Param", shape=[3, 8], name="g"), g.add("Param", shape=[8], name="b")],
              {"axis": -1, "eps": 1e-5}, [2, 3, 8])
    model = check(g.graph([g.add("Mul", [s, y], shape=[2, 3, 8])]))
    assert "SkipLayerNormalization" not in ops(model)


@pytest.mark.parametrize("op", ["FusedResidualLN", "FusedResidualRmsNorm"])
def test_residual_norm_takes_the_projection_bias(op):
    g = GraphBuilder(op, default_dtype="f32")
    x, h = g.add("Input", shape=[2, 3, 8], name="x"), g.add("Input", shape=[2, 3, 6], name="h")
    proj = g.add("FusedMatMulBiasAct", [h, g.add("Param", shape=[6, 8], name="w"), g.add("Param", shape=[8], name="b")],
                 {"activation": None}, [2, 3, 8])
    y = g.add(op, [x, proj, g.add("Param", shape=[8], name="g"), g.add("Param", shape=[8], name="beta")],
              {"has_bias": False, "eps": 1e-5}, [2, 3, 8])
    model = check(g.graph([y]))
    assert "Add" not in ops(model) or op == "FusedResidualRmsNorm"
    assert len(next(n for n in model.graph.node if n.op_type.startswith("Skip")).input) == (5 if op == "FusedResidualLN" else 4)


# ---- attention: multi-query folded, BNSH k/v, packed projections -----------------------------------------------
MASKS = [("None", None), ("Causal", None), ("SlidingWindow", None), ("Custom", [2, 1, 5, 5]), ("Custom", [2, 5]),
         ("Custom", [2, 5, 5]), ("Custom", [2, 4, 5, 5]), ("Bias", [2, 4, 5, 5])]


def mask_inputs(kind, shape):
    if kind == "Custom":
        return {"mask": keep_mask(shape)}  # a fully masked row included
    return {"mask": np.random.default_rng(2).standard_normal(shape).astype(np.float32)} if kind == "Bias" else None


@pytest.mark.parametrize("layout", ["bsh", "bshd"])
@pytest.mark.parametrize("kind,mask_shape", MASKS)
def test_multi_query_attention_is_folded_not_repeated(layout, kind, mask_shape):
    extra = {"window": 2} if kind == "SlidingWindow" else {}
    graph = attention_graph(kind, heads=4, kv_heads=1, layout=layout, mask_shape=mask_shape,
                            mask_dtype="f32" if kind == "Bias" else "bool", **extra)
    model = check(graph, inputs=mask_inputs(kind, mask_shape))
    mha = next(n for n in model.graph.node if n.op_type == "MultiHeadAttention")
    assert [a.i for a in mha.attribute if a.name == "num_heads"] == [1]  # Sq·H query rows on the one kv head
    assert "unidirectional" not in {a.name for a in mha.attribute}  # a row's position is not its index


@pytest.mark.parametrize("mask_shape", [[2, 1, 5, 5], [2, 5], [2, 4, 5, 5]])
def test_multi_query_attention_with_zeroed_dead_rows(mask_shape):
    check(attention_graph("Custom", heads=4, kv_heads=1, mask_shape=mask_shape, masked_rows="zero"),
          inputs={"mask": keep_mask(mask_shape)})


def test_bhsd_keys_go_to_multi_head_attention_as_they_are():
    model = check(attention_graph("Custom", heads=4, layout="bhsd", mask_shape=[2, 1, 5, 5]),
                  inputs={"mask": keep_mask([2, 1, 5, 5])})
    mha = next(n for n in model.graph.node if n.op_type == "MultiHeadAttention")
    assert mha.input[1] == "k" and mha.input[2] == "v"  # BNSH key and value, no transpose


def packed_graph(kind="Custom", mask_shape=(2, 1, 5, 5), extra_reader=False, has_bias=True, **attrs):
    g = GraphBuilder("packed", default_dtype="f32")
    x = g.add("Input", shape=[2, 5, 6], name="x")
    w = g.add("Param", shape=[6, 24], name="w")
    if has_bias:
        p = g.add("FusedMatMulBiasAct", [x, w, g.add("Param", shape=[24], name="b")], {"activation": None}, [2, 5, 24])
    else:
        p = g.add("MatMul", [x, w], shape=[2, 5, 24])
    q, k, v = (g.add("Narrow", [p], {"axis": 2, "start": 8 * j, "len": 8}, [2, 5, 8]) for j in range(3))
    ins = [q, k, v] + ([g.add("Input", shape=list(mask_shape), name="mask", dtype="bool")] if mask_shape else [])
    y = g.add("Attention", ins, {"num_heads": 2, "head_dim": 4, "mask_kind": kind, "score_scale": None,
                                 "attn_logit_softcap": None, **attrs}, [2, 5, 8])
    return g.graph([y, p] if extra_reader else [y])


@pytest.mark.parametrize("kind,mask_shape,has_bias", [("Custom", (2, 1, 5, 5), True), ("Causal", None, True),
                                                      ("None", None, False), ("Custom", (2, 5), False)])
def test_packed_projection_is_one_attention_op(kind, mask_shape, has_bias):
    model = check(packed_graph(kind, mask_shape, has_bias=has_bias),
                  inputs={"mask": keep_mask(list(mask_shape))} if mask_shape else None)
    att = next(n for n in model.graph.node if n.op_type == "Attention")
    assert "MultiHeadAttention" not in ops(model) and "Split" not in ops(model) and "Slice" not in ops(model)
    # never mask_index: with its -10000 fill a fully masked row is not uniform (ONNX Runtime 1.2x: 4.0 off)
    assert len(att.input) < 4 or att.input[3] == ""


def test_packed_projection_read_elsewhere_keeps_its_matmul():
    model = check(packed_graph(extra_reader=True), inputs={"mask": keep_mask([2, 1, 5, 5])})
    assert "Attention" not in ops(model) and "MultiHeadAttention" in ops(model)


def test_packed_projection_with_zeroed_dead_rows():
    check(packed_graph(masked_rows="zero"), inputs={"mask": keep_mask([2, 1, 5, 5])})


def test_attention_block_output_bias_goes_to_the_residual_norm():
    g = GraphBuilder("block_norm", default_dtype="f32")
    x = g.add("Input", shape=[2, 5, 8], name="hidden")
    ins = [x, g.add("Param", shape=[8, 24], name="qkv_w"), g.add("Param", shape=[8, 8], name="out_w"),
           g.add("Input", shape=[2, 1, 5, 5], name="mask", dtype="bool"), g.add("Param", shape=[24], name="qkv_b"),
           g.add("Param", shape=[8], name="out_b")]
    y = g.add("FusedAttentionBlock", ins, {"num_heads": 2, "head_dim": 4, "has_bias": True, "has_rope": False},
              [2, 5, 8])
    z = g.add("FusedResidualLN", [y, x, g.add("Param", shape=[8], name="g"), g.add("Param", shape=[8], name="b")],
              {"has_bias": False, "eps": 1e-5}, [2, 5, 8])
    model = check(g.graph([z]), inputs={"mask": keep_mask([2, 1, 5, 5])})
    skip = next(n for n in model.graph.node if n.op_type == "SkipLayerNormalization")
    assert len(skip.input) == 5 and "Add" not in ops(model)


def test_pieces_of_an_axis_are_one_split_and_empty_concat_inputs_go():
    g = GraphBuilder("rotate_half", default_dtype="f32")
    x = g.add("Input", shape=[2, 3, 8], name="x")
    hi = g.add("Narrow", [x], {"axis": 2, "start": 4, "len": 4}, [2, 3, 4])
    lo = g.add("Narrow", [x], {"axis": -1, "start": 0, "len": 4}, [2, 3, 4])
    empty = g.add("Narrow", [x], {"axis": 2, "start": 8, "len": 0}, [2, 3, 0])
    y = g.add("Concat", [g.add("Neg", [hi], shape=[2, 3, 4]), lo], {"axis": 2}, [2, 3, 8])
    z = g.add("Concat", [y, empty], {"axis": 2}, [2, 3, 8])
    w = g.add("Input", shape=[2, 3, 8], name="w")
    odd = g.add("Narrow", [w], {"axis": 2, "start": 1, "len": 3}, [2, 3, 3])  # no cover of the axis: a Slice
    model = check(g.graph([z, odd, g.add("Narrow", [w], {"axis": 2, "start": 0, "len": 2}, [2, 3, 2])]))
    assert ops(model).count("Split") == 1 and ops(model).count("Concat") == 1 and ops(model).count("Slice") == 2


@pytest.mark.parametrize("kind,mask_shape", [("Custom", [2, 1, 5, 7]), ("None", None), ("Causal", None)])
def test_cross_attention_projection_biases_go_to_multi_head_attention(kind, mask_shape):
    g = GraphBuilder("cross", default_dtype="f32")
    x, mem = g.add("Input", shape=[2, 5, 6], name="x"), g.add("Input", shape=[2, 7, 6], name="mem")
    q, k, v = (g.add("FusedMatMulBiasAct", [src, g.add("Param", shape=[6, 8], name=f"w{j}"),
                                             g.add("Param", shape=[8], name=f"b{j}")], {"activation": None},
                     [2, 5 if j == 0 else 7, 8]) for j, src in enumerate((x, mem, mem)))
    ins = [q, k, v] + ([g.add("Input", shape=mask_shape, name="mask", dtype="bool")] if mask_shape else [])
    y = g.add("Attention", ins, {"num_heads": 2, "head_dim": 4, "mask_kind": kind, "score_scale": None,
                                 "attn_logit_softcap": None}, [2, 5, 8])
    model = check(g.graph([y]), inputs={"mask": keep_mask(mask_shape)} if mask_shape else None)
    mha = next(n for n in model.graph.node if n.op_type == "MultiHeadAttention")
    assert mha.input[3] and "Add" not in ops(model) and ops(model).count("MatMul") == 3


@pytest.mark.parametrize("reader", ["pieces", "swiglu", "pieces_and_more"])
def test_a_packed_matmul_read_as_pieces_is_one_matmul_per_weight(reader):
    g = GraphBuilder("unpack", default_dtype="f32")
    x = g.add("Input", shape=[2, 3, 8], name="x")
    widths = [6, 6] if reader == "swiglu" else [8, 4, 4]
    w = g.add("Concat", [g.add("Param", shape=[8, k], name=f"w{j}") for j, k in enumerate(widths)], {"axis": 1},
              [8, sum(widths)])
    p = g.add("MatMul", [x, w], shape=[2, 3, sum(widths)])
    if reader == "swiglu":
        outs = [g.add("FusedSwiGLU", [p], {"gate_first": False}, [2, 3, 6])]
    else:
        starts = np.cumsum([0] + widths[:-1])
        outs = [g.add("Narrow", [p], {"axis": 2, "start": int(s0), "len": k}, [2, 3, k]) for s0, k in zip(starts, widths)]
        outs += [p] if reader == "pieces_and_more" else []  # read whole too: the packed MatMul stays, with a Split
    model = check(g.graph(outs))
    unpacked = reader != "pieces_and_more"
    assert ops(model).count("MatMul") == (len(widths) if unpacked else 1)
    assert ("Split" in ops(model)) != unpacked and ("Concat" in ops(model)) != unpacked
