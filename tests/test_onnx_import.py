"""ONNX import: the corpus of real exports, a hand-built model converted exactly, errors, CLI, and ORT parity."""

import json
import pathlib

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from rlx_rules.errors import OnnxImportError  # noqa: E402
from rlx_rules.graph import Graph  # noqa: E402
from rlx_rules.cli.app import main as import_main  # noqa: E402
from rlx_rules.onnx.importer import convert, import_onnx  # noqa: E402

CORPUS = pathlib.Path(__file__).parents[1].parent / "shared" / "corpus"
CORPUS_FILES = sorted(CORPUS.glob("*.onnx")) if CORPUS.is_dir() else []


def _model(nodes, inputs, outputs, inits=(), opset=17, value_info=(), domain_opsets=()):
    g = helper.make_graph(nodes, "tiny", inputs, outputs, initializer=list(inits), value_info=list(value_info))
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in domain_opsets]
    return helper.make_model(g, opset_imports=opsets)


def _attention_model():
    """A tiny attention-like block: x[1,S,8] @ W + b, per-head Reshape/Transpose, scaled scores, Softmax."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")
    shape = numpy_helper.from_array(np.array([1, 0, 2, 4], dtype=np.int64), "heads")  # 0: copy dim 1
    scale = numpy_helper.from_array(np.array(0.5, dtype=np.float32), "scale")
    axes = numpy_helper.from_array(np.array([-1], dtype=np.int64), "axes")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["mm"], name="proj"),
        helper.make_node("Add", ["b", "mm"], ["qb"], name="bias"),
        helper.make_node("Reshape", ["qb", "heads"], ["q4"], name="split_heads"),
        helper.make_node("Transpose", ["q4"], ["qt"], perm=[0, 2, 1, 3], name="to_bhsd"),
        helper.make_node("Transpose", ["q4"], ["kt"], perm=[0, 2, 3, 1], name="to_bhds"),
        helper.make_node("MatMul", ["qt", "kt"], ["scores"], name="qk"),
        helper.make_node("Mul", ["scores", "scale"], ["scaled"], name="scale_mul"),
        helper.make_node("Softmax", ["scaled"], ["p"], axis=-1, name="softmax"),
        helper.make_node("ReduceMean", ["p", "axes"], ["out"], keepdims=1, name="mean"),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "seq", 8])
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, None)
    return _model(nodes, [x], [out], [w, b, shape, scale, axes], opset=18)


def test_hand_built_model_converts_exactly(tmp_path):
    graph = import_onnx(_attention_model(), tmp_path / "tiny.graph.json")
    data = json.loads((tmp_path / "tiny.graph.json").read_text())
    assert data["weights"] == "tiny.weights.npz"
    by_name = {n.get("name"): n for n in data["nodes"]}
    ops = [n["op"] for n in data["nodes"]]
    assert ops.count("Param") == 1 and ops.count("Input") == 1  # w (64 elements) is a weight; b (8) is inline
    assert by_name["x"]["shape"] == [1, "seq", 8] and by_name["x"]["dtype"] == "f32"
    assert by_name["b"]["op"] == "Constant" and len(by_name["b"]["attrs"]["value"]) == 8
    assert by_name["proj"]["op"] == "MatMul" and by_name["proj"]["onnx_op"] == "MatMul"
    # Reshape's shape input is folded into new_shape; the 0 (copy) became -1 since dim 1 is symbolic
    assert by_name["split_heads"]["attrs"] == {"new_shape": [1, -1, 2, 4]}
    assert len(by_name["split_heads"]["inputs"]) == 1 and "heads" not in by_name
    assert by_name["to_bhds"]["attrs"] == {"perm": [0, 2, 3, 1]}
    scale = data["nodes"][by_name["scale_mul"]["inputs"][1]]
    assert scale["op"] == "Constant" and scale["attrs"]["value"] == 0.5 and scale["shape"] == []
    assert by_name["softmax"]["attrs"] == {"axis": -1}
    assert by_name["mean"]["op"] == "Reduce"
    assert by_name["mean"]["attrs"] == {"op": "Mean", "axes": [3], "keep_dim": True}
    assert by_name["mean"]["shape"][:2] == [1, 2]  # from ONNX shape inference
    with np.load(tmp_path / "tiny.weights.npz") as w:
        assert sorted(w.files) == ["w"] and w["w"].shape == (8, 8) and w["w"].dtype == np.float32
    assert graph.warnings == []


def test_unknown_dims_get_symbols_and_constants_fold():
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "i1"], ["d1"], axis=0),
             helper.make_node("Unsqueeze", ["d1", "ax0"], ["d1v"]),
             helper.make_node("Concat", ["d1v", "one"], ["shape"], axis=0),
             helper.make_node("Reshape", ["x", "shape"], ["y"], name="r")]
    inits = [numpy_helper.from_array(np.array(1, dtype=np.int64), "i1"),
             numpy_helper.from_array(np.array([0], dtype=np.int64), "ax0"),
             numpy_helper.from_array(np.array([4], dtype=np.int64), "one")]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 6])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, None])
    data = convert(_model(nodes, [x], [y], inits, opset=17)).graph
    r = next(n for n in data["nodes"] if n.get("name") == "r")
    assert r["attrs"] == {"new_shape": [6, 4]} and r["op"] == "Reshape"  # Shape→Gather→Concat folded
    assert [n["op"] for n in data["nodes"]] == ["Input", "Reshape"]  # the folded chain is gone


def test_dynamic_reshape_target_names_the_input_symbols_and_runs():
    """Without pinning, Shape→Gather→Unsqueeze→Concat resolves to a symbolic target: Reshape {new_shape: [batch, seq,
    2, 8]} (legacy's [B, S, -1, 8], the -1 solved), which the interpreter runs by binding batch and seq from the
    input, and which exports back to ONNX (Shape gathers of the input) with ONNX Runtime's values."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "i0"], ["d0"], axis=0),
             helper.make_node("Gather", ["s", "i1"], ["d1"], axis=0),
             helper.make_node("Unsqueeze", ["d0", "ax0"], ["d0v"]),
             helper.make_node("Unsqueeze", ["d1", "ax0"], ["d1v"]),
             helper.make_node("Concat", ["d0v", "d1v", "rest"], ["shape"], axis=0),
             helper.make_node("Reshape", ["x", "shape"], ["y"], name="r")]
    inits = [numpy_helper.from_array(np.array(0, dtype=np.int64), "i0"),
             numpy_helper.from_array(np.array(1, dtype=np.int64), "i1"),
             numpy_helper.from_array(np.array([0], dtype=np.int64), "ax0"),
             numpy_helper.from_array(np.array([-1, 8], dtype=np.int64), "rest")]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    result = convert(_model(nodes, [x], [y], inits, opset=17))
    r = next(n for n in result.graph["nodes"] if n.get("name") == "r")
    assert r["op"] == "Reshape" and r["attrs"] == {"new_shape": ["batch", "seq", 2, 8]}
    assert r["shape"] == ["batch", "seq", 2, 8]
    import rlx_rules
    from rlx_rules.onnx.export import to_onnx
    graph = Graph.from_dict(result.graph)
    xv = np.arange(3 * 5 * 16, dtype=np.float32).reshape(3, 5, 16)
    (got,) = rlx_rules.run(graph, {"x": xv}, result.weights)
    np.testing.assert_array_equal(got, xv.reshape(3, 5, 2, 8))
    ort = pytest.importorskip("onnxruntime")
    model = to_onnx(graph, result.weights)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(sess.run(None, {sess.get_inputs()[0].name: xv})[0], xv.reshape(3, 5, 2, 8))


