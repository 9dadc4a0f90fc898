"""Reference semantics (numpy, float64) of the ONNX-only ops that the ONNX importer emits, for the interpreter."""

from __future__ import annotations

import numpy as np

from ..interpret.numerics import erf
from ..interpret.optable import check_elements, register_op


def _ints(v) -> list[int]:
    return [int(x) for x in np.asarray(v).reshape(-1)]


def _attr_or_input(node, args, name: str, index: int):
    if name in node.attrs:
        return node.attrs[name]
    return _ints(args[index]) if len(args) > index else None


@register_op("Gemm")
def _gemm(it, node, args):
    a, b = args[0], args[1]
    if node.attrs.get("transA", 0):
        a = a.T
    if node.attrs.get("transB", 0):
        b = b.T
    y = float(node.attrs.get("alpha", 1.0)) * (a @ b)
    if len(args) > 2:
        y = y + float(node.attrs.get("beta", 1.0)) * args[2]
    return y


@register_op("Unsqueeze")
def _unsqueeze(it, node, args):
    x, axes = args[0], _attr_or_input(node, args, "axes", 1)
    rank = x.ndim + len(axes)
    for a in sorted(a + rank if a < 0 else a for a in axes):
        x = np.expand_dims(x, a)
    return x


@register_op("Squeeze")
def _squeeze(it, node, args):
    x, axes = args[0], _attr_or_input(node, args, "axes", 1)
    if axes is None:
        return np.squeeze(x)
    return np.squeeze(x, axis=tuple(a + x.ndim if a < 0 else a for a in axes))


@register_op("Flatten")
def _flatten(it, node, args):
    x = args[0]
    axis = node.attrs.get("axis", 1)
    axis = axis + x.ndim if axis < 0 else axis
    return x.reshape(int(np.prod(x.shape[:axis], dtype=np.int64)), -1)


@register_op("Shape")
def _shape(it, node, args):
    start, end = node.attrs.get("start", 0), node.attrs.get("end")
    dims = list(args[0].shape)
    return np.array(dims[start:end] if end is not None else dims[start:], dtype=np.float64)


@register_op("ConstantOfShape")
def _constant_of_shape(it, node, args):
    shape = _attr_or_input(node, args, "shape", 0)
    value = node.attrs.get("value", 0.0)
    value = np.asarray(value, dtype=np.float64).reshape(-1)[0] if np.size(value) else 0.0
    check_elements(it, node, shape)
    return np.full(shape, value, dtype=np.float64)


@register_op("Range")
def _range(it, node, args):
    vals = [node.attrs[k] if k in node.attrs else float(np.asarray(args[i]).reshape(-1)[0])
            for i, k in enumerate(("start", "limit", "delta"))]
    start, limit, delta = (float(v) for v in vals)
    if delta == 0 or not np.isfinite([start, limit, delta]).all():
        raise ValueError(f"Range({start}, {limit}, {delta}) is not a finite range")
    check_elements(it, node, max(0, int(np.ceil((limit - start) / delta))))
    return np.arange(start, limit, delta, dtype=np.float64)


@register_op("Trilu")
def _trilu(it, node, args):
    k = node.attrs["k"] if "k" in node.attrs else (int(np.asarray(args[1]).reshape(-1)[0]) if len(args) > 1 else 0)
    return np.triu(args[0], k) if node.attrs.get("upper", 1) else np.tril(args[0], k)


_UNARY = {
    "Erf": erf, "Reciprocal": lambda x: 1.0 / x, "Floor": np.floor, "Ceil": np.ceil, "Sign": np.sign,
    "IsNaN": lambda x: np.isnan(x).astype(np.float64), "Not": lambda x: (x == 0).astype(np.float64),
}
_BINARY = {
    "And": lambda a, b: ((a != 0) & (b != 0)).astype(np.float64),
    "Or": lambda a, b: ((a != 0) | (b != 0)).astype(np.float64),
    "Xor": lambda a, b: ((a != 0) ^ (b != 0)).astype(np.float64),
}


@register_op(*_UNARY)
def _unary(it, node, args):
    return _UNARY[node.op](args[0])


@register_op(*_BINARY)
def _binary(it, node, args):
    return _BINARY[node.op](args[0], args[1])


@register_op("IsInf")
def _isinf(it, node, args):
    x = args[0]
    neg, pos = node.attrs.get("detect_negative", 1), node.attrs.get("detect_positive", 1)
    return ((np.isneginf(x) & bool(neg)) | (np.isposinf(x) & bool(pos))).astype(np.float64)


@register_op("GatherND")
def _gather_nd(it, node, args):
    data, idx = args[0], np.asarray(args[1]).astype(np.int64)
    b = node.attrs.get("batch_dims", 0)
    if b:
        return np.stack([_gather_nd_0(d, i) for d, i in zip(data.reshape(-1, *data.shape[b:]),
                                                             idx.reshape(-1, *idx.shape[b:]))]).reshape(
            *idx.shape[:b], *_gather_nd_0(data.reshape(-1, *data.shape[b:])[0],
                                          idx.reshape(-1, *idx.shape[b:])[0]).shape)
    return _gather_nd_0(data, idx)


