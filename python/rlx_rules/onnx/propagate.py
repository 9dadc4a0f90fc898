"""Constant propagation after conversion: integer shape arithmetic that became constant only once the importer knew
its own shapes (Shape of a tensor whose static shape it computed later) is evaluated, and the ONNX-only ops it
fed become RLX's: OnnxReshape -> Reshape, OnnxExpand -> Expand, OnnxSlice -> Narrow. Shape vectors of a dynamic
model are propagated too, as symbolic vectors (sizes and dim symbols): a run-time Reshape or Expand target built from
Shape gathers names the input's own symbols, so its output shape does too (one symbol per dim across the graph), and
the op becomes RLX's: Reshape and Expand targets are dim lists (sizes and symbols, bound at run time from the
input's shape)."""

from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from .common import value_to_json
from .op_converters import expand_target
from .shapes import computed_shape, is_unknown, merge_shapes

MAX_VALUE = 64  # the most elements a propagated constant may have (shape vectors and scalars)

_INTS = {"i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64, "u8": np.uint8, "u16": np.uint16,
         "u32": np.uint32, "u64": np.uint64, "bool": np.bool_}
# float scalars (a score scale computed at run time from a static head dim: Sqrt(Cast(D)), 1/that): IEEE ops on the
# node's own dtype, as ONNX Runtime computes them
_FLOATS = {"f16": np.float16, "f32": np.float32, "f64": np.float64}
_FLOAT_OPS = ("Constant", "Cast", "Sqrt", "Div", "Mul", "Add", "Sub", "Neg")


def _cast(at, a):
    to = at["to"]
    return a.astype(_INTS[to] if to in _INTS else _FLOATS[to])  # KeyError for other targets


def _divide(at, a, b):
    return a / b if a.dtype.kind == "f" and b.dtype.kind == "f" else _div(at, a, b)


def _static(shape) -> bool:
    return shape is not None and all(isinstance(d, int) for d in shape)


def _axis(a: int, rank: int) -> int:
    return a + rank if a < 0 else a


def _div(at, a, b):
    if np.any(b == 0):
        raise ValueError("division by zero")
    q = np.abs(a) // np.abs(b)  # ONNX truncates toward zero
    return np.where((a < 0) != (b < 0), -q, q)


def _unsqueeze(at, x):
    axes = sorted(_axis(a, x.ndim + len(at["axes"])) for a in at["axes"])
    for a in axes:
        x = np.expand_dims(x, a)
    return x


def _narrow(at, x):
    index = [slice(None)] * x.ndim
    index[at["axis"]] = slice(at["start"], at["start"] + at["len"])
    return x[tuple(index)]


_STRUCTURAL = ("Gather", "Concat", "Unsqueeze", "Squeeze", "Reshape", "Narrow")  # also exact on symbolic vectors

_EVAL: dict[str, Callable] = {
    "Gather": lambda at, x, i: np.take(x, i, axis=at.get("axis", 0)),
    "Concat": lambda at, *xs: np.concatenate(xs, axis=at["axis"]),
    "Unsqueeze": _unsqueeze,
    "Squeeze": lambda at, x: np.squeeze(x, axis=tuple(_axis(a, x.ndim) for a in at["axes"])),
    "Reshape": lambda at, x: x.reshape(at["new_shape"]),
    "Narrow": _narrow,
    "Add": lambda at, a, b: a + b,
    "Sub": lambda at, a, b: a - b,
    "Mul": lambda at, a, b: a * b,
    "Div": _divide,
    "Neg": lambda at, a: -a,
    "Sqrt": lambda at, a: np.sqrt(a) if a.dtype.kind == "f" else None,
    "Cast": _cast,
    "Max": lambda at, a, b: np.maximum(a, b),
    "Min": lambda at, a, b: np.minimum(a, b),
}


def _value(n: dict) -> Optional[np.ndarray]:
    """An integer or bool inline Constant's value, or a one-element float one's, with its declared shape."""
    dtype = _INTS.get(n.get("dtype")) or _FLOATS.get(n.get("dtype"))
    value = n.get("attrs", {}).get("value")
    if dtype is None or value is None or not _static(n.get("shape")):
        return None
    if n["dtype"] in _FLOATS and int(np.prod(n["shape"], dtype=np.int64)) != 1:
        return None
    arr = np.asarray(value, dtype=dtype)
    shape = n["shape"]
    return np.broadcast_to(arr, shape).copy() if arr.ndim == 0 else arr.reshape(shape)