def test_split_becomes_narrows_and_slice_a_narrow():
    nodes = [helper.make_node("Split", ["x", "sizes"], ["a", "b", "c"], axis=2, name="qkv"),
             helper.make_node("Slice", ["c", "st", "en", "ax"], ["d"], name="half"),
             helper.make_node("Add", ["a", "b"], ["ab"])]
    inits = [numpy_helper.from_array(np.array([4, 4, 8], dtype=np.int64), "sizes"),
             numpy_helper.from_array(np.array([4], dtype=np.int64), "st"),
             numpy_helper.from_array(np.array([2**63 - 1], dtype=np.int64), "en"),
             numpy_helper.from_array(np.array([-1], dtype=np.int64), "ax")]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16])
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("ab", "d")]
    data = convert(_model(nodes, [x], outs, inits)).graph
    narrows = [n["attrs"] for n in data["nodes"] if n["op"] == "Narrow"]
    assert narrows == [{"axis": 2, "start": 0, "len": 4}, {"axis": 2, "start": 4, "len": 4},
                       {"axis": 2, "start": 8, "len": 8}, {"axis": 2, "start": 4, "len": 4}]
    Graph.from_dict(data)


def test_onnx_only_ops_keep_their_names_with_defaults_and_folded_inputs():
    nodes = [helper.make_node("Gemm", ["x", "w"], ["y"], transB=1, name="fc"),
             helper.make_node("Unsqueeze", ["y", "axes"], ["z"], name="u")]
    inits = [numpy_helper.from_array(np.ones((3, 4), dtype=np.float32), "w"),
             numpy_helper.from_array(np.array([0], dtype=np.int64), "axes")]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, None)
    graph = Graph.from_dict(convert(_model(nodes, [x], [z], inits), inline_max_elements=4).graph)
    fc, u = graph.find("Gemm")[0], graph.find("Unsqueeze")[0]
    assert fc.attrs == {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 1}
    assert u.attrs == {"axes": [0]} and len(u.inputs) == 1
    assert graph.warnings == []  # the registry knows them


