"""Op semantics: convolution, pooling and resizing over NCHW images."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .ops_shape import REDUCE
from .optable import node_attr, register_op


def _pads(padding: Sequence[int]) -> tuple[int, int, int, int]:
    """[ph, pw] (both sides) or [top, left, bottom, right] (ONNX order)."""
    p = [int(v) for v in padding]
    if len(p) == 2:
        return p[0], p[1], p[0], p[1]
    if len(p) == 4:
        return p[0], p[1], p[2], p[3]
    raise ValueError(f"padding must have 2 or 4 values, got {p}")


def _pair(v: Sequence[int], what: str) -> tuple[int, int]:
    v = [int(x) for x in v]
    if len(v) == 1:
        return v[0], v[0]
    if len(v) != 2:
        raise ValueError(f"{what} must have 1 or 2 values for a 2-D op, got {v}")
    return v[0], v[1]


def _windows(x: np.ndarray, kernel, stride, dilation, pads, fill: float) -> np.ndarray:
    """[N, C, Ho, Wo, kh, kw] windows of a padded NCHW `x`."""
    if x.ndim != 4:
        raise ValueError(f"expects an NCHW input, got shape {list(x.shape)}")
    t, l, b, r = pads
    xp = np.pad(x, ((0, 0), (0, 0), (t, b), (l, r)), constant_values=fill)
    (kh, kw), (sh, sw), (dh, dw) = kernel, stride, dilation
    span_h, span_w = (kh - 1) * dh + 1, (kw - 1) * dw + 1
    if xp.shape[2] < span_h or xp.shape[3] < span_w:
        raise ValueError(f"the kernel {kh}x{kw} (dilation {dh}x{dw}) is larger than the padded input")
    win = np.lib.stride_tricks.sliding_window_view(xp, (span_h, span_w), axis=(2, 3))
    return win[:, :, ::sh, ::sw, ::dh, ::dw]


@register_op("Conv")
def _conv(it, node, args):
    x, w = args
    groups = int(node_attr(node, "groups", 1))
    kernel = _pair(node_attr(node, "kernel_size"), "kernel_size")
    if w.ndim != 4 or tuple(w.shape[2:]) != kernel or x.shape[1] != w.shape[1] * groups or w.shape[0] % groups:
        raise ValueError(f"weight {list(w.shape)} does not fit input {list(x.shape)} with groups={groups} "
                         f"and kernel_size {list(kernel)} (weight [C_out, C_in/groups, kH, kW])")
    win = _windows(x, kernel, _pair(node_attr(node, "stride", [1, 1]), "stride"),
                   _pair(node_attr(node, "dilation", [1, 1]), "dilation"), _pads(node_attr(node, "padding", [0, 0])), 0.0)
    n, c, ho, wo = win.shape[:4]
    win = win.reshape(n, groups, c // groups, ho, wo, *kernel)
    wg = w.reshape(groups, w.shape[0] // groups, *w.shape[1:])
    return np.einsum("ngchwij,gocij->ngohw", win, wg).reshape(n, w.shape[0], ho, wo)


_POOL_FILL = {"Sum": 0.0, "Mean": 0.0, "Max": -np.inf, "Min": np.inf, "Prod": 1.0}


@register_op("Pool")
def _pool(it, node, args):
    kind = node_attr(node, "kind")
    kernel = _pair(node_attr(node, "kernel_size"), "kernel_size")
    win = _windows(args[0], kernel, _pair(node_attr(node, "stride", list(kernel)), "stride"), (1, 1),
                   _pads(node_attr(node, "padding", [0, 0])), _POOL_FILL[kind])
    return REDUCE[kind](win, axis=(4, 5))  # Mean counts the padding (PyTorch's count_include_pad=True)


@register_op("ResizeNearest2x")
def _resize(it, node, args):
    x = args[0]
    if x.ndim != 4:
        raise ValueError(f"expects an NCHW input, got shape {list(x.shape)}")
    return x.repeat(2, axis=2).repeat(2, axis=3)
