"""The reference interpreter: runs a graph with numpy, one op at a time, with RLX's semantics, to prove rewrites keep values."""

from __future__ import annotations

import math
import os
from typing import Callable, Mapping, Optional, Sequence, Union

import numpy as np

from . import facts
from .errors import GraphError
from .graph import Graph, Node, load_graph

__all__ = [
    "BACKENDS", "Interpreter", "UnsupportedOpError", "attention", "erf", "erfc", "gelu", "gelu_approx",
    "layer_norm", "load_weights", "random_values", "register_op", "rms_norm", "rope", "run", "sigmoid", "silu", "softmax",
    "supported_ops",
]

BACKENDS = ("numpy", "kernels")
MASKED = -1e9  # the score RLX gives a masked key (Custom keep mask, Causal, SlidingWindow)


class UnsupportedOpError(GraphError, NotImplementedError):
    """The interpreter has no semantics for a node's op (or for one of its attribute values)."""


# ── Numerics ─────────────────────────────────────────────────────────────────────────────────────

_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def _erf_series(a: np.ndarray) -> np.ndarray:
    """erf(a) for 0 <= a < 2 from the all-positive series 2/√π·e^(−a²)·Σ 2ⁿa^(2n+1)/(2n+1)!! (no cancellation)."""
    a2 = a * a
    term = a.copy()
    total = a.copy()
    for n in range(1, 60):  # for a < 2 the terms fall below 1e-25 of the sum before n = 60
        term *= 2.0 * a2 / (2 * n + 1)
        total += term
    return _TWO_OVER_SQRT_PI * np.exp(-a2) * total


def _erfc_fraction(a: np.ndarray) -> np.ndarray:
    """erfc(a) for a >= 2 from Laplace's continued fraction e^(−a²)/√π / (a + ½/(a + 1/(a + 3/2/(a + …))))."""
    f = a.copy()
    for n in range(80, 0, -1):
        f = a + (0.5 * n) / f
    return np.exp(-a * a) / (math.sqrt(math.pi) * f)


def _erf_erfc(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(x, dtype=np.float64)
    a = np.abs(x)
    erf_a = np.empty_like(a)
    erfc_a = np.empty_like(a)
    small = a < 2.0
    large = ~small & ~np.isnan(a)
    if small.any():
        erf_a[small] = _erf_series(a[small])
        erfc_a[small] = 1.0 - erf_a[small]
    if large.any():
        with np.errstate(over="ignore", under="ignore"):
            erfc_a[large] = _erfc_fraction(np.minimum(a[large], 1e150))
        erf_a[large] = 1.0 - erfc_a[large]
    nan = np.isnan(a)
    erf_a[nan] = np.nan
    erfc_a[nan] = np.nan
    neg = x < 0
    return np.where(neg, -erf_a, erf_a), np.where(neg, 2.0 - erfc_a, erfc_a)


def erf(x) -> np.ndarray:
    """The error function, vectorized, to about 1e-15 of ``math.erf`` (float64)."""
    return _erf_erfc(x)[0]


def erfc(x) -> np.ndarray:
    """The complementary error function 1 − erf(x), accurate in relative terms for large x."""
    return _erf_erfc(x)[1]


def gelu(x: np.ndarray) -> np.ndarray:
    """Exact-erf GELU, x·Φ(x) = ½·x·erfc(−x/√2) (RLX's ``Gelu``)."""
    return 0.5 * x * erfc(-np.asarray(x, dtype=np.float64) / math.sqrt(2.0))


def gelu_approx(x: np.ndarray) -> np.ndarray:
    """Tanh-approximated GELU, ½·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) (RLX's ``GeluApprox``)."""
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def sigmoid(x: np.ndarray) -> np.ndarray:
    """1/(1 + e^(−x)), without overflow for large |x|."""
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def silu(x: np.ndarray) -> np.ndarray:
    return x * sigmoid(x)


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    shifted = x - np.max(x, axis=axis, keepdims=True)
    e = np.exp(shifted)
    return e / np.sum(e, axis=axis, keepdims=True)


ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "Gelu": gelu,
    "GeluApprox": gelu_approx,
    "Silu": silu,
    "Relu": lambda x: np.maximum(x, 0.0),
    "Sigmoid": sigmoid,
    "Tanh": np.tanh,
    "Exp": np.exp,
    "Log": np.log,
    "Sqrt": np.sqrt,
    "Rsqrt": lambda x: 1.0 / np.sqrt(x),
    "Neg": np.negative,
    "Abs": np.abs,
    "Sin": np.sin,
    "Cos": np.cos,
    "Tan": np.tan,
    "Atan": np.arctan,
    "Round": np.round,  # half to even, like RLX's Round
}


def _feature_axis(x: np.ndarray, axis: int) -> int:
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"axis {axis} is out of range for a rank-{x.ndim} input")
    return axis % x.ndim


def _along(v: np.ndarray, ndim: int, axis: int) -> np.ndarray:
    """A per-feature vector (gamma, beta) shaped to broadcast along `axis` of a rank-`ndim` tensor."""
    v = np.asarray(v)
    if v.ndim <= 1 and axis != ndim - 1:
        shape = [1] * ndim
        shape[axis] = -1
        return v.reshape(shape)
    return v


