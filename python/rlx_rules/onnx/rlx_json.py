"""RLX's own serde JSON for a Graph (rlx_ir::Graph) to graph.json and back, so that RLX users can round-trip."""

from __future__ import annotations

import json
import os
import re
import stat
from typing import Any, Optional, Union

import numpy as np

from ..errors import GraphError
from ..formats import GRAPH_FORMAT, GRAPH_VERSION

# RLX's DType variants (serde: unit variants as strings) <-> graph.json dtype strings.
DTYPE_TO_RLX = {"f32": "F32", "f16": "F16", "bf16": "BF16", "f64": "F64", "i8": "I8", "i16": "I16", "i32": "I32",
                "i64": "I64", "u8": "U8", "u32": "U32", "bool": "Bool", "c64": "C64"}
DTYPE_FROM_RLX = {v: k for k, v in DTYPE_TO_RLX.items()}
_NUMPY = {"f32": np.float32, "f16": np.float16, "f64": np.float64, "i8": np.int8, "i16": np.int16,
          "i32": np.int32, "i64": np.int64, "u8": np.uint8, "u32": np.uint32, "bool": np.bool_}

# Wrapper variants that graph.json flattens into the op name (Binary(Add) is "Add").
WRAPPERS = {
    "Binary": ("Add", "Sub", "Mul", "Div", "Max", "Min", "Pow"),
    "Activation": ("Gelu", "GeluApprox", "Silu", "Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Rsqrt", "Neg",
                   "Abs", "Sin", "Cos", "Tan", "Atan", "Round"),
    "Compare": ("Eq", "Ne", "Lt", "Le", "Gt", "Ge"),
}
FLAT_TO_WRAPPER = {op: w for w, ops in WRAPPERS.items() for op in ops}
# RLX's unit variants among the registry's ops: serialized as a bare string ("MatMul").
UNIT_OPS = {"StopGradient", "Where", "Fma", "MatMul", "GroupedMatMul", "ScatterAdd", "ResizeNearest2x",
            "ReluBackward", "ComplexNormSq", "Conjugate", "ComplexNormSqBackward", "SoftmaxCrossEntropy",
            "SoftmaxCrossEntropyWithLogits", "SoftmaxCrossEntropyBackward", "BatchedDenseSolve", "DenseSolve",
            "BatchNormInferenceBackwardBeta"}
# Fields of type DType / Option<DType> inside ops.
DTYPE_FIELDS = {("Cast", "to"), ("FusedSwiGLU", "cast_to")}
_SYM = re.compile(r"^dyn(\d+)$")


def _dim_from_rlx(d: Any, where: str) -> Union[int, str]:
    if isinstance(d, dict) and len(d) == 1:
        (kind, v), = d.items()
        if kind == "Static" and isinstance(v, int) and v >= 0:
            return v
        if kind == "Dynamic" and isinstance(v, int) and v >= 0:
            return f"dyn{v}"
    raise GraphError(f"{where}: a dim must be {{\"Static\": n}} or {{\"Dynamic\": k}}, found {json.dumps(d)}")


def _dtype_from_rlx(v: Any, where: str) -> str:
    if v in DTYPE_FROM_RLX:
        return DTYPE_FROM_RLX[v]
    raise GraphError(f"{where}: unknown RLX dtype {json.dumps(v)} (known: {', '.join(DTYPE_FROM_RLX)})")


def _constant_value(data: list, shape: Optional[list], dtype: Optional[str]) -> Any:
    """RLX's Constant { data: Vec<u8> } (little-endian bytes) decoded by the node's dtype, or None."""
    if dtype not in _NUMPY or shape is None or not all(isinstance(d, int) for d in shape):
        return None
    raw = np.frombuffer(bytes(data), dtype=np.dtype(_NUMPY[dtype]).newbyteorder("<"))
    if raw.size != int(np.prod(shape, dtype=np.int64)):
        return None
    from .common import value_to_json  # the same JSON form as the ONNX importer's constants
    return value_to_json(raw.reshape(shape))


def _op_from_rlx(op: Any, where: str) -> tuple[str, dict, dict]:
    """(op name, attrs, extra node fields) from RLX's externally tagged Op."""
    if isinstance(op, str):
        return op, {}, {}
    if not (isinstance(op, dict) and len(op) == 1):
        raise GraphError(f"{where}: an op must be a string or an object with one key, found {json.dumps(op)[:80]}")
    (variant, payload), = op.items()
    if variant in WRAPPERS:
        if payload not in WRAPPERS[variant]:
            raise GraphError(f"{where}: unknown {variant} kind {json.dumps(payload)}")
        return payload, {}, {}
    if not isinstance(payload, dict):  # a newtype or tuple variant this module does not know: kept verbatim
        return variant, {}, {"rlx_payload": payload}
    attrs = dict(payload)
    if variant in ("Attention", "AttentionBackward") and isinstance(attrs.get("mask_kind"), dict):
        (kind, window), = attrs["mask_kind"].items()
        attrs["mask_kind"] = kind
        attrs["window"] = window
    for (v, f) in DTYPE_FIELDS:
        if v == variant and attrs.get(f) is not None:
            attrs[f] = _dtype_from_rlx(attrs[f], where)
    return variant, attrs, {}


