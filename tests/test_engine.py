"""Engine semantics: unsafe rewrites are refused whatever the rule says, phases, caps, budgets, multi-node rewrites."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

import rlx_rules
from rlx_rules.interpret import random_values, run
from rlx_rules.report import StopReason

from conftest import seed_graph

HERE = pathlib.Path(__file__).parent

# A rule with no use-count or output guards at all: only the engine stands between it and a wrong graph.
CARELESS = """
rule careless_matmul_bias {
  match {
    mm  = MatMul(x, w)
    add = Add(mm, bias)
  }
  rewrite add => FusedMatMulBiasAct(x, w, bias) { activation: null }
}
"""


def mm_add(extra_use=False, mm_output=False) -> dict:
    nodes = [
        {"id": 0, "op": "Input", "name": "x", "shape": [2, 4], "dtype": "f32"},
        {"id": 1, "op": "Param", "name": "w", "shape": [4, 3], "dtype": "f32"},
        {"id": 2, "op": "Param", "name": "b", "shape": [3], "dtype": "f32"},
        {"id": 3, "op": "MatMul", "inputs": [0, 1], "shape": [2, 3], "dtype": "f32"},
        {"id": 4, "op": "Add", "inputs": [3, 2], "shape": [2, 3], "dtype": "f32"},
    ]
    outputs = [4]
    if extra_use:
        nodes.append({"id": 5, "op": "Relu", "inputs": [3], "shape": [2, 3], "dtype": "f32"})
        outputs.append(5)
    if mm_output:
        outputs.append(3)
    return {"format": "rlx-graph", "version": 1, "nodes": nodes, "outputs": outputs}


def test_careless_rule_fires_when_safe():
    fused, report = rlx_rules.compile_text(CARELESS).apply(mm_add())
    assert report.fired("careless_matmul_bias") == 1


@pytest.mark.parametrize("case", ["extra_use", "mm_output"])
def test_engine_refuses_to_delete_a_node_still_needed(case):
    graph = mm_add(**{case: True})
    fused, report = rlx_rules.compile_text(CARELESS).apply(graph)
    rule = report.rules["careless_matmul_bias"]
    assert rule["matched"] == 1 and rule["fired"] == 0 and rule["refused_unsafe"] == 1
    assert "graph output" in rule["first_refusal"] or "still used by" in rule["first_refusal"]
    assert fused.to_dict() == rlx_rules.load_graph(graph).to_dict()  # untouched
    inputs, params = random_values(graph)
    for a, b in zip(run(graph, inputs, params), run(fused, inputs, params)):
        np.testing.assert_array_equal(a, b)


def test_root_that_is_an_output_keeps_its_id_so_the_output_survives():
    fused, _ = rlx_rules.compile_text(CARELESS).apply(mm_add())
    assert fused.outputs == [4] and fused.node(4).op == "FusedMatMulBiasAct"


def test_multi_node_rewrite_builds_helpers_and_keeps_values():
    rules = rlx_rules.compile_rules([HERE / "rules" / "pass" / "features.rlxr"])
    graph = {"format": "rlx-graph", "version": 1, "nodes": [
        {"id": 0, "op": "Input", "name": "x", "shape": [3, 5], "dtype": "f32"},
        {"id": 1, "op": "Param", "name": "b", "shape": [5], "dtype": "f32"},
        {"id": 2, "op": "Add", "inputs": [0, 1], "shape": [3, 5], "dtype": "f32"},
        {"id": 3, "op": "Silu", "inputs": [2], "shape": [3, 5], "dtype": "f32"}], "outputs": [3]}
    fused, report = rules.apply(graph)
    assert report.fired("split_out") == 1
    assert fused.node(3).op == "Mul"
    sig = fused.find("Sigmoid")[0]
    assert list(sig.shape) == [3, 5] and sig.dtype == "f32" and sig.id == 4  # a fresh id after the largest
    inputs, params = random_values(graph, scale=1.0)
    np.testing.assert_allclose(run(fused, inputs, params)[0], run(graph, inputs, params)[0], rtol=1e-12)


def test_a_phase_that_never_settles_stops_at_its_cap_and_says_so():
    flip = """