@pytest.mark.parametrize("case", ["subgraph", "domain", "external", "opset"])
def test_unsupported_constructs_raise(tmp_path, case):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    if case == "subgraph":
        branch = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "b", [], [y])
        cond = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
        model = _model([helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch)],
                       [x, cond], [y])
        match = "subgraph"
    elif case == "domain":
        model = _model([helper.make_node("Foo", ["x"], ["y"], domain="my.domain")], [x], [y],
                       domain_opsets=[("my.domain", 1)])
        match = "my.domain"
    elif case == "external":
        w = numpy_helper.from_array(np.ones(2, dtype=np.float32), "w")
        model = _model([helper.make_node("Add", ["x", "w"], ["y"])], [x], [y], [w])
        onnx.save_model(model, tmp_path / "m.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
                        location="m.data", size_threshold=0)
        (tmp_path / "m.data").unlink()
        model = tmp_path / "m.onnx"
        match = "external"
    else:
        model = _model([helper.make_node("Relu", ["x"], ["y"])], [x], [y], opset=999)
        match = "opset 999"
    with pytest.raises(OnnxImportError, match=match):
        import_onnx(model)


def test_external_data_found_is_loaded(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 40])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 40])
    w = numpy_helper.from_array(np.arange(80, dtype=np.float32).reshape(2, 40), "w")
    onnx.save_model(_model([helper.make_node("Add", ["x", "w"], ["y"])], [x], [y], [w]), tmp_path / "m.onnx",
                    save_as_external_data=True, location="m.data", size_threshold=0)
    import_onnx(tmp_path / "m.onnx", tmp_path / "m.graph.json")
    with np.load(tmp_path / "m.weights.npz") as wz:
        np.testing.assert_array_equal(wz["w"], np.arange(80, dtype=np.float32).reshape(2, 40))


def test_cli_import_and_exit_codes(tmp_path, capsys):
    src = tmp_path / "tiny.onnx"
    onnx.save_model(_attention_model(), src)
    out = tmp_path / "tiny.graph.json"
    assert import_main(["import", str(src), "-o", str(out), "--weights", str(tmp_path / "w.npz")]) == 0
    assert json.loads(out.read_text())["weights"] == "w.npz" and (tmp_path / "w.npz").exists()
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    assert import_main(["import", str(bad), "-o", str(tmp_path / "x.json")]) == 4
    assert "cannot read" in capsys.readouterr().err


@pytest.mark.skipif(not CORPUS_FILES, reason="../shared/corpus is not available")
@pytest.mark.parametrize("path", CORPUS_FILES, ids=lambda p: p.name)
def test_corpus_imports(tmp_path, path):
    model = onnx.load(path)
    n_onnx = len(model.graph.node)
    out = tmp_path / (path.stem + ".graph.json")
    graph = import_onnx(path, out)
    assert graph.warnings == []
    counts = graph.op_counts()
    assert 0.5 * n_onnx <= len(graph) - counts["Param"] - counts["Constant"] - counts["Input"] <= 1.2 * n_onnx  # Split: one Narrow per output
    assert counts["Softmax"] == 2 and counts["LayerNorm"] + counts["Reduce"] >= 5
    assert counts["MatMul"] + counts["Gemm"] >= 13  # 2 layers: 4 projections, 2 FFN, 2 attention products
    params = {n.name: n for n in graph.find("Param")}
    inits = {t.name: t for t in model.graph.initializer if int(np.prod(t.dims)) > 16}
    assert set(inits) <= set(params)
    with np.load(out.with_name(path.stem + ".weights.npz")) as w:
        assert set(w.files) == set(params)
        for name, t in inits.items():
            np.testing.assert_array_equal(w[name], numpy_helper.to_array(t))
    for node in graph:
        assert node.shape is not None, f"{node} has no shape"


