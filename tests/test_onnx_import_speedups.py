"""The importer's faster paths give what the plain ones gave: the .npz writer (what np.savez writes), the raw_data
fast path of to_array, the single pass over the nodes, and the paused garbage collector."""

import os
import zipfile

import numpy as np
import pytest

from rlx_rules.errors import OnnxImportError, OutputError
from rlx_rules.onnx.importer import convert
from rlx_rules.onnx.model import load_model
from rlx_rules.onnx.weights import save_weights



def _zipfile_npz(path, weights):
    """The reference: the .npz as zipfile and np.lib.format.write_array write it (what np.savez does)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name, arr in weights.items():
            with zf.open(name + ".npy", "w", force_zip64=True) as f:
                np.lib.format.write_array(f, np.asarray(arr), allow_pickle=False)


def _weights():
    rng = np.random.default_rng(0)
    w = {f"plain_{np.dtype(t).name}": (rng.standard_normal((3, 5)) * 10).astype(t)
         for t in ("f4", "f8", "f2", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "c8", "c16")}
    w["bool"] = rng.standard_normal((4, 4)) > 0
    w["scalar"] = np.array(2.5, dtype=np.float32)
    w["empty"] = np.zeros((0, 3), dtype=np.float32)
    w["fortran"] = np.asfortranarray(rng.standard_normal((4, 6)).astype(np.float32))
    w["strided"] = rng.standard_normal((6, 8)).astype(np.float32)[::2, 1::3]
    w["big_endian"] = np.arange(12, dtype=">f4").reshape(3, 4)
    w["read_only_view"] = np.frombuffer(np.arange(20, dtype="<f4").tobytes(), dtype="<f4").reshape(4, 5)
    w["layer.0/attention/q weight"] = rng.standard_normal((2, 3, 4)).astype(np.float32)
    w["ünïcödé/名前"] = np.arange(6, dtype=np.int64)
    for k in range(3):  # members of 300 KiB and more
        w[f"large{k}"] = rng.standard_normal((300, 257 + k)).astype(np.float32)
    w["large_strided"] = rng.standard_normal((300, 600)).astype(np.float32)[:, ::2]
    w["after_large"] = np.arange(7, dtype=np.int16)
    return w


def test_npz_holds_what_np_savez_would(tmp_path):
    """Every member is byte for byte the .npy that numpy writes; the archive passes zipfile's CRC checks."""
    weights = _weights()
    ours, ref = tmp_path / "ours.npz", tmp_path / "ref.npz"
    save_weights(str(ours), weights)
    _zipfile_npz(ref, weights)
    assert not os.path.exists(str(ours) + ".tmp.npz")
    with zipfile.ZipFile(ours) as a, zipfile.ZipFile(ref) as b:
        assert a.namelist() == b.namelist()
        for name in b.namelist():
            assert a.read(name) == b.read(name), name
    with zipfile.ZipFile(ours) as zf:
        assert zf.testzip() is None
    with np.load(ours, allow_pickle=False) as got:
        assert list(got.keys()) == list(weights)
        for name, arr in weights.items():
            assert got[name].dtype == arr.dtype and got[name].shape == arr.shape
            assert got[name].tobytes() == np.ascontiguousarray(arr).tobytes()


def test_npz_with_more_members_than_plain_zip_allows(tmp_path):
    n = (1 << 16) + 10  # over 65535 members: the ZIP64 end-of-archive records
    weights = {f"w{k}": np.array([k], dtype=np.int32) for k in range(n)}
    path = tmp_path / "many.npz"
    save_weights(str(path), weights)
    with zipfile.ZipFile(path) as zf:
        assert len(zf.infolist()) == n
        assert zf.testzip() is None
    with np.load(path) as got:
        assert len(got.files) == n
        assert got["w0"].tolist() == [0] and got[f"w{n - 1}"].tolist() == [n - 1]


