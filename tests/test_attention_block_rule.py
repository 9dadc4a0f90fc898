"""The seed pass as a rule: it fires on the seed pattern and BERT graphs, and each seed guard alone blocks it."""

from __future__ import annotations

import numpy as np
import pytest

import rlx_rules
from rlx_rules import examples
from rlx_rules.interpret import random_values, run

from conftest import add_node, node_named, seed_graph


def fused_count(rules, graph, **params) -> int:
    fused, report = rules.apply(graph, params or None)
    return fused.op_counts().get("FusedAttentionBlock", 0)


def test_seed_pattern_fuses_into_one_node_with_the_seed_input_order(rules, seed):
    fused, report = rules.apply(seed)
    assert report.fired("fuse_attention_block") == 1
    assert dict(fused.op_counts()) == {"Input": 2, "Param": 4, "FusedAttentionBlock": 1}
    block = fused.find("FusedAttentionBlock")[0]
    names = [fused.node(i).name for i in block.inputs]
    assert names == ["hidden", "qkv_w", "out_w", "mask", "qkv_b", "out_b"]
    assert block.attrs == {"num_heads": 4, "head_dim": 16, "has_bias": True, "has_rope": False}
    assert block.id == 11 and fused.outputs == [11]  # the replaced root's id, so consumers need no change
    assert list(block.shape) == [1, 8, 64]


def test_bert_base_layer_from_plain_matmul_and_add_reaches_the_fused_block_in_one_apply(rules):
    graph = examples.bert_encoder(layers=1, batch=1, seq=8, hidden=768, heads=12)
    fused, report = rules.apply(graph)
    counts = fused.op_counts()
    assert counts["FusedAttentionBlock"] == 1
    assert counts["FusedMatMulBiasAct"] == 2  # the FFN projections
    assert "MatMul" not in counts and "Attention" not in counts and "Narrow" not in counts
    block = fused.find("FusedAttentionBlock")[0]
    assert block.attrs["num_heads"] == 12 and block.attrs["head_dim"] == 64


def test_two_layers_fuse_twice(rules):
    assert fused_count(rules, examples.bert_encoder(layers=2)) == 2


def test_fused_graph_computes_the_same_values(rules):
    graph = rlx_rules.load_graph(examples.bert_encoder(layers=2, batch=2, seq=5, hidden=32, heads=4, ffn=48))
    fused, report = rules.apply(graph)
    assert fused.op_counts()["FusedAttentionBlock"] == 2
    inputs, params = random_values(graph, seed=3)
    before, after = run(graph, inputs, params), run(fused, inputs, params)
    np.testing.assert_allclose(after[0], before[0], rtol=1e-10, atol=1e-10)


def test_threshold_boundary_64_fuses_and_65_does_not(rules):
    assert fused_count(rules, seed_graph(batch=1, seq=64)) == 1
    assert fused_count(rules, seed_graph(batch=1, seq=65)) == 0
    assert fused_count(rules, seed_graph(batch=8, seq=8)) == 1
    assert fused_count(rules, seed_graph(batch=5, seq=13)) == 0


def test_threshold_from_env_var_and_from_params(rules, monkeypatch):
    graph = seed_graph(batch=1, seq=100)
    assert fused_count(rules, graph) == 0
    monkeypatch.setenv("RLX_FUSE_ATTN_THRESHOLD", "100")
    fused, report = rules.apply(graph)
    assert fused.op_counts()["FusedAttentionBlock"] == 1
    assert report.params["RLX_FUSE_ATTN_THRESHOLD"] == {"value": 100, "source": "env RLX_FUSE_ATTN_THRESHOLD"}
    monkeypatch.setenv("RLX_FUSE_ATTN_THRESHOLD", "99")
    assert fused_count(rules, graph) == 0
    assert fused_count(rules, graph, RLX_FUSE_ATTN_THRESHOLD=100) == 1  # an explicit value beats the env var


def test_bad_threshold_in_env_is_a_param_error(rules, monkeypatch):
    monkeypatch.setenv("RLX_FUSE_ATTN_THRESHOLD", "sixty-four")
    with pytest.raises(rlx_rules.ParamError, match="RLX_FUSE_ATTN_THRESHOLD"):
        rules.apply(seed_graph())


def test_symbolic_batch_or_seq_closes_the_gate(rules):
    assert fused_count(rules, seed_graph(batch="batch", seq=8)) == 0
    assert fused_count(rules, seed_graph(batch=1, seq="seq")) == 0


def _mutate(name, fn):
    return pytest.param(fn, id=name)