def _gather_nd_0(data, idx):
    k = idx.shape[-1]
    flat = idx.reshape(-1, k)
    out = np.stack([data[tuple(np.where(r < 0, r + np.array(data.shape[:k]), r))] for r in flat])
    return out.reshape(*idx.shape[:-1], *data.shape[k:])


@register_op("Tile")
def _tile(it, node, args):
    reps = _attr_or_input(node, args, "repeats", 1)
    check_elements(it, node, args[0].size * int(np.prod([max(int(r), 0) for r in reps], dtype=object)))
    return np.tile(args[0], reps)


@register_op("Mean")
def _mean(it, node, args):
    return sum(args) / len(args)


@register_op("OnnxReshape")
def _onnx_reshape(it, node, args):
    x, shape = args[0], _ints(args[1])
    if not node.attrs.get("allowzero", 0):
        shape = [x.shape[k] if d == 0 else d for k, d in enumerate(shape)]
    return x.reshape(shape)


@register_op("OnnxExpand")
def _onnx_expand(it, node, args):
    x = args[0]
    shape = np.broadcast_shapes(x.shape, tuple(_ints(args[1])))
    check_elements(it, node, shape)
    return np.broadcast_to(x, shape).copy()


@register_op("GatherElements")
def _gather_elements(it, node, args):
    data, idx = args[0], np.asarray(args[1]).astype(np.int64)
    axis = int(node.attrs.get("axis", 0))
    axis = axis + data.ndim if axis < 0 else axis
    idx = np.where(idx < 0, idx + data.shape[axis], idx)
    return np.take_along_axis(data, idx, axis=axis)


@register_op("OnnxConv")
def _onnx_conv(it, node, args):
    """ONNX Conv on N spatial dims (explicit pads; auto_pad SAME_* computed as ONNX does), grouped, biased."""
    x, w = args[0], args[1]
    n_sp = x.ndim - 2
    strides = node.attrs.get("strides") or [1] * n_sp
    dil = node.attrs.get("dilations") or [1] * n_sp
    kernel = list(w.shape[2:])
    pads = list(node.attrs.get("pads") or [0] * (2 * n_sp))
    auto = node.attrs.get("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        for a in range(n_sp):
            out = -(-x.shape[2 + a] // strides[a])
            total = max(0, (out - 1) * strides[a] + (kernel[a] - 1) * dil[a] + 1 - x.shape[2 + a])
            lo = total // 2 if auto == "SAME_UPPER" else total - total // 2
            pads[a], pads[a + n_sp] = lo, total - lo
    elif auto == "VALID":
        pads = [0] * (2 * n_sp)
    xp = np.pad(x, [(0, 0), (0, 0)] + [(pads[a], pads[a + n_sp]) for a in range(n_sp)])
    spans = [(k - 1) * d + 1 for k, d in zip(kernel, dil)]
    win = np.lib.stride_tricks.sliding_window_view(xp, spans, axis=tuple(range(2, 2 + n_sp)))
    win = win[(slice(None), slice(None)) + tuple(slice(None, None, s) for s in strides)
              + tuple(slice(None, None, d) for d in dil)]
    g = int(node.attrs.get("group", 1))
    nb, c = win.shape[:2]
    sp = win.shape[2:2 + n_sp]
    win = win.reshape(nb, g, c // g, *sp, -1)
    wg = w.reshape(g, w.shape[0] // g, w.shape[1], -1)
    y = np.einsum("ngc...k,gock->ngo...", win, wg).reshape(nb, w.shape[0], *sp)
    if len(args) > 2:
        y = y + args[2].reshape(1, -1, *([1] * n_sp))
    return y


@register_op("OnnxSlice")
def _onnx_slice(it, node, args):
    """ONNX Slice: starts, ends, axes, steps from attributes or inputs; clamped as ONNX clamps them."""
    x = args[0]
    starts = _attr_or_input(node, args, "starts", 1)
    ends = _attr_or_input(node, args, "ends", 2)
    axes = _attr_or_input(node, args, "axes", 3)
    steps = _attr_or_input(node, args, "steps", 4)
    axes = list(range(len(starts))) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    index = [slice(None)] * x.ndim
    for a, s, e, st in zip(axes, starts, ends, steps):
        a = a + x.ndim if a < 0 else a
        n = x.shape[a]
        s = max(-n - 1, min(n, s))
        e = max(-n - 1, min(n, e))  # INT64_MAX / INT64_MIN ends become the dim's edges
        index[a] = slice(s, e if e >= -n else None, st) if st < 0 else slice(max(s, -n), e, st)
    return x[tuple(index)]


@register_op("Clip")
def _clip(it, node, args):
    lo = node.attrs["min"] if "min" in node.attrs else (float(np.asarray(args[1]).reshape(-1)[0]) if len(args) > 1 else None)
    hi = node.attrs["max"] if "max" in node.attrs else (float(np.asarray(args[2]).reshape(-1)[0]) if len(args) > 2 else None)
    x = args[0]
    if lo is not None:
        x = np.maximum(x, float(lo))
    if hi is not None:
        x = np.minimum(x, float(hi))
    return x

