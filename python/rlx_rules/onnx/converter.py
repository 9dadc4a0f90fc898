"""The ONNX converter: opsets and value info, node emission, constant folding dispatch, generic ops."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from ..errors import OnnxImportError
from ..graph_builder import GraphBuilder
from .canonical import canonicalize
from .common import BINARY, COMPARE, DTYPES, FOLDED_INPUTS, MIN_OPSET, REDUCE, SUPPORTED_DOMAINS, UNARY, f32_json, gc_paused, numpy_helper, onnx, rlx_ops_named, tensor_array, value_to_json
from .folding import FOLDERS, FOLD_MAX, NoFold, fold_int_list
from .model import constant_size
from .op_converters import OpConverters
from .propagate import propagate
from .shapes import computed_shape, is_unknown, merge_shapes, prune, refine_shapes, toposorted


class Converter(OpConverters):
    def __init__(self, model: "onnx.ModelProto", inline_max: int, *, canonical: bool = True):
        self.model = model
        self.graph = model.graph
        self.inline_max = inline_max
        self.canonical = canonical
        self.builder = GraphBuilder(self.graph.name or None)
        self.nodes = self.builder.nodes
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
        self.in_order = nodes if ordered else toposorted(self.graph)

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
        shape = self.shape(name)
        return None if shape is None else len(shape)

    def shape(self, name: str) -> Optional[list]:
        if name in self.consts:  # a known constant (initializer, Constant, folded): its own shape
            return list(self.consts[name].shape)
        return self.vi.get(name, (None, None))[0]

    # ---- node creation --------------------------------------------------------------------------------------
    def emit(self, op: str, inputs: list[int], attrs: Optional[dict] = None, *, out: Optional[str] = None,
             name: Optional[str] = None, onnx_node=None, shape=None, dtype=None, extra: Optional[dict] = None) -> int:
        if out is not None and shape is None and dtype is None:
            shape, dtype = self.vi.get(out, (None, None))
        more: dict[str, Any] = {}
        if onnx_node is not None:
            more["onnx_op"] = onnx_node.op_type
            if onnx_node.domain not in ("", "ai.onnx"):
                more["onnx_domain"] = onnx_node.domain
        if out is not None:
            more["onnx_output"] = out
        more.update(extra or {})
        nid = self.builder.add(op, inputs, attrs, shape, name=name, dtype=dtype, extra=more)
        node = self.nodes[nid]
        if shape is None or any(is_unknown(d) for d in shape):  # the importer's own shape, where ONNX's is unknown
            merged = merge_shapes(shape, computed_shape(node, [self.nodes[i].get("shape") for i in inputs]))
            if merged is not None:
                node["shape"] = merged
        if out is not None:
            self.tensors[out] = nid
            self.vi[out] = (node.get("shape"), node.get("dtype"))
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
        with gc_paused():
            return self._run()

    def _run(self) -> dict:
        self.check_opsets()
        self.collect_value_info()
        for init in self.graph.initializer:
            try:
                self.consts[init.name] = tensor_array(init)
            except Exception as e:  # noqa: BLE001 - numpy or onnx on a malformed tensor: wrong data length, type
                raise OnnxImportError(f"initializer {init.name!r} is malformed: {e}") from e
        for inp in self.graph.input:
            if inp.name in self.consts:  # an input with a default value (IR < 4): treated as a weight
                continue
            shape, dtype = self.vi[inp.name]
            self.emit("Input", [], name=inp.name, shape=shape, dtype=dtype)
            self.tensors[inp.name] = len(self.nodes) - 1
        for node in self.in_order:
            self.convert(node)
        outputs = [self.value(o.name) for o in self.graph.output]
        propagate(self.nodes)
        nodes, outputs = prune(self.nodes, outputs)  # folded shape computations no longer count as uses
        if self.canonical:
            outputs = canonicalize(nodes, outputs)
            nodes, outputs = prune(nodes, outputs)
        refine_shapes(nodes)
        self.builder.nodes[:] = nodes
        opsets = {imp.domain or "ai.onnx": imp.version for imp in self.model.opset_import}
        producer = f"{self.model.producer_name} {self.model.producer_version}".strip()
        return self.builder.graph(outputs, source="onnx", onnx={"ir_version": self.model.ir_version, "opsets": opsets,
                                                 "producer": producer})

    def convert(self, node) -> None:
        op, domain = node.op_type, node.domain
        standard = domain in ("", "ai.onnx")
        if standard and op in FOLDERS and self.fold(node):
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
        if op not in FOLDERS or len(node.output) != 1:
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
        if op in ("Range", "ConstantOfShape", "Expand"):  # sized before allocating: folded only when small
            size = constant_size(op, args)
            if size is None or size > FOLD_MAX:
                return False
        try:
            if op == "ConstantOfShape":
                value = next((numpy_helper.to_array(a.t) for a in node.attribute if a.name == "value"),
                             np.zeros(1, dtype=np.float32))
                result = np.full(fold_int_list(args[0]), value.reshape(-1)[0], dtype=value.dtype)
            else:
                while args and args[-1] is None:
                    args.pop()
                if any(a is None for a in args):
                    return False
                result = FOLDERS[op](self, at, *args)
        except (NoFold, ValueError, IndexError, TypeError):
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
                v = f32_json(v)
            elif a.type == onnx.AttributeProto.FLOATS:
                v = [f32_json(x) for x in v]
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
                    d = f32_json(d)
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
        if rlx_ops_named(op):
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