def _set_attr(node, **attrs):
    def change(g):
        node_named(g, node)["attrs"].update(attrs)
    return change


def _extra_use(node):
    def change(g):
        n = node_named(g, node)
        extra = add_node(g, "Relu", [n["id"]], shape=n["shape"])
        g["outputs"].append(extra)
    return change


def _output(node):
    def change(g):
        g["outputs"].append(node_named(g, node)["id"])
    return change


def _drop_mask_input(g):
    node_named(g, "attn")["inputs"] = node_named(g, "attn")["inputs"][:3]


def _k_from_other_parent(g):
    other = add_node(g, "FusedMatMulBiasAct", [0, 2, 3], {"activation": None}, [1, 8, 192], name="qkv2")
    node_named(g, "k")["inputs"] = [other]


def _small_input_is_rank_one(g):
    node_named(g, "hidden")["shape"] = [1, 100, 64]
    node_named(g, "mask")["shape"] = [100]


# Each case breaks exactly one guard of the seed pass; the attention must stay unfused.
GUARD_BREAKS = [
    _mutate("gate: no rank>=2 input with dim0*dim1 <= threshold", _small_input_is_rank_one),
    _mutate("mask_kind is not Custom", _set_attr("attn", mask_kind="Causal")),
    _mutate("score_scale is set", _set_attr("attn", score_scale=0.5)),
    _mutate("attn_logit_softcap is set", _set_attr("attn", attn_logit_softcap=30.0)),
    _mutate("attention has 3 inputs, not 4", _drop_mask_input),
    _mutate("narrows do not share their parent", _k_from_other_parent),
    _mutate("q narrows another axis", _set_attr("q", axis=1)),
    _mutate("v narrows another axis", _set_attr("v", axis=1)),
    _mutate("q len is not num_heads*head_dim", _set_attr("q", len=32)),
    _mutate("k len is not num_heads*head_dim", _set_attr("k", len=32)),
    _mutate("q start is not 0", _set_attr("q", start=1)),
    _mutate("k start is not h (off by one)", _set_attr("k", start=65)),
    _mutate("v start is not 2h", _set_attr("v", start=64)),
    _mutate("q and k starts swapped", lambda g: (_set_attr("q", start=64)(g), _set_attr("k", start=0)(g))),
    _mutate("q has a second use", _extra_use("q")),
    _mutate("k has a second use", _extra_use("k")),
    _mutate("v has a second use", _extra_use("v")),
    _mutate("q is a graph output", _output("q")),
    _mutate("k is a graph output", _output("k")),
    _mutate("v is a graph output", _output("v")),
    _mutate("qkv has a fourth use", _extra_use("qkv")),
    _mutate("qkv is a graph output", _output("qkv")),
    _mutate("qkv projection has an activation", _set_attr("qkv", activation="Gelu")),
    _mutate("qkv parent is not FusedMatMulBiasAct", lambda g: node_named(g, "qkv").update(op="Add", attrs={},
                                                                                        inputs=[0, 0])),
    _mutate("attention has a second use", _extra_use("attn")),
    _mutate("attention is a graph output", _output("attn")),
    _mutate("out projection has an activation", _set_attr("out", activation="Silu")),
    _mutate("attention feeds the out projection's weight slot", lambda g: node_named(g, "out").update(
        inputs=[4, 10, 5])),
]


@pytest.mark.parametrize("break_guard", GUARD_BREAKS)
def test_breaking_one_seed_guard_leaves_attention_unfused(rules, seed, break_guard):
    break_guard(seed)
    fused, report = rules.apply(seed)
    assert fused.op_counts().get("FusedAttentionBlock", 0) == 0
    assert fused.op_counts().get("Attention", 0) == 1


def test_the_unbroken_seed_fuses_so_the_guard_tests_mean_something(rules, seed):
    assert fused_count(rules, seed) == 1


def test_result_is_identical_across_runs_and_rule_loads():
    graph = examples.bert_encoder(layers=3)
    outputs = {rlx_rules.load_rules().apply(graph)[0].to_json() for _ in range(3)}
    assert len(outputs) == 1


def test_input_node_order_does_not_change_which_nodes_result(rules):
    graph = examples.bert_encoder(layers=2)
    shuffled = dict(graph, nodes=list(reversed(graph["nodes"])))
    a, b = rules.apply(graph)[0], rules.apply(shuffled)[0]
    assert sorted(a.to_dict()["nodes"], key=lambda n: n["id"]) == sorted(b.to_dict()["nodes"], key=lambda n: n["id"])
