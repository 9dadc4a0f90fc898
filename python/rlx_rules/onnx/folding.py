"""Constant folding at import: shape computations (Shape, Unsqueeze, Reshape, Slice, ...) evaluated on static values."""

from __future__ import annotations

import numpy as np

from .common import DTYPES, norm_axis, onnx


FOLD_MAX = 1024


class NoFold(Exception):
    pass


def fold_int_list(a) -> list[int]:
    return [int(x) for x in np.asarray(a).reshape(-1)]


def _fold_shape(c, at, x):
    start, end = at.get("start", 0), at.get("end")
    return x[start:end] if end is not None else x[start:]


def _fold_unsqueeze(c, at, x, axes=None):
    axes = fold_int_list(axes) if axes is not None else at.get("axes")
    if axes is None:
        raise NoFold
    rank = x.ndim + len(axes)
    for a in sorted(norm_axis(a, rank) for a in axes):
        x = np.expand_dims(x, a)
    return x


def _fold_squeeze(c, at, x, axes=None):
    axes = fold_int_list(axes) if axes is not None else at.get("axes")
    if axes is None:
        return np.squeeze(x)
    return np.squeeze(x, axis=tuple(norm_axis(a, x.ndim) for a in axes))


def _fold_reshape(c, at, x, shape):
    new = fold_int_list(shape)
    if not at.get("allowzero", 0):
        new = [x.shape[k] if d == 0 else d for k, d in enumerate(new)]
    return x.reshape(new)


def _fold_cast(c, at, x):
    to = at["to"]
    if to in (8, 16) or to not in DTYPES:  # strings, bfloat16: not folded
        raise NoFold
    return x.astype(onnx.helper.tensor_dtype_to_np_dtype(to))


def _fold_div(c, at, a, b):
    if np.issubdtype(a.dtype, np.integer) and np.issubdtype(b.dtype, np.integer):
        if np.any(b == 0):
            raise NoFold
        q = np.abs(a) // np.abs(b)  # ONNX truncates toward zero; numpy's // floors
        return np.where((a < 0) != (b < 0), -q, q).astype(np.result_type(a, b))
    if not (np.issubdtype(a.dtype, np.floating) and np.issubdtype(b.dtype, np.floating)):
        raise NoFold
    return a / b


def _fold_range(c, at, start, limit, delta):
    return np.arange(start.reshape(()), limit.reshape(()), delta.reshape(()), dtype=start.dtype)


def _fold_expand(c, at, x, shape):
    return np.broadcast_to(x, np.broadcast_shapes(x.shape, tuple(fold_int_list(shape)))).copy()


def _fold_slice(c, at, x, starts, ends, axes=None, steps=None):
    starts, ends = fold_int_list(starts), fold_int_list(ends)
    axes = fold_int_list(axes) if axes is not None else list(range(len(starts)))
    steps = fold_int_list(steps) if steps is not None else [1] * len(starts)
    index = [slice(None)] * x.ndim
    for a, s, e, st in zip(axes, starts, ends, steps):
        index[norm_axis(a, x.ndim)] = slice(s, e, st)
    return x[tuple(index)]


def _fold_flatten(c, at, x):
    axis = norm_axis(at.get("axis", 1), x.ndim)
    return x.reshape(int(np.prod(x.shape[:axis], dtype=np.int64)), -1)


FOLDERS = {
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
    "ConstantOfShape": lambda c, at, shape: None,  # folded in Converter.fold: needs the value's dtype
    "Range": _fold_range,
    "Expand": _fold_expand,
    "Slice": _fold_slice,
}
