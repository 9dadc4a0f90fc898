"""ONNX import: an ONNX model becomes a graph.json in RLX's vocabulary plus a weights .npz beside it."""

from __future__ import annotations

import contextlib
import gc
import io
import math
import os
import sys
import warnings
from dataclasses import dataclass, field
from typing import Any, Optional, Union

import numpy as np

from . import facts
from .errors import OnnxImportError

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


@dataclass
class OnnxImport:
    """The result of converting a model in memory: graph.json as a dict, the weights, and warnings."""

    graph: dict
    weights: dict[str, np.ndarray]
    warnings: list[str] = field(default_factory=list)


def _require_onnx() -> None:
    if onnx is None:
        raise OnnxImportError("importing ONNX needs the onnx package: pip install 'rlx-rules[onnx]'")


def _f32(x: float) -> Union[float, str]:
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
        return _f32(float(x))
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


def _tensor_array(t: "onnx.TensorProto") -> np.ndarray:
    """numpy_helper.to_array(t), without its general dispatch for the common case (raw little-endian data of a
    plain numeric type, which it reads with np.frombuffer as well)."""
    if (t.data_type in _PLAIN_TYPES and sys.byteorder == "little" and t.HasField("raw_data")
            and not t.HasField("segment") and t.data_location != onnx.TensorProto.EXTERNAL):
        return np.frombuffer(t.raw_data, dtype=onnx.helper.tensor_dtype_to_np_dtype(t.data_type)).reshape(t.dims)
    return numpy_helper.to_array(t)


@contextlib.contextmanager
def _gc_paused():
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


def _norm_axis(axis: int, rank: Optional[int]) -> int:
    if axis < 0 and rank is not None:
        return axis + rank
    return axis


