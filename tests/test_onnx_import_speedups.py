"""The importer's faster paths give what the plain ones gave: the .npz writer (what np.savez/zipfile write)."""

import os
import zipfile

import numpy as np
import pytest

from rlx_rules.errors import OnnxImportError
from rlx_rules.onnx_import import save_weights


def _zipfile_npz(path, weights):
    """The reference: the .npz as zipfile and np.lib.format.write_array write it (the importer's former writer)."""
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
    w["large"] = rng.standard_normal((300, 257)).astype(np.float32)
    return w


def test_npz_is_what_zipfile_writes(tmp_path):
    weights = _weights()
    ours, ref = tmp_path / "ours.npz", tmp_path / "ref.npz"
    save_weights(str(ours), weights)
    _zipfile_npz(ref, weights)
    assert ours.read_bytes() == ref.read_bytes()
    assert not os.path.exists(str(ours) + ".tmp.npz")
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
    with pytest.raises(OnnxImportError, match="cannot write weights"):
        save_weights(str(missing), {"a": np.ones(3, dtype=np.float32)})


def test_npz_refuses_object_arrays_and_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "w.npz"
    with pytest.raises(ValueError):
        save_weights(str(path), {"a": np.ones(3, dtype=np.float32), "s": np.array(["x", None], dtype=object)})
    assert not path.exists() and not os.path.exists(str(path) + ".tmp.npz")
