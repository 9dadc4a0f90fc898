"""Op semantics: reshape, transpose, slicing, concat, gather, scatter, reductions, top-k, sampling."""

from __future__ import annotations

import numpy as np

from .numerics import softmax
from .optable import check_elements, checked_indices, node_attr, norm_axis, register_op


def _dims(it, node, name: str) -> list[int]:
    """A dim-list attribute's sizes: each symbol is the size bound to it from an earlier value's shape."""
    out = []
    for d in node_attr(node, name):
        if isinstance(d, str):
            if d not in it.dims:
                raise ValueError(f"{name} names the symbol {d!r}, which no earlier value's shape bound")
            d = it.dims[d]
        out.append(int(d))
    return out


@register_op("Reshape")
def _reshape(it, node, args):
    x = args[0]
    new = _dims(it, node, "new_shape")
    if sum(d == -1 for d in new) > 1 or any(d < -1 for d in new):
        raise ValueError(f"new_shape {new} may hold one -1 and no other negative dim")
    known = int(np.prod([d for d in new if d != -1]))
    if -1 in new:
        if known == 0 or x.size % known:
            raise ValueError(f"cannot infer the -1 of new_shape {new} for {x.size} elements")
        new[new.index(-1)] = x.size // known
    if int(np.prod(new)) != x.size:
        raise ValueError(f"cannot reshape {list(x.shape)} ({x.size} elements) to {new}")
    return x.reshape(new)


@register_op("Transpose")
def _transpose(it, node, args):
    perm = [int(p) for p in node_attr(node, "perm")]
    if sorted(p % max(args[0].ndim, 1) for p in perm) != list(range(args[0].ndim)):
        raise ValueError(f"perm {perm} is not a permutation of the {args[0].ndim} axes")
    return np.transpose(args[0], perm)


def _slice_along(x: np.ndarray, axis: int, index) -> np.ndarray:
    full = [slice(None)] * x.ndim
    full[axis] = index
    return x[tuple(full)]


@register_op("Narrow")
def _narrow(it, node, args):
    x = args[0]
    axis = norm_axis(x, node_attr(node, "axis"))
    start, length = int(node_attr(node, "start")), int(node_attr(node, "len"))
    if start < 0 or length < 0 or start + length > x.shape[axis]:
        raise ValueError(f"[{start}, {start + length}) is outside axis {axis} of size {x.shape[axis]}")
    return _slice_along(x, axis, slice(start, start + length))


@register_op("Slice")
def _slice(it, node, args):
    x = args[0]
    axis = norm_axis(x, node_attr(node, "axis"))
    start, length, step = int(node_attr(node, "start")), int(node_attr(node, "len")), int(node_attr(node, "step", 1))
    if step <= 0 or start < 0 or length < 0 or (length and start + (length - 1) * step >= x.shape[axis]):
        raise ValueError(f"{length} elements from {start} in steps of {step} do not fit axis {axis} "
                         f"of size {x.shape[axis]}")
    return _slice_along(x, axis, slice(start, start + length * step, step) if length else slice(0, 0))


@register_op("Concat")
def _concat(it, node, args):
    return np.concatenate(args, axis=norm_axis(args[0], node_attr(node, "axis")))


@register_op("Expand")
def _expand(it, node, args):
    x = args[0]
    target = _dims(it, node, "target_shape")
    if len(target) < x.ndim:
        raise ValueError(f"target_shape {target} has fewer dims than the input {list(x.shape)}")
    lead = len(target) - x.ndim
    shape = [x.shape[i - lead] if d == -1 and i >= lead else d for i, d in enumerate(target)]  # -1 keeps the dim
    check_elements(it, node, np.broadcast_shapes(x.shape, tuple(shape)))
    return np.broadcast_to(x, shape).copy()


@register_op("Gather")
def _gather(it, node, args):
    table, idx = args
    axis = norm_axis(table, node_attr(node, "axis", 0))
    return np.take(table, checked_indices(idx, table.shape[axis], "indices"), axis=axis)


