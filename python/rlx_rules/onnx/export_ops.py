"""The ONNX export table: for every RLX op, the ONNX (or com.microsoft) ops it becomes, and the mapping code."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import onnx
from onnx import AttributeProto, helper

from ..errors import ExportError
from .common import FOLDED_INPUTS
from .export_builder import ONNX_TYPES, Builder, node_label
from . import export_attention as attention, export_fused as fused

INT64_MIN = -(2**63)


@dataclass(frozen=True)
class Export:
    """One row of the table: what an RLX op becomes (for docs/export.md) and the function that writes it."""

    target: str
    emit: Callable  # (builder, node, input names) -> output name


def label(n) -> str:
    return n.name or f"n{n.id}"


def same(op_type: str) -> Callable:
    return lambda b, n, ins: b.op(op_type, ins, label(n))


def cast_to(b: Builder, n, x: str) -> str:
    """`x` cast to the node's dtype (RLX gives compare results and indices the node's dtype)."""
    if n.dtype in (None, "bool") and n.op in ("Eq", "Ne", "Lt", "Le", "Gt", "Ge"):
        return x
    if n.dtype not in ONNX_TYPES:
        raise ExportError(f"{node_label(n)}: dtype {n.dtype!r} cannot be written to ONNX")
    return b.op("Cast", [x], label(n), to=ONNX_TYPES[n.dtype])


def compare(op_type: str, negate: bool = False) -> Callable:
    def emit(b, n, ins):
        y = b.op(op_type, ins, label(n))
        return cast_to(b, n, b.op("Not", [y], label(n)) if negate else y)
    return emit


def as_bool(b: Builder, nid: int, x: str, hint: str) -> str:
    """A condition as ONNX bool: RLX's Where takes any non-zero as true."""
    return x if b.dtype(nid) == "bool" else b.op("Cast", [x], hint, to=onnx.TensorProto.BOOL)


def as_index(b: Builder, nid: int, x: str, hint: str) -> str:
    """RLX's indices are f32-encoded; ONNX wants integers."""
    return x if b.dtype(nid) in ("i64", "i32") else b.op("Cast", [x], hint, to=onnx.TensorProto.INT64)


def emit_where(b, n, ins):
    return b.op("Where", [as_bool(b, n.inputs[0], ins[0], label(n)), ins[1], ins[2]], label(n))


def emit_cast(b, n, ins):
    to = n.attrs.get("to")
    if to not in ONNX_TYPES:
        raise ExportError(f"{node_label(n)}: Cast to {to!r} has no ONNX type")
    return b.op("Cast", ins, label(n), to=ONNX_TYPES[to])


def emit_silu(b, n, ins):
    return b.op("Mul", [ins[0], b.op("Sigmoid", ins, label(n))], label(n))


def emit_rsqrt(b, n, ins):
    return b.op("Reciprocal", [b.op("Sqrt", ins, label(n))], label(n))


def emit_fma(b, n, ins):
    return b.op("Add", [b.op("Mul", ins[:2], label(n)), ins[2]], label(n))


def emit_lora(b, n, ins):
    x, w, a, lb = ins
    base = b.op("MatMul", [x, w], label(n))
    low = b.op("MatMul", [b.op("MatMul", [x, a], label(n)), lb], label(n))
    scale = b.const(np.asarray(n.attrs.get("scale", 1.0), dtype=b.np_dtype(n.id)), f"{label(n)}/scale")
    return b.op("Add", [base, b.op("Mul", [low, scale], label(n))], label(n))


