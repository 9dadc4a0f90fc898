"""The cases of docs/rlx-differences.md: graphs on which RLX's pass would change results, and the rule refuses."""

from __future__ import annotations

import json
import pathlib

import pytest

import rlx_rules

EXAMPLES = pathlib.Path(rlx_rules.bundled_rules_dir()) / "fusion" / "examples"


def example(name: str) -> dict:
    return json.loads((EXAMPLES / f"{name}.graph.json").read_text())


def node(graph: dict, name: str) -> dict:
    return next(n for n in graph["nodes"] if n.get("name") == name)


def fired(rules, graph, rule) -> int:
    return rules.apply(graph)[1].fired(rule)


def test_examples_fire_unchanged_so_each_case_below_is_a_single_change(rules):
    for name, rule in [("residual_ln", "fuse_residual_ln"), ("residual_rms_norm", "fuse_residual_rms_norm"),
                       ("rms_norm_reshape", "fuse_rms_norm_reshape"), ("swiglu_dual_matmul", "fuse_swiglu_dual_matmul"),
                       ("swiglu", "fuse_swiglu"), ("shared_input_matmul", "fuse_shared_input_matmul")]:
        assert fired(rules, example(name), rule) == 1, name


@pytest.mark.parametrize("name, rule", [("residual_ln", "fuse_residual_ln"),
                                        ("residual_rms_norm", "fuse_residual_rms_norm")])
def test_norm_over_another_axis_is_not_fused_into_a_last_axis_op(rules, name, rule):
    g = example(name)
    node(g, "norm")["attrs"]["axis"] = 1
    assert fired(rules, g, rule) == 0


def test_rms_norm_reshape_requires_the_last_axis_and_writes_minus_one(rules):
    g = example("rms_norm_reshape")
    node(g, "norm")["attrs"]["axis"] = 2  # the last axis of [2, 3, 8], spelled positively
    fused, report = rules.apply(g)
    assert report.fired("fuse_rms_norm_reshape") == 1
    assert fused.find("RmsNorm")[0].attrs["axis"] == -1  # RLX would keep 2: out of range on [6, 8]
    node(g, "norm")["attrs"]["axis"] = 1
    assert fired(rules, g, "fuse_rms_norm_reshape") == 0


def test_swiglu_dual_matmul_never_deletes_a_matmul_read_elsewhere(rules):
    g = example("swiglu_dual_matmul")
    g["nodes"].append({"id": 99, "op": "Relu", "inputs": [node(g, "up")["id"]], "shape": [2, 3, 6], "dtype": "f32"})
    g["outputs"].append(99)
    fused, report = rules.apply(g)
    assert report.fired("fuse_swiglu_dual_matmul") == 0
    assert fused.op_counts()["Silu"] == 1


def test_swiglu_dual_matmul_requires_equal_halves(rules):
    g = example("swiglu_dual_matmul")
    node(g, "w_gate")["shape"] = [8, 5]
    for n in ("gate", "act"):
        node(g, n)["shape"] = [2, 3, 5]
    assert fired(rules, g, "fuse_swiglu_dual_matmul") == 0


@pytest.mark.parametrize("change", ["not_last_axis", "does_not_cover"])
def test_swiglu_requires_the_two_halves_of_the_last_axis(rules, change):
    g = example("swiglu")
    if change == "not_last_axis":
        for n in ("up_half", "gate_half"):
            node(g, n)["attrs"]["axis"] = 1
    else:
        node(g, "c")["shape"] = [2, 3, 14]
    assert fired(rules, g, "fuse_swiglu") == 0


def test_shared_input_matmul_refuses_symbolic_widths_and_is_deterministic(rules):
    g = example("shared_input_matmul")
    node(g, "w1")["shape"] = [8, "n"]
    node(g, "mm1")["shape"] = [2, 3, "n"]
    assert fired(rules, g, "fuse_shared_input_matmul") == 0
    outputs = {rules.apply(example("shared_input_matmul"))[0].to_json() for _ in range(3)}
    assert len(outputs) == 1
