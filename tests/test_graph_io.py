"""Graphs through the Python API: validation errors name the node and field, round trips keep unknown fields."""

from __future__ import annotations

import json

import pytest

import rlx_rules


def graph(nodes, outputs, **extra):
    return json.dumps({"format": "rlx-graph", "version": 1, "nodes": nodes, "outputs": outputs, **extra})


X = {"id": 0, "op": "Input", "name": "x", "shape": [2, 3], "dtype": "f32"}


@pytest.mark.parametrize("text, needle", [
    ("", "invalid JSON"),
    ("[1, 2", "invalid JSON"),
    (graph([X, X], [0]), "id 0 is already used"),
    (graph([X, {"id": 1, "op": "Relu", "inputs": [5]}], [1]), "node 1: input 5 does not exist"),
    (graph([X], [9]), "output"),
    (graph([X, {"id": 1, "op": "Add", "inputs": [0]}], [1]), "node 1"),
    (graph([X, {"id": 1, "op": "Narrow", "inputs": [0], "attrs": {"axis": "one", "start": 0, "len": 1}}], [1]),
     "axis"),
    (graph([{"id": 0, "op": "Relu", "inputs": [1]}, {"id": 1, "op": "Relu", "inputs": [0]}], [0]), "cycle"),
    (json.dumps({"format": "onnx", "version": 1, "nodes": [], "outputs": []}), "format"),
])
def test_invalid_graphs_raise_graph_error(text, needle):
    with pytest.raises(rlx_rules.GraphError, match=needle):
        rlx_rules.Graph.from_json(text)


def test_unknown_op_loads_with_a_warning_and_is_matched_by_name():
    text = graph([X, {"id": 1, "op": "MyCustomOp", "inputs": [0], "shape": [2, 3]}], [1])
    g = rlx_rules.Graph.from_json(text)
    assert any("MyCustomOp" in w for w in g.warnings)
    assert g.op_counts()["MyCustomOp"] == 1


def test_unknown_fields_survive_a_round_trip_and_apply():
    node = dict(X, note="keep me")
    text = graph([node, {"id": 1, "op": "Relu", "inputs": [0], "shape": [2, 3]}], [1], producer={"tool": "t"})
    g = rlx_rules.Graph.from_json(text)
    data = g.to_dict()
    assert data["producer"] == {"tool": "t"} and data["nodes"][0]["note"] == "keep me"
    fused, _ = rlx_rules.load_rules().apply(g)
    assert fused.to_dict()["producer"] == {"tool": "t"}


def test_nodes_in_any_order_come_out_topologically_sorted():
    nodes = [{"id": 2, "op": "Relu", "inputs": [1]}, {"id": 1, "op": "Relu", "inputs": [0]}, X]
    g = rlx_rules.Graph.from_json(graph(nodes, [2]))
    assert [n.id for n in g.nodes] == [0, 1, 2]


def test_atomic_write_replaces_the_file_whole(tmp_path):
    g = rlx_rules.load_graph(rlx_rules.examples.bert_encoder(layers=1))
    path = tmp_path / "g.json"
    path.write_text("old")
    g.write(path, pretty=True)
    assert rlx_rules.Graph.load(path) == g
    assert [p.name for p in tmp_path.iterdir()] == ["g.json"]


def test_graph_is_pleasant_to_inspect():
    g = rlx_rules.load_graph(rlx_rules.examples.bert_encoder(layers=1))
    assert len(g) == 31 and g.op_counts()["MatMul"] == 4
    assert repr(g).startswith("<Graph 'bert_encoder_1l': 31 nodes")
    attn = g.find("Attention")[0]
    assert "Attention" in repr(attn) and attn.attrs["num_heads"] == 12
    assert "<table>" in g._repr_html_()