def dims_tensor(b, n, dims: list, hint: str) -> str:
    """A dim list (sizes and symbols) as an int64 tensor: a constant, or, with symbols, a Concat of the sizes and
    of Shape(input)[k] for each symbol, read from a graph input that has it (an imported dynamic model's
    Reshape and Expand targets)."""
    if all(not isinstance(d, str) for d in dims):
        return b.ints([int(d) for d in dims], hint)
    parts = []
    for d in dims:
        if not isinstance(d, str):
            parts.append(b.ints([int(d)], hint))
            continue
        src = next(((m.id, m.shape.index(d)) for m in b.graph.nodes
                    if m.op == "Input" and m.shape is not None and d in m.shape and m.id in b.names), None)
        if src is None:
            raise ExportError(f"{node_label(n)}: {hint} names the symbol {d!r}, which no graph input's shape has")
        shape = b.op("Shape", [b.names[src[0]]], label(n))
        parts.append(b.op("Gather", [shape, b.ints([src[1]], "axis")], label(n), axis=0))
    return b.op("Concat", parts, label(n), axis=0)


def emit_reshape(b, n, ins):
    shape = list(n.attrs["new_shape"])
    return b.op("Reshape", [ins[0], dims_tensor(b, n, shape, "shape")], label(n), allowzero=1 if 0 in shape else None)


def pieces(b: Builder, n) -> list:
    """The unit-step Narrow/Slice readers of n's input that cut its static axis into adjacent pieces covering it
    all (e.g. rotate-half's two halves), in order; [] when they do not (each piece is then its own Slice)."""
    src, axis = n.inputs[0], int(n.attrs["axis"])
    shape = b.shape(src)
    if shape is None or not -len(shape) <= axis < len(shape) or not isinstance(shape[axis], int):
        return []
    axis %= len(shape)
    cuts = sorted((int(m.attrs["start"]), int(m.attrs["len"]), m.id) for m in b.readers(src)
                  if m.op in ("Narrow", "Slice") and m.inputs[0] == src and int(m.attrs.get("step", 1)) == 1
                  and int(m.attrs["axis"]) % len(shape) == axis and int(m.attrs["len"]) > 0)
    ends = [start + length for start, length, _ in cuts]
    if len(cuts) < 2 or [start for start, _, _ in cuts] != [0] + ends[:-1] or ends[-1] != shape[axis]:
        return []
    return cuts


def emit_narrow(b, n, ins):
    a, start, length = int(n.attrs["axis"]), int(n.attrs["start"]), int(n.attrs["len"])
    if int(n.attrs.get("step", 1)) == 1 and length > 0:
        rank = len(b.shape(n.inputs[0]) or [0])
        key = ("split", n.inputs[0], a % rank if rank else a)
        if key not in b.cache:
            cuts = pieces(b, n)
            alone = len(b.readers(n.inputs[0])) == len(cuts)  # the pieces are all that read it
            outs = fused.unpacked(b, n.inputs[0], [c[1] for c in cuts]) if cuts and alone else []
            if cuts and not outs:
                outs = b.op("Split", [ins[0], b.ints([c[1] for c in cuts], "split")], label(n), n_out=len(cuts),
                            axis=a)
            b.cache[key] = {c[2]: o for c, o in zip(cuts, outs)}
        if n.id in b.cache[key]:  # one Split for all the pieces
            return b.cache[key][n.id]
    return b.op("Slice", [ins[0], b.ints([start]), b.ints([start + length]), b.ints([a])], label(n))


def emit_concat(b, n, ins):
    """Concat, without the inputs that are empty along its (static) axis."""
    a = int(n.attrs["axis"])
    kept = [x for x, i in zip(ins, n.inputs) if not (b.shape(i) is not None and b.shape(i)[a] == 0)] or ins[:1]
    return kept[0] if len(kept) == 1 else b.op("Concat", kept, label(n), axis=a)


def emit_slice(b, n, ins):
    a, start, length = int(n.attrs["axis"]), int(n.attrs["start"]), int(n.attrs["len"])
    step = int(n.attrs.get("step", 1))
    if step == 1:
        return emit_narrow(b, n, ins)
    end = start + (length - 1) * step + 1 if length > 0 else start
    return b.op("Slice", [ins[0], b.ints([start]), b.ints([end]), b.ints([a]), b.ints([step])], label(n))


