"""Python API of the fused attention kernels (the Rust core via ``rlx_rules._native``): numpy float32 in, numpy float32 out.

Semantics (RLX's ``FusedAttentionBlock``), for ``hidden`` ``[B, S, H]`` and ``head_dim = H / num_heads``::

    qkv   = hidden @ qkv_w + qkv_b              # weights are [in, out], row-major
    q,k,v = qkv[..., :H], qkv[..., H:2H], qkv[..., 2H:]   (split into heads)
    q,k   = rope(q), rope(k)                    # optional, NeoX rotate-half, tables [S, head_dim/2]
    s     = q @ k.T * head_dim**-0.5
    s     = where(mask[b, key] < 0.5, -1e9, s)  # keep mask; a fully masked row comes out uniform
    ctx   = softmax(s) @ v                      # heads merged back to [B, S, H]
    out   = ctx @ out_w + out_b

Arrays must be C-contiguous float32; anything else is refused with a ``TypeError`` or
``ValueError`` that names the argument (no silent float64 → float32 copy of large arrays). The
one documented conversion: a ``mask`` of another real or bool dtype is cast to float32, since it
is only ``B·S`` elements. See docs/kernels.md for SIMD paths, threads and environment variables.
"""

from __future__ import annotations

from typing import Optional, Sequence, Tuple

import numpy as np

from . import _native

__all__ = [
    "FusedAttentionBlock",
    "attention",
    "fused_attention_block",
    "simd_paths",
    "selected_simd",
    "default_threads",
]

_F32 = np.dtype(np.float32)


def _describe(x: object) -> str:
    if isinstance(x, np.ndarray):
        return f"dtype {x.dtype} with shape {list(x.shape)}"
    return f"a {type(x).__name__}"


def _array(name: str, x: object, ndim: int) -> np.ndarray:
    """Checks a float32, C-contiguous array of rank ``ndim`` (cheap: no copy, no scan)."""
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray of float32, got {_describe(x)}")
    if x.dtype != _F32:
        raise TypeError(f"{name} must have dtype float32, got {_describe(x)}; convert with {name}.astype(numpy.float32)")
    if x.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {list(x.shape)}")
    if not x.flags.c_contiguous:
        raise ValueError(f"{name} (shape {list(x.shape)}) must be C-contiguous; pass numpy.ascontiguousarray({name})")
    return x


def _mask(mask: object, shape: Tuple[int, int]) -> Optional[np.ndarray]:
    """A ``[B, S]`` keep mask as contiguous float32 (cast from bool/int/float: it is small)."""
    if mask is None:
        return None
    if not isinstance(mask, np.ndarray):
        raise TypeError(f"mask must be a numpy.ndarray of shape {list(shape)}, got {_describe(mask)}")
    if mask.dtype.kind not in "biuf":
        raise TypeError(f"mask must have a bool, integer or float dtype, got {_describe(mask)}")
    if mask.shape != tuple(shape):
        raise ValueError(f"mask must have shape {list(shape)} ([batch, seq_k]), got {list(mask.shape)}")
    return np.ascontiguousarray(mask, dtype=np.float32)


def _rope(rope: object) -> Tuple[Optional[np.ndarray], Optional[np.ndarray]]:
    if rope is None:
        return None, None
    if not (isinstance(rope, (tuple, list)) and len(rope) == 2):
        raise TypeError(f"rope must be a (cos, sin) pair of float32 arrays [seq, head_dim/2], got {_describe(rope)}")
    return _array("rope cos", rope[0], 2), _array("rope sin", rope[1], 2)


def _threads(threads: Optional[int]) -> Optional[int]:
    if threads is None:
        return None
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads < 1:
        raise ValueError(f"threads must be a positive integer or None, got {threads!r}")
    return int(threads)


def _num_heads(num_heads: object, hidden: int) -> int:
    if isinstance(num_heads, bool) or not isinstance(num_heads, (int, np.integer)) or num_heads < 1:
        raise ValueError(f"num_heads must be a positive integer, got {num_heads!r}")
    if hidden % num_heads:
        raise ValueError(f"hidden size {hidden} is not divisible by num_heads={num_heads}")
    return int(num_heads)


