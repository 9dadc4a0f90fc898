"""The builder that ONNX export mappings write into: ONNX nodes, initializers, value_info and unique names."""

from __future__ import annotations

import re
from typing import Any, Mapping, Optional, Sequence

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from ..errors import ExportError

MS_DOMAIN = "com.microsoft"

ONNX_TYPES = {"f32": TensorProto.FLOAT, "f16": TensorProto.FLOAT16, "bf16": TensorProto.BFLOAT16,
              "f64": TensorProto.DOUBLE, "i8": TensorProto.INT8, "i16": TensorProto.INT16,
              "i32": TensorProto.INT32, "i64": TensorProto.INT64, "u8": TensorProto.UINT8,
              "u16": TensorProto.UINT16, "u32": TensorProto.UINT32, "u64": TensorProto.UINT64,
              "bool": TensorProto.BOOL}
NP_TYPES = {"f32": np.float32, "f16": np.float16, "f64": np.float64, "i8": np.int8, "i16": np.int16,
            "i32": np.int32, "i64": np.int64, "u8": np.uint8, "u16": np.uint16, "u32": np.uint32,
            "u64": np.uint64, "bool": np.bool_}



def node_label(node) -> str:
    return f"node {node.id}" + (f" ({node.name!r}, {node.op})" if node.name else f" ({node.op})")


