"""`rlx-rules show`: summary, DOT and SVG drawings (whole graph or around a node, before/after rules), progress."""

from __future__ import annotations

import io
import os
import shutil
import time

import pytest

import rlx_rules
from rlx_rules.tools import show
from rlx_rules.cli import ExitCode
from rlx_rules.cli.app import main
from rlx_rules.tools.progress import enabled_for, progress


@pytest.fixture
def graph_file(small_bert_file):
    return small_bert_file


def test_summary_lists_size_histogram_inputs_and_outputs(graph_file, capsys):
    assert main(["show", str(graph_file)]) == ExitCode.OK
    out = capsys.readouterr().out
    assert "graph bert_encoder_2l: 60 nodes," in out
    assert "MatMul                       8" in out and "Attention                    2" in out
    assert "inputs (2):" in out and "%0 hidden [1, 8, 64] f32" in out and "%1 mask [1, 8] f32" in out
    assert "outputs (1):" in out and "%59 LayerNorm layer1.ln2" in out


def test_summary_after_the_bundled_rules_marks_fused_nodes(graph_file, capsys):
    assert main(["show", str(graph_file), "-r"]) == ExitCode.OK
    out = capsys.readouterr().out
    assert "before bert_encoder_2l: 60 nodes" in out and "after bert_encoder_2l: 36 nodes" in out
    assert "FusedAttentionBlock          2" in out
    assert "fused or new nodes: 10" in out  # 4 FusedMatMulBiasAct, 2 FusedAttentionBlock, 4 FusedResidualLN


def test_dot_of_the_whole_graph_has_every_node_and_edge(graph_file, tmp_path):
    dot = tmp_path / "g.dot"
    assert main(["show", str(graph_file), "--dot", str(dot)]) == ExitCode.OK
    text = dot.read_text()
    graph = rlx_rules.Graph.load(graph_file)
    assert text.startswith("digraph rlx {") and text.rstrip().endswith("}")
    assert text.count(" [label=") == len(graph)
    assert text.count(" -> ") == sum(len(n.inputs) for n in graph)
    assert 'n5 [label="%5 Add\\nlayer0.qkv\\n[1, 8, 192]"];' in text
    assert "peripheries=2" in text  # the output
    assert not [p for p in os.listdir(tmp_path) if ".tmp-" in p]


def test_dot_before_and_after_around_a_node(graph_file, tmp_path):
    dot = tmp_path / "part.dot"
    assert main(["show", str(graph_file), "-r", "--node", "5", "--radius", "1", "--dot", str(dot)]) == 0
    text = dot.read_text()
    assert "subgraph cluster_before" in text and "subgraph cluster_after" in text
    before_ids = {line.split()[0] for line in text.splitlines() if line.startswith("    b") and "[label=" in line
                  and "cut" not in line}
    assert before_ids == {"b3", "b4", "b5", "b6", "b7", "b8"}  # %5, its inputs and its consumers
    assert "bcut0 -> b4 [style=dashed" in text  # an input outside the part is a stub, not a lost edge
    assert 'fillcolor="#ffd27f"' in text and "FusedAttentionBlock" in text  # the fused node that took the Narrows


def test_dot_to_stdout_and_a_bad_node(graph_file, capsys):
    assert main(["show", str(graph_file), "--dot", "-"]) == ExitCode.OK
    assert "digraph rlx {" in capsys.readouterr().out
    assert main(["show", str(graph_file), "--node", "999"]) == ExitCode.GRAPH_ERROR
    assert "no node with id 999" in capsys.readouterr().err


def test_svg_without_graphviz_fails_clearly(graph_file, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    out = tmp_path / "g.svg"
    assert main(["show", str(graph_file), "--svg", str(out)]) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert "needs Graphviz's `dot` program" in err and "--dot FILE" in err
    assert not out.exists()


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed (optional extra)")
def test_svg_with_graphviz(graph_file, tmp_path):
    out = tmp_path / "g.svg"
    assert main(["show", str(graph_file), "-r", "--svg", str(out)]) == ExitCode.OK
    svg = out.read_text()
    assert "<svg" in svg and "FusedAttentionBlock" in svg and "before: 60 nodes" in svg


def test_unwritable_dot_output_is_an_output_error(graph_file, tmp_path, capsys):
    assert main(["show", str(graph_file), "--dot", str(tmp_path / "no" / "such" / "g.dot")]) \
        == ExitCode.OUTPUT_ERROR
    assert "cannot write" in capsys.readouterr().err


def test_dot_labels_are_escaped():
    g = rlx_rules.Graph.from_dict({"format": "rlx-graph", "version": 1, "outputs": [0], "nodes": [
        {"id": 0, "op": "Input", "name": 'a "quoted" \\ name\nx', "shape": [1], "dtype": "f32"}]})
    text = show.to_dot(g)
    assert '\\"quoted\\" \\\\ name\\nx' in text


# ---- progress (rlx_rules.tools.progress, used by `rlx-rules apply`) ----

class FakeTty(io.StringIO):
    def isatty(self):
        return True


def test_progress_shows_after_the_delay_and_finishes_the_line():
    stream = FakeTty()
    with progress("applying", stream=stream, delay=0.0, interval=0.01, enabled=True):
        time.sleep(0.2)
    text = stream.getvalue()
    assert text.startswith("\rapplying ") and "s" in text
    assert text.endswith("s\n") and "applying: done in" in text


def test_progress_is_silent_for_short_calls_quiet_and_non_terminals(monkeypatch):
    monkeypatch.delenv("RLX_RULES_PROGRESS", raising=False)
    stream = FakeTty()
    with progress("applying", stream=stream, delay=30):
        pass
    assert stream.getvalue() == ""
    assert enabled_for(FakeTty()) and not enabled_for(FakeTty(), quiet=True) and not enabled_for(io.StringIO())
    monkeypatch.setenv("RLX_RULES_PROGRESS", "1")
    assert enabled_for(io.StringIO()) and not enabled_for(io.StringIO(), quiet=True)
    monkeypatch.setenv("RLX_RULES_PROGRESS", "0")
    assert not enabled_for(FakeTty())


def test_progress_ticks_while_the_native_apply_runs():
    # the native apply releases the GIL: the timer thread must get to print during it
    rules = rlx_rules.load_rules()
    graph = rlx_rules.Graph.from_dict(rlx_rules.examples.bert_encoder(layers=300, hidden=64, heads=4))
    stream = FakeTty()
    with progress("applying", stream=stream, delay=0.0, interval=0.001, enabled=True):
        rules.apply(graph)
    assert stream.getvalue().count("\r") >= 2


def test_progress_never_breaks_the_work_on_a_closed_stream():
    stream = FakeTty()
    stream.close()
    with progress("applying", stream=stream, delay=0.0, interval=0.01, enabled=True):
        time.sleep(0.05)
