"""rules/simplify: what exports leave behind that computes nothing, removed with values kept (and verified)."""

from __future__ import annotations

import pathlib

import numpy as np

import rlx_rules
from rlx_rules.interpret.core import random_values, run
from rlx_rules.tools.verify import verify

SIMPLIFY = pathlib.Path(rlx_rules.default_rules()).parent / "simplify" / "simplify.rlxr"


def test_the_simplification_library_verifies():
    report = verify([SIMPLIFY])
    assert report.ok, str(report)
    assert all(v.synthesized for v in report.rules), str(report)


def test_every_rule_has_a_firing_example_and_a_no_fire_example_per_guard():
    program = rlx_rules.load_rules(SIMPLIFY).program
    for rule in program["rules"]:
        guards = [i for i in rule["code"] if i["i"] == "guard"]
        fires = [e for e in rule["examples"] if e["fires"]]
        no_fire = [e for e in rule["examples"] if not e["fires"]]
        assert fires, rule["name"]
        assert len(no_fire) >= max(1, len(guards)), (rule["name"], [g["text"] for g in guards])


def test_it_runs_first_in_the_onnx_and_the_default_libraries():
    assert rlx_rules.load_rules().phases[0] == "simplify"
    onnx = pathlib.Path(rlx_rules.default_rules()).parent / "onnx" / "default.rlxr"
    assert rlx_rules.load_rules(onnx).phases[0] == "simplify"


def test_a_graph_full_of_leftovers_shrinks_to_what_it_computes():
    def n(i, op, inputs, shape, **attrs):
        return {"id": i, "op": op, "inputs": inputs, "shape": shape, "dtype": "f32", **({"attrs": attrs} if attrs else {})}

    graph = {"format": "rlx-graph", "version": 1, "nodes": [
        {"id": 0, "op": "Input", "name": "x", "shape": [2, 3, 4], "dtype": "f32"},
        {"id": 1, "op": "Constant", "name": "one", "shape": [], "dtype": "f32", "attrs": {"value": 1.0}},
        {"id": 2, "op": "Constant", "name": "zero", "shape": [1], "dtype": "f32", "attrs": {"value": [0.0]}},
        n(3, "Transpose", [0], [3, 2, 4], perm=[1, 0, 2]),
        n(4, "Cast", [3], [3, 2, 4], to="f32"),
        n(5, "Transpose", [4], [2, 3, 4], perm=[1, 0, 2]),
        n(6, "Mul", [1, 5], [2, 3, 4]),
        n(7, "Reshape", [6], [6, 4], new_shape=[6, 4]),
        n(8, "Reshape", [7], [2, 3, 4], new_shape=[2, 3, 4]),
        n(9, "Add", [8, 2], [2, 3, 4]),
        n(10, "Neg", [9], [2, 3, 4]),
        n(11, "Neg", [10], [2, 3, 4]),
        n(12, "Expand", [11], [2, 3, 4], target_shape=[2, 3, 4]),
        n(13, "Relu", [12], [2, 3, 4])], "outputs": [13]}
    out, report = rlx_rules.load_rules(SIMPLIFY).apply(graph)
    assert [(node.op, node.inputs) for node in out.nodes] == [("Input", ()), ("Relu", (0,))], str(report)
    inputs, params = random_values(graph)
    inputs = {k: v.astype(np.float32).astype(np.float64) for k, v in inputs.items()}  # f32 values: Cast is a no-op
    assert np.array_equal(run(graph, inputs, params)[0], run(out, inputs, params)[0])