@register_op("Reverse")
def _reverse(it, node, args):
    axes = tuple(norm_axis(args[0], a) for a in node_attr(node, "axes"))
    return np.flip(args[0], axis=axes) if axes else args[0]


@register_op("ScatterAdd")
def _scatter_add(it, node, args):
    updates, idx = args
    if node.shape is None or not node.shape or not isinstance(node.shape[0], int):
        if node.shape and isinstance(node.shape[0], str) and node.shape[0] in it.dims:
            out_dim = it.dims[node.shape[0]]
        else:
            raise ValueError("ScatterAdd takes its output size from the node's shape, which is missing or unbound")
    else:
        out_dim = node.shape[0]
    rows = checked_indices(idx, out_dim, "indices")
    if rows.shape != updates.shape[:1]:
        raise ValueError(f"indices {list(rows.shape)} must be [num_updates] for updates {list(updates.shape)}")
    out = np.zeros((out_dim,) + updates.shape[1:], dtype=np.result_type(updates, np.float64))
    np.add.at(out, rows, updates)
    return out


REDUCE = {"Sum": np.sum, "Mean": np.mean, "Max": np.max, "Min": np.min, "Prod": np.prod}


@register_op("Reduce")
def _reduce(it, node, args):
    x = args[0]
    axes = tuple(sorted({norm_axis(x, a) for a in node_attr(node, "axes")}))
    return REDUCE[node_attr(node, "op")](x, axis=axes, keepdims=bool(node_attr(node, "keep_dim", False)))


@register_op("Cumsum")
def _cumsum(it, node, args):
    x = args[0]
    axis = norm_axis(x, node_attr(node, "axis"))
    out = np.cumsum(x, axis=axis)
    if node_attr(node, "exclusive", False):
        out = out - x
    return out


@register_op("ArgMax", "ArgMin")
def _arg(it, node, args):
    x = args[0]
    axis = norm_axis(x, node_attr(node, "axis"))
    fn = np.argmax if node.op == "ArgMax" else np.argmin  # the first index on ties
    return fn(x, axis=axis, keepdims=bool(node_attr(node, "keep_dim", False))).astype(np.float64)  # f32-encoded


@register_op("TopK")
def _topk(it, node, args):
    x = args[0]
    k = int(node_attr(node, "k"))
    if not 0 <= k <= x.shape[-1]:
        raise ValueError(f"k={k} is outside [0, {x.shape[-1]}]")
    order = np.argsort(-x, axis=-1, kind="stable")  # largest first, the smaller index first on ties
    return order[..., :k].astype(np.float64)


@register_op("Sample")
def _sample(it, node, args):
    logits = np.asarray(args[0], dtype=np.float64)
    top_k, top_p = int(node_attr(node, "top_k")), float(node_attr(node, "top_p"))
    temperature, seed = float(node_attr(node, "temperature")), int(node_attr(node, "seed"))
    rows = logits.reshape(-1, logits.shape[-1])
    if temperature <= 0 or top_k == 1:
        return np.argmax(logits, axis=-1).astype(np.float64)
    z = rows / temperature
    if 0 < top_k < z.shape[1]:
        kth = -np.sort(-z, axis=1)[:, top_k - 1:top_k]
        z = np.where(z >= kth, z, -np.inf)
    p = softmax(z, -1)
    if top_p < 1.0:
        order = np.argsort(-p, axis=1, kind="stable")
        sorted_p = np.take_along_axis(p, order, axis=1)
        keep_sorted = np.cumsum(sorted_p, axis=1) - sorted_p < top_p  # the smallest prefix reaching top_p
        keep = np.zeros_like(keep_sorted)
        np.put_along_axis(keep, order, keep_sorted, axis=1)
        p = np.where(keep, p, 0.0)
        p /= p.sum(axis=1, keepdims=True)
    u = np.random.default_rng(seed).random(len(p))
    picks = np.minimum((np.cumsum(p, axis=1) < u[:, None]).sum(axis=1), p.shape[1] - 1)
    return picks.reshape(logits.shape[:-1]).astype(np.float64)
