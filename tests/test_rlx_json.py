"""RLX's serde JSON for a Graph: read into graph.json, written back unchanged; ONNX-only ops refused."""

import json
import struct

import pytest

from rlx_rules.errors import GraphError
from rlx_rules.graph import load_graph
from rlx_rules.cli.app import main as cli_main
from rlx_rules.onnx.rlx_json import export_rlx_json, from_rlx_json, import_rlx_json, to_rlx_json


def _shape(dims, dtype="F32"):
    return {"dims": [{"Static": d} if isinstance(d, int) else {"Dynamic": d[1]} for d in dims], "dtype": dtype}


def _node(i, op, inputs, dims, dtype="F32", name=None, origin=None):
    return {"id": i, "op": op, "inputs": inputs, "shape": _shape(dims, dtype), "name": name, "origin": origin}


SEQ = ("dyn", 1)

RLX_GRAPH = {
    "name": "tiny_attn",
    "nodes": [
        _node(0, {"Input": {"name": "x"}}, [], [2, SEQ, 8], name="x"),
        _node(1, {"Param": {"name": "w"}}, [], [8, 24], name="w"),
        _node(2, "MatMul", [0, 1], [2, SEQ, 24]),
        _node(3, {"Narrow": {"axis": 2, "start": 0, "len": 8}}, [2], [2, SEQ, 8]),
        _node(4, {"Narrow": {"axis": 2, "start": 8, "len": 8}}, [2], [2, SEQ, 8]),
        _node(5, {"Narrow": {"axis": 2, "start": 16, "len": 8}}, [2], [2, SEQ, 8]),
        _node(6, {"Attention": {"num_heads": 2, "head_dim": 4, "mask_kind": {"SlidingWindow": 3},
                                "score_scale": 0.5, "attn_logit_softcap": None}}, [3, 4, 5], [2, SEQ, 8]),
        _node(7, {"Constant": {"data": list(struct.pack("<f", 0.125))}}, [], [], name="c"),
        _node(8, {"Binary": "Mul"}, [6, 7], [2, SEQ, 8]),
        _node(9, {"Activation": "Gelu"}, [8], [2, SEQ, 8]),
        _node(10, {"Compare": "Lt"}, [9, 7], [2, SEQ, 8], dtype="Bool"),
        _node(11, {"Cast": {"to": "F16"}}, [9], [2, SEQ, 8], dtype="F16",
              origin={"pass": "fusion"}),
        _node(12, {"FakeQuantize": {"bits": 8, "axis": None, "ste": "Identity", "scale_mode": {"EMA": {"decay": 0.9}}}},
              [9], [2, SEQ, 8]),
    ],
    "outputs": [11, 10, 12],
}


def test_reads_rlx_json_into_the_registry_vocabulary():
    data = from_rlx_json(json.dumps(RLX_GRAPH))
    nodes = {n["id"]: n for n in data["nodes"]}
    assert nodes[0] == {"id": 0, "op": "Input", "name": "x", "shape": [2, "dyn1", 8], "dtype": "f32"}
    assert nodes[6]["op"] == "Attention"
    assert nodes[6]["attrs"]["mask_kind"] == "SlidingWindow" and nodes[6]["attrs"]["window"] == 3
    assert nodes[7]["attrs"] == {"value": 0.125}
    assert [nodes[i]["op"] for i in (8, 9, 10)] == ["Mul", "Gelu", "Lt"]
    assert nodes[10]["dtype"] == "bool" and nodes[11]["attrs"] == {"to": "f16"}
    assert nodes[11]["rlx_origin"] == {"pass": "fusion"}
    graph = load_graph(data)
    assert graph.op_counts()["Narrow"] == 3
    assert any("FakeQuantize" in w for w in graph.warnings)  # not in the registry: loaded with a warning


def test_round_trip_is_exact(tmp_path):
    src = tmp_path / "rlx.json"
    src.write_text(json.dumps(RLX_GRAPH))
    graph = import_rlx_json(src, tmp_path / "g.graph.json")
    back = json.loads(export_rlx_json(graph))
    assert back == RLX_GRAPH
    again = to_rlx_json(load_graph(str(tmp_path / "g.graph.json")))
    assert again == RLX_GRAPH


def test_export_renumbers_and_names_symbols():
    g = {"format": "rlx-graph", "version": 1, "nodes": [
        {"id": 10, "op": "Input", "name": "a", "shape": ["batch", 4], "dtype": "f32"},
        {"id": 20, "op": "Relu", "inputs": [10], "shape": ["batch", 4], "dtype": "f32"}], "outputs": [20]}
    out = to_rlx_json(g)
    assert [n["id"] for n in out["nodes"]] == [0, 1] and out["outputs"] == [1]
    assert out["nodes"][1]["op"] == {"Activation": "Relu"} and out["nodes"][1]["inputs"] == [0]
    assert out["nodes"][0]["shape"]["dims"] == [{"Dynamic": 0}, {"Static": 4}]


def test_onnx_only_ops_are_refused(tmp_path, capsys):
    g = {"format": "rlx-graph", "version": 1, "nodes": [
        {"id": 0, "op": "Input", "name": "a", "shape": [4], "dtype": "f32"},
        {"id": 1, "op": "Erf", "inputs": [0], "shape": [4], "dtype": "f32"}], "outputs": [1]}
    with pytest.raises(GraphError, match="Erf"):
        to_rlx_json(g)
    assert to_rlx_json(g, allow_non_rlx=True)["nodes"][1]["op"] == {"Erf": {}}
    path = tmp_path / "g.json"
    path.write_text(json.dumps(g))
    assert cli_main(["export", str(path), "-o", str(tmp_path / "o.json")]) == 4
    assert "Erf" in capsys.readouterr().err
    assert cli_main(["export", str(path), "-o", str(tmp_path / "o.json"), "--allow-non-rlx", "-q"]) == 0


def test_bad_rlx_json_is_a_graph_error():
    with pytest.raises(GraphError, match="dim"):
        from_rlx_json({"name": "g", "nodes": [_node(0, {"Input": {"name": "x"}}, [], [1]) | {
            "shape": {"dims": [{"Huge": 1}], "dtype": "F32"}}], "outputs": [0]})
    with pytest.raises(GraphError, match="dtype"):
        from_rlx_json({"name": "g", "nodes": [_node(0, {"Input": {"name": "x"}}, [], [1], dtype="F8")],
                       "outputs": [0]})