def emit_expand(b, n, ins):
    target = [1 if d == -1 else d for d in n.attrs["target_shape"]]  # ONNX keeps the input's dim at 1
    return b.op("Expand", [ins[0], dims_tensor(b, n, target, "shape")], label(n))


def emit_gather(b, n, ins):
    return b.op("Gather", [ins[0], as_index(b, n.inputs[1], ins[1], label(n))], label(n),
                axis=int(n.attrs.get("axis", 0)))


def emit_reverse(b, n, ins):
    axes = [int(a) for a in n.attrs["axes"]]
    k = len(axes)
    return b.op("Slice", [ins[0], b.ints([-1] * k), b.ints([INT64_MIN] * k), b.ints(axes), b.ints([-1] * k)],
                label(n))


def emit_conv(b, n, ins):
    a = n.attrs
    pad = [int(p) for p in a.get("padding", [0, 0])]
    pads = pad * 2 if len(pad) == 2 else pad
    return b.op("Conv", ins, label(n), kernel_shape=[int(k) for k in a["kernel_size"]],
                strides=[int(s) for s in a.get("stride", [1, 1])], pads=pads,
                dilations=[int(d) for d in a.get("dilation", [1, 1])], group=int(a.get("groups", 1)))


REDUCE = {"Sum": "ReduceSum", "Mean": "ReduceMean", "Max": "ReduceMax", "Min": "ReduceMin", "Prod": "ReduceProd"}


def emit_reduce(b, n, ins):
    kind = REDUCE.get(n.attrs.get("op"))
    if kind is None:
        raise ExportError(f"{node_label(n)}: Reduce op {n.attrs.get('op')!r} has no ONNX mapping")
    keep = 1 if n.attrs.get("keep_dim") else 0
    axes = [int(a) for a in n.attrs["axes"]]
    if b.opset >= 18 or kind == "ReduceSum":
        return b.op(kind, [ins[0], b.ints(axes, "axes")], label(n), keepdims=keep)
    return b.op(kind, ins, label(n), axes=axes, keepdims=keep)


def emit_cumsum(b, n, ins):
    axis = b.const(np.asarray(int(n.attrs["axis"]), dtype=np.int64), "axis")
    return b.op("CumSum", [ins[0], axis], label(n), exclusive=1 if n.attrs.get("exclusive") else 0)


def arg(op_type: str) -> Callable:
    def emit(b, n, ins):
        y = b.op(op_type, ins, label(n), axis=int(n.attrs["axis"]), keepdims=1 if n.attrs.get("keep_dim") else 0)
        return cast_to(b, n, y)
    return emit


def emit_topk(b, n, ins):
    _, idx = b.op("TopK", [ins[0], b.ints([int(n.attrs["k"])], "k")], label(n), n_out=2, axis=-1, largest=1,
                  sorted=1)
    return cast_to(b, n, idx)


# ---- ONNX-only ops (kept by the importer under their ONNX names) ----------------------------------------------------
_ATTR_KIND = {AttributeProto.INT: "i", AttributeProto.FLOAT: "f", AttributeProto.STRING: "s",
              AttributeProto.INTS: "ints", AttributeProto.FLOATS: "floats", AttributeProto.STRINGS: "strings",
              AttributeProto.TENSOR: "t"}


def _attr(b: Builder, n, schema, name: str, value):
    kind = _ATTR_KIND.get(schema.attributes[name].type) if name in schema.attributes else None
    if kind == "i":
        return int(value)
    if kind == "f":
        return float(value)
    if kind == "ints":
        return [int(v) for v in value]
    if kind == "floats":
        return [float(v) for v in value]
    if kind == "t":
        return helper.make_tensor_from_array(np.asarray(value, dtype=b.np_dtype(n.id))) \
            if hasattr(helper, "make_tensor_from_array") else onnx.numpy_helper.from_array(
                np.asarray(value, dtype=b.np_dtype(n.id)).reshape(-1))
    return value