def from_rlx_json(data: Union[str, bytes, dict]) -> dict:
    """graph.json (as a dict) from RLX's serde JSON for a Graph: {"name", "nodes": [{id, op, inputs, shape:
    {dims, dtype}, name, origin}], "outputs"}. Dims {"Dynamic": k} become the symbol "dyn<k>"."""
    if not isinstance(data, dict):
        try:
            data = json.loads(data)
        except json.JSONDecodeError as e:
            raise GraphError(f"invalid JSON: {e}") from e
        except RecursionError:
            raise GraphError("invalid JSON: it nests too deeply to read") from None
    if not isinstance(data, dict) or "nodes" not in data or "outputs" not in data:
        raise GraphError("an RLX graph JSON must be an object with \"nodes\" and \"outputs\"")
    try:
        return _from_rlx_dict(data)
    except GraphError:
        raise
    except (AttributeError, TypeError, KeyError, IndexError, ValueError) as e:  # a field of the wrong JSON type
        raise GraphError(f"not an RLX graph JSON: a field has the wrong type ({type(e).__name__}: {e})") from None


def _from_rlx_dict(data: dict) -> dict:
    nodes = []
    for k, n in enumerate(data["nodes"]):
        where = f"RLX node at index {k}"
        if not isinstance(n, dict) or "id" not in n or "op" not in n:
            raise GraphError(f"{where}: a node needs \"id\" and \"op\"")
        op, attrs, extra = _op_from_rlx(n["op"], where)
        node: dict[str, Any] = {"id": n["id"], "op": op}
        name = n.get("name")
        if op in ("Input", "Param"):
            name = attrs.pop("name", name)
            if n.get("name") != name:  # RLX's node label differs from the op's name: kept for the way back
                extra["rlx_node_name"] = n.get("name")
        if name is not None:
            node["name"] = name
        if n.get("inputs"):
            node["inputs"] = list(n["inputs"])
        shape = dtype = None
        if n.get("shape") is not None:
            s = n["shape"]
            shape = [_dim_from_rlx(d, where) for d in s.get("dims", [])]
            dtype = _dtype_from_rlx(s.get("dtype"), where)
            node["shape"], node["dtype"] = shape, dtype
        if op == "Constant" and "data" in attrs:
            data_bytes = attrs.pop("data")
            value = _constant_value(data_bytes, shape, dtype)
            if value is None:
                extra["rlx_data"] = data_bytes
            else:
                attrs["value"] = value
        if attrs:
            node["attrs"] = attrs
        if n.get("origin") is not None:
            extra["rlx_origin"] = n["origin"]
        node.update(extra)
        nodes.append(node)
    return {"format": GRAPH_FORMAT, "version": GRAPH_VERSION, "name": data.get("name"), "nodes": nodes,
            "outputs": list(data["outputs"])}


MAX_RLX_JSON_BYTES = 1 << 30  # as the graph.json loader's default


def import_rlx_json(path_or_data, output_path=None):
    """A Graph from RLX's serde JSON (a path, a JSON string or a dict); written to `output_path` if given."""
    from ..graph import Graph

    source = None
    if isinstance(path_or_data, (str, os.PathLike)) and not str(path_or_data).lstrip().startswith("{"):
        source = path_or_data
        try:
            with open(path_or_data, "rb") as f:
                st = os.fstat(f.fileno())
                if not stat.S_ISREG(st.st_mode):
                    raise GraphError(f"cannot read {os.fspath(source)}: not a regular file")
                path_or_data = f.read(min(st.st_size, MAX_RLX_JSON_BYTES) + 1)  # read() allocates what it is asked
        except OSError as e:
            raise GraphError(f"cannot read {os.fspath(path_or_data)}: {e.strerror}") from e
        if len(path_or_data) > MAX_RLX_JSON_BYTES:
            raise GraphError(f"cannot read {os.fspath(source)}: more than {MAX_RLX_JSON_BYTES} bytes")
    graph = Graph.from_dict(from_rlx_json(path_or_data))
    if output_path is not None:
        graph.write(os.fspath(output_path), pretty=True, inputs=[source])
    return graph


def _encode_value(value: Any, shape: list, dtype: str, where: str) -> list[int]:
    if dtype not in _NUMPY:
        raise GraphError(f"{where}: cannot encode a Constant of dtype {dtype} as RLX bytes")
    arr = np.asarray(value, dtype=_NUMPY[dtype])
    arr = np.broadcast_to(arr, tuple(shape)) if arr.shape != tuple(shape) else arr
    return list(np.ascontiguousarray(arr, dtype=np.dtype(_NUMPY[dtype]).newbyteorder("<")).tobytes())