class Propagator:
    def __init__(self, nodes: list[dict]):
        self.nodes = nodes
        self.by_id = {n["id"]: n for n in nodes}
        self.known: dict[int, np.ndarray] = {}
        self.symbolic: dict[int, np.ndarray] = {}  # integer vectors with dim symbols (object arrays), by node id
        # the symbols every run binds: the inputs' (other nodes may be rewritten away before a run)
        self.bound = {d for n in nodes if n["op"] == "Input" for d in n.get("shape") or () if isinstance(d, str)}

    def shape(self, i: int):
        return self.by_id[i].get("shape")

    def refine(self, n: dict) -> None:
        shape = n.get("shape")
        if shape is None or any(is_unknown(d) for d in shape):
            merged = merge_shapes(shape, computed_shape(n, [self.shape(i) for i in n.get("inputs", ())]))
            if merged is not None:
                n["shape"] = merged

    def run(self) -> None:
        for n in self.nodes:
            self.visit(n)

    def visit(self, n: dict) -> None:
        self.refine(n)
        op, ins = n["op"], n.get("inputs", [])
        value = None
        try:
            if op == "Constant":
                value = _value(n)
            elif op == "Shape" and ins and _static(self.shape(ins[0])):
                at = n.get("attrs", {})
                dims = self.shape(ins[0])
                value = np.array(dims[at.get("start", 0):at.get("end", len(dims))], dtype=np.int64)
            elif op in _EVAL and ins and all(i in self.known for i in ins):
                value = np.asarray(_EVAL[op](n.get("attrs", {}), *[self.known[i] for i in ins]))
        except (KeyError, IndexError, TypeError, ValueError):
            value = None
        if value is not None and (value.dtype.kind == "f" and (op not in _FLOAT_OPS or value.size != 1
                                                                or value.dtype != _FLOATS.get(n.get("dtype")))):
            value = None
        if value is not None and value.size <= MAX_VALUE and (value.dtype.kind in "iubf"):
            self.known[n["id"]] = value
            if op != "Constant":
                n["op"], n["attrs"], n["shape"] = "Constant", {"value": value_to_json(value)}, list(value.shape)
                n.pop("inputs", None)
            return
        self.symbolic_value(n)
        self.lift_onnx_op(n)

    def vector(self, i: int) -> Optional[np.ndarray]:
        """Node `i`'s integer value, as sizes and dim symbols (an object array) where it has symbols."""
        return self.known[i] if i in self.known else self.symbolic.get(i)

    def symbolic_value(self, n: dict) -> None:
        """Record the value of a shape computation over a dynamic shape: Shape of a tensor whose dims all have names,
        and the structural ops over such vectors (gathers, concatenations, slices, integer casts)."""
        op, ins, at = n["op"], n.get("inputs", []), n.get("attrs", {})
        value = None
        if op == "Range" and len(ins) == 3 and ins[1] in self.symbolic:  # Range(0, S, 1): S positions
            bounds = [self.vector(i) for i in ins]
            if all(b is not None and b.size == 1 for b in bounds) and \
                    [bounds[0].reshape(-1)[0], bounds[2].reshape(-1)[0]] == [0, 1]:
                self.name_dims(n, [bounds[1].reshape(-1)[0]])
            return
        if op == "ConstantOfShape" and len(ins) == 1 and ins[0] in self.symbolic:  # a fill shaped like a tensor
            self.name_dims(n, self.target(ins[0]))
            return
        try:
            if op == "Shape" and ins:
                dims = self.shape(ins[0])
                if dims is not None and None not in dims:
                    value = np.array(dims[at.get("start", 0):at.get("end", len(dims))], dtype=object)
            elif ins and any(i in self.symbolic for i in ins) and all(self.vector(i) is not None for i in ins):
                args = [self.vector(i) for i in ins]
                if op == "Cast" and _INTS.get(n.get("dtype")) in (np.int32, np.int64):
                    value = args[0]
                elif op in _STRUCTURAL and not (op == "Gather" and args[1].dtype == object):
                    value = np.asarray(_EVAL[op](at, *args), dtype=object)
                elif op == "Eq" and len(args) == 2:  # legacy's Where(Eq(shape, -1), 1, shape)
                    value = _symbolic_eq(*args)
                elif op == "Where" and len(args) == 3 and args[0].dtype == np.bool_:
                    value = np.where(args[0], args[1], args[2]).astype(object)
        except (KeyError, IndexError, TypeError, ValueError):
            value = None
        if value is None or not 0 < value.size <= MAX_VALUE:
            return
        if value.dtype == np.bool_:  # a decided comparison of a symbolic vector
            self.known[n["id"]] = value
            n["op"], n["attrs"], n["shape"] = "Constant", {"value": value_to_json(value)}, list(value.shape)
            n.pop("inputs", None)
        elif any(isinstance(d, str) for d in value.reshape(-1)):
            self.symbolic[n["id"]] = value
        else:  # the static part of a dynamic shape (a head count): a constant
            value = value.astype(_INTS.get(n.get("dtype"), np.int64))
            self.known[n["id"]] = value
            n["op"], n["attrs"], n["shape"] = "Constant", {"value": value_to_json(value)}, list(value.shape)
            n.pop("inputs", None)

    def name_dims(self, n: dict, dims: list) -> None:
        """Give `n`'s unknown dims the sizes or symbols its target names (-1: not known)."""
        got = [None if d == -1 else d for d in dims]
        merged = merge_shapes(n.get("shape"), got) if len(got) == len(n.get("shape") or got) else None
        if merged is not None:
            n["shape"] = merged

    def writable(self, new: list) -> Optional[list]:
        """A Reshape target as new_shape: the inputs' symbols as they are, one other symbol as -1 (when there is no
        -1 yet); None where more than that is left (no run would be sure to bind those symbols)."""
        other = [k for k, d in enumerate(new) if isinstance(d, str) and d not in self.bound]
        if not other:
            return list(new)
        if len(other) == 1 and -1 not in new:
            return [-1 if k == other[0] else d for k, d in enumerate(new)]
        return None

    def name_slice_to_symbol(self, n: dict, src: list, parts: list) -> None:
        """A slice from 0 to a dim symbol S along a static axis of size D (position ids or a causal table cut to
        the sequence length) has min(D, S) there: named "Min(D, S)", as torch names it (shapes.broadcast knows
        that a valid broadcast of it against S is S). It stays OnnxSlice: RLX's Narrow has a static length."""
        starts, ends = parts[0], parts[1]
        axes = parts[2] if len(parts) > 2 else list(range(len(starts)))
        steps = parts[3] if len(parts) > 3 else [1] * len(starts)
        if len(starts) != 1 or steps != [1] or starts != [0] or not isinstance(ends[0], str):
            return
        axis = _axis(int(axes[0]), len(src))
        if not isinstance(src[axis], int) or src[axis] <= 1:
            return
        self.name_dims(n, [f"Min({src[axis]}, {ends[0]})" if k == axis else d for k, d in enumerate(src)])

    def target(self, i: int) -> Optional[list]:
        """Node `i`'s value as a shape target: a list of sizes and dim symbols, or None where it is not known."""
        v = self.vector(i)
        return None if v is None else [d if isinstance(d, str) else int(d) for d in v.reshape(-1)]

    def lift_onnx_op(self, n: dict) -> None:
        op, ins = n["op"], n.get("inputs", [])
        src = self.shape(ins[0]) if ins else None
        if op == "OnnxReshape" and len(ins) == 2 and self.target(ins[1]) is not None:
            new = self.target(ins[1])
            if not n.get("attrs", {}).get("allowzero", 0):
                if 0 in new and not (src is not None and all(k < len(src) and src[k] is not None
                                                             for k, d in enumerate(new) if d == 0)):
                    return
                new = [src[k] if d == 0 else d for k, d in enumerate(new)]
            new = _solve_minus_one(src, new)
            written = self.writable(new)
            self.name_dims(n, new)
            if written is None:  # the shape is known; the target names a symbol no run is sure to bind
                return
            n["op"], n["attrs"], n["inputs"] = "Reshape", {"new_shape": written}, [ins[0]]  # symbols: a dim_list
        elif op == "OnnxExpand" and len(ins) == 2 and self.target(ins[1]) is not None:
            target = expand_target(src, self.target(ins[1]))
            if target is None:
                return
            aligned = len(src) == len(target)
            self.name_dims(n, [src[k] if aligned and d == -1 else d for k, d in enumerate(target)])
            keep = [-1 if aligned and isinstance(d, str) and src[k] == d else d for k, d in enumerate(target)]
            if any(isinstance(d, str) and d not in self.bound for d in keep):
                return
            n["op"], n["attrs"], n["inputs"] = "Expand", {"target_shape": keep}, [ins[0]]
        elif op == "OnnxSlice" and len(ins) in (3, 4, 5) and src is not None and \
                all(self.target(i) is not None for i in ins[1:]) and not all(i in self.known for i in ins[1:]):
            self.name_slice_to_symbol(n, src, [self.target(i) for i in ins[1:]])
            return
        elif op == "OnnxSlice" and len(ins) in (3, 4, 5) and all(i in self.known for i in ins[1:]) and src is not None:
            parts = [[int(v) for v in self.known[i].reshape(-1)] for i in ins[1:]]
            starts, ends = parts[0], parts[1]
            axes = parts[2] if len(parts) > 2 else list(range(len(starts)))
            steps = parts[3] if len(parts) > 3 else [1] * len(starts)
            if len(starts) != 1 or steps != [1]:
                return
            axis = _axis(axes[0], len(src))
            dim = src[axis]
            if not isinstance(dim, int):  # only the sliced axis needs a static size
                return
            s = max(0, min(dim, starts[0] + dim if starts[0] < 0 else starts[0]))
            e = max(0, min(dim, ends[0] + dim if ends[0] < 0 else ends[0]))
            n["op"], n["attrs"], n["inputs"] = "Narrow", {"axis": axis, "start": s, "len": max(0, e - s)}, [ins[0]]
        else:
            return
        shape = n.get("shape")
        got = computed_shape(n, [self.shape(i) for i in n["inputs"]])
        if got is not None and all(isinstance(d, int) for d in got):
            n["shape"] = got
        elif shape is not None:
            n["shape"] = merge_shapes(shape, got)