def test_npz_replaces_the_old_file_and_reports_os_errors(tmp_path):
    path = tmp_path / "w.npz"
    path.write_bytes(b"old")
    save_weights(str(path), {"a": np.ones(3, dtype=np.float32)})
    with np.load(path) as got:
        assert got["a"].tolist() == [1.0, 1.0, 1.0]
    missing = tmp_path / "no such folder" / "w.npz"
    with pytest.raises(OutputError, match="cannot write .*w.npz"):  # a write error, exit code output_error
        save_weights(str(missing), {"a": np.ones(3, dtype=np.float32)})


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX only")
def test_npz_refuses_what_is_not_a_regular_file(tmp_path):
    from rlx_rules.errors import OutputRefused

    fifo = tmp_path / "fifo.npz"
    os.mkfifo(fifo)  # refused before it is opened (opening a FIFO for writing would block)
    with pytest.raises(OutputRefused, match="a FIFO"):
        save_weights(str(fifo), {"a": np.ones(3, dtype=np.float32)})
    link = tmp_path / "link.npz"
    link.symlink_to(tmp_path / "target.npz")
    with pytest.raises(OutputRefused, match="symbolic link"):
        save_weights(str(link), {"a": np.zeros(2, dtype=np.float32)})
    assert link.is_symlink() and not (tmp_path / "target.npz").exists()
    assert sorted(os.listdir(tmp_path)) == ["fifo.npz", "link.npz"]  # no temporary file left


def test_npz_refuses_object_arrays_and_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "w.npz"
    with pytest.raises(ValueError):
        save_weights(str(path), {"a": np.ones(3, dtype=np.float32), "s": np.array(["x", None], dtype=object)})
    assert not path.exists() and not os.path.exists(str(path) + ".tmp.npz")


# ---- reading a model with its large weights kept out of the ModelProto --------------------------------------------

_NUMERIC = ["f4", "f8", "f2", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "c8", "c16", "?"]