def to_rlx_json(graph, *, allow_non_rlx: bool = False) -> dict:
    """RLX's serde JSON for `graph` (a Graph, path or dict). Nodes are renumbered 0..n-1 in topological order
    (RLX's ids are positions). Symbolic dims get Dynamic indices: "dyn<k>" keeps k, other names take the free
    indices in order of appearance. Ops that only exist in ONNX are refused unless `allow_non_rlx`."""
    from ..graph import load_graph
    from ..lang.registry import builtin_registry
    from .common import onnx_only_ops

    data = load_graph(graph).to_dict()
    onnx_only = onnx_only_ops()
    bad = sorted({n["op"] for n in data["nodes"] if n["op"] in onnx_only})
    if bad and not allow_non_rlx:
        raise GraphError(f"ops without an RLX variant cannot be exported to RLX JSON: {', '.join(bad)} "
                         f"(lift them with rules first, or pass allow_non_rlx)")
    registry = builtin_registry()
    ids = {n["id"]: k for k, n in enumerate(data["nodes"])}
    syms: dict[str, int] = {}
    for n in data["nodes"]:
        for d in n.get("shape") or ():
            m = _SYM.match(d) if isinstance(d, str) else None
            if m:
                syms[d] = int(m.group(1))
    next_sym = 0

    def dim(d):
        nonlocal next_sym
        if isinstance(d, int):
            return {"Static": d}
        if d not in syms:
            while next_sym in syms.values():
                next_sym += 1
            syms[d] = next_sym
        return {"Dynamic": syms[d]}

    nodes = []
    for n in data["nodes"]:
        where = f"node {n['id']}" + (f" ({n['name']!r})" if n.get("name") else "")
        op, attrs = n["op"], dict(n.get("attrs", {}))
        if n.get("shape") is None or n.get("dtype") is None:
            raise GraphError(f"{where}: RLX needs every node's shape and dtype")
        if n["dtype"] not in DTYPE_TO_RLX:
            raise GraphError(f"{where}: dtype {n['dtype']} has no RLX DType")
        name = n.get("name")
        if "rlx_payload" in n:
            rop: Any = {op: n["rlx_payload"]}
        elif op in FLAT_TO_WRAPPER:
            rop = {FLAT_TO_WRAPPER[op]: op}
        elif op in ("Input", "Param"):
            rop = {op: {"name": name or ""}}
            name = n["rlx_node_name"] if "rlx_node_name" in n else name
        elif op == "Constant":
            if "rlx_data" in n:
                payload = n["rlx_data"]
            elif "value" in attrs:
                payload = _encode_value(attrs["value"], n["shape"], n["dtype"], where)
            else:
                raise GraphError(f"{where}: a Constant without a value cannot be written as RLX JSON")
            rop = {"Constant": {"data": payload}}
        elif op in UNIT_OPS and not attrs:
            rop = op
        else:
            if op in ("Attention", "AttentionBackward") and attrs.get("mask_kind") == "SlidingWindow":
                attrs["mask_kind"] = {"SlidingWindow": attrs.pop("window")}
            attrs.pop("window", None)
            for (v, f) in DTYPE_FIELDS:
                if v == op and attrs.get(f) is not None:
                    attrs[f] = DTYPE_TO_RLX[attrs[f]]
            spec = registry.get(op)
            if spec is not None:  # optional attributes absent in graph.json take RLX's defaults
                if op == "Rope":
                    attrs.setdefault("style", "NeoX")
                if op == "FusedSwiGLU":
                    attrs.setdefault("cast_to", None)
                    attrs.setdefault("gate_first", False)
                if op == "Attention":
                    attrs.setdefault("attn_logit_softcap", None)
                    attrs.setdefault("score_scale", None)
            rop = {op: attrs} if attrs or op not in UNIT_OPS else op
        nodes.append({"id": ids[n["id"]], "op": rop, "inputs": [ids[i] for i in n.get("inputs", [])],
                      "shape": {"dims": [dim(d) for d in n["shape"]], "dtype": DTYPE_TO_RLX[n["dtype"]]},
                      "name": name, "origin": n.get("rlx_origin")})
    return {"name": data.get("name") or "", "nodes": nodes, "outputs": [ids[o] for o in data["outputs"]]}


def export_rlx_json(graph, path=None, *, allow_non_rlx: bool = False, indent: Optional[int] = None) -> str:
    """RLX's serde JSON for `graph` as text; written to `path` (atomically, never over the file the graph was
    loaded from) when given."""
    from ..graph import load_graph

    graph = load_graph(graph)
    text = json.dumps(to_rlx_json(graph, allow_non_rlx=allow_non_rlx), indent=indent)
    if path is not None:
        from ..safe_write import atomic_write

        atomic_write(path, text + "\n", inputs=[graph.source_path, graph.weights_file])
    return text
