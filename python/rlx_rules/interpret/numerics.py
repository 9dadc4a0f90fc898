"""Numerics with RLX semantics in numpy: erf, activations, softmax, norms, attention, rope, dtype casts."""

from __future__ import annotations

import math
from typing import Callable, Optional

import numpy as np


MASKED = -1e9  # the score RLX gives a masked key (Custom keep mask, Causal, SlidingWindow)


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


def feature_axis(x: np.ndarray, axis: int) -> int:
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
    ax = feature_axis(x, axis)
    mean = x.mean(axis=ax, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=ax, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * _along(gamma, x.ndim, ax) + _along(beta, x.ndim, ax)


def rms_norm(x, gamma, beta, eps: float, axis: int = -1) -> np.ndarray:
    """x/√(mean(x²) + eps)·γ + β over `axis` (RLX's RmsNorm carries a β; pass zeros for the plain form)."""
    ax = feature_axis(x, axis)
    ms = (x * x).mean(axis=ax, keepdims=True)
    return x / np.sqrt(ms + eps) * _along(gamma, x.ndim, ax) + _along(beta, x.ndim, ax)


def split_heads(t: np.ndarray, num_heads: int, head_dim: int, what: str):
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


def merge_heads(t: np.ndarray, layout: str) -> np.ndarray:
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
              softcap: Optional[float] = None, v_head_dim: Optional[int] = None,
              masked_rows: str = "uniform") -> np.ndarray:
    """RLX's ``Attention``: softmax(mask(softcap(q·kᵀ·scale))) · v, per head.

    q, k, v are [B, S, H·D] (heads split from the last axis), [B, S, H, D] or [B, H, S, D]; the output has q's
    layout. K/V may have fewer heads than Q (grouped-query: each K/V head serves H/H_kv query heads) and more
    positions (KV cache: the Sq queries sit at the end of the Sk keys). `scale` defaults to head_dim^-0.5.
    Masks: ``None``; ``Causal`` (key j is masked for query i when j > i + Sk − Sq); ``SlidingWindow`` (also masked
    when j < i + Sk − Sq − window); ``Custom`` keep mask (scores where mask < 0.5 become −1e9; a fully masked row
    comes out uniform); ``Bias`` (added to the scores). ``masked_rows="zero"`` (PyTorch SDPA's semantics): a
    masked key scores −inf instead of −1e9, and a row with no score above −inf (every key masked, or a −inf
    bias on every key) is 0 instead of uniform (or NaN).
    """
    if masked_rows not in ("uniform", "zero"):
        raise ValueError(f"masked_rows must be uniform or zero, got {masked_rows!r}")
    fill = MASKED if masked_rows == "uniform" else -np.inf
    head_dim = head_dim or q.shape[-1] // num_heads
    v_dim = v_head_dim or head_dim
    qh, layout = split_heads(np.asarray(q), num_heads, head_dim, "q")
    kh, _ = split_heads(np.asarray(k), num_heads, head_dim, "k")
    vh, _ = split_heads(np.asarray(v), num_heads, v_dim, "v")
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
        scores = np.where(masked, fill, scores)
    elif mask_kind == "Custom":
        if mask is None:
            raise ValueError("mask_kind Custom needs the mask input")
        scores = np.where(_score_mask(mask, scores.shape, "keep mask") < 0.5, fill, scores)
    elif mask_kind == "Bias":
        if mask is None:
            raise ValueError("mask_kind Bias needs the bias input")
        scores = scores + _score_mask(mask, scores.shape, "bias")
    elif mask_kind != "None":
        raise ValueError(f"unknown mask_kind {mask_kind!r}")
    if masked_rows == "zero":
        dead = np.all(np.isneginf(scores), axis=-1, keepdims=True)
        probs = np.where(dead, 0.0, softmax(np.where(dead, 0.0, scores), -1))
    else:
        probs = softmax(scores, -1)
    return merge_heads(probs @ vh, layout)


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


_FLOAT = {"f16": np.float16, "f32": np.float32, "f64": np.float64, "bf16": None}


INT = {"i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64,
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
    if to in INT:
        info = np.iinfo(INT[to])
        t = np.trunc(np.nan_to_num(np.asarray(x, dtype=np.float64), nan=0.0))
        return np.clip(t, info.min, info.max)
    if to == "bool":
        return (np.asarray(x) != 0).astype(np.float64)
    raise ValueError(f"cannot cast to dtype {to!r} (known: {', '.join([*_FLOAT, *INT, 'bool'])})")


def check_dtype(value: np.ndarray, dtype: Optional[str]) -> Optional[str]:
    """Why `value` cannot stand for a tensor of `dtype`, or None when it can."""
    kind = value.dtype.kind
    if kind not in "biuf":
        return f"an array of dtype {value.dtype} is not a tensor of numbers"
    if dtype is None:
        return None
    if dtype in _FLOAT and kind not in "iuf":
        return f"expected {dtype} values, got an array of dtype {value.dtype}"
    if dtype in INT and kind == "f" and not np.all(np.isfinite(value) & (value == np.round(value))):
        return f"expected {dtype} values, got non-integer floats"
    if dtype == "bool" and not np.all((value == 0) | (value == 1)):
        return "expected bool values (0 or 1)"
    return None
