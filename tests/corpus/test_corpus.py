"""The committed ONNX corpus is whole: every manifest entry's file exists, is self-contained, and ONNX Runtime reproduces its recorded outputs."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

HERE = Path(__file__).resolve().parent
MANIFEST = json.loads((HERE / "manifest.json").read_text())
EXPORTED = [e for e in MANIFEST["files"] if e.get("exported")]


def test_manifest_lists_every_file_and_nothing_else():
    listed = {e["file"] for e in EXPORTED}
    assert listed == {p.name for p in HERE.glob("*.onnx")}
    for e in EXPORTED:
        stem = e["file"][: -len(".onnx")]
        assert (HERE / f"{stem}.inputs.npz").exists() and (HERE / f"{stem}.expected.npz").exists(), stem
    assert len({e["family"] for e in EXPORTED}) >= 20


def test_corpus_stays_small():
    assert sum(p.stat().st_size for p in HERE.iterdir() if p.is_file()) < 12 * 2**20


@pytest.mark.parametrize("entry", EXPORTED, ids=[e["file"] for e in EXPORTED])
def test_onnxruntime_reproduces_expected(entry):
    stem = entry["file"][: -len(".onnx")]
    model = onnx.load(str(HERE / entry["file"]), load_external_data=False)
    assert not any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer)
    assert [i.name for i in model.graph.input] == entry["inputs"]
    feed = dict(np.load(HERE / f"{stem}.inputs.npz"))
    expected = dict(np.load(HERE / f"{stem}.expected.npz"))
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    (got,) = sess.run(None, feed)
    (want,) = expected.values()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, equal_nan=True)
