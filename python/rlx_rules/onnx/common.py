"""Shared pieces of the ONNX importer: the optional onnx package, dtype and op tables, the result type, JSON values."""

from __future__ import annotations

import contextlib
import gc
import math
import sys
from dataclasses import dataclass, field
from typing import Any, Optional, Union

import numpy as np

from ..errors import OnnxImportError


try:  # the optional extra: pip install rlx-rules[onnx]
    import onnx
    from onnx import numpy_helper
except ImportError:  # pragma: no cover - exercised only without the extra
    onnx = None


SUPPORTED_DOMAINS = ("", "ai.onnx", "com.microsoft")


MIN_OPSET = 7


# ONNX TensorProto element types -> graph.json dtype strings (RLX's DType, lower case).
DTYPES = {1: "f32", 2: "u8", 3: "i8", 4: "u16", 5: "i16", 6: "i32", 7: "i64", 8: "string", 9: "bool",
          10: "f16", 11: "f64", 12: "u32", 13: "u64", 14: "c64", 15: "c128", 16: "bf16"}


# ONNX ops that become RLX ops with the same meaning (more below, with attribute handling).
BINARY = {"Add": "Add", "Sub": "Sub", "Mul": "Mul", "Div": "Div", "Pow": "Pow"}


COMPARE = {"Equal": "Eq", "Less": "Lt", "LessOrEqual": "Le", "Greater": "Gt", "GreaterOrEqual": "Ge"}


UNARY = {op: op for op in ("Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Neg", "Abs", "Sin", "Cos", "Tan",
                            "Atan", "Round")}


REDUCE = {"ReduceMean": "Mean", "ReduceSum": "Sum", "ReduceMax": "Max", "ReduceMin": "Min", "ReduceProd": "Prod"}


# Inputs of ONNX-only ops that are attributes in all but name: (input index, attribute, kind). When every such
# input present is a known constant, it is folded into the node's attrs and removed from its inputs.
FOLDED_INPUTS = {
    "Unsqueeze": [(1, "axes", "ints")],
    "Squeeze": [(1, "axes", "ints")],
    "ConstantOfShape": [(0, "shape", "ints")],
    "Range": [(0, "start", "scalar"), (1, "limit", "scalar"), (2, "delta", "scalar")],
    "Trilu": [(1, "k", "int")],
    "Tile": [(1, "repeats", "ints")],
    "Pad": [(1, "pads", "ints"), (2, "constant_value", "scalar"), (3, "axes", "ints")],
    "Clip": [(1, "min", "scalar"), (2, "max", "scalar")],
    "TopK": [(1, "k", "int")],
    "CumSum": [(1, "axis", "int")],
    "OnnxSlice": [(1, "starts", "ints"), (2, "ends", "ints"), (3, "axes", "ints"), (4, "steps", "ints")],
    "ReduceL1": [(1, "axes", "ints")], "ReduceL2": [(1, "axes", "ints")],
    "ReduceLogSum": [(1, "axes", "ints")], "ReduceLogSumExp": [(1, "axes", "ints")],
    "ReduceSumSquare": [(1, "axes", "ints")],
    **{op: [(1, "axes", "ints")] for op in REDUCE},
}


INT64_MAX = 2**63 - 1


# The most elements one tensor may have when the importer computes it (a folded constant, or ONNX shape
# inference's data propagation) and, by default, when the interpreter allocates it: 2^28 (1 GiB of float32).
MAX_ELEMENTS = 2**28


@dataclass
class OnnxImport:
    """The result of converting a model in memory: graph.json as a dict, the weights, and warnings."""

    graph: dict
    weights: dict[str, np.ndarray]
    warnings: list[str] = field(default_factory=list)


def require_onnx() -> None:
    if onnx is None:
        raise OnnxImportError("importing ONNX needs the onnx package: pip install 'rlx-rules[onnx]'")


def f32_json(x: float) -> Union[float, str]:
    """A float32 value as the shortest decimal that reads back to it (0.125, 1e-12); non-finite as a string."""
    v = np.float32(x)
    if not np.isfinite(v):
        return "nan" if np.isnan(v) else ("inf" if v > 0 else "-inf")
    return float(str(v))


def _scalar_json(x: Any) -> Any:
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (np.float32, np.float16)):
        return f32_json(float(x))
    if isinstance(x, (float, np.floating)):
        x = float(x)
        return x if math.isfinite(x) else ("nan" if math.isnan(x) else ("inf" if x > 0 else "-inf"))
    if isinstance(x, bytes):
        return x.decode("utf-8", "replace")
    if isinstance(x, (complex, np.complexfloating)):
        return [_scalar_json(x.real), _scalar_json(x.imag)]
    return x


def value_to_json(arr: np.ndarray) -> Any:
    """A small array as JSON: a number for a 0-d array, nested lists otherwise; float32 values written shortest."""
    arr = np.asarray(arr)
    if arr.ndim == 0:
        return _scalar_json(arr[()])

    def rec(a):
        if a.ndim == 1:
            return [_scalar_json(x) for x in a]
        return [rec(x) for x in a]
    return rec(arr)


def tensor_array(t: "onnx.TensorProto") -> np.ndarray:
    """numpy_helper.to_array(t), without its general dispatch for the common case (raw little-endian data of a
    plain numeric type, which it reads with np.frombuffer as well)."""
    if (t.data_type in _PLAIN_TYPES and sys.byteorder == "little" and t.HasField("raw_data")
            and not t.HasField("segment") and t.data_location != onnx.TensorProto.EXTERNAL):
        return np.frombuffer(t.raw_data, dtype=onnx.helper.tensor_dtype_to_np_dtype(t.data_type)).reshape(t.dims)
    return numpy_helper.to_array(t)


@contextlib.contextmanager
def gc_paused():
    """The cyclic garbage collector paused (as it was, after): an import allocates some 10^5 dicts and lists and
    frees almost none, so the collections it would trigger (a full one among them, ~30 ms at 192 BERT layers) find
    nothing to collect. Reference counting still frees everything as usual."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def norm_axis(axis: int, rank: Optional[int]) -> int:
    if axis < 0 and rank is not None:
        return axis + rank
    return axis


def rlx_ops_named(op: str) -> bool:
    """True if `op` is the name of an RLX op in the registry (so an unmapped ONNX op must not take it)."""
    from ..lang.registry import builtin_registry

    spec = builtin_registry().get(op)
    return spec is not None and op not in onnx_only_ops()


def onnx_only_ops() -> set[str]:
    import json
    from importlib import resources

    global _ONNX_ONLY
    if _ONNX_ONLY is None:
        data = json.loads(resources.files("rlx_rules").joinpath("data/ops.json").read_text(encoding="utf-8"))
        _ONNX_ONLY = {name for name, spec in data["ops"].items() if is_onnx_only_spec(spec)}
    return _ONNX_ONLY


_ONNX_ONLY: Optional[set[str]] = None


def is_onnx_only_spec(spec: dict) -> bool:
    """ops.json marks ops that exist only in ONNX (no RLX variant) with `"rlx": "ONNX-only"`."""
    return spec.get("onnx") is True or str(spec.get("rlx", "")).startswith("ONNX-only")


# TensorProto types whose raw_data numpy_helper.to_array reads with np.frombuffer as it is (little-endian hosts)
_PLAIN_TYPES = frozenset({1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 14, 15})