def emit_onnx_only(b, n, ins):
    """The importer's ONNX-only ops go back as themselves; attributes it folded from constant inputs become
    inputs again where the target opset takes them as inputs."""
    op_type = n.op[4:] if n.op.startswith("Onnx") else n.op
    try:
        schema = onnx.defs.get_schema(op_type, b.opset, "")
    except onnx.defs.SchemaError as e:
        raise ExportError(f"{node_label(n)}: no ONNX op {op_type!r} at opset {b.opset}") from e
    attrs = dict(n.attrs)
    inputs = list(ins)
    for idx, name, kind in FOLDED_INPUTS.get(n.op, []):
        if name not in attrs or name in schema.attributes:
            continue
        value = attrs.pop(name)
        if kind == "ints":
            arr = np.asarray([int(v) for v in value], dtype=np.int64)
        elif kind == "int":
            arr = np.asarray([int(value)] if op_type == "TopK" else int(value), dtype=np.int64)
        else:
            first = n.inputs[0] if n.inputs else n.id
            dt = b.np_dtype(n.id if op_type in ("Range", "ConstantOfShape") else first)
            arr = np.asarray(value, dtype=dt)
        while len(inputs) < idx:
            inputs.append("")
        inputs.insert(idx, b.const(arr, f"{label(n)}/{name}"))
    if op_type == "ConstantOfShape" and "value" in attrs:
        attrs["value"] = onnx.numpy_helper.from_array(np.asarray(attrs["value"], dtype=b.np_dtype(n.id)).reshape(1))
    out = {}
    for k, v in attrs.items():
        if k not in schema.attributes:
            raise ExportError(f"{node_label(n)}: ONNX {op_type} at opset {b.opset} has no attribute {k!r}")
        out[k] = v if op_type == "ConstantOfShape" and k == "value" else _attr(b, n, schema, k, v)
    return b.op(op_type, inputs, label(n), **out)


UNARY = ("Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Neg", "Abs", "Sin", "Cos", "Tan", "Atan", "Round")
BINARY = ("Add", "Sub", "Mul", "Div", "Max", "Min", "Pow", "MatMul")