def fused_attention_block(
    hidden: np.ndarray,
    qkv_w: np.ndarray,
    out_w: np.ndarray,
    mask: Optional[np.ndarray],
    qkv_b: Optional[np.ndarray] = None,
    out_b: Optional[np.ndarray] = None,
    *,
    num_heads: int,
    rope: Optional[Sequence[np.ndarray]] = None,
    threads: Optional[int] = None,
) -> np.ndarray:
    """Runs the fused attention block once; returns ``[B, S, H]`` float32.

    ``mask`` is the ``[B, S]`` keep mask, or ``None`` to keep every key. ``rope`` is an optional
    ``(cos, sin)`` pair of ``[S, head_dim/2]`` tables. ``threads`` overrides ``RLX_RULES_THREADS``.
    For repeated calls with the same weights use :class:`FusedAttentionBlock`.
    """
    x = _array("hidden", hidden, 3)
    b, s, h = x.shape
    heads = _num_heads(num_heads, h)
    cos, sin = _rope(rope)
    return _native.fused_attention_block(
        x,
        _array("qkv_w", qkv_w, 2),
        _array("out_w", out_w, 2),
        _mask(mask, (b, s)),
        None if qkv_b is None else _array("qkv_b", qkv_b, 1),
        None if out_b is None else _array("out_b", out_b, 1),
        num_heads=heads,
        rope_cos=cos,
        rope_sin=sin,
        threads=_threads(threads),
    )


class FusedAttentionBlock:
    """A fused attention block with its weights packed once and ``head_dim**-0.5`` folded into Q.

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> H = 8
    >>> block = FusedAttentionBlock(rng.standard_normal((H, 3 * H), dtype=np.float32),
    ...                             rng.standard_normal((H, H), dtype=np.float32), num_heads=2)
    >>> block(np.zeros((1, 3, H), np.float32), np.ones((1, 3), np.float32)).shape
    (1, 3, 8)
    """

    __slots__ = ("_native", "hidden", "num_heads", "head_dim")

    def __init__(
        self,
        qkv_w: np.ndarray,
        out_w: np.ndarray,
        qkv_b: Optional[np.ndarray] = None,
        out_b: Optional[np.ndarray] = None,
        *,
        num_heads: int,
    ) -> None:
        w = _array("qkv_w", qkv_w, 2)
        heads = _num_heads(num_heads, w.shape[0])
        self._native = _native.PreparedAttentionBlock(
            w,
            _array("out_w", out_w, 2),
            None if qkv_b is None else _array("qkv_b", qkv_b, 1),
            None if out_b is None else _array("out_b", out_b, 1),
            num_heads=heads,
        )
        self.hidden = int(w.shape[0])
        self.num_heads = heads
        self.head_dim = self.hidden // heads

    @property
    def nbytes(self) -> int:
        """Bytes of packed weights held."""
        return self._native.nbytes

    def __call__(
        self,
        hidden: np.ndarray,
        mask: Optional[np.ndarray] = None,
        *,
        rope: Optional[Sequence[np.ndarray]] = None,
        threads: Optional[int] = None,
    ) -> np.ndarray:
        """Runs the block on ``hidden`` ``[B, S, H]`` with the ``[B, S]`` keep ``mask``."""
        x = _array("hidden", hidden, 3)
        cos, sin = _rope(rope)
        return self._native(x, _mask(mask, x.shape[:2]), rope_cos=cos, rope_sin=sin, threads=_threads(threads))

    def __repr__(self) -> str:
        return f"FusedAttentionBlock(hidden={self.hidden}, num_heads={self.num_heads})"


def attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    mask: Optional[np.ndarray] = None,
    *,
    num_heads: int,
    mask_kind: str = "custom",
    scale: Optional[float] = None,
    threads: Optional[int] = None,
) -> np.ndarray:
    """Multi-head attention on ``q`` ``[B, Sq, H]`` and ``k``, ``v`` ``[B, Sk, H]``; returns ``[B, Sq, H]``.

    ``mask_kind``: ``"custom"`` needs the ``[B, Sk]`` keep ``mask``; ``"none"`` takes none;
    ``"causal"`` masks key ``j > i`` for query ``i`` (needs ``Sq == Sk``) and also applies
    ``mask`` when one is given. ``scale`` defaults to ``head_dim**-0.5``.
    """
    qa = _array("q", q, 3)
    b, _, h = qa.shape
    heads = _num_heads(num_heads, h)
    ka = _array("k", k, 3)
    if mask_kind not in ("custom", "none", "causal"):
        raise ValueError(f"mask_kind must be 'custom', 'none' or 'causal', got {mask_kind!r}")
    return _native.attention(
        qa,
        ka,
        _array("v", v, 3),
        _mask(mask, (b, ka.shape[1])) if ka.shape[0] == b else mask,
        num_heads=heads,
        mask_kind=mask_kind,
        scale=None if scale is None else float(scale),
        threads=_threads(threads),
    )


def simd_paths() -> list:
    """SIMD paths this CPU can run, slowest first (``RLX_RULES_SIMD`` accepts these names)."""
    return list(_native.simd_paths())


def selected_simd() -> str:
    """The SIMD path a call would use now."""
    return _native.selected_simd()


def default_threads() -> int:
    """The thread count a call uses with ``threads=None``."""
    return _native.default_threads()