def _symbolic_eq(a: np.ndarray, b: np.ndarray) -> Optional[np.ndarray]:
    """Elementwise a == b over sizes and dim symbols where it is decided: the same symbol is equal, a symbol (a
    size, never negative) is not a negative number; None where any element is not decided."""
    out = []
    xs, ys = (v.reshape(-1) for v in np.broadcast_arrays(a, b))
    for x, y in zip(xs, ys):
        if isinstance(x, str) or isinstance(y, str):
            if x == y:
                out.append(True)
            elif (not isinstance(x, str) and x < 0) or (not isinstance(y, str) and y < 0):
                out.append(False)
            else:
                return None
        else:
            out.append(int(x) == int(y))
    return np.array(out, dtype=np.bool_).reshape(np.broadcast_shapes(a.shape, b.shape))


def _solve_minus_one(src: Optional[list], new: list) -> list:
    """A Reshape target's -1 as a size where the input's symbols all reappear in the target (they cancel), so the
    -1 is the quotient of the static sizes: [B, S, 16] -> [B, S, -1, 8] has -1 = 2."""
    if src is None or new.count(-1) != 1 or any(d is None for d in src):
        return new
    syms = sorted(d for d in src if isinstance(d, str))
    if syms != sorted(d for d in new if isinstance(d, str)):
        return new
    have = int(np.prod([d for d in src if isinstance(d, int)], dtype=np.int64))
    rest = int(np.prod([d for d in new if isinstance(d, int) and d != -1], dtype=np.int64))
    if rest <= 0 or have % rest:
        return new
    return [have // rest if d == -1 else d for d in new]


def propagate(nodes: list[dict]) -> None:
    """Constant propagation over the converter's node list (in place, topological order kept)."""
    Propagator(nodes).run()