phase flip max_iterations 3
rule a phase flip { match { n = Relu(x) } rewrite n => Sigmoid(x) }
rule b phase flip { match { n = Sigmoid(x) } rewrite n => Relu(x) }
"""
    graph = {"format": "rlx-graph", "version": 1, "nodes": [
        {"id": 0, "op": "Input", "name": "x", "shape": [2], "dtype": "f32"},
        {"id": 1, "op": "Relu", "inputs": [0], "shape": [2], "dtype": "f32"}], "outputs": [1]}
    fused, report = rlx_rules.compile_text(flip).apply(graph)
    phase = report.phases[0]
    assert phase["stop"] is StopReason.ITERATION_CAP and phase["iterations"] == 3
    assert report.stop_reason is StopReason.ITERATION_CAP
    assert phase["still_firing"] == ["a", "b"]
    assert "CAP REACHED" in str(report)


def test_rewrite_budget_and_debug_failure_hook_raise_apply_error(rules):
    graph = rlx_rules.examples.bert_encoder(layers=3)
    with pytest.raises(rlx_rules.ApplyError, match="budget"):
        rules.apply(graph, max_rewrites=2)
    with pytest.raises(rlx_rules.ApplyError, match="on purpose"):
        rules.apply(graph, fail_after_rewrites=1)


def test_unknown_param_is_rejected(rules):
    with pytest.raises(rlx_rules.ParamError, match="unknown parameter NOPE"):
        rules.apply(seed_graph(), {"NOPE": 1})


@pytest.mark.parametrize("value", ["99999999999999999999", 2**63, True, 1.5, "12x"])
def test_param_values_are_checked_once_against_the_declared_type(rules, value):
    # RLX_FUSE_ATTN_THRESHOLD is an int: the same check (value_fits) for a --set string and a Python value
    with pytest.raises(rlx_rules.ParamError, match="RLX_FUSE_ATTN_THRESHOLD: expected int"):
        rules.apply(seed_graph(), {"RLX_FUSE_ATTN_THRESHOLD": value})


def test_apply_leaves_the_input_graph_unchanged(rules):
    graph = rlx_rules.load_graph(rlx_rules.examples.bert_encoder(layers=1))
    before = graph.to_json()
    rules.apply(graph)
    assert graph.to_json() == before


def test_an_apply_that_takes_the_graph_gives_the_same_result_and_leaves_it_consumed(rules):
    # The CLI's path: the core takes the input's nodes instead of copying them; the input then refuses every use.
    doc = rlx_rules.examples.bert_encoder(layers=2)
    expected, expected_report = rules.apply(rlx_rules.load_graph(doc), explain=True)
    graph = rlx_rules.load_graph(doc)
    fused, report = rules._apply_taking(graph, explain=True)
    assert fused.to_json() == expected.to_json()
    assert report.data["ops_after"] == expected_report.data["ops_after"] and report.rewrites == expected_report.rewrites
    for use in (len, lambda g: g.to_json(), lambda g: g.name, lambda g: g.field("x"), lambda g: rules.apply(g)):
        with pytest.raises(rlx_rules.GraphError, match="consumed") as caught:
            use(graph)
        assert caught.value.kind == "consumed"
    assert repr(graph) == "<Graph (consumed)>"
    quiet, none = rules._apply_taking(rlx_rules.load_graph(doc), report=False)
    assert none is None and quiet.to_json() == expected.to_json()
    with pytest.raises(rlx_rules.ApplyError, match="budget") as limit:  # a limit still returns the work done
        rules._apply_taking(rlx_rules.load_graph(doc), max_rewrites=1)
    stopped, _ = rules.apply(rlx_rules.load_graph(doc), max_rewrites=1, on_limit="stop")
    assert limit.value.graph.to_json() == stopped.to_json() and len(stopped) < len(doc["nodes"])


def test_symbolic_dims_compare_by_name_and_never_equal_a_number():
    rules = rlx_rules.compile_text("""
