"""The importer's own shapes, input pinning, canonical forms, resource limits and typed errors (rlx_rules.onnx)."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import rlx_rules  # noqa: E402
from rlx_rules.errors import GraphError, OnnxImportError  # noqa: E402
from rlx_rules.onnx.importer import convert, import_onnx  # noqa: E402


def _model(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _ints(name, values):
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def _ops(data):
    return [n["op"] for n in data["nodes"]]


def test_noop_reshape_cast_and_expand_are_removed():
    nodes = [helper.make_node("Reshape", ["x", "same"], ["r"]), helper.make_node("Cast", ["r"], ["c"], to=1),
             helper.make_node("Expand", ["c", "ones"], ["e"]), helper.make_node("Relu", ["e"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    data = convert(_model(nodes, [x], [y], [_ints("same", [2, 3]), _ints("ones", [1, 1])])).graph
    assert _ops(data) == ["Input", "Relu"] and data["source"] == "onnx"
    raw = convert(_model(nodes, [x], [y], [_ints("same", [2, 3]), _ints("ones", [1, 1])]), canonical=False).graph
    assert "Cast" in _ops(raw)


def test_kt_through_a_merged_heads_reshape_becomes_one_transpose():
    # SDPA's kᵀ: [B, H, S, D] -> Reshape [B·H, S, D] -> Transpose {0, 2, 1} -> Reshape [B, H, D, S]
    nodes = [helper.make_node("Reshape", ["k", "s3"], ["k3"]), helper.make_node("Transpose", ["k3"], ["kt3"], perm=[0, 2, 1]),
             helper.make_node("Reshape", ["kt3", "s4"], ["kt"])]
    k = helper.make_tensor_value_info("k", TensorProto.FLOAT, [2, 3, 5, 4])
    y = helper.make_tensor_value_info("kt", TensorProto.FLOAT, None)
    model = _model(nodes, [k], [y], [_ints("s3", [6, 5, 4]), _ints("s4", [2, 3, 4, 5])])
    data = convert(model).graph
    assert _ops(data) == ["Input", "Transpose"] and data["nodes"][1]["attrs"] == {"perm": [0, 1, 3, 2]}
    feed = {"k": np.random.default_rng(0).standard_normal((2, 3, 5, 4)).astype(np.float32)}
    (got,) = rlx_rules.run(json.dumps(data), feed)
    np.testing.assert_array_equal(got, feed["k"].transpose(0, 1, 3, 2))


def test_one_element_constants_become_scalars_and_shared_scalars_are_copied():
    half = numpy_helper.from_array(np.array([0.5], dtype=np.float32), "half")
    nodes = [helper.make_node("Mul", ["a", "half"], ["qa"]), helper.make_node("Mul", ["b", "half"], ["qb"]),
             helper.make_node("Add", ["qa", "qb"], ["y"])]
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3]) for n in "ab"]
    data = convert(_model(nodes, ins, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [half])).graph
    consts = [n for n in data["nodes"] if n["op"] == "Constant"]
    assert len(consts) == 2 and all(c["shape"] == [] and c["attrs"]["value"] == 0.5 for c in consts)


def test_unknown_dims_resolve_through_folded_shapes_and_broadcasts():
    # the mask's dims are unknown to ONNX (a Reshape of a runtime shape); the importer folds Shape of a static
    # tensor and broadcasts against the static [B, 1, S, S] Expand target
    nodes = [helper.make_node("Shape", ["m"], ["ms"]), helper.make_node("Reshape", ["m", "ms"], ["m2"]),
             helper.make_node("Expand", ["m2", "target"], ["me"]), helper.make_node("Cast", ["me"], ["y"], to=1)]
    m = helper.make_tensor_value_info("m", TensorProto.INT64, [2, 1, 1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    model = _model(nodes, [m], [y], [_ints("target", [2, 1, 4, 4])])
    del model.graph.value_info[:]
    data = convert(model).graph
    assert all(isinstance(d, int) for n in data["nodes"] for d in n.get("shape") or [])
    assert data["nodes"][-1]["shape"] == [2, 1, 4, 4]


def test_input_shape_pinning():
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Reshape", ["x", "flat"], ["f"]),
             helper.make_node("Relu", ["f"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    model = _model(nodes, [x], [y], [_ints("flat", [-1])])
    dynamic = convert(model).graph
    assert dynamic["nodes"][0]["shape"] == ["batch", "seq"]
    pinned = convert(model, input_shapes={"x": [3, 4]}).graph
    assert pinned["nodes"][0]["shape"] == [3, 4] and pinned["nodes"][-1]["shape"] == [12]
    with pytest.raises(OnnxImportError, match="no input 'nope'"):
        convert(model, input_shapes={"nope": [1]})
    with pytest.raises(OnnxImportError, match="rank 2"):
        convert(model, input_shapes={"x": [1, 2, 3]})


def test_input_shape_flag(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    path = tmp_path / "m.onnx"
    onnx.save(_model(nodes, [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]), str(path))
    out = tmp_path / "m.graph.json"
    r = subprocess.run([sys.executable, "-m", "rlx_rules.cli", "import", str(path), "-o", str(out), "-q",
                        "--input-shape", "x=2,4"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert json.loads(out.read_text())["nodes"][0]["shape"] == [2, 4]
    r = subprocess.run([sys.executable, "-m", "rlx_rules.cli", "import", str(path), "-o", str(out), "-q",
                        "--input-shape", "x=2,a"], capture_output=True, text=True)
    assert r.returncode != 0 and "Traceback" not in r.stderr and "NAME=D0,D1" in r.stderr


@pytest.mark.parametrize("op", ["Range", "ConstantOfShape"])
def test_huge_constant_sizes_are_refused_before_shape_inference(op):
    if op == "Range":
        nodes = [helper.make_node("Range", ["s", "l", "d"], ["y"])]
        inits = [_ints("s", 0), _ints("l", 10**12), _ints("d", 1)]
    else:  # 4 TiB of float32
        nodes = [helper.make_node("ConstantOfShape", ["shape"], ["y"])]
        inits = [_ints("shape", [2**20, 2**20])]
    model = _model(nodes, [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    with pytest.raises(OnnxImportError, match="over the limit"):
        convert(model)


def test_the_element_limit_is_overridable():
    nodes = [helper.make_node("Range", ["s", "l", "d"], ["y"])]
    model = _model(nodes, [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                   [_ints("s", 0), _ints("l", 5000), _ints("d", 1)])
    with pytest.raises(OnnxImportError, match="over the limit of 1000"):
        convert(model, max_elements=1000)
    assert _ops(convert(model).graph) == ["Range"]  # over FOLD_MAX: a runtime op, not folded


def test_malformed_initializer_and_non_onnx_file_are_typed_errors(tmp_path):
    bad = onnx.TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4, 4], raw_data=b"\x00" * 7)
    nodes = [helper.make_node("Add", ["x", "w"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 4])
    with pytest.raises(OnnxImportError, match="malformed"):
        convert(_model(nodes, [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [bad]))
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"this is not a protobuf \xff\xfe" * 10)
    with pytest.raises(OnnxImportError):
        import_onnx(str(junk))
    r = subprocess.run([sys.executable, "-m", "rlx_rules.cli", "import", str(junk), "-o", str(tmp_path / "g.json")],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "Traceback" not in r.stderr


def test_interpreter_refuses_a_huge_value_before_allocating():
    graph = {"format": "rlx-graph", "version": 1, "nodes": [
        {"id": 0, "op": "Constant", "attrs": {"value": 0.0}, "shape": [100000, 100000], "dtype": "f32"}], "outputs": [0]}
    assert len(json.dumps(graph, separators=(",", ":"))) < 150
    with pytest.raises(GraphError, match="max_elements"):
        rlx_rules.run(json.dumps(graph), {})
    expand = {"format": "rlx-graph", "version": 1, "nodes": [
        {"id": 0, "op": "Input", "name": "x", "shape": [1]},
        {"id": 1, "op": "Expand", "inputs": [0], "attrs": {"target_shape": [2**20, 2**20]}}], "outputs": [1]}
    with pytest.raises(GraphError, match="max_elements"):
        rlx_rules.run(json.dumps(expand), {"x": np.ones(1)})
    with pytest.raises(GraphError, match="max_elements"):
        rlx_rules.run(json.dumps(graph), {}, max_elements=10)