class _Converter:
    def __init__(self, model: "onnx.ModelProto", inline_max: int):
        self.model = model
        self.graph = model.graph
        self.inline_max = inline_max
        self.nodes: list[dict] = []
        self.weights: dict[str, np.ndarray] = {}
        self.warnings: list[str] = []
        self.tensors: dict[str, int] = {}      # ONNX tensor name -> graph.json node id
        self.consts: dict[str, np.ndarray] = {}  # known constant tensors (initializers, Constant outputs)
        self.const_origin: dict[str, Any] = {}   # Constant-node output -> the ONNX node
        self.vi: dict[str, tuple] = {}           # tensor -> (shape list or None, dtype or None)
        self.unknown_dims = 0
        self.opset = 0
        self.used: set[str] = set()
        self.in_order: list = []                 # the nodes in topological order
        self.from_registry = None

    # ---- set-up ---------------------------------------------------------------------------------------------
    def check_opsets(self) -> None:
        """Refuse unsupported opsets, domains and subgraphs; in the same pass over the nodes, collect the tensors
        they use (`used`) and put them in topological order (`in_order`)."""
        domains = {}
        for imp in self.model.opset_import:
            domains[imp.domain] = imp.version
        self.opset = domains.get("", domains.get("ai.onnx", 0))
        if not self.opset:
            raise OnnxImportError("the model imports no ai.onnx opset")
        latest = onnx.defs.onnx_opset_version()
        if self.opset > latest or self.opset < MIN_OPSET:
            raise OnnxImportError(f"unsupported ai.onnx opset {self.opset} (this importer, with onnx "
                                  f"{onnx.__version__}, reads opsets {MIN_OPSET} to {latest})")
        # the same pass over the nodes collects the tensors they use and finds whether ONNX's order is topological
        subgraph = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
        used = self.used
        known = {i.name for i in self.graph.input} | {t.name for t in self.graph.initializer} | {""}
        nodes = list(self.graph.node)
        ordered = True
        for node in nodes:
            if node.domain not in SUPPORTED_DOMAINS:
                raise OnnxImportError(f"node {node.name or node.op_type!r} ({node.op_type}) is in domain "
                                      f"{node.domain!r}; only ai.onnx and com.microsoft are supported")
            for a in node.attribute:
                if a.type in subgraph:
                    raise OnnxImportError(
                        f"node {node.name or node.op_type!r} ({node.op_type}) has a subgraph (attribute "
                        f"{a.name!r}); control flow (If, Loop, Scan) is not supported")
            used.update(node.input)
            if ordered:
                if known.issuperset(node.input):
                    known.update(node.output)
                else:
                    ordered = False
        used.discard("")
        used.update(o.name for o in self.graph.output)
        self.in_order = nodes if ordered else _toposorted(self.graph)

    def collect_value_info(self) -> None:
        vi = self.vi
        seen: dict[bytes, tuple] = {}  # a serialized TypeProto -> (dims, dtype), for types without unknown dims
        for t in (*self.graph.input, *self.graph.output, *self.graph.value_info):
            tp = t.type
            key = tp.SerializeToString()
            known = seen.get(key)
            if known is not None:
                vi[t.name] = (None if known[0] is None else list(known[0]), known[1])
                continue
            if not tp.HasField("tensor_type"):
                vi[t.name] = seen[key] = (None, None)
                continue
            tt = tp.tensor_type
            dtype = DTYPES.get(tt.elem_type)
            if not tt.HasField("shape"):
                vi[t.name] = seen[key] = (None, dtype)
                continue
            dims, invented = [], False
            for d in tt.shape.dim:
                which = d.WhichOneof("value")
                if which == "dim_value":
                    dims.append(d.dim_value)
                elif which == "dim_param" and d.dim_param:
                    dims.append(d.dim_param)
                else:  # a fresh name for each unknown dim
                    self.unknown_dims += 1
                    dims.append(f"unk_{self.unknown_dims}")
                    invented = True
            vi[t.name] = (dims, dtype)
            if not invented:
                seen[key] = (list(dims), dtype)
        for init in self.graph.initializer:
            vi[init.name] = (list(init.dims), DTYPES.get(init.data_type))

    def rank(self, name: str) -> Optional[int]:
        shape = self.vi.get(name, (None, None))[0]
        return None if shape is None else len(shape)

    def shape(self, name: str) -> Optional[list]:
        return self.vi.get(name, (None, None))[0]

    # ---- node creation --------------------------------------------------------------------------------------
    def emit(self, op: str, inputs: list[int], attrs: Optional[dict] = None, *, out: Optional[str] = None,
             name: Optional[str] = None, onnx_node=None, shape=None, dtype=None, extra: Optional[dict] = None) -> int:
        nid = len(self.nodes)
        node: dict[str, Any] = {"id": nid, "op": op}
        if name:
            node["name"] = name
        if inputs:
            node["inputs"] = list(inputs)
        if attrs:
            node["attrs"] = attrs
        if out is not None and shape is None and dtype is None:
            shape, dtype = self.vi.get(out, (None, None))
        if shape is not None:
            node["shape"] = list(shape)
        if dtype is not None:
            node["dtype"] = dtype
        if onnx_node is not None:
            node["onnx_op"] = onnx_node.op_type
            if onnx_node.domain not in ("", "ai.onnx"):
                node["onnx_domain"] = onnx_node.domain
        if out is not None:
            node["onnx_output"] = out
        if extra:
            node.update(extra)
        self.nodes.append(node)
        if out is not None:
            self.tensors[out] = nid
        return nid

    def value(self, name: str) -> int:
        """The node id of tensor `name`, creating its Constant or Param node on first use."""
        nid = self.tensors.get(name)
        if nid is not None:
            return nid
        if name in self.consts:
            arr = self.consts[name]
            origin = self.const_origin.get(name)
            dtype = DTYPES.get(onnx.helper.np_dtype_to_tensor_dtype(arr.dtype)) if arr.dtype != object else "string"
            if arr.size <= self.inline_max and arr.dtype != object:
                nid = self.emit("Constant", [], {"value": value_to_json(arr)}, name=name, onnx_node=origin,
                                shape=list(arr.shape), dtype=dtype)
            else:
                if arr.dtype == object:
                    raise OnnxImportError(f"string tensor {name!r} with {arr.size} elements cannot be stored")
                self.weights[name] = arr
                nid = self.emit("Param", [], name=name, onnx_node=origin, shape=list(arr.shape), dtype=dtype)
            self.tensors[name] = nid
            return nid
        raise OnnxImportError(f"tensor {name!r} is used before it is defined (or is not defined at all)")

    def const(self, name: str) -> Optional[np.ndarray]:
        return self.consts.get(name) if name else None

    # ---- the conversion -------------------------------------------------------------------------------------
    def run(self) -> dict:
        with _gc_paused():
            return self._run()

    def _run(self) -> dict:
        self.check_opsets()
        self.collect_value_info()
        for init in self.graph.initializer:
            self.consts[init.name] = _tensor_array(init)
        for inp in self.graph.input:
            if inp.name in self.consts:  # an input with a default value (IR < 4): treated as a weight
                continue
            shape, dtype = self.vi[inp.name]
            self.emit("Input", [], name=inp.name, shape=shape, dtype=dtype)
            self.tensors[inp.name] = len(self.nodes) - 1
        for node in self.in_order:
            self.convert(node)
        outputs = [self.value(o.name) for o in self.graph.output]
        nodes, outputs = _prune(self.nodes, outputs)
        _refine_shapes(nodes)
        opsets = {imp.domain or "ai.onnx": imp.version for imp in self.model.opset_import}
        return {"format": "rlx-graph", "version": 1, "name": self.graph.name or None, "nodes": nodes,
                "outputs": outputs,
                "onnx": {"ir_version": self.model.ir_version, "opsets": opsets,
                         "producer": f"{self.model.producer_name} {self.model.producer_version}".strip()}}

    def convert(self, node) -> None:
        op, domain = node.op_type, node.domain
        standard = domain in ("", "ai.onnx")
        if standard and op in _FOLDERS and self.fold(node):
            return
        if len(node.output) > 1 and op != "Split":
            for k, o in enumerate(node.output[1:], 1):
                if o and o in self.used:
                    raise OnnxImportError(
                        f"node {node.name or op!r} ({op}): output {k} ({o!r}) is used, but graph.json nodes have "
                        f"one output; only Split is converted with several outputs")
        if standard:
            if op in BINARY:
                self.simple(node, BINARY[op])
                return
            if op in COMPARE:
                self.simple(node, COMPARE[op])
                return
            if op in UNARY:
                self.simple(node, UNARY[op])
                return
            if op in REDUCE:
                self.reduce(node)
                return
            handler = getattr(self, f"op_{op}", None)
        elif domain == "com.microsoft":
            handler = getattr(self, f"ms_{op}", None)
        else:
            handler = None
        if handler is not None:
            handler(node)
        else:
            self.generic(node)

    def fold(self, node) -> bool:
        """Evaluate a node whose inputs are all known constants (and Shape of a static shape) with numpy, for a
        small set of shape-computing ops, so that shapes computed at run time become attributes. Exact: each
        folder follows ONNX's definition; anything else, or a result over FOLD_MAX elements, is not folded."""
        op = node.op_type
        if op not in _FOLDERS or len(node.output) != 1:
            return False
        at = self.attrs_of(node) if len(node.attribute) else {}
        if op == "Shape":
            shape = self.shape(node.input[0])
            if shape is None or not all(isinstance(d, int) for d in shape):
                return False
            args = [np.array(shape, dtype=np.int64)]
        else:
            args = [self.const(i) if i else None for i in node.input]
            if not node.input or any(a is None for a, i in zip(args, node.input) if i):
                return False
            if sum(a.size for a in args if a is not None) > FOLD_MAX * 64:
                return False
            if (op == "Slice" and self.opset < 10) or (op in ("Unsqueeze", "Squeeze") and len(args) > 1
                                                         and args[1] is None):
                return False
        try:
            if op == "ConstantOfShape":
                value = next((numpy_helper.to_array(a.t) for a in node.attribute if a.name == "value"),
                             np.zeros(1, dtype=np.float32))
                result = np.full(_fold_int_list(args[0]), value.reshape(-1)[0], dtype=value.dtype)
            else:
                while args and args[-1] is None:
                    args.pop()
                if any(a is None for a in args):
                    return False
                result = _FOLDERS[op](self, at, *args)
        except (_NoFold, ValueError, IndexError, TypeError):
            return False
        if result is None or result.size > FOLD_MAX:
            return False
        self.consts[node.output[0]] = np.asarray(result)
        self.const_origin[node.output[0]] = node
        return True

    def attrs_of(self, node) -> dict:
        out = {}
        for a in node.attribute:
            v = onnx.helper.get_attribute_value(a)
            if a.type == onnx.AttributeProto.TENSOR:
                arr = numpy_helper.to_array(v)
                if arr.size > max(self.inline_max, 1):
                    raise OnnxImportError(f"node {node.name!r} ({node.op_type}): tensor attribute {a.name!r} "
                                          f"has {arr.size} elements; only small ones can be inlined")
                v = value_to_json(arr)
            elif a.type == onnx.AttributeProto.FLOAT:
                v = _f32(v)
            elif a.type == onnx.AttributeProto.FLOATS:
                v = [_f32(x) for x in v]
            elif a.type == onnx.AttributeProto.STRING:
                v = v.decode("utf-8", "replace")
            elif a.type == onnx.AttributeProto.STRINGS:
                v = [s.decode("utf-8", "replace") for s in v]
            elif a.type in (onnx.AttributeProto.INT, onnx.AttributeProto.INTS):
                v = int(v) if a.type == onnx.AttributeProto.INT else [int(x) for x in v]
            else:
                raise OnnxImportError(f"node {node.name!r} ({node.op_type}): attribute {a.name!r} has an "
                                      f"unsupported type ({onnx.AttributeProto.AttributeType.Name(a.type)})")
            out[a.name] = v
        return out

    def schema_defaults(self, node) -> dict:
        try:
            schema = onnx.defs.get_schema(node.op_type, self.opset, node.domain or "")
        except Exception:  # noqa: BLE001 - no schema (com.microsoft, unknown op): no defaults
            return {}
        out = {}
        for name, a in schema.attributes.items():
            if a.default_value is not None and a.default_value.type:
                d = onnx.helper.get_attribute_value(a.default_value)
                if isinstance(d, bytes):
                    d = d.decode("utf-8", "replace")
                elif isinstance(d, float):
                    d = _f32(d)
                elif isinstance(d, list):
                    d = [x.decode() if isinstance(x, bytes) else x for x in d]
                elif not isinstance(d, (int, str)):
                    continue
                out[name] = d
        return out

    def label(self, node, k: int = 0) -> str:
        base = node.name or (node.output[0] if node.output else node.op_type)
        return base if k == 0 else f"{base}#{k}"

    def simple(self, node, op: str, attrs: Optional[dict] = None, inputs: Optional[list[str]] = None) -> int:
        ins = [self.value(i) for i in (node.input if inputs is None else inputs) if i]
        return self.emit(op, ins, attrs, out=node.output[0], name=self.label(node), onnx_node=node)

    def alias(self, node, src: str) -> None:
        out = node.output[0]
        if src in self.consts and src not in self.tensors:
            self.consts[out] = self.consts[src]
            self.const_origin[out] = self.const_origin.get(src)
        else:
            self.tensors[out] = self.value(src)

    def generic(self, node) -> None:
        """An op without an RLX equivalent: its ONNX name (prefixed Onnx where that name is an RLX op's), its
        attributes with ONNX's defaults filled in, and attribute-like constant inputs folded into attrs."""
        op = node.op_type
        if _rlx_ops_named(op):
            op = "Onnx" + op
        attrs = self.schema_defaults(node)
        attrs.update(self.attrs_of(node))
        names = list(node.input)
        fold = FOLDED_INPUTS.get(op, [])
        if fold and all(idx >= len(names) or not names[idx] or self.const(names[idx]) is not None
                        for idx, _, _ in fold):
            for idx, attr, kind in fold:
                if idx < len(names) and names[idx]:
                    arr = self.const(names[idx])
                    attrs[attr] = ([int(x) for x in arr.reshape(-1)] if kind == "ints"
                                   else value_to_json(arr.reshape(-1)[0] if arr.size == 1 else arr))
            folded = {idx for idx, _, _ in fold}
            names = [n for k, n in enumerate(names) if k not in folded]
        while names and not names[-1]:
            names.pop()
        if any(not n for n in names):
            raise OnnxImportError(f"node {node.name!r} ({node.op_type}): an optional input is missing before a "
                                  f"present one; graph.json inputs are positional and cannot express that")
        self.emit(op, [self.value(n) for n in names], attrs, out=node.output[0] if node.output else None,
                  name=self.label(node), onnx_node=node)

    # ---- ops with RLX equivalents ---------------------------------------------------------------------------
    def op_Constant(self, node) -> None:
        a = node.attribute[0]
        if a.name == "value":
            arr = _tensor_array(a.t)
        elif a.name in ("value_float", "value_int"):
            arr = np.array(a.f if a.name == "value_float" else a.i,
                           dtype=np.float32 if a.name == "value_float" else np.int64)
        elif a.name in ("value_floats", "value_ints"):
            arr = np.array(list(a.floats) if a.name == "value_floats" else list(a.ints),
                           dtype=np.float32 if a.name == "value_floats" else np.int64)
        else:
            raise OnnxImportError(f"Constant {node.name!r}: attribute {a.name!r} is not supported")
        self.consts[node.output[0]] = arr
        self.const_origin[node.output[0]] = node

    def op_Identity(self, node) -> None:
        self.alias(node, node.input[0])

    def op_Dropout(self, node) -> None:
        if len(node.input) > 2 and node.input[2]:
            mode = self.const(node.input[2])
            if mode is None or bool(mode.reshape(-1)[0]):
                raise OnnxImportError(f"Dropout {node.name!r} in training mode is not supported")
        self.alias(node, node.input[0])

    def op_MatMul(self, node) -> None:
        a, b = node.input[0], node.input[1]
        ra, rb = self.rank(a), self.rank(b)
        if ra != 1 and rb != 1:
            self.simple(node, "MatMul")
            return
        # ONNX (numpy) promotes a 1-D operand to a matrix and drops that axis afterwards.
        ia, ib = self.value(a), self.value(b)
        if ra == 1:
            ia = self.emit("Unsqueeze", [ia], {"axes": [0]}, name=self.label(node, 1), onnx_node=node,
                           shape=[1] + self.shape(a), dtype=self.vi[a][1])
        if rb == 1:
            ib = self.emit("Unsqueeze", [ib], {"axes": [1]}, name=self.label(node, 2), onnx_node=node,
                           shape=self.shape(b) + [1], dtype=self.vi[b][1])
        mm = self.emit("MatMul", [ia, ib], name=self.label(node, 3), onnx_node=node)
        axes = ([-2] if ra == 1 else []) + ([-1] if rb == 1 else [])
        self.emit("Squeeze", [mm], {"axes": axes}, out=node.output[0], name=self.label(node), onnx_node=node)

    def chain(self, node, op: str) -> None:
        names = [i for i in node.input if i]
        if len(names) == 1:
            self.alias(node, names[0])
            return
        acc = self.value(names[0])
        for k, n in enumerate(names[1:], 1):
            last = k == len(names) - 1
            acc = self.emit(op, [acc, self.value(n)], out=node.output[0] if last else None,
                            name=self.label(node, 0 if last else k), onnx_node=node)

    def op_Max(self, node) -> None:
        self.chain(node, "Max")

    def op_Min(self, node) -> None:
        self.chain(node, "Min")

    def op_Sum(self, node) -> None:
        self.chain(node, "Add")

    def op_Where(self, node) -> None:
        self.simple(node, "Where")

    def op_Cast(self, node) -> None:
        to = DTYPES.get(self.attrs_of(node)["to"])
        if to is None:
            raise OnnxImportError(f"Cast {node.name!r}: unsupported target type")
        self.simple(node, "Cast", {"to": to})

    def op_Gelu(self, node) -> None:
        approx = self.attrs_of(node).get("approximate", "none")
        self.simple(node, "GeluApprox" if approx == "tanh" else "Gelu")

    def ms_Gelu(self, node) -> None:
        self.simple(node, "Gelu")

    def ms_FastGelu(self, node) -> None:
        if len([i for i in node.input if i]) == 1:
            self.simple(node, "GeluApprox")
        else:
            self.generic(node)

    def op_Softmax(self, node) -> None:
        axis = self.attrs_of(node).get("axis", -1 if self.opset >= 13 else 1)
        rank = self.rank(node.input[0])
        last = axis == -1 or (rank is not None and _norm_axis(axis, rank) == rank - 1)
        if self.opset < 13 and not last:
            raise OnnxImportError(f"Softmax {node.name!r}: opset {self.opset} softmax over the flattened axes "
                                  f"from {axis} on (not the last axis) has no RLX equivalent")
        self.simple(node, "Softmax", {"axis": -1 if last else _norm_axis(axis, rank)})

    def op_LayerNormalization(self, node) -> None:
        at = self.attrs_of(node)
        axis = at.get("axis", -1)
        rank = self.rank(node.input[0])
        if not (axis == -1 or (rank is not None and _norm_axis(axis, rank) == rank - 1)):
            self.generic(node)  # normalizes over several trailing axes: kept as ONNX's op
            return
        eps = at.get("epsilon", _f32(1e-5))
        ins = [self.value(node.input[0]), self.value(node.input[1])]
        if len(node.input) > 2 and node.input[2]:
            ins.append(self.value(node.input[2]))
        else:
            ins.append(self.emit("Constant", [], {"value": 0.0}, name=self.label(node) + "/zero_bias",
                                 onnx_node=node, shape=[], dtype=self.vi.get(node.input[0], (None, None))[1]))
        self.emit("LayerNorm", ins, {"axis": -1, "eps": eps}, out=node.output[0], name=self.label(node),
                  onnx_node=node)

    def op_Transpose(self, node) -> None:
        perm = self.attrs_of(node).get("perm")
        if perm is None:
            rank = self.rank(node.input[0])
            if rank is None:
                raise OnnxImportError(f"Transpose {node.name!r}: no perm and the input rank is unknown")
            perm = list(range(rank))[::-1]
        self.simple(node, "Transpose", {"perm": perm})

    def op_Concat(self, node) -> None:
        axis = self.attrs_of(node)["axis"]
        self.simple(node, "Concat", {"axis": _norm_axis(axis, self.rank(node.output[0]) or self.rank(node.input[0]))})

    def op_Gather(self, node) -> None:
        axis = self.attrs_of(node).get("axis", 0)
        self.simple(node, "Gather", {"axis": _norm_axis(axis, self.rank(node.input[0]))})

    def static_out(self, name: str) -> Optional[list[int]]:
        shape = self.shape(name)
        if shape is not None and all(isinstance(d, int) for d in shape):
            return list(shape)
        return None

    def op_Reshape(self, node) -> None:
        at = self.attrs_of(node)
        shape_c = self.const(node.input[1]) if len(node.input) > 1 else None
        if self.opset < 5:
            shape_c = np.array(at.get("shape", []), dtype=np.int64)
        if shape_c is not None:
            new = [int(x) for x in shape_c.reshape(-1)]
            if 0 in new and not at.get("allowzero", 0):
                src = self.shape(node.input[0]) or []
                for k, d in enumerate(new):
                    if d == 0:
                        if k < len(src) and isinstance(src[k], int):
                            new[k] = src[k]
                        elif -1 not in new:
                            new[k] = -1
                        else:
                            new = None
                            break
            if new is not None:
                self.simple(node, "Reshape", {"new_shape": new}, inputs=[node.input[0]])
                return
        out = self.static_out(node.output[0])
        if out is not None:
            self.simple(node, "Reshape", {"new_shape": out}, inputs=[node.input[0]])
            return
        self.emit("OnnxReshape", [self.value(i) for i in node.input[:2]], {"allowzero": at.get("allowzero", 0)},
                  out=node.output[0], name=self.label(node), onnx_node=node)

    def op_Expand(self, node) -> None:
        shape_c = self.const(node.input[1])
        if shape_c is not None:
            target = [int(x) for x in shape_c.reshape(-1)]
        else:
            target = self.static_out(node.output[0])
        if target is None:
            self.emit("OnnxExpand", [self.value(i) for i in node.input[:2]], out=node.output[0],
                      name=self.label(node), onnx_node=node)
        else:
            self.simple(node, "Expand", {"target_shape": target}, inputs=[node.input[0]])

    def op_Slice(self, node) -> None:
        data = node.input[0]
        if self.opset < 10:
            at = self.attrs_of(node)
            starts, ends = at["starts"], at["ends"]
            axes = at.get("axes", list(range(len(starts))))
            steps = [1] * len(starts)
        else:
            parts = [self.const(node.input[k]) if len(node.input) > k and node.input[k] else None
                     for k in range(1, 5)]
            present = [len(node.input) > k and bool(node.input[k]) for k in range(1, 5)]
            if any(p and v is None for p, v in zip(present, parts)):
                self.generic_slice(node)
                return
            starts = [int(x) for x in parts[0].reshape(-1)]
            ends = [int(x) for x in parts[1].reshape(-1)]
            axes = [int(x) for x in parts[2].reshape(-1)] if parts[2] is not None else list(range(len(starts)))
            steps = [int(x) for x in parts[3].reshape(-1)] if parts[3] is not None else [1] * len(starts)
        rank = self.rank(data)
        shape = self.shape(data)
        out_shape = self.shape(node.output[0])
        if any(s != 1 for s in steps) or rank is None:
            self.generic_slice(node)
            return
        narrows = []
        for ax, s, e in zip(axes, starts, ends):
            ax = _norm_axis(ax, rank)
            dim = shape[ax]
            if isinstance(dim, int):
                s = max(0, min(dim, s + dim if s < 0 else s))
                e = max(0, min(dim, e + dim if e < 0 else e))
                length = max(0, e - s)
                if s == 0 and length == dim:
                    continue
            elif s >= 0 and out_shape is not None and isinstance(out_shape[ax], int):
                length = out_shape[ax]
            else:
                self.generic_slice(node)
                return
            narrows.append((ax, s, length))
        if not narrows:
            self.alias(node, data)
            return
        acc = self.value(data)
        cur = list(shape)
        for k, (ax, s, length) in enumerate(narrows):
            cur[ax] = length
            last = k == len(narrows) - 1
            acc = self.emit("Narrow", [acc], {"axis": ax, "start": s, "len": length},
                            out=node.output[0] if last else None, name=self.label(node, 0 if last else k + 1),
                            onnx_node=node, shape=None if last else list(cur),
                            dtype=None if last else self.vi.get(data, (None, None))[1])

    def generic_slice(self, node) -> None:
        self.generic(node)  # named OnnxSlice: "Slice" is RLX's strided single-axis slice

    def op_Split(self, node) -> None:
        at = self.attrs_of(node)
        data = node.input[0]
        rank = self.rank(data)
        axis = _norm_axis(at.get("axis", 0), rank)
        if axis < 0:
            raise OnnxImportError(f"Split {node.name!r}: negative axis with unknown rank")
        sizes = at.get("split")
        if len(node.input) > 1 and node.input[1]:
            c = self.const(node.input[1])
            if c is None:
                raise OnnxImportError(f"Split {node.name!r}: the split sizes are not constant")
            sizes = [int(x) for x in c.reshape(-1)]
        if sizes is None:
            dim = (self.shape(data) or [None] * (axis + 1))[axis]
            if not isinstance(dim, int):
                raise OnnxImportError(f"Split {node.name!r}: even split of a dimension that is not static")
            n = at.get("num_outputs", len(node.output))
            chunk = -(-dim // n)
            sizes = [min(chunk, dim - k * chunk) for k in range(n)]
        start = 0
        for k, (out, size) in enumerate(zip(node.output, sizes)):
            if out:
                self.emit("Narrow", [self.value(data)], {"axis": axis, "start": start, "len": size}, out=out,
                          name=self.label(node, k), onnx_node=node)
            start += size

    def reduce(self, node) -> None:
        at = self.attrs_of(node)
        data = node.input[0]
        axes = at.get("axes")
        if len(node.input) > 1 and node.input[1]:
            c = self.const(node.input[1])
            if c is None:
                self.generic(node)
                return
            axes = [int(x) for x in c.reshape(-1)]
        rank = self.rank(data)
        if not axes:
            if at.get("noop_with_empty_axes", 0):
                self.alias(node, data)
                return
            if rank is None:
                self.generic(node)
                return
            axes = list(range(rank))
        if rank is None and any(a < 0 for a in axes):
            self.generic(node)
            return
        axes = sorted(_norm_axis(a, rank) for a in axes)
        self.simple(node, "Reduce", {"op": REDUCE[node.op_type], "axes": axes,
                                     "keep_dim": bool(at.get("keepdims", 1))}, inputs=[data])

    def op_CumSum(self, node) -> None:
        at = self.attrs_of(node)
        axis = self.const(node.input[1])
        if axis is None or at.get("reverse", 0):
            self.generic(node)
            return
        rank = self.rank(node.input[0])
        ax = int(axis.reshape(-1)[0])
        ax = -1 if (ax == -1 or (rank is not None and _norm_axis(ax, rank) == rank - 1)) else _norm_axis(ax, rank)
        self.simple(node, "Cumsum", {"axis": ax, "exclusive": bool(at.get("exclusive", 0))}, inputs=[node.input[0]])

    def arg(self, node, op: str) -> None:
        at = self.attrs_of(node)
        if at.get("select_last_index", 0):
            self.generic(node)
            return
        self.simple(node, op, {"axis": _norm_axis(at.get("axis", 0), self.rank(node.input[0])),
                               "keep_dim": bool(at.get("keepdims", 1))})

    def op_ArgMax(self, node) -> None:
        self.arg(node, "ArgMax")

    def op_ArgMin(self, node) -> None:
        self.arg(node, "ArgMin")


FOLD_MAX = 1024


class _NoFold(Exception):
    pass


def _fold_int_list(a) -> list[int]:
    return [int(x) for x in np.asarray(a).reshape(-1)]


def _fold_shape(c, at, x):
    start, end = at.get("start", 0), at.get("end")
    return x[start:end] if end is not None else x[start:]


def _fold_unsqueeze(c, at, x, axes=None):
    axes = _fold_int_list(axes) if axes is not None else at.get("axes")
    if axes is None:
        raise _NoFold
    rank = x.ndim + len(axes)
    for a in sorted(_norm_axis(a, rank) for a in axes):
        x = np.expand_dims(x, a)
    return x


def _fold_squeeze(c, at, x, axes=None):
    axes = _fold_int_list(axes) if axes is not None else at.get("axes")
    if axes is None:
        return np.squeeze(x)
    return np.squeeze(x, axis=tuple(_norm_axis(a, x.ndim) for a in axes))


def _fold_reshape(c, at, x, shape):
    new = _fold_int_list(shape)
    if not at.get("allowzero", 0):
        new = [x.shape[k] if d == 0 else d for k, d in enumerate(new)]
    return x.reshape(new)


def _fold_cast(c, at, x):
    to = at["to"]
    if to in (8, 16) or to not in DTYPES:  # strings, bfloat16: not folded
        raise _NoFold
    return x.astype(onnx.helper.tensor_dtype_to_np_dtype(to))


def _fold_div(c, at, a, b):
    if not (np.issubdtype(a.dtype, np.floating) and np.issubdtype(b.dtype, np.floating)):
        raise _NoFold  # integer division truncates in ONNX, floors in numpy
    return a / b


def _fold_range(c, at, start, limit, delta):
    return np.arange(start.reshape(()), limit.reshape(()), delta.reshape(()), dtype=start.dtype)


def _fold_expand(c, at, x, shape):
    return np.broadcast_to(x, np.broadcast_shapes(x.shape, tuple(_fold_int_list(shape)))).copy()


def _fold_slice(c, at, x, starts, ends, axes=None, steps=None):
    starts, ends = _fold_int_list(starts), _fold_int_list(ends)
    axes = _fold_int_list(axes) if axes is not None else list(range(len(starts)))
    steps = _fold_int_list(steps) if steps is not None else [1] * len(starts)
    index = [slice(None)] * x.ndim
    for a, s, e, st in zip(axes, starts, ends, steps):
        index[_norm_axis(a, x.ndim)] = slice(s, e, st)
    return x[tuple(index)]


def _fold_flatten(c, at, x):
    axis = _norm_axis(at.get("axis", 1), x.ndim)
    return x.reshape(int(np.prod(x.shape[:axis], dtype=np.int64)), -1)


_FOLDERS = {
    "Shape": _fold_shape,
    "Gather": lambda c, at, x, i: np.take(x, i, axis=at.get("axis", 0)),
    "Concat": lambda c, at, *xs: np.concatenate(xs, axis=at["axis"]),
    "Unsqueeze": _fold_unsqueeze,
    "Squeeze": _fold_squeeze,
    "Reshape": _fold_reshape,
    "Flatten": _fold_flatten,
    "Cast": _fold_cast,
    "Add": lambda c, at, a, b: a + b,
    "Sub": lambda c, at, a, b: a - b,
    "Mul": lambda c, at, a, b: a * b,
    "Div": _fold_div,
    "Neg": lambda c, at, a: -a,
    "Sqrt": lambda c, at, a: np.sqrt(a) if np.issubdtype(a.dtype, np.floating) else None,  # IEEE: correctly rounded
    "Equal": lambda c, at, a, b: np.equal(a, b),
    "Less": lambda c, at, a, b: np.less(a, b),
    "LessOrEqual": lambda c, at, a, b: np.less_equal(a, b),
    "Greater": lambda c, at, a, b: np.greater(a, b),
    "GreaterOrEqual": lambda c, at, a, b: np.greater_equal(a, b),
    "And": lambda c, at, a, b: np.logical_and(a, b),
    "Or": lambda c, at, a, b: np.logical_or(a, b),
    "Not": lambda c, at, a: np.logical_not(a),
    "Where": lambda c, at, cond, a, b: np.where(cond, a, b),
    "ConstantOfShape": lambda c, at, shape: None,  # folded in _Converter.fold: needs the value's dtype
    "Range": _fold_range,
    "Expand": _fold_expand,
    "Slice": _fold_slice,
}


def _rlx_ops_named(op: str) -> bool:
    """True if `op` is the name of an RLX op in the registry (so an unmapped ONNX op must not take it)."""
    from .lang.registry import builtin_registry

    spec = builtin_registry().get(op)
    return spec is not None and op not in _onnx_only_ops()


def _onnx_only_ops() -> set[str]:
    import json
    from importlib import resources

    global _ONNX_ONLY
    if _ONNX_ONLY is None:
        data = json.loads(resources.files(__package__).joinpath("data/ops.json").read_text(encoding="utf-8"))
        _ONNX_ONLY = {name for name, spec in data["ops"].items() if is_onnx_only_spec(spec)}
    return _ONNX_ONLY


_ONNX_ONLY: Optional[set[str]] = None


def is_onnx_only_spec(spec: dict) -> bool:
    """ops.json marks ops that exist only in ONNX (no RLX variant) with `"rlx": "ONNX-only"`."""
    return spec.get("onnx") is True or str(spec.get("rlx", "")).startswith("ONNX-only")


def _prune(nodes: list[dict], outputs: list[int]) -> tuple[list[dict], list[int]]:
    """Drop nodes that no output depends on (shape computations that were folded away, dead ONNX nodes), keep
    every Input, and number the rest 0, 1, ... in order."""
    live = set(outputs) | {n["id"] for n in nodes if n["op"] == "Input"}
    for n in reversed(nodes):  # nodes are created in topological order
        if n["id"] in live:
            live.update(n.get("inputs", ()))
    renum = {}
    kept = []
    for n in nodes:
        if n["id"] in live:
            renum[n["id"]] = len(kept)
            n["id"] = len(kept)
            if "inputs" in n:
                n["inputs"] = [renum[i] for i in n["inputs"]]
            kept.append(n)
    return kept, [renum[o] for o in outputs]


_SAME_SHAPE = {"Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Neg", "Abs", "Sin", "Cos", "Tan", "Atan", "Round",
               "Erf", "Reciprocal", "Floor", "Ceil", "Sign", "IsNaN", "IsInf", "Not", "Cast", "Softmax", "Gelu",
               "GeluApprox", "Silu", "LayerNorm", "Rsqrt"}
_BROADCAST = {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Eq", "Ne", "Lt", "Le", "Gt", "Ge", "And", "Or", "Xor",
              "Where"}


def _static_shape(node: Optional[dict]) -> Optional[list[int]]:
    shape = None if node is None else node.get("shape")
    if shape is None or not all(isinstance(d, int) for d in shape):
        return None
    return list(shape)


def _computed_shape(n: dict, ins: list) -> Optional[list[int]]:
    """The output shape of `n` from its static input shapes, for the ops whose shape rule is simple; else None."""
    op, at = n["op"], n.get("attrs", {})
    if not ins or any(s is None for s in ins):
        return None
    try:
        if op in _SAME_SHAPE:
            return ins[0]
        if op in _BROADCAST:
            return list(np.broadcast_shapes(*[tuple(s) for s in ins]))
        if op == "Expand":
            return list(np.broadcast_shapes(tuple(ins[0]), tuple(at["target_shape"])))
        if op == "Transpose":
            return [ins[0][p] for p in at["perm"]]
        if op == "Narrow":
            out = list(ins[0])
            out[at["axis"]] = at["len"]
            return out
        if op == "Concat" and len({len(s) for s in ins}) == 1:
            out = list(ins[0])
            out[at["axis"]] = sum(s[at["axis"]] for s in ins)
            return out
        if op == "Reshape":
            new = list(at["new_shape"])
            total = int(np.prod(ins[0], dtype=np.int64))
            if new.count(-1) == 1:
                rest = int(np.prod([d for d in new if d != -1], dtype=np.int64))
                if rest == 0 or total % rest:
                    return None
                new[new.index(-1)] = total // rest
            return new if int(np.prod(new, dtype=np.int64)) == total and all(d >= 0 for d in new) else None
        if op == "Gemm" and len(ins[0]) == 2 and len(ins[1]) == 2:
            m = ins[0][1] if at.get("transA", 0) else ins[0][0]
            return [m, ins[1][0] if at.get("transB", 0) else ins[1][1]]
        if op == "MatMul" and len(ins[0]) >= 2 and len(ins[1]) >= 2 and ins[0][-1] == ins[1][-2]:
            batch = np.broadcast_shapes(tuple(ins[0][:-2]), tuple(ins[1][:-2]))
            return list(batch) + [ins[0][-2], ins[1][-1]]
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    return None


def _refine_shapes(nodes: list[dict]) -> None:
    """Replace the dims that ONNX shape inference could not name ("unk__N", invented) with the static size that
    follows from static input shapes (after constant folding, a legacy export's Expand and Reshape targets are
    known). Only invented dims change, and only when the computed shape has the declared rank and agrees with
    every declared static dim; named symbols ("batch") are kept."""
    by_id = {n["id"]: n for n in nodes}
    for n in nodes:  # ids are in topological order
        shape = n.get("shape")
        if not shape or not any(isinstance(d, str) and d.startswith("unk") for d in shape):
            continue
        got = _computed_shape(n, [_static_shape(by_id.get(i)) for i in n.get("inputs", ())])
        if got is None or len(got) != len(shape):
            continue
        if any(isinstance(d, int) and d != g for d, g in zip(shape, got)):
            continue
        if any(isinstance(d, str) and not d.startswith("unk") for d in shape):
            continue
        n["shape"] = [int(g) for g in got]


def _toposorted(graph) -> list:
    """The graph's nodes in an order where every tensor is produced before it is used, for a graph whose own
    order is not one (_Converter.check_opsets finds out); raises OnnxImportError on a cycle."""
    producers = {o: k for k, n in enumerate(graph.node) for o in n.output}
    order, state = [], {}

    def visit(k):  # iterative DFS
        stack = [(k, 0)]
        while stack:
            idx, pos = stack.pop()
            if pos == 0:
                if state.get(idx) == 2:
                    continue
                state[idx] = 1
            ins = [i for i in graph.node[idx].input if i in producers]
            if pos < len(ins):
                stack.append((idx, pos + 1))
                dep = producers[ins[pos]]
                if state.get(dep) == 1:
                    raise OnnxImportError(f"the ONNX graph has a cycle through node {graph.node[dep].name!r}")
                if state.get(dep) != 2:
                    stack.append((dep, 0))
            else:
                state[idx] = 2
                order.append(graph.node[idx])
    for k in range(len(graph.node)):
        if state.get(k) != 2:
            visit(k)
    return order


def _needs_shape_inference(model) -> bool:
    have = {v.name for v in model.graph.value_info} | {o.name for o in model.graph.output}
    return any(o and o not in have for n in model.graph.node for o in n.output)


def load_model(model_or_path, *, infer_shapes: bool = True) -> "onnx.ModelProto":
    """Load an ONNX model (path or ModelProto) with its external data, inline its local functions and run ONNX
    shape inference where value info is missing. Raises OnnxImportError for what cannot be read."""
    _require_onnx()
    base_dir = None
    if isinstance(model_or_path, (str, os.PathLike)):
        path = os.fspath(model_or_path)
        base_dir = os.path.dirname(os.path.abspath(path))
        try:
            model = onnx.load(path, load_external_data=False)
        except FileNotFoundError as e:
            raise OnnxImportError(f"cannot read {path}: no such file") from e
        except Exception as e:  # noqa: BLE001 - protobuf decode errors and the like
            raise OnnxImportError(f"cannot read {path} as an ONNX model: {e}") from e
    elif onnx is not None and isinstance(model_or_path, onnx.ModelProto):
        model = model_or_path
    else:
        raise OnnxImportError(f"expected a path or an onnx.ModelProto, got {type(model_or_path).__name__}")
    external = [t for t in model.graph.initializer
                if t.HasField("data_location") and t.data_location == onnx.TensorProto.EXTERNAL]
    if external:
        if base_dir is None:
            base_dir = os.getcwd()
        for t in external:
            loc = next((e.value for e in t.external_data if e.key == "location"), None)
            if loc is None or not os.path.exists(os.path.join(base_dir, loc)):
                raise OnnxImportError(f"initializer {t.name!r} stores its data in external file {loc!r}, "
                                      f"which is not in {base_dir}")
        if not isinstance(model_or_path, (str, os.PathLike)):
            copy = onnx.ModelProto()
            copy.CopyFrom(model)
            model = copy
        try:
            onnx.external_data_helper.load_external_data_for_model(model, base_dir)
        except Exception as e:  # noqa: BLE001
            raise OnnxImportError(f"cannot load external data from {base_dir}: {e}") from e
    if len(model.functions):
        from onnx import inliner

        model = inliner.inline_local_functions(model)
    if infer_shapes and _needs_shape_inference(model):
        try:
            model = _infer_shapes_light(model, in_place=isinstance(model_or_path, (str, os.PathLike)) or model is not model_or_path)
        except Exception as e:  # noqa: BLE001 - a model ONNX cannot infer still imports, with fewer shapes
            warnings.warn(f"ONNX shape inference failed ({e}); importing with the shapes the model declares")
    return model


# TensorProto types whose raw_data numpy_helper.to_array reads with np.frombuffer as it is (little-endian hosts)
_PLAIN_TYPES = frozenset({1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 14, 15})


_INFER_KEEP_ELEMENTS = 1024  # initializers up to this size keep their values for data propagation


def _infer_shapes_light(model: "onnx.ModelProto", in_place: bool = False) -> "onnx.ModelProto":
    """ONNX shape inference (strict_mode=False, data_prop=True) without serializing the weights: large
    initializers are passed as typed graph inputs instead (their shapes and dtypes are all inference reads from
    them; data propagation only needs small shape tensors), and the inferred value info is copied back."""
    light = onnx.ModelProto()
    light.ir_version = model.ir_version
    light.opset_import.extend(model.opset_import)
    light.functions.extend(model.functions)
    g = light.graph
    g.name = model.graph.name
    g.node.extend(model.graph.node)
    g.input.extend(model.graph.input)
    g.output.extend(model.graph.output)
    g.value_info.extend(model.graph.value_info)
    inputs = {i.name for i in model.graph.input}
    types: dict[tuple, Any] = {}  # (element type, dims) -> the TypeProto make_tensor_value_info makes
    for t in model.graph.initializer:
        dims = tuple(t.dims)
        n = 1
        for d in dims:
            n *= d
        if n <= _INFER_KEEP_ELEMENTS:
            g.initializer.append(t)
        elif t.name not in inputs:
            key = (t.data_type, dims)
            tp = types.get(key)
            if tp is None:
                tp = types[key] = onnx.helper.make_tensor_type_proto(t.data_type, list(dims))
            vi = g.input.add()
            vi.name = t.name
            vi.type.CopyFrom(tp)
    inferred = onnx.shape_inference.infer_shapes(light, strict_mode=False, data_prop=True)
    out = model
    if not in_place:  # the caller's ModelProto is left as it was
        out = onnx.ModelProto()
        out.CopyFrom(model)
    del out.graph.value_info[:]
    out.graph.value_info.extend(inferred.graph.value_info)
    del out.graph.output[:]
    out.graph.output.extend(inferred.graph.output)  # inference fills in the outputs' types too
    return out


def convert(model_or_path, *, inline_max_elements: int = 16) -> OnnxImport:
    """Convert in memory: graph.json as a dict (without the "weights" field) and the weights by Param name."""
    model = load_model(model_or_path)
    c = _Converter(model, inline_max_elements)
    graph = c.run()
    facts.annotate(graph, c.weights)  # what the weights guarantee (duplicated rotary halves, causal masks)
    return OnnxImport(graph, c.weights, c.warnings)


def default_weights_path(graph_path: str) -> str:
    """NAME.graph.json or NAME.json -> NAME.weights.npz, in the same folder."""
    base = graph_path
    for suffix in (".graph.json", ".json"):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
            break
    return base + ".weights.npz"


def import_onnx(model_or_path, output_path=None, *, weights_path=None, inline_max_elements: int = 16):
    """Import an ONNX model as a Graph. With `output_path`, write the graph there and the weights beside it
    (NAME.weights.npz, or `weights_path`), and point the graph's "weights" field at them."""
    with _gc_paused():
        return _import_onnx(model_or_path, output_path, weights_path, inline_max_elements)


def _import_onnx(model_or_path, output_path, weights_path, inline_max_elements: int):
    from .graph import Graph

    result = convert(model_or_path, inline_max_elements=inline_max_elements)
    data = result.graph
    if output_path is not None:
        output_path = os.fspath(output_path)
        wpath = os.fspath(weights_path) if weights_path is not None else default_weights_path(output_path)
        graph_dir = os.path.dirname(os.path.abspath(output_path))
        data["weights"] = os.path.relpath(os.path.abspath(wpath), graph_dir)
        graph = Graph.from_dict(data)
        save_weights(wpath, result.weights)
        graph.write(output_path, pretty=True)
        return graph
    if weights_path is not None:
        save_weights(os.fspath(weights_path), result.weights)
        data["weights"] = os.path.abspath(os.fspath(weights_path))
    return Graph.from_dict(data)


def save_weights(path: str, weights: dict[str, np.ndarray]) -> None:
    """Write the weights as an uncompressed .npz (keys are Param names; what np.savez writes, without its
    keyword-name limits), through a temporary file and a rename.

    The archive is written in Rust (rlx_rules_core::npz, with the zip crate), from the arrays' own buffers and
    without the GIL; Python only makes the .npy headers (numpy's own format code)."""
    from . import _native

    tmp = path + ".tmp.npz"
    try:
        names, headers, data = [], [], []
        heads: dict = {}
        for name, arr in weights.items():
            head, body = _npy_parts(np.asanyarray(arr), heads)
            names.append(name)
            headers.append(head)
            data.append(body)
        _native.write_npz(tmp, names, headers, data)
        os.replace(tmp, path)
    except BaseException as e:  # never leave a half-written file behind
        if os.path.exists(tmp):
            os.remove(tmp)
        if isinstance(e, OSError):
            raise OnnxImportError(f"cannot write weights to {path}: {e}") from e
        raise


_NO_DATA = np.zeros(0, dtype=np.uint8)


def _npy_parts(arr: np.ndarray, heads: dict) -> tuple[bytes, np.ndarray]:
    """The .npy file of `arr` as np.lib.format.write_array writes it, as (header, data as a flat uint8 array).
    A C-contiguous array of a plain dtype gives its own buffer (no copy); `heads` keeps the headers made so far
    by (dtype, shape), for numpy's built-in dtypes (whose descr is dtype.str): a stacked model repeats a few."""
    if type(arr) is np.ndarray and arr.flags.c_contiguous and not arr.dtype.hasobject:
        key = (arr.dtype.str, arr.shape) if arr.dtype.isbuiltin == 1 else None
        head = heads.get(key) if key is not None else None
        if head is None:
            buf = io.BytesIO()
            try:  # write_array's choice while the header fits version 1.0
                np.lib.format.write_array_header_1_0(buf, np.lib.format.header_data_from_array_1_0(arr))
            except ValueError:
                buf = None
            if buf is not None:
                head = buf.getvalue()
                if key is not None:
                    heads[key] = head
        if head is not None:
            return head, (arr.reshape(-1).view(np.uint8) if arr.nbytes else _NO_DATA)
    buf = io.BytesIO()  # anything else (Fortran order, strided, subclasses): numpy's own writer
    np.lib.format.write_array(buf, arr, allow_pickle=False)
    return b"", np.frombuffer(buf.getvalue(), dtype=np.uint8)