# The table (docs/export.md shows it): RLX op -> what it becomes. Fused ops and attention live in export_fused.
EXPORTS: dict[str, Export] = {
    **{op: Export(op, same(op)) for op in UNARY + BINARY},
    "Gelu": Export("com.microsoft Gelu (exact erf)", fused.emit_gelu),
    "GeluApprox": Export("com.microsoft FastGelu (tanh form)", fused.emit_gelu_approx),
    "Silu": Export("Mul(x, Sigmoid(x))", emit_silu),
    "Rsqrt": Export("Reciprocal(Sqrt(x))", emit_rsqrt),
    "Cast": Export("Cast", emit_cast),
    "StopGradient": Export("Identity", same("Identity")),
    "Eq": Export("Equal", compare("Equal")),
    "Ne": Export("Not(Equal)", compare("Equal", negate=True)),
    "Lt": Export("Less", compare("Less")),
    "Le": Export("LessOrEqual", compare("LessOrEqual")),
    "Gt": Export("Greater", compare("Greater")),
    "Ge": Export("GreaterOrEqual", compare("GreaterOrEqual")),
    "Where": Export("Where (condition cast to bool)", emit_where),
    "Fma": Export("Add(Mul(a, b), c)", emit_fma),
    "LoraMatMul": Export("MatMul(x, w) + scale·MatMul(MatMul(x, a), b)", emit_lora),
    "LayerNorm": Export("LayerNormalization", fused.emit_layer_norm),
    "RmsNorm": Export("Pow, ReduceMean, Add, Sqrt, Div, Mul (ONNX Runtime fuses it into SimplifiedLayerNormalization; "
                      "that op is not in ONNX's domain, so onnx.checker would refuse it), + Add β unless β is 0",
                      fused.emit_rms_norm),
    "Conv": Export("Conv (pads [top, left, bottom, right])", emit_conv),
    "Softmax": Export("Softmax", lambda b, n, ins: b.op("Softmax", ins, label(n), axis=int(n.attrs["axis"]))),
    "Attention": Export("com.microsoft MultiHeadAttention (masks as an exact additive bias; GQA heads repeated)",
                        attention.emit_attention),
    "Rope": Export("com.microsoft RotaryEmbedding (interleaved for GptJ, rotary_embedding_dim = n_rot)",
                   fused.emit_rope),
    "Reshape": Export("Reshape (allowzero when a dim is 0)", emit_reshape),
    "Transpose": Export("Transpose", lambda b, n, ins: b.op("Transpose", ins, label(n),
                                                            perm=[int(p) for p in n.attrs["perm"]])),
    "Narrow": Export("Slice (one Split for the pieces that cut an axis)", emit_narrow),
    "Slice": Export("Slice (with steps; unit steps as Narrow)", emit_slice),
    "Concat": Export("Concat (empty inputs dropped)", emit_concat),
    "Expand": Export("Expand (-1 becomes 1: ONNX keeps the input's dim)", emit_expand),
    "Gather": Export("Gather (indices cast to int64)", emit_gather),
    "Reverse": Export("Slice with steps -1", emit_reverse),
    "Reduce": Export("ReduceSum/Mean/Max/Min/Prod", emit_reduce),
    "Cumsum": Export("CumSum", emit_cumsum),
    "ArgMax": Export("ArgMax (cast to the node's dtype)", arg("ArgMax")),
    "ArgMin": Export("ArgMin (cast to the node's dtype)", arg("ArgMin")),
    "TopK": Export("TopK's indices (cast to the node's dtype)", emit_topk),
    "FusedMatMulBiasAct": Export("MatMul + com.microsoft BiasGelu / FastGelu(x, bias), or MatMul, Add, activation",
                                 fused.emit_matmul_bias_act),
    "FusedResidualLN": Export("com.microsoft SkipLayerNormalization", fused.emit_residual_ln),
    "FusedResidualRmsNorm": Export("com.microsoft SkipSimplifiedLayerNormalization (+ Add β unless β is 0)",
                                   fused.emit_residual_rms),
    "FusedSwiGLU": Export("Split, Sigmoid, Mul, Mul", fused.emit_swiglu),
    "FusedAttentionBlock": Export("com.microsoft Attention (packed QKV weights; RotaryEmbedding and "
                                  "MultiHeadAttention with RoPE), MatMul, Add", fused.emit_attention_block),
    "FusedTransformerLayer": Export("the block as above, SkipLayerNormalization, MatMul + BiasGelu/FastGelu, "
                                    "MatMul, SkipLayerNormalization", fused.emit_transformer_layer),
}


def _onnx_only_ops() -> list[str]:
    import json
    from importlib import resources

    ops = json.loads(resources.files("rlx_rules").joinpath("data/ops.json").read_text())["ops"]
    return [name for name, spec in ops.items() if str(spec.get("rlx", "")).startswith("ONNX-only")]


for _op in _onnx_only_ops():
    EXPORTS.setdefault(_op, Export(f"{_op[4:] if _op.startswith('Onnx') else _op} (the ONNX op it came from)",
                                   emit_onnx_only))

NOT_EXPORTED = {
    "GroupedMatMul": "per-row weight selection has no ONNX op",
    "ScatterAdd": "not mapped yet (ScatterElements with reduction add over zeros would do)",
    "Sample": "random sampling: RLX's stream cannot be reproduced",
    "LayerNorm2d": "not mapped yet", "GroupNorm": "not mapped yet", "BatchNormInference": "not mapped yet",
    "Pool": "not mapped yet", "ResizeNearest2x": "not mapped yet",
}

