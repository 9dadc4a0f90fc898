"""The interpreter op table: register_op and the helpers op semantics share (attributes, axes, indices)."""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..errors import GraphError
from ..graph import Node
from .numerics import feature_axis


OpFn = Callable[..., np.ndarray]  # fn(interpreter, node, args) -> value


OPS: dict[str, OpFn] = {}


def register_op(*names: str):
    """Decorator: gives ops `names` the semantics ``fn(interpreter, node, args) -> ndarray`` (args float64).
    For ops outside RLX's vocabulary (for example the ONNX importer's); an existing op is replaced."""
    def register(fn: OpFn) -> OpFn:
        for name in names:
            OPS[name] = fn
        return fn
    return register



# The most elements one value may have, by default (Interpreter(max_elements=...) overrides it): 2^28, 1 GiB of
# float32 (2 GiB as the interpreter's float64). Checked before allocating, from the declared or computed size.
MAX_ELEMENTS = 2**28


def check_elements(it, node: Node, shape) -> None:
    """GraphError when a value of `shape` (a shape, or an element count) would exceed the interpreter's limit."""
    count = int(np.prod([int(d) for d in shape], dtype=object)) if not isinstance(shape, (int, np.integer)) else int(shape)
    limit = getattr(it, "max_elements", MAX_ELEMENTS)
    if count > limit:
        raise GraphError(f"node {node.id} ({node.op}): a value of {count} elements is over the interpreter's limit "
                         f"of {limit} (max_elements)")


def node_attr(node: Node, name: str, default=...):
    if name in node.attrs:
        return node.attrs[name]
    if default is ...:
        raise ValueError(f"missing attribute {name!r}")
    return default


def norm_axis(x: np.ndarray, axis: int) -> int:
    return feature_axis(x, int(axis))


def checked_indices(idx: np.ndarray, size: int, what: str) -> np.ndarray:
    """f32-encoded indices as int64, checked to lie in [−size, size) (negative counts from the end, as ONNX)."""
    idx = np.asarray(idx)
    if idx.size and not np.all(np.isfinite(idx) & (idx == np.round(idx))):
        raise ValueError(f"{what} must be whole numbers")
    ints = idx.astype(np.int64)
    if ints.size and (ints.min() < -size or ints.max() >= size):
        raise ValueError(f"{what} out of range: values in [{ints.min()}, {ints.max()}] for a dim of size {size}")
    return np.where(ints < 0, ints + size, ints)