def layer_norm(x, gamma, beta, eps: float, axis: int = -1) -> np.ndarray:
    """(x − mean)/√(var + eps)·γ + β over `axis` (the biased variance, as RLX and PyTorch)."""
    ax = _feature_axis(x, axis)
    mean = x.mean(axis=ax, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=ax, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * _along(gamma, x.ndim, ax) + _along(beta, x.ndim, ax)


def rms_norm(x, gamma, beta, eps: float, axis: int = -1) -> np.ndarray:
    """x/√(mean(x²) + eps)·γ + β over `axis` (RLX's RmsNorm carries a β; pass zeros for the plain form)."""
    ax = _feature_axis(x, axis)
    ms = (x * x).mean(axis=ax, keepdims=True)
    return x / np.sqrt(ms + eps) * _along(gamma, x.ndim, ax) + _along(beta, x.ndim, ax)


def _heads(t: np.ndarray, num_heads: int, head_dim: int, what: str):
    """`t` as [B, H, S, D] plus its layout: "flat" [B, S, H·D] (or [S, H·D]), "bshd" or "bhsd"."""
    if t.ndim == 2:
        t = t[None]
        flat2 = True
    else:
        flat2 = False
    if t.ndim == 3:
        b, s, width = t.shape
        if width % head_dim:
            raise ValueError(f"{what} has last dim {width}, not a multiple of head_dim {head_dim}")
        return t.reshape(b, s, width // head_dim, head_dim).transpose(0, 2, 1, 3), ("flat2" if flat2 else "flat")
    if t.ndim == 4:
        if t.shape[3] != head_dim:
            raise ValueError(f"{what} {list(t.shape)} does not end in head_dim {head_dim}")
        if t.shape[2] == num_heads or t.shape[1] != num_heads:  # RLX: heads at axis 2 is the dominant layout
            return t.transpose(0, 2, 1, 3), "bshd"
        return t, "bhsd"
    raise ValueError(f"{what} must have rank 2, 3 or 4, got shape {list(t.shape)}")


def _unheads(t: np.ndarray, layout: str) -> np.ndarray:
    b, h, s, d = t.shape
    if layout in ("flat", "flat2"):
        out = t.transpose(0, 2, 1, 3).reshape(b, s, h * d)
        return out[0] if layout == "flat2" else out
    return t.transpose(0, 2, 1, 3) if layout == "bshd" else t


def _score_mask(mask: np.ndarray, shape: tuple[int, int, int, int], what: str) -> np.ndarray:
    """A mask or bias broadcast to the scores [B, H, Sq, Sk]: [B, Sk], [B, Sq, Sk] or [B, H, Sq, Sk] (size 1 broadcasts)."""
    m = np.asarray(mask, dtype=np.float64)
    if m.ndim == 2:
        m = m[:, None, None, :]
    elif m.ndim == 3:
        m = m[:, None, :, :]
    elif m.ndim != 4:
        raise ValueError(f"the {what} must be [B, Sk], [B, Sq, Sk] or [B, H, Sq, Sk], got shape {list(np.shape(mask))}")
    try:
        return np.broadcast_to(m, shape)
    except ValueError:
        raise ValueError(f"the {what} of shape {list(np.shape(mask))} does not broadcast to the scores "
                         f"[B, H, Sq, Sk] = {list(shape)}") from None


def attention(q, k, v, mask=None, num_heads: int = 1, head_dim: Optional[int] = None, mask_kind: str = "Custom",
              score_scale: Optional[float] = None, *, window: Optional[int] = None,
              softcap: Optional[float] = None, v_head_dim: Optional[int] = None) -> np.ndarray:
    """RLX's ``Attention``: softmax(mask(softcap(q·kᵀ·scale))) · v, per head.

    q, k, v are [B, S, H·D] (heads split from the last axis), [B, S, H, D] or [B, H, S, D]; the output has q's
    layout. K/V may have fewer heads than Q (grouped-query: each K/V head serves H/H_kv query heads) and more
    positions (KV cache: the Sq queries sit at the end of the Sk keys). `scale` defaults to head_dim^-0.5.
    Masks: ``None``; ``Causal`` (key j is masked for query i when j > i + Sk − Sq); ``SlidingWindow`` (also masked
    when j < i + Sk − Sq − window); ``Custom`` keep mask (scores where mask < 0.5 become −1e9; a fully masked row
    comes out uniform); ``Bias`` (added to the scores).
    """
    head_dim = head_dim or q.shape[-1] // num_heads
    v_dim = v_head_dim or head_dim
    qh, layout = _heads(np.asarray(q), num_heads, head_dim, "q")
    kh, _ = _heads(np.asarray(k), num_heads, head_dim, "k")
    vh, _ = _heads(np.asarray(v), num_heads, v_dim, "v")
    b, h, sq, _ = qh.shape
    if kh.shape[0] != b or vh.shape[0] != b:
        raise ValueError(f"q, k and v have different batch sizes ({b}, {kh.shape[0]}, {vh.shape[0]})")
    if h != num_heads:
        raise ValueError(f"q has {h} heads of {head_dim}, but num_heads is {num_heads}")
    if kh.shape[1] != vh.shape[1] or h % kh.shape[1]:
        raise ValueError(f"k and v have {kh.shape[1]} and {vh.shape[1]} heads; both must divide q's {h}")
    if kh.shape[2] != vh.shape[2]:
        raise ValueError(f"k and v have different lengths ({kh.shape[2]} and {vh.shape[2]})")
    if kh.shape[1] != h:
        kh = np.repeat(kh, h // kh.shape[1], axis=1)
        vh = np.repeat(vh, h // vh.shape[1], axis=1)
    sk = kh.shape[2]
    scale = head_dim ** -0.5 if score_scale is None else score_scale
    scores = (qh @ kh.transpose(0, 1, 3, 2)) * scale
    if softcap is not None:
        scores = softcap * np.tanh(scores / softcap)
    if mask_kind in ("Causal", "SlidingWindow"):
        qpos = np.arange(sq)[:, None] + (sk - sq)
        kpos = np.arange(sk)[None, :]
        masked = kpos > qpos
        if mask_kind == "SlidingWindow":
            if window is None:
                raise ValueError("mask_kind SlidingWindow needs the attribute window")
            masked |= kpos < qpos - window
        scores = np.where(masked, MASKED, scores)
    elif mask_kind == "Custom":
        if mask is None:
            raise ValueError("mask_kind Custom needs the mask input")
        scores = np.where(_score_mask(mask, scores.shape, "keep mask") < 0.5, MASKED, scores)
    elif mask_kind == "Bias":
        if mask is None:
            raise ValueError("mask_kind Bias needs the bias input")
        scores = scores + _score_mask(mask, scores.shape, "bias")
    elif mask_kind != "None":
        raise ValueError(f"unknown mask_kind {mask_kind!r}")
    return _unheads(softmax(scores, -1) @ vh, layout)


def rope(x, cos, sin, head_dim: int, n_rot: Optional[int] = None, style: str = "NeoX") -> np.ndarray:
    """RLX's ``Rope`` on x [B, S, …] (or [S, …]); the trailing dims are heads of `head_dim`.

    The first `n_rot` dims of each head rotate (the rest are copied). ``NeoX`` pairs dim i with i + n_rot/2,
    ``GptJ`` pairs 2i with 2i+1: (x1, x2) → (x1·cos − x2·sin, x2·cos + x1·sin), with cos, sin from row `pos` of
    the [P, W] tables (P ≥ S; rows are positions 0, 1, …; P = B·S ≠ S means one row per token), column i < n_rot/2.
    """
    x = np.asarray(x)
    n_rot = head_dim if n_rot is None else n_rot
    if head_dim <= 0 or n_rot % 2 or not 0 <= n_rot <= head_dim:
        raise ValueError(f"n_rot {n_rot} must be even and at most head_dim {head_dim}")
    squeeze = x.ndim == 2
    xs = x[None] if squeeze else x
    if xs.ndim < 3:
        raise ValueError(f"x must be [S, …] or [B, S, …], got shape {list(x.shape)}")
    b, s = xs.shape[:2]
    rest = int(np.prod(xs.shape[2:]))
    if rest % head_dim:
        raise ValueError(f"x {list(x.shape)}: the dims after [B, S] ({rest}) are not a multiple of head_dim {head_dim}")
    half = n_rot // 2
    cos, sin = np.asarray(cos), np.asarray(sin)
    if cos.shape != sin.shape or cos.ndim < 1:
        raise ValueError(f"cos {list(cos.shape)} and sin {list(sin.shape)} must be tables of the same shape")
    width = cos.shape[-1]
    rows = int(cos.size // max(width, 1))
    if width < half:
        raise ValueError(f"the tables have {width} columns, fewer than n_rot/2 = {half}")
    c2, s2 = cos.reshape(rows, width)[:, :half], sin.reshape(rows, width)[:, :half]
    if rows == b * s and rows != s:
        c2, s2 = c2.reshape(b, s, 1, half), s2.reshape(b, s, 1, half)
    elif rows >= s:
        c2, s2 = c2[:s].reshape(1, s, 1, half), s2[:s].reshape(1, s, 1, half)
    else:
        raise ValueError(f"the tables have {rows} rows, fewer than the sequence length {s}")
    h = xs.reshape(b, s, rest // head_dim, head_dim)
    out = h.astype(np.result_type(h, c2), copy=True)
    if style == "NeoX":
        i1, i2 = slice(0, half), slice(half, n_rot)
    elif style == "GptJ":
        i1, i2 = slice(0, n_rot, 2), slice(1, n_rot, 2)
    else:
        raise ValueError(f"unknown rope style {style!r}")
    x1, x2 = h[..., i1], h[..., i2]
    out[..., i1] = x1 * c2 - x2 * s2
    out[..., i2] = x2 * c2 + x1 * s2
    out = out.reshape(xs.shape)
    return out[0] if squeeze else out


# ── dtypes ───────────────────────────────────────────────────────────────────────────────────────

_FLOAT = {"f16": np.float16, "f32": np.float32, "f64": np.float64, "bf16": None}
_INT = {"i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64,
        "u8": np.uint8, "u16": np.uint16, "u32": np.uint32, "u64": np.uint64}


def _round_bf16(x: np.ndarray) -> np.ndarray:
    """Rounds to bfloat16 (nearest, ties to even) through float32 bits; NaN stays NaN."""
    f = np.asarray(x, dtype=np.float32)
    bits = f.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
    return np.where(np.isnan(f), np.float32("nan"), rounded.view(np.float32)).astype(np.float64)


def cast(x: np.ndarray, to: str) -> np.ndarray:
    """RLX's ``Cast``: the value `x` takes in dtype `to`, held as float64 (floats round to nearest even; integers
    truncate toward zero and saturate, NaN → 0, like Rust's ``as``; ``bool`` is x ≠ 0)."""
    if to in _FLOAT:
        if to == "bf16":
            return _round_bf16(x)
        with np.errstate(over="ignore"):
            return np.asarray(x).astype(_FLOAT[to]).astype(np.float64)
    if to in _INT:
        info = np.iinfo(_INT[to])
        t = np.trunc(np.nan_to_num(np.asarray(x, dtype=np.float64), nan=0.0))
        return np.clip(t, info.min, info.max)
    if to == "bool":
        return (np.asarray(x) != 0).astype(np.float64)
    raise ValueError(f"cannot cast to dtype {to!r} (known: {', '.join([*_FLOAT, *_INT, 'bool'])})")


def _check_dtype(value: np.ndarray, dtype: Optional[str]) -> Optional[str]:
    """Why `value` cannot stand for a tensor of `dtype`, or None when it can."""
    kind = value.dtype.kind
    if kind not in "biuf":
        return f"an array of dtype {value.dtype} is not a tensor of numbers"
    if dtype is None:
        return None
    if dtype in _FLOAT and kind not in "iuf":
        return f"expected {dtype} values, got an array of dtype {value.dtype}"
    if dtype in _INT and kind == "f" and not np.all(np.isfinite(value) & (value == np.round(value))):
        return f"expected {dtype} values, got non-integer floats"
    if dtype == "bool" and not np.all((value == 0) | (value == 1)):
        return "expected bool values (0 or 1)"
    return None


# ── The ops ──────────────────────────────────────────────────────────────────────────────────────

OpFn = Callable[["Interpreter", Node, list], np.ndarray]
_OPS: dict[str, OpFn] = {}
_onnx_ops_loaded = False


def _load_onnx_ops() -> None:
    """The semantics of the ONNX-only ops (rlx_rules.onnx_ops), loaded when a graph first needs one."""
    global _onnx_ops_loaded
    _onnx_ops_loaded = True
    from . import onnx_ops  # noqa: F401 - registers its ops


def register_op(*names: str):
    """Decorator: gives ops `names` the semantics ``fn(interpreter, node, args) -> ndarray`` (args float64).
    For ops outside RLX's vocabulary (for example the ONNX importer's); an existing op is replaced."""
    def register(fn: OpFn) -> OpFn:
        for name in names:
            _OPS[name] = fn
        return fn
    return register


_op = register_op


def supported_ops() -> list[str]:
    """Every op the interpreter can run (Input, Param and Constant included)."""
    if not _onnx_ops_loaded:
        _load_onnx_ops()
    return sorted([*_OPS, "Input", "Param", "Constant"])


def _attr(node: Node, name: str, default=...):
    if name in node.attrs:
        return node.attrs[name]
    if default is ...:
        raise ValueError(f"missing attribute {name!r}")
    return default


def _axis(x: np.ndarray, axis: int) -> int:
    return _feature_axis(x, int(axis))


def _indices(idx: np.ndarray, size: int, what: str) -> np.ndarray:
    """f32-encoded indices as int64, checked to lie in [−size, size) (negative counts from the end, as ONNX)."""
    idx = np.asarray(idx)
    if idx.size and not np.all(np.isfinite(idx) & (idx == np.round(idx))):
        raise ValueError(f"{what} must be whole numbers")
    ints = idx.astype(np.int64)
    if ints.size and (ints.min() < -size or ints.max() >= size):
        raise ValueError(f"{what} out of range: values in [{ints.min()}, {ints.max()}] for a dim of size {size}")
    return np.where(ints < 0, ints + size, ints)


@_op(*ACTIVATIONS)
def _activation(it, node, args):
    return ACTIVATIONS[node.op](args[0])


@_op("StopGradient")
def _identity(it, node, args):
    return args[0]


@_op("Cast")
def _cast(it, node, args):
    return cast(args[0], _attr(node, "to"))


_BINARY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide, "Max": np.maximum,
           "Min": np.minimum, "Pow": np.power}
_COMPARE = {"Eq": np.equal, "Ne": np.not_equal, "Lt": np.less, "Le": np.less_equal, "Gt": np.greater,
            "Ge": np.greater_equal}


@_op(*_BINARY)
def _binary(it, node, args):
    return _BINARY[node.op](args[0], args[1])


@_op(*_COMPARE)
def _compare(it, node, args):
    return _COMPARE[node.op](args[0], args[1]).astype(np.float64)  # bool held as 0.0 / 1.0


@_op("Where")
def _where(it, node, args):
    return np.where(np.asarray(args[0]) != 0, args[1], args[2])


@_op("Fma")
def _fma(it, node, args):
    return args[0] * args[1] + args[2]


@_op("MatMul")
def _matmul(it, node, args):
    return np.matmul(args[0], args[1])


@_op("GroupedMatMul")
def _grouped_matmul(it, node, args):
    x, w, idx = args
    experts = _indices(idx, w.shape[0], "expert_idx")
    if x.ndim != 2 or w.ndim != 3 or experts.shape != (x.shape[0],):
        raise ValueError(f"expects input [M, K], weight [E, K, N], expert_idx [M]; got {list(x.shape)}, "
                         f"{list(w.shape)}, {list(np.shape(idx))}")
    return np.einsum("mk,mkn->mn", x, w[experts])


@_op("LoraMatMul")
def _lora_matmul(it, node, args):
    x, w, a, b = args
    return x @ w + float(_attr(node, "scale")) * ((x @ a) @ b)


@_op("LayerNorm")
def _layer_norm(it, node, args):
    return layer_norm(args[0], args[1], args[2], _attr(node, "eps"), _attr(node, "axis", -1))


@_op("RmsNorm")
def _rms_norm(it, node, args):
    y = rms_norm(args[0], args[1], args[2], _attr(node, "eps"), _attr(node, "axis", -1))
    # RLX's RmsNorm writes its declared shape: FuseRmsNormReshape gives it the flattened shape of the
    # Reshape it absorbed ([prod(leading), H]), the same elements in the same order.
    shape = node.shape
    if shape is not None and y.ndim >= 2 and list(shape) == [int(np.prod(y.shape[:-1])), y.shape[-1]]:
        y = y.reshape(shape)
    return y


def _channels(v: np.ndarray, ndim: int) -> np.ndarray:
    return np.asarray(v).reshape([1, -1] + [1] * (ndim - 2))


@_op("LayerNorm2d")
def _layer_norm_2d(it, node, args):
    x, gamma, beta = args
    if x.ndim < 2:
        raise ValueError(f"expects NCHW input, got shape {list(x.shape)}")
    return layer_norm(x, gamma, beta, _attr(node, "eps"), axis=1)


@_op("GroupNorm")
def _group_norm(it, node, args):
    x, gamma, beta = args
    groups = int(_attr(node, "num_groups"))
    n, c = x.shape[:2]
    if groups <= 0 or c % groups:
        raise ValueError(f"{c} channels do not split into num_groups={groups}")
    g = x.reshape(n, groups, -1)
    mean = g.mean(axis=2, keepdims=True)
    var = ((g - mean) ** 2).mean(axis=2, keepdims=True)
    normed = ((g - mean) / np.sqrt(var + _attr(node, "eps"))).reshape(x.shape)
    return normed * _channels(gamma, x.ndim) + _channels(beta, x.ndim)


@_op("BatchNormInference")
def _batch_norm(it, node, args):
    x, gamma, beta, mean, var = args  # feature axis: the last (RLX)
    return (x - mean) / np.sqrt(var + _attr(node, "eps")) * gamma + beta


@_op("Softmax")
def _softmax(it, node, args):
    return softmax(args[0], _axis(args[0], _attr(node, "axis", -1)))


def _no_mask_input(node: Node, args: list, kind: str):
    if len(args) > 3:
        raise ValueError(f"mask_kind {kind} takes no mask input, but the node has {len(args)} inputs")


@_op("Attention")
def _attention(it, node, args):
    a = node.attrs
    kind = _attr(node, "mask_kind")
    if kind in ("None", "Causal", "SlidingWindow"):
        _no_mask_input(node, args, kind)
    elif len(args) < 4:
        raise ValueError(f"mask_kind {kind} needs a 4th input (the mask), but the node has {len(args)} inputs")
    mask = args[3] if len(args) > 3 else None
    q, k, v = args[:3]
    if it.backend == "kernels" and _kernel_attention_ok(q, k, v, mask, a, kind):
        it.kernel_nodes.append(node.id)
        return _kernel_attention(q, k, v, mask, a, kind)
    return attention(q, k, v, mask, int(_attr(node, "num_heads")), int(_attr(node, "head_dim")), kind,
                     a.get("score_scale"), window=a.get("window"), softcap=a.get("attn_logit_softcap"),
                     v_head_dim=a.get("v_head_dim"))


@_op("Rope")
def _rope(it, node, args):
    return rope(args[0], args[1], args[2], int(_attr(node, "head_dim")), int(_attr(node, "n_rot")),
                _attr(node, "style", "NeoX"))


@_op("Reshape")
def _reshape(it, node, args):
    x = args[0]
    new = [int(d) for d in _attr(node, "new_shape")]
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


@_op("Transpose")
def _transpose(it, node, args):
    perm = [int(p) for p in _attr(node, "perm")]
    if sorted(p % max(args[0].ndim, 1) for p in perm) != list(range(args[0].ndim)):
        raise ValueError(f"perm {perm} is not a permutation of the {args[0].ndim} axes")
    return np.transpose(args[0], perm)


def _slice_along(x: np.ndarray, axis: int, index) -> np.ndarray:
    full = [slice(None)] * x.ndim
    full[axis] = index
    return x[tuple(full)]


@_op("Narrow")
def _narrow(it, node, args):
    x = args[0]
    axis = _axis(x, _attr(node, "axis"))
    start, length = int(_attr(node, "start")), int(_attr(node, "len"))
    if start < 0 or length < 0 or start + length > x.shape[axis]:
        raise ValueError(f"[{start}, {start + length}) is outside axis {axis} of size {x.shape[axis]}")
    return _slice_along(x, axis, slice(start, start + length))


@_op("Slice")
def _slice(it, node, args):
    x = args[0]
    axis = _axis(x, _attr(node, "axis"))
    start, length, step = int(_attr(node, "start")), int(_attr(node, "len")), int(_attr(node, "step", 1))
    if step <= 0 or start < 0 or length < 0 or (length and start + (length - 1) * step >= x.shape[axis]):
        raise ValueError(f"{length} elements from {start} in steps of {step} do not fit axis {axis} "
                         f"of size {x.shape[axis]}")
    return _slice_along(x, axis, slice(start, start + length * step, step) if length else slice(0, 0))


@_op("Concat")
def _concat(it, node, args):
    return np.concatenate(args, axis=_axis(args[0], _attr(node, "axis")))


@_op("Expand")
def _expand(it, node, args):
    x = args[0]
    target = [int(d) for d in _attr(node, "target_shape")]
    if len(target) < x.ndim:
        raise ValueError(f"target_shape {target} has fewer dims than the input {list(x.shape)}")
    lead = len(target) - x.ndim
    shape = [x.shape[i - lead] if d == -1 and i >= lead else d for i, d in enumerate(target)]  # -1 keeps the dim
    return np.broadcast_to(x, shape).copy()


@_op("Gather")
def _gather(it, node, args):
    table, idx = args
    axis = _axis(table, _attr(node, "axis", 0))
    return np.take(table, _indices(idx, table.shape[axis], "indices"), axis=axis)


@_op("Reverse")
def _reverse(it, node, args):
    axes = tuple(_axis(args[0], a) for a in _attr(node, "axes"))
    return np.flip(args[0], axis=axes) if axes else args[0]


@_op("ScatterAdd")
def _scatter_add(it, node, args):
    updates, idx = args
    if node.shape is None or not node.shape or not isinstance(node.shape[0], int):
        if node.shape and isinstance(node.shape[0], str) and node.shape[0] in it.dims:
            out_dim = it.dims[node.shape[0]]
        else:
            raise ValueError("ScatterAdd takes its output size from the node's shape, which is missing or unbound")
    else:
        out_dim = node.shape[0]
    rows = _indices(idx, out_dim, "indices")
    if rows.shape != updates.shape[:1]:
        raise ValueError(f"indices {list(rows.shape)} must be [num_updates] for updates {list(updates.shape)}")
    out = np.zeros((out_dim,) + updates.shape[1:], dtype=np.result_type(updates, np.float64))
    np.add.at(out, rows, updates)
    return out


_REDUCE = {"Sum": np.sum, "Mean": np.mean, "Max": np.max, "Min": np.min, "Prod": np.prod}


@_op("Reduce")
def _reduce(it, node, args):
    x = args[0]
    axes = tuple(sorted({_axis(x, a) for a in _attr(node, "axes")}))
    return _REDUCE[_attr(node, "op")](x, axis=axes, keepdims=bool(_attr(node, "keep_dim", False)))


@_op("Cumsum")
def _cumsum(it, node, args):
    x = args[0]
    axis = _axis(x, _attr(node, "axis"))
    out = np.cumsum(x, axis=axis)
    if _attr(node, "exclusive", False):
        out = out - x
    return out


@_op("ArgMax", "ArgMin")
def _arg(it, node, args):
    x = args[0]
    axis = _axis(x, _attr(node, "axis"))
    fn = np.argmax if node.op == "ArgMax" else np.argmin  # the first index on ties
    return fn(x, axis=axis, keepdims=bool(_attr(node, "keep_dim", False))).astype(np.float64)  # f32-encoded


@_op("TopK")
def _topk(it, node, args):
    x = args[0]
    k = int(_attr(node, "k"))
    if not 0 <= k <= x.shape[-1]:
        raise ValueError(f"k={k} is outside [0, {x.shape[-1]}]")
    order = np.argsort(-x, axis=-1, kind="stable")  # largest first, the smaller index first on ties
    return order[..., :k].astype(np.float64)


@_op("Sample")
def _sample(it, node, args):
    logits = np.asarray(args[0], dtype=np.float64)
    top_k, top_p = int(_attr(node, "top_k")), float(_attr(node, "top_p"))
    temperature, seed = float(_attr(node, "temperature")), int(_attr(node, "seed"))
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


@_op("Conv")
def _conv(it, node, args):
    x, w = args
    groups = int(_attr(node, "groups", 1))
    kernel = _pair(_attr(node, "kernel_size"), "kernel_size")
    if w.ndim != 4 or tuple(w.shape[2:]) != kernel or x.shape[1] != w.shape[1] * groups or w.shape[0] % groups:
        raise ValueError(f"weight {list(w.shape)} does not fit input {list(x.shape)} with groups={groups} "
                         f"and kernel_size {list(kernel)} (weight [C_out, C_in/groups, kH, kW])")
    win = _windows(x, kernel, _pair(_attr(node, "stride", [1, 1]), "stride"),
                   _pair(_attr(node, "dilation", [1, 1]), "dilation"), _pads(_attr(node, "padding", [0, 0])), 0.0)
    n, c, ho, wo = win.shape[:4]
    win = win.reshape(n, groups, c // groups, ho, wo, *kernel)
    wg = w.reshape(groups, w.shape[0] // groups, *w.shape[1:])
    return np.einsum("ngchwij,gocij->ngohw", win, wg).reshape(n, w.shape[0], ho, wo)


_POOL_FILL = {"Sum": 0.0, "Mean": 0.0, "Max": -np.inf, "Min": np.inf, "Prod": 1.0}


@_op("Pool")
def _pool(it, node, args):
    kind = _attr(node, "kind")
    kernel = _pair(_attr(node, "kernel_size"), "kernel_size")
    win = _windows(args[0], kernel, _pair(_attr(node, "stride", list(kernel)), "stride"), (1, 1),
                   _pads(_attr(node, "padding", [0, 0])), _POOL_FILL[kind])
    return _REDUCE[kind](win, axis=(4, 5))  # Mean counts the padding (PyTorch's count_include_pad=True)


@_op("ResizeNearest2x")
def _resize(it, node, args):
    x = args[0]
    if x.ndim != 4:
        raise ValueError(f"expects an NCHW input, got shape {list(x.shape)}")
    return x.repeat(2, axis=2).repeat(2, axis=3)


# fused ops: each is its unfused expansion (see docs/interpreter.md); the kernel path where a kernel exists

@_op("FusedMatMulBiasAct")
def _fused_matmul_bias_act(it, node, args):
    y = np.matmul(args[0], args[1]) + args[2]
    act = node.attrs.get("activation")
    return ACTIVATIONS[act](y) if act else y


def _residual_parts(node: Node, args: list):
    has_bias = bool(_attr(node, "has_bias", False))
    if len(args) != (5 if has_bias else 4):
        raise ValueError(f"has_bias={has_bias} needs {5 if has_bias else 4} inputs, got {len(args)}")
    pre = args[0] + args[1]
    if has_bias:
        pre = pre + args[2]
    return pre, args[-2], args[-1]


@_op("FusedResidualLN")
def _fused_residual_ln(it, node, args):
    pre, gamma, beta = _residual_parts(node, args)
    return layer_norm(pre, gamma, beta, _attr(node, "eps"))


@_op("FusedResidualRmsNorm")
def _fused_residual_rms(it, node, args):
    pre, gamma, beta = _residual_parts(node, args)
    return rms_norm(pre, gamma, beta, _attr(node, "eps"))


@_op("FusedSwiGLU")
def _fused_swiglu(it, node, args):
    x = args[0]
    if x.shape[-1] % 2:
        raise ValueError(f"the last axis ({x.shape[-1]}) must split into two halves")
    n = x.shape[-1] // 2
    low, high = x[..., :n], x[..., n:]
    gate, up = (low, high) if _attr(node, "gate_first", False) else (high, low)
    out = silu(gate) * up
    to = node.attrs.get("cast_to")
    return cast(out, to) if to else out


def _block_inputs(node: Node, args: list):
    has_bias, has_rope = bool(_attr(node, "has_bias")), bool(_attr(node, "has_rope"))
    want = 4 + 2 * has_bias + 2 * has_rope
    if len(args) != want:
        raise ValueError(f"has_bias={has_bias}, has_rope={has_rope} needs {want} inputs, got {len(args)}")
    hidden, qkv_w, out_w, mask = args[:4]
    qkv_b, out_b = (args[4], args[5]) if has_bias else (None, None)
    tables = (args[-2], args[-1]) if has_rope else None
    return hidden, qkv_w, out_w, mask, qkv_b, out_b, tables


def attention_block(hidden, qkv_w, out_w, mask, qkv_b=None, out_b=None, *, num_heads: int, head_dim: int,
                    rope_tables=None) -> np.ndarray:
    """RLX's ``FusedAttentionBlock`` as its unfused expansion: QKV MatMul (+ bias), three Narrows, NeoX Rope on
    q and k (when tables are given), Attention with the Custom keep mask, output MatMul (+ bias)."""
    h = num_heads * head_dim
    qkv = hidden @ qkv_w
    if qkv_b is not None:
        qkv = qkv + qkv_b
    if qkv.shape[-1] != 3 * h:
        raise ValueError(f"the QKV projection gives {qkv.shape[-1]} features, not 3 x {h}")
    q, k, v = qkv[..., :h], qkv[..., h:2 * h], qkv[..., 2 * h:]
    if rope_tables is not None:
        q = rope(q, rope_tables[0], rope_tables[1], head_dim)
        k = rope(k, rope_tables[0], rope_tables[1], head_dim)
    out = attention(q, k, v, mask, num_heads, head_dim, "Custom") @ out_w
    return out + out_b if out_b is not None else out


def _attention_block(it, node, hidden, qkv_w, out_w, mask, qkv_b, out_b, tables):
    heads, hd = int(_attr(node, "num_heads")), int(_attr(node, "head_dim"))
    if it.backend == "kernels" and _kernel_block_ok(hidden, qkv_w, out_w, mask, qkv_b, out_b, tables, heads, hd):
        it.kernel_nodes.append(node.id)
        return _kernel_block(hidden, qkv_w, out_w, mask, qkv_b, out_b, tables, heads)
    return attention_block(hidden, qkv_w, out_w, mask, qkv_b, out_b, num_heads=heads, head_dim=hd,
                           rope_tables=tables)


@_op("FusedAttentionBlock")
def _fused_attention_block(it, node, args):
    return _attention_block(it, node, *_block_inputs(node, args))


@_op("FusedTransformerLayer")
def _fused_transformer_layer(it, node, args):
    has_bias = bool(_attr(node, "has_bias"))
    if len(args) != (14 if has_bias else 10):
        raise ValueError(f"has_bias={has_bias} needs {14 if has_bias else 10} inputs, got {len(args)}")
    if has_bias:
        hidden, qkv_w, qkv_b, out_w, out_b, ln1_g, ln1_b, fc1_w, fc1_b, fc2_w, fc2_b, ln2_g, ln2_b, mask = args
    else:
        hidden, qkv_w, out_w, ln1_g, ln1_b, fc1_w, fc2_w, ln2_g, ln2_b, mask = args
        qkv_b = out_b = fc1_b = fc2_b = None
    inter = int(_attr(node, "intermediate_size"))
    if fc1_w.shape[-1] != inter:
        raise ValueError(f"fc1_w {list(fc1_w.shape)} does not give intermediate_size {inter}")
    attn = _attention_block(it, node, hidden, qkv_w, out_w, mask, qkv_b, out_b, None)
    h1 = layer_norm(attn + hidden, ln1_g, ln1_b, _attr(node, "eps1"))
    up = h1 @ fc1_w
    up = ACTIVATIONS[_attr(node, "activation")](up + fc1_b if fc1_b is not None else up)
    down = up @ fc2_w
    if fc2_b is not None:
        down = down + fc2_b
    return layer_norm(down + h1, ln2_g, ln2_b, _attr(node, "eps2"))


# ── The kernel path (rlx_rules.kernels, float32) ─────────────────────────────────────────────────

def _f32(x) -> np.ndarray:
    return np.ascontiguousarray(x, dtype=np.float32)


def _kernel_attention_ok(q, k, v, mask, a, kind) -> bool:
    if q.ndim != 3 or k.ndim != 3 or v.ndim != 3 or k.shape != v.shape or q.shape[0] != k.shape[0]:
        return False
    if q.shape[2] != k.shape[2] or q.shape[2] != a["num_heads"] * a["head_dim"]:
        return False
    if a.get("attn_logit_softcap") is not None or a.get("v_head_dim") not in (None, a["head_dim"]):
        return False
    if kind == "Custom":
        return np.shape(mask) == (q.shape[0], k.shape[1])
    return kind == "None" or (kind == "Causal" and q.shape[1] == k.shape[1])


def _kernel_attention(q, k, v, mask, a, kind) -> np.ndarray:
    from . import kernels
    out = kernels.attention(_f32(q), _f32(k), _f32(v), None if mask is None else _f32(mask),
                            num_heads=int(a["num_heads"]), mask_kind=kind.lower(), scale=a.get("score_scale"))
    return out.astype(np.float64)


def _kernel_block_ok(hidden, qkv_w, out_w, mask, qkv_b, out_b, tables, heads, hd) -> bool:
    h = heads * hd
    if hidden.ndim != 3 or hidden.shape[2] != h or np.shape(qkv_w) != (h, 3 * h) or np.shape(out_w) != (h, h):
        return False
    if np.shape(mask) != hidden.shape[:2] or (qkv_b is not None and np.shape(qkv_b) != (3 * h,)):
        return False
    if out_b is not None and np.shape(out_b) != (h,):
        return False
    if tables is not None:
        cos, sin = (np.asarray(t) for t in tables)
        if cos.ndim != 2 or cos.shape != sin.shape or cos.shape[1] != hd // 2 or cos.shape[0] < hidden.shape[1]:
            return False
    return True


def _kernel_block(hidden, qkv_w, out_w, mask, qkv_b, out_b, tables, heads) -> np.ndarray:
    from . import kernels
    rope_pair = None
    if tables is not None:
        s = hidden.shape[1]
        rope_pair = (_f32(np.asarray(tables[0])[:s]), _f32(np.asarray(tables[1])[:s]))
    out = kernels.fused_attention_block(_f32(hidden), _f32(qkv_w), _f32(out_w), _f32(mask),
                                        None if qkv_b is None else _f32(qkv_b),
                                        None if out_b is None else _f32(out_b), num_heads=heads, rope=rope_pair)
    return out.astype(np.float64)


# ── Parameters ───────────────────────────────────────────────────────────────────────────────────

def _graph_extra(graph: Graph) -> dict:
    return graph.to_dict()


def weights_path(graph: Graph) -> Optional[str]:
    """The path of the graph's ``"weights"`` file (relative to the graph file), or None when it names none."""
    ref = _graph_extra(graph).get("weights")
    if ref is None:
        return None
    if not isinstance(ref, str) or not ref:
        raise GraphError(f'field "weights" must be a file name (a string), found {ref!r}')
    if os.path.isabs(ref):
        return ref
    source = getattr(graph, "source_path", None)
    if source is None:
        raise GraphError(f'the graph names weights "{ref}" relative to its file, but it was not loaded from a file; '
                         "load it with rlx_rules.load_graph(path) or pass params")
    return os.path.join(os.path.dirname(os.path.abspath(source)), ref)


def load_weights(graph) -> dict[str, np.ndarray]:
    """The arrays of the graph's ``"weights"`` .npz, keyed by Param/Constant name ({} when it names none)."""
    graph = load_graph(graph)
    path = weights_path(graph)
    if path is None:
        return {}
    try:
        with np.load(path, allow_pickle=False) as data:
            return {name: data[name] for name in data.files}
    except (OSError, ValueError) as e:
        raise GraphError(f'cannot read the weights file {path} (field "weights"): {e}') from e


# ── The interpreter ──────────────────────────────────────────────────────────────────────────────

def _label(node: Node) -> str:
    return f"node {node.id} ({node.name!r}, {node.op})" if node.name else f"node {node.id} ({node.op})"


class Interpreter:
    """Runs one graph; ``values`` holds every node's value after :meth:`run`, ``kernel_nodes`` the ids of the
    nodes that ran through the Rust kernels (backend ``"kernels"``)."""

    def __init__(self, graph, *, backend: str = "numpy", check_shapes: bool = True):
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
        self.graph = load_graph(graph)
        self.backend = backend
        self.check_shapes = check_shapes
        self.values: dict[int, np.ndarray] = {}
        self.kernel_nodes: list[int] = []
        self.dims: dict[str, int] = {}

    def run(self, inputs: Mapping[str, object], params: Optional[Mapping[str, object]] = None) -> list[np.ndarray]:
        if params is None:
            params = load_weights(self.graph)
        self.values, self.kernel_nodes, self.dims = {}, [], {}
        with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
            for node in self.graph.nodes:
                self.values[node.id] = value = self._node(node, inputs, params)
                if node.facts:
                    self._check_facts(node, value)
        return [self.values[i] for i in self.graph.outputs]

    def _node(self, node: Node, inputs: Mapping, params: Mapping) -> np.ndarray:
        if node.op == "Input":
            return self._leaf(node, inputs, "inputs")
        if node.op == "Param":
            return self._leaf(node, params, "params")
        if node.op == "Constant":
            return self._constant(node, params)
        fn = _OPS.get(node.op)
        if fn is None and not _onnx_ops_loaded:
            _load_onnx_ops()
            fn = _OPS.get(node.op)
        if fn is None:
            raise UnsupportedOpError(f"{_label(node)}: the reference interpreter has no semantics for op "
                                     f"{node.op!r}")
        args = [self.values[i] for i in node.inputs]
        try:
            value = np.asarray(fn(self, node, args))
        except (GraphError, UnsupportedOpError):
            raise
        except KeyError as e:
            raise UnsupportedOpError(f"{_label(node)}: no semantics for attribute value {e}") from e
        except (ValueError, TypeError, IndexError, np.linalg.LinAlgError) as e:
            shapes = ", ".join(str(list(np.shape(a))) for a in args)
            raise GraphError(f"{_label(node)}: {e} (input shapes {shapes})") from e
        if value.dtype != np.float64:
            value = value.astype(np.float64)
        self._check_shape(node, value, "computed")
        return value

    def _check_facts(self, node: Node, value: np.ndarray) -> None:
        """A rewrite may have relied on the node's claimed facts (has_fact); values without them are an error."""
        try:
            facts.check(_label(node), value.astype(bool) if node.dtype == "bool" else value, node.facts)
        except ValueError as e:
            raise GraphError(str(e)) from e

    def _leaf(self, node: Node, table: Mapping, what: str) -> np.ndarray:
        if node.name is None:
            raise GraphError(f"{_label(node)}: an {node.op} needs a name to look its value up by")
        if node.name not in table:
            known = ", ".join(sorted(map(str, table))[:8]) or "none"
            raise GraphError(f"{_label(node)}: no value for {node.name!r} in {what} (given: {known})")
        return self._accept(node, table[node.name], f"{what}[{node.name!r}]")

    def _constant(self, node: Node, params: Mapping) -> np.ndarray:
        if "value" in node.attrs and node.attrs["value"] is not None:
            value = np.asarray(node.attrs["value"], dtype=np.float64)
            shape = self._static_shape(node)
            if value.ndim == 0 and shape is not None:
                value = np.full(shape, float(value))
            return self._accept(node, value, 'attribute "value"')
        if node.name is not None and node.name in params:
            return self._accept(node, params[node.name], f"params[{node.name!r}]")
        raise GraphError(f"{_label(node)}: a Constant needs an inline \"value\" attribute or an entry named "
                         f"{node.name!r} in params / the weights file")

    def _accept(self, node: Node, raw, where: str) -> np.ndarray:
        try:
            value = np.asarray(raw)
        except Exception as e:  # a ragged list, say
            raise GraphError(f"{_label(node)}: {where} is not an array: {e}") from e
        problem = _check_dtype(value, node.dtype)
        if problem:
            raise GraphError(f"{_label(node)}: {where}: {problem}")
        value = value.astype(np.float64)
        self._check_shape(node, value, f"{where} has")
        return value

    def _static_shape(self, node: Node) -> Optional[list[int]]:
        if node.shape is None:
            return None
        out = []
        for d in node.shape:
            if isinstance(d, str):
                if d not in self.dims:
                    return None
                d = self.dims[d]
            out.append(d)
        return out

    def _check_shape(self, node: Node, value: np.ndarray, what: str) -> None:
        """Checks `value` against the node's declared shape, binding each symbolic dim at its first use."""
        if node.shape is None or not self.check_shapes:
            return
        declared = list(node.shape)
        ok = len(declared) == value.ndim
        if ok:
            bound = {}
            for d, n in zip(declared, value.shape):
                if isinstance(d, str):
                    have = self.dims.get(d, bound.get(d))
                    if have is None:
                        bound[d] = n
                    elif have != n:
                        ok = False
                elif d != n:
                    ok = False
            if ok:
                self.dims.update(bound)
        if not ok:
            hint = "" if all(isinstance(d, int) for d in declared) else \
                f" (symbolic dims bound so far: {self.dims})"
            raise GraphError(f"{_label(node)}: {what} shape {list(value.shape)}, but the graph declares "
                             f"{declared}{hint}")


def run(graph, inputs: Mapping[str, object], params: Optional[Mapping[str, object]] = None, *,
        backend: str = "numpy") -> list[np.ndarray]:
    """Executes `graph` (a Graph, a path, a JSON string or a dict) and returns its outputs as float64 arrays.

    Input nodes are looked up by name in `inputs`; Param and Constant nodes (without an inline ``value``) in
    `params`, or, when `params` is None, in the .npz that the graph's ``"weights"`` field names. ``backend=
    "kernels"`` runs FusedAttentionBlock, FusedTransformerLayer's attention and eligible Attention nodes
    through the Rust kernels (float32); everything else runs in numpy float64. Raises GraphError naming the
    node for a missing value, a wrong shape or dtype, or an op without semantics (UnsupportedOpError)."""
    return Interpreter(graph, backend=backend).run(inputs, params)


def random_values(graph: Union[Graph, str, dict], seed: int = 0, scale: float = 0.1) -> tuple[dict, dict]:
    """Random inputs and params for every Input and Param (and Constant without a value) of a static-shaped
    graph: standard normal inputs; params ×`scale`; Inputs named like ``mask`` a 0/1 keep mask with a padded
    tail; integer inputs in [0, 2); bool inputs 0/1; a node with "facts" gets values that have them."""
    rng = np.random.default_rng(seed)
    inputs, params = {}, {}
    for node in load_graph(graph).nodes:
        if node.op not in ("Input", "Param", "Constant") or (node.op == "Constant" and "value" in node.attrs):
            continue
        if node.shape is None or not all(isinstance(d, int) for d in node.shape):
            raise GraphError(f"{_label(node)}: random_values needs a static shape, found {node.shape}")
        shape = tuple(node.shape)
        if node.facts:  # values that keep the node's claimed facts (rlx_rules.facts)
            value = facts.sample(shape, node.facts, rng, 1.0 if node.op == "Input" else scale)
        elif node.dtype in _INT or node.dtype == "bool":
            value = rng.integers(0, 2, size=shape).astype(np.float64)
        elif node.op == "Input" and node.name and "mask" in node.name:
            value = np.ones(shape)
            if shape:
                value[..., -max(1, shape[-1] // 4):] = 0.0  # a padded tail
        elif node.op == "Input":
            value = rng.standard_normal(shape)
        else:
            value = rng.standard_normal(shape) * scale
        (inputs if node.op == "Input" else params)[node.name] = value
    return inputs, params
