"""FuseMatMulBiasAct: fires on MatMul + bias Add in either order (plus Gelu/Silu), and each guard blocks it."""

from __future__ import annotations

import numpy as np
import pytest

from rlx_rules.interpret import random_values, run


def mlp(bias_first=False, act=None, bias_shape=(8,), mm_extra_use=False, add_extra_use=False, outputs=("last",)):
    nodes = [
        {"id": 0, "op": "Input", "name": "x", "shape": [2, 3, 4], "dtype": "f32"},
        {"id": 1, "op": "Param", "name": "w", "shape": [4, 8], "dtype": "f32"},
        {"id": 2, "op": "Param", "name": "b", "shape": list(bias_shape), "dtype": "f32"},
        {"id": 3, "op": "MatMul", "name": "mm", "inputs": [0, 1], "shape": [2, 3, 8], "dtype": "f32"},
        {"id": 4, "op": "Add", "name": "add", "inputs": [2, 3] if bias_first else [3, 2], "shape": [2, 3, 8],
         "dtype": "f32"},
    ]
    last = 4
    if act:
        nodes.append({"id": 5, "op": act, "name": "act", "inputs": [4], "shape": [2, 3, 8], "dtype": "f32"})
        last = 5
    outs = []
    for o in outputs:
        outs.append({"last": last, "mm": 3, "add": 4}[o])
    if mm_extra_use:
        nodes.append({"id": 10, "op": "Relu", "inputs": [3], "shape": [2, 3, 8], "dtype": "f32"})
        outs.append(10)
    if add_extra_use:
        nodes.append({"id": 11, "op": "Relu", "inputs": [4], "shape": [2, 3, 8], "dtype": "f32"})
        outs.append(11)
    return {"format": "rlx-graph", "version": 1, "name": "mlp", "nodes": nodes, "outputs": outs}


def check_same_values(graph, fused):
    inputs, params = random_values(graph, seed=1, scale=1.0)
    for a, b in zip(run(graph, inputs, params), run(fused, inputs, params)):
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("bias_first", [False, True])
@pytest.mark.parametrize("act", [None, "Gelu", "Silu"])
def test_fires_in_either_operand_order_and_absorbs_gelu_or_silu(rules, bias_first, act):
    graph = mlp(bias_first=bias_first, act=act)
    fused, report = rules.apply(graph)
    assert dict(fused.op_counts()) == {"Input": 1, "Param": 2, "FusedMatMulBiasAct": 1}
    node = fused.find("FusedMatMulBiasAct")[0]
    assert node.attrs == {"activation": act}
    assert [fused.node(i).name for i in node.inputs] == ["x", "w", "b"]
    check_same_values(graph, fused)


def test_other_activations_are_left_alone(rules):
    fused, _ = rules.apply(mlp(act="Relu"))
    assert fused.op_counts()["Relu"] == 1
    assert fused.find("FusedMatMulBiasAct")[0].attrs == {"activation": None}


def test_scalar_bias_is_rank_zero_and_fuses(rules):
    fused, _ = rules.apply(mlp(bias_shape=()))
    assert fused.op_counts()["FusedMatMulBiasAct"] == 1


GUARD_BREAKS = {
    "bias of rank 2": dict(bias_shape=(3, 8)),
    "matmul has a second use": dict(mm_extra_use=True),
    "matmul is a graph output": dict(outputs=("last", "mm")),
}


@pytest.mark.parametrize("case", GUARD_BREAKS, ids=list(GUARD_BREAKS))
def test_each_guard_blocks_the_fusion(rules, case):
    graph = mlp(**GUARD_BREAKS[case])
    fused, report = rules.apply(graph)
    assert "FusedMatMulBiasAct" not in fused.op_counts()
    check_same_values(graph, fused)


@pytest.mark.parametrize("case", {"add has a second use": dict(add_extra_use=True),
                                  "add is a graph output": dict(outputs=("last", "add"))})
def test_activation_not_absorbed_when_the_add_is_needed_elsewhere(rules, case):
    kwargs = {"add has a second use": dict(add_extra_use=True), "add is a graph output": dict(outputs=("last", "add"))}[case]
    graph = mlp(act="Gelu", **kwargs)
    fused, _ = rules.apply(graph)
    assert fused.op_counts()["Gelu"] == 1
    assert fused.find("FusedMatMulBiasAct")[0].attrs == {"activation": None}
    check_same_values(graph, fused)