rule same_batch {
  match { m = Mul(a, b) }
  where dim(a, 0) == dim(b, 0)
  rewrite m => Add(a, b)
}
rule batch_is_one {
  match { m = Sub(a, b) }
  where dim(a, 0) != 1 and a != b
  rewrite m => Add(a, b)
}
""")
    def graph(op, d0, d1):
        return {"format": "rlx-graph", "version": 1, "nodes": [
            {"id": 0, "op": "Input", "name": "a", "shape": [d0, 2]},
            {"id": 1, "op": "Input", "name": "b", "shape": [d1, 2]},
            {"id": 2, "op": op, "inputs": [0, 1], "shape": [d0, 2]}], "outputs": [2]}
    assert rules.apply(graph("Mul", "n", "n"))[1].fired("same_batch") == 1
    assert rules.apply(graph("Mul", "n", "m"))[1].fired("same_batch") == 0
    assert rules.apply(graph("Mul", "n", 4))[1].fired("same_batch") == 0
    # unknown whether a symbolic dim is 1, so even "!= 1" does not hold
    assert rules.apply(graph("Sub", "n", "n"))[1].fired("batch_is_one") == 0
    assert rules.apply(graph("Sub", 3, 3))[1].fired("batch_is_one") == 1


def test_a_malformed_program_is_a_program_error():
    from rlx_rules import _native

    with pytest.raises(rlx_rules.ProgramError):
        _native.Program('{"format": "rlx-program", "version": 99, "phases": [], "rules": []}')
    with pytest.raises(rlx_rules.ProgramError, match="before it is bound"):
        _native.Program('{"format": "rlx-program", "version": 1, "phases": [{"name": "p", "max_iterations": 1, '
                        '"rules": ["r"]}], "rules": [{"name": "r", "phase": "p", "root_ops": ["Relu"], '
                        '"slots": [{"name": "n", "leaf": false}, {"name": "x", "leaf": true}], '
                        '"code": [{"i": "same", "slot": 0, "index": 0, "as": 1}], "absorb": [], '
                        '"rewrite": [{"name": "n", "op": "Relu", "inputs": [{"slot": 1}], "attrs": [], '
                        '"shape": null, "dtype": null, "replaces": 0}]}]}')


def test_sqrt_checks_a_score_scale_against_head_dim():
    rules = rlx_rules.compile_text("""
rule scaled {
  match { a = Attention(q, k, v) }
  where q != k and v == v
  where a.score_scale is not null and abs(a.score_scale - 1.0 / sqrt(a.head_dim)) < 0.000001
  rewrite a => Attention(q, k, v) { num_heads: a.num_heads, head_dim: a.head_dim, mask_kind: a.mask_kind,
                                     score_scale: null, attn_logit_softcap: a.attn_logit_softcap }
}
""")

    def graph(scale):
        return {"format": "rlx-graph", "version": 1, "nodes": [
            {"id": i, "op": "Input", "name": n, "shape": [1, 4, 8]} for i, n in enumerate("qkv")] + [
            {"id": 3, "op": "Attention", "inputs": [0, 1, 2], "shape": [1, 4, 8],
             "attrs": {"num_heads": 2, "head_dim": 4, "mask_kind": "None", "score_scale": scale,
                       "attn_logit_softcap": None}}], "outputs": [3]}
    assert rules.apply(graph(0.5))[1].fired("scaled") == 1
    assert rules.apply(graph(0.25))[1].fired("scaled") == 0


def test_a_rewrite_that_breaks_the_registry_is_caught_before_anything_is_returned():
    # op(n) is a str, so the checker accepts it for an enum attribute; the value is not a MaskKind
    rules = rlx_rules.compile_text("""