class Builder:
    """What a mapping writes into: ONNX nodes, initializers and value_info, with unique tensor names."""

    def __init__(self, graph, weights: Mapping[str, np.ndarray], opset: int):
        self.graph = graph
        self.weights = weights
        self.opset = opset
        self.nodes: list = []
        self.initializers: list = []
        self.inputs: list = []
        self.value_info: list = []
        self.names: dict[int, str] = {}  # RLX node id -> its output tensor
        self.by_id = {n.id: n for n in graph.nodes}
        self.used: set[str] = set()
        self.cache: dict = {}  # shared helper tensors (mask biases, position ids), keyed by the mapping
        self.contrib: set[str] = set()

    # ---- names and tensors --------------------------------------------------------------------------------------
    def fresh(self, hint: str) -> str:
        base = re.sub(r"[^A-Za-z0-9_./:-]", "_", hint or "t")[:120] or "t"
        name, k = base, 1
        while name in self.used:
            name, k = f"{base}_{k}", k + 1
        self.used.add(name)
        return name

    def op(self, op_type: str, inputs: Sequence[str], hint: str, *, n_out: int = 1, domain: str = "",
           unused: Sequence[int] = (), **attrs: Any) -> Any:
        """Add one ONNX node; returns its output name (a list of names when n_out > 1; "" for the optional
        outputs listed in `unused`, which the op then does not compute)."""
        outs = ["" if k in unused else self.fresh(f"{hint}/{op_type}" + (f":{k}" if k else "")) for k in range(n_out)]
        if domain == MS_DOMAIN:
            self.contrib.add(op_type)
        attrs = {k: v for k, v in attrs.items() if v is not None}
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=self.fresh(f"{hint}/{op_type}#node"),
                                           domain=domain or None, **attrs))
        return outs if n_out > 1 else outs[0]

    def const(self, value: Any, hint: str, dtype: Any = None) -> str:
        """An initializer holding `value` (small ones are shared by value)."""
        arr = np.asarray(value, dtype=dtype)
        key = None
        if arr.size <= 64:
            key = ("const", arr.dtype.str, arr.shape, arr.tobytes())
            if key in self.cache:
                return self.cache[key]
        name = self.fresh(hint)
        self.initializers.append(numpy_helper.from_array(np.array(arr, order="C"), name))
        if key is not None:
            self.cache[key] = name
        return name

    def ints(self, values: Sequence[int], hint: str = "ints") -> str:
        return self.const(np.asarray(list(values), dtype=np.int64), hint)

    # ---- what the graph says about a node ------------------------------------------------------------------------
    def node(self, nid: int):
        return self.by_id[nid]

    def readers(self, nid: int) -> list:
        """The nodes that read node `nid` (once each), graph outputs not counted."""
        if "readers" not in self.cache:
            table: dict[int, list] = {}
            for n in self.graph.nodes:
                for i in dict.fromkeys(n.inputs):
                    table.setdefault(i, []).append(n)
            self.cache["readers"] = table
        return self.cache["readers"].get(nid, [])

    def shape(self, nid: int) -> Optional[list]:
        s = self.by_id[nid].shape
        return None if s is None else list(s)

    def static_shape(self, nid: int, why: str, at) -> list[int]:
        s = self.shape(nid)
        if s is None or not all(isinstance(d, int) for d in s):
            raise ExportError(f"{node_label(at)}: {why} needs the static shape of node {nid}, found {s}")
        return s

    def dtype(self, nid: int) -> Optional[str]:
        return self.by_id[nid].dtype

    def np_dtype(self, nid: int, default=np.float32):
        return NP_TYPES.get(self.dtype(nid) or "", default)

    def value_of(self, nid: int) -> Optional[np.ndarray]:
        """The value of a Constant or Param node (None for anything else)."""
        n = self.by_id[nid]
        if n.op == "Constant" and "value" in n.attrs:
            arr = np.asarray(n.attrs["value"], dtype=self.np_dtype(nid, np.float64))
            return np.broadcast_to(arr, n.shape).copy() if n.shape is not None and arr.ndim == 0 else arr
        if n.op in ("Param", "Constant") and n.name in self.weights:
            return np.asarray(self.weights[n.name])
        return None

    def is_zero(self, nid: int) -> bool:
        v = self.value_of(nid)
        return v is not None and v.size > 0 and not np.any(v)

    # ---- leaves -------------------------------------------------------------------------------------------------
    def name_of(self, nid: int) -> str:
        """The tensor of node `nid`; a Param or Constant not written yet is written now (initializers have no
        order), so a mapping may read a weight that comes later in the graph."""
        if nid not in self.names:
            n = self.by_id[nid]
            if n.op not in ("Param", "Constant"):
                raise ExportError(f"{node_label(n)}: read before it is written")
            self.names[nid] = self.leaf(n)
        return self.names[nid]

    def leaf(self, n) -> str:
        if n.op == "Input":
            name = self.fresh(n.name or f"input_{n.id}")
            self.inputs.append(tensor_info(name, n.dtype, n.shape, n))
            return name
        value = self.value_of(n.id)
        if value is None:
            raise ExportError(f"{node_label(n)}: no value for {n.name!r} in the weights")
        if n.dtype in NP_TYPES:
            value = value.astype(NP_TYPES[n.dtype], copy=False)
        elif n.dtype is not None:
            raise ExportError(f"{node_label(n)}: dtype {n.dtype!r} cannot be written to ONNX")
        if n.shape is not None and all(isinstance(d, int) for d in n.shape) and list(value.shape) != list(n.shape):
            value = np.broadcast_to(value, n.shape) if value.size == 1 else value.reshape(n.shape)
        name = self.fresh(n.name or f"const_{n.id}")
        self.initializers.append(numpy_helper.from_array(np.array(value, order="C"), name))
        return name

    def annotate(self, n, name: str) -> None:
        if n.dtype in ONNX_TYPES and n.shape is not None:
            self.value_info.append(tensor_info(name, n.dtype, n.shape, n))


def tensor_info(name: str, dtype: Optional[str], shape, node):
    if dtype not in ONNX_TYPES:
        raise ExportError(f"{node_label(node)}: dtype {dtype!r} cannot be written to ONNX")
    dims = None if shape is None else [d if isinstance(d, int) else str(d) for d in shape]
    return helper.make_tensor_value_info(name, ONNX_TYPES[dtype], dims)