def _weights_model(onnx, big=20000):
    """A model whose outputs are its initializers: every plain dtype large and small (raw_data, read with
    np.frombuffer), a large bfloat16 (not a plain type: read by numpy_helper), typed-field tensors and a string
    tensor."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(1)
    inits = []
    for t in _NUMERIC:
        for n in (big, 3):
            v = rng.standard_normal(n) * 50
            arr = (v > 0) if t == "?" else (v + 1j * v if t[0] == "c" else v).astype(t)
            inits.append(numpy_helper.from_array(arr.reshape(-1, 1) if n == big else arr, f"{t}_{n}"))
    bf = helper.make_tensor("bf16_big", TensorProto.BFLOAT16, [big], rng.integers(0, 1 << 16, big).astype(np.uint16)
                            .tobytes(), raw=True)
    typed = helper.make_tensor("typed_f32", TensorProto.FLOAT, [2, 3], [1.0, 2.0, 3.0, 4.0, 5.0, 6.5])
    typed16 = helper.make_tensor("typed_f16", TensorProto.FLOAT16, [3], np.array([1, 2, 3], np.float16))
    ints = helper.make_tensor("typed_i64", TensorProto.INT64, [4], [1, -2, 3, 1 << 40])
    inits += [bf, typed, typed16, ints]
    outs = [helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in inits]
    g = helper.make_graph([], "weights", [], outs, initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _same_import(a, b):
    assert a.graph == b.graph
    assert list(a.weights) == list(b.weights)
    for name in a.weights:
        x, y = a.weights[name], b.weights[name]
        assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes(), name


def test_convert_from_a_file_equals_convert_of_the_loaded_model(tmp_path):
    onnx = pytest.importorskip("onnx")
    model = _weights_model(onnx)
    path = tmp_path / "w.onnx"
    onnx.save(model, str(path))
    from_file = convert(str(path))
    assert {"f4_20000", "bf16_big", "u1_20000"} <= set(from_file.weights)
    _same_import(from_file, convert(onnx.load(str(path))))
    full = load_model(str(path))  # the public loader still gives every initializer its data
    assert all(t.HasField("raw_data") or len(t.float_data) or len(t.int32_data) or len(t.int64_data)
               for t in full.graph.initializer)


def test_duplicate_initializer_names_read_as_onnx_reads_them(tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx import helper, numpy_helper

    a = numpy_helper.from_array(np.arange(6000, dtype=np.float32), "w")
    b = numpy_helper.from_array(-np.arange(6000, dtype=np.float32), "w")  # the last one wins
    out = helper.make_tensor_value_info("w", 1, [6000])
    model = helper.make_model(helper.make_graph([], "dup", [], [out], initializer=[a, b]),
                              opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "dup.onnx"
    onnx.save(model, str(path))
    got = convert(str(path))
    _same_import(got, convert(onnx.load(str(path))))
    assert got.weights["w"][1] == -1.0


def test_external_data_and_malformed_files(tmp_path):
    onnx = pytest.importorskip("onnx")
    model = _weights_model(onnx)
    ext = tmp_path / "ext.onnx"
    onnx.save(model, str(ext), save_as_external_data=True, all_tensors_to_one_file=True, location="ext.data",
              size_threshold=1024)
    _same_import(convert(str(ext)), convert(onnx.load(str(ext))))
    path = tmp_path / "w.onnx"
    onnx.save(model, str(path))
    data = path.read_bytes()
    for k, bad in enumerate([data[: len(data) // 2], data[:-3], b"\x3a\xff\xff\xff\xff\x0f" + data]):
        p = tmp_path / f"bad{k}.onnx"
        p.write_bytes(bad)
        with pytest.raises(OnnxImportError, match="as an ONNX model"):
            convert(str(p))


def test_tensor_array_equals_to_array():
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    from rlx_rules.onnx.common import tensor_array

    rng = np.random.default_rng(2)
    tensors = []
    for t in _NUMERIC:
        v = rng.standard_normal((2, 3)) * 50
        arr = (v > 0) if t == "?" else (v + 1j * v if t[0] == "c" else v).astype(t)
        tensors.append(numpy_helper.from_array(arr, f"raw_{t}"))
        tensors.append(numpy_helper.from_array(arr.reshape(()) if arr.size == 1 else arr[0, 0], f"scalar_{t}"))
    tensors += [helper.make_tensor("typed_f32", TensorProto.FLOAT, [2], [1.5, -2.0]),
                helper.make_tensor("typed_f16", TensorProto.FLOAT16, [2], np.array([1, 2], np.float16)),
                helper.make_tensor("typed_bool", TensorProto.BOOL, [3], [True, False, True]),
                helper.make_tensor("bf16", TensorProto.BFLOAT16, [2], np.array([1, 2], np.uint16).tobytes(), raw=True),
                helper.make_tensor("strings", TensorProto.STRING, [2], [b"a", b"bc"]),
                helper.make_tensor("empty", TensorProto.FLOAT, [0, 3], b"", raw=True)]
    for t in tensors:
        ref, got = numpy_helper.to_array(t), tensor_array(t)
        assert got.dtype == ref.dtype and got.shape == ref.shape, t.name
        assert got.tobytes() == ref.tobytes() if ref.dtype != object else got.tolist() == ref.tolist()


def test_import_leaves_the_garbage_collector_as_it_was(tmp_path):
    import gc

    onnx = pytest.importorskip("onnx")
    from rlx_rules.onnx.importer import import_onnx

    path = tmp_path / "w.onnx"
    onnx.save(_weights_model(onnx), str(path))
    assert gc.isenabled()
    import_onnx(str(path), str(tmp_path / "w.graph.json"))
    assert gc.isenabled()
    with pytest.raises(OnnxImportError):
        import_onnx(str(tmp_path / "missing.onnx"))
    assert gc.isenabled()
    gc.disable()
    try:
        convert(str(path))
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_nodes_out_of_order_are_sorted_and_cycles_refused():
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Relu", ["x"], ["a"], name="r"), helper.make_node("Neg", ["a"], ["b"], name="n"),
             helper.make_node("Exp", ["b"], ["y"], name="e")]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])

    def model(ns):
        return helper.make_model(helper.make_graph(ns, "chain", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])

    def wiring(graph):  # (ONNX shape inference sees less of an unsorted graph: shapes may differ)
        return [(n["op"], n.get("name"), n.get("inputs")) for n in graph["nodes"]], graph["outputs"]

    in_order = convert(model(nodes)).graph
    assert [n["op"] for n in in_order["nodes"]] == ["Input", "Relu", "Neg", "Exp"]
    assert wiring(convert(model(nodes[::-1])).graph) == wiring(in_order)
    cyclic = [helper.make_node("Relu", ["x", "b"], ["a"], name="r"), helper.make_node("Neg", ["a"], ["b"], name="n"),
              helper.make_node("Exp", ["b"], ["y"], name="e")]
    with pytest.raises(OnnxImportError, match="cycle"):
        convert(model(cyclic))