rule bad_enum {
  match { n = Gelu(x) }
  rewrite n => Attention(x, x, x) { num_heads: 1, head_dim: 2, mask_kind: op(n), score_scale: null,
                                     attn_logit_softcap: null }
}
""")
    graph = {"format": "rlx-graph", "version": 1, "nodes": [
        {"id": 0, "op": "Input", "name": "x", "shape": [1, 2, 2]},
        {"id": 1, "op": "Gelu", "inputs": [0], "shape": [1, 2, 2]}], "outputs": [1]}
    with pytest.raises(rlx_rules.ApplyError, match="mask_kind"):
        rules.apply(graph)


ORPHAN_RULE = """
rule mask_to_relu {
  match { m = Add(x, w)  w = Where(_, _, _) }
  keep w
  rewrite m => Relu(x)
}
"""


def test_a_rewrite_removes_what_it_left_unread_but_nothing_else():
    """The kept Where (and its Constants) lose their only reader: removed with it. The Input it reads stays, and so
    does a node that nothing read before the rewrite."""
    g = {"format": "rlx-graph", "version": 1, "nodes": [
        {"id": 0, "op": "Input", "name": "x", "shape": [2]},
        {"id": 1, "op": "Input", "name": "keep", "shape": [2], "dtype": "bool"},
        {"id": 2, "op": "Constant", "attrs": {"value": 0.0}, "shape": []},
        {"id": 3, "op": "Constant", "attrs": {"value": -1.0}, "shape": []},
        {"id": 4, "op": "Where", "inputs": [1, 2, 3], "shape": [2]},
        {"id": 5, "op": "Add", "inputs": [0, 4], "shape": [2]},
        {"id": 6, "op": "Neg", "inputs": [0], "shape": [2]}],  # unused from the start
        "outputs": [5]}
    out, report = rlx_rules.compile_text(ORPHAN_RULE).apply(g)
    assert report.fired("mask_to_relu") == 1
    assert sorted((n.id, n.op) for n in out.nodes) == [(0, "Input"), (1, "Input"), (5, "Relu"), (6, "Neg")]
    # still read elsewhere (here: a graph output), the Where stays
    g["outputs"] = [5, 4]
    out, _ = rlx_rules.compile_text(ORPHAN_RULE).apply(g)
    assert {n.op for n in out.nodes} >= {"Where", "Constant", "Relu"}


def test_rewrites_on_several_roots_share_identical_helpers():
    """Two roots reading the same x each ask for Abs(x): the second rewrite reuses the first one's node."""
    text = "rule r { match { y = Neg(x) } rewrite { a = Abs(x) shape shape(x)  y => Relu(a) } }"
    g = {"format": "rlx-graph", "version": 1, "nodes": [
        {"id": 0, "op": "Input", "name": "x", "shape": [2]},
        {"id": 1, "op": "Neg", "inputs": [0], "shape": [2]},
        {"id": 2, "op": "Neg", "inputs": [0], "shape": [2]},
        {"id": 3, "op": "Input", "name": "z", "shape": [2]},
        {"id": 4, "op": "Neg", "inputs": [3], "shape": [2]}],
        "outputs": [1, 2, 4]}
    out, report = rlx_rules.compile_text(text).apply(g)
    assert report.fired("r") == 3
    abs_nodes = [n for n in out.nodes if n.op == "Abs"]
    assert sorted(n.inputs for n in abs_nodes) == [(0,), (3,)]  # one for x, shared by both roots; one for z
    relus = {n.id: n for n in out.nodes if n.op == "Relu"}
    assert relus[1].inputs == relus[2].inputs != relus[4].inputs


def test_report_is_typed_and_round_trips_through_json():
    from rlx_rules.report import PhaseReport, Report, RuleStats

    _, report = rlx_rules.load_rules().apply(rlx_rules.examples.bert_encoder(layers=1), explain=True)
    assert isinstance(report.phases[0], PhaseReport) and isinstance(report.phases[0].rules[0], RuleStats)
    assert report.stop_reason is StopReason.FIXPOINT and report.phases[0]["stop"] == "fixpoint"
    data = json.loads(report.to_json())
    assert Report.from_dict(data) == report and Report.from_dict(data).to_dict() == data
    assert report.near_misses and str(report.near_misses[0]).startswith(report.near_misses[0].rule)


@pytest.mark.parametrize("text, reason", [("fixpoint", "FIXPOINT"), ("cap", "ITERATION_CAP"),
                                          ("iteration_cap", "ITERATION_CAP"), ("rewrite_limit", "REWRITE_LIMIT"),
                                          ("time_budget", "TIME_BUDGET")])
def test_stop_reasons_old_and_new(text, reason):
    assert StopReason(text) is StopReason[reason]
    with pytest.raises(ValueError):
        StopReason("tired")


def test_large_graphs_dropped_while_others_are_in_use_stay_intact():
    # Graphs of 65,536 nodes or more are freed on a thread of their own: dropping one must not disturb the graph
    # made next, nor one made from the same text before it.
    from rlx_rules.examples import bert_encoder

    doc = bert_encoder(2300)
    assert len(doc["nodes"]) >= 65536
    text = json.dumps(doc)
    rules = rlx_rules.load_rules(pathlib.Path(__file__).parent.parent / "rules" / "seed.rlxr")
    kept = rlx_rules.Graph.from_json(text)
    expected = rules.apply(kept)[0].to_json()
    for _ in range(2):
        graph = rlx_rules.Graph.from_json(text)
        fused, _ = rules.apply(graph)
        assert fused.to_json() == expected
        del graph, fused
    assert rules.apply(kept)[0].to_json() == expected