@pytest.mark.skipif(not CORPUS_FILES, reason="../shared/corpus is not available")
@pytest.mark.parametrize("path", CORPUS_FILES, ids=lambda p: p.name)
def test_corpus_matches_onnxruntime(tmp_path, path):
    ort = pytest.importorskip("onnxruntime")
    from rlx_rules.interpret import run

    inputs = dict(np.load(CORPUS / (path.name.split(".")[0] + ".inputs.npz")))
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feed = {i.name: inputs[i.name] for i in session.get_inputs()}
    expected = session.run(None, feed)
    out = tmp_path / "g.graph.json"
    import_onnx(path, out)
    try:
        got = run(out, feed)
    except (NotImplementedError, KeyError) as e:  # an op the interpreter cannot run yet
        pytest.skip(f"interpreter: {e}")
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, atol=1e-4, rtol=1e-4)


def test_dynamic_shape_rules_strided_slice_tile_and_reshape_minus_one():
    """Shape rules over dim symbols: a strided slice with constant bounds sizes its static axis, a Tile keeps a dim
    repeated once, and a Reshape's -1 is the one input symbol that the target does not name."""
    from rlx_rules.onnx.shapes import computed_shape
    sl = {"op": "OnnxSlice", "attrs": {"starts": [1], "ends": [2**63 - 1], "axes": [3], "steps": [2]}}
    assert computed_shape(sl, [["b", "s", 2, 5]]) == ["b", "s", 2, 2]
    tile = {"op": "Tile", "attrs": {"repeats": [1, 1, 1, 2]}}
    assert computed_shape(tile, [[1, "s", 2, 2]]) == [1, "s", 2, 4]
    assert computed_shape(tile, [[1, "s", 2, "d"]]) == [1, "s", 2, None]
    reshape = {"op": "Reshape", "attrs": {"new_shape": [1, -1, 1, 4]}}
    assert computed_shape(reshape, [[1, "s", 1, 2, 2]]) == [1, "s", 1, 4]
    assert computed_shape(reshape, [[1, "s", 1, 2, 3]]) is None  # the static sizes' products differ
    assert computed_shape({"op": "Reshape", "attrs": {"new_shape": [-1, "s"]}}, [["b", "s"]]) == ["b", "s"]
    assert computed_shape({"op": "Reshape", "attrs": {"new_shape": [-1, 4]}}, [["b", "s", 4]]) is None  # B·S


def test_dynamic_scale_from_a_static_dim_folds_and_fill_names_its_dims():
    """Without pinning: a float scale computed from x's static last dim (SDPA's Sqrt(1 / Sqrt(Cast(D)))) becomes a
    Constant, and ConstantOfShape(Shape(x)) takes x's symbols; the values are ONNX's."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Slice", ["s", "m1", "big"], ["d"]),
             helper.make_node("Cast", ["d"], ["df"], to=TensorProto.FLOAT),
             helper.make_node("Sqrt", ["df"], ["r"]),
             helper.make_node("Div", ["one", "r"], ["inv"]),
             helper.make_node("Sqrt", ["inv"], ["scale"], name="scale"),
             helper.make_node("ConstantOfShape", ["s"], ["fill"], name="fill",
                              value=numpy_helper.from_array(np.array([2.0], dtype=np.float32))),
             helper.make_node("Mul", ["x", "scale"], ["xs"]),
             helper.make_node("Add", ["xs", "fill"], ["y"])]
    inits = [numpy_helper.from_array(np.array([-1], dtype=np.int64), "m1"),
             numpy_helper.from_array(np.array([2**62], dtype=np.int64), "big"),
             numpy_helper.from_array(np.array(1.0, dtype=np.float32), "one")]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    result = convert(_model(nodes, [x], [y], inits, opset=17))
    by_name = {n.get("name"): n for n in result.graph["nodes"]}
    assert by_name["scale"]["op"] == "Constant"
    assert np.float32(np.asarray(by_name["scale"]["attrs"]["value"]).reshape(-1)[0]) == \
        np.sqrt(np.float32(1.0) / np.sqrt(np.float32(16.0)))
    assert by_name["fill"]["shape"] == ["batch", "seq", 16]
    import rlx_rules
    xv = np.arange(2 * 3 * 16, dtype=np.float32).reshape(2, 3, 16)
    (got,) = rlx_rules.run(Graph.from_dict(result.graph), {"x": xv}, result.weights)
    np.testing.assert_allclose(got, xv * np.sqrt(np.float32(0.25)) + 2.0, rtol=1e-6)
