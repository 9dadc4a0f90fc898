"""Python API of the fused attention kernels (the Rust core via ``rlx_rules._native``): numpy float32 in, numpy float32 out.

Semantics (RLX's ``FusedAttentionBlock``), for ``hidden`` ``[B, S, H]`` and ``head_dim = H / num_heads``::

    qkv   = hidden @ qkv_w + qkv_b              # weights are [in, out], row-major
    q,k,v = qkv[..., :H], qkv[..., H:2H], qkv[..., 2H:]   (split into heads)
    q,k   = rope(q), rope(k)                    # optional, NeoX rotate-half, tables [S, head_dim/2]
    s     = q @ k.T * head_dim**-0.5
    s     = where(mask[b, key] < 0.5, -1e9, s)  # keep mask; a fully masked row comes out uniform
                                                # (masked_rows="zero": -inf, and such a row is 0)
    ctx   = softmax(s) @ v                      # heads merged back to [B, S, H]
    out   = ctx @ out_w + out_b

Arrays must be C-contiguous, aligned float32; anything else is refused with a ``TypeError`` (wrong
type or dtype) or a :class:`~rlx_rules.errors.KernelError` (a ``ValueError``: shape, layout, value)
that names the argument (no silent float64 → float32 copy of large arrays). The one documented
conversion: a keep ``mask`` of another real or bool dtype is cast to float32. Every check lives in
the Rust binding (``rust/python/src/kernels.rs``); this module only documents and forwards. See
docs/kernels.md for the masks, GQA, RoPE, SIMD paths, threads and environment variables.
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

def _rope(rope: object) -> Tuple[Optional[np.ndarray], Optional[np.ndarray]]:
    """Splits the ``(cos, sin)`` pair (the arrays themselves are checked by the binding)."""
    if rope is None:
        return None, None
    if not (isinstance(rope, (tuple, list)) and len(rope) == 2):
        kind = f"dtype {rope.dtype} with shape {list(rope.shape)}" if isinstance(rope, np.ndarray) else f"a {type(rope).__name__}"
        raise TypeError(f"rope must be a (cos, sin) pair of float32 arrays [seq, rotary_dim/2], got {kind}")
    return rope[0], rope[1]


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
    masked_rows: str = "uniform",
    threads: Optional[int] = None,
) -> np.ndarray:
    """Runs the fused attention block once; returns ``[B, S, H]`` float32.

    ``mask`` is the ``[B, S]`` keep mask, or ``None`` to keep every key. ``rope`` is an optional
    ``(cos, sin)`` pair of ``[S, rotary_dim/2]`` tables (NeoX; ``rotary_dim <= head_dim``, the rest
    of each head passes through). ``masked_rows``: ``"uniform"`` (RLX: a fully masked row is the
    mean of V) or ``"zero"`` (PyTorch SDPA: it is 0). ``threads`` overrides ``RLX_RULES_THREADS``.
    For repeated calls with the same weights use :class:`FusedAttentionBlock`.
    """
    cos, sin = _rope(rope)
    return _native.fused_attention_block(hidden, qkv_w, out_w, mask, qkv_b, out_b, num_heads=num_heads,
                                         rope_cos=cos, rope_sin=sin, masked_rows=masked_rows, threads=threads)


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
        self._native = _native.PreparedAttentionBlock(qkv_w, out_w, qkv_b, out_b, num_heads=num_heads)
        self.hidden = int(self._native.hidden)
        self.num_heads = int(self._native.num_heads)
        self.head_dim = self.hidden // self.num_heads

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
        masked_rows: str = "uniform",
        threads: Optional[int] = None,
    ) -> np.ndarray:
        """Runs the block on ``hidden`` ``[B, S, H]`` with the ``[B, S]`` keep ``mask`` (see :func:`fused_attention_block`)."""
        cos, sin = _rope(rope)
        return self._native(hidden, mask, rope_cos=cos, rope_sin=sin, masked_rows=masked_rows, threads=threads)

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
    bias: Optional[np.ndarray] = None,
    masked_rows: str = "uniform",
    rope: Optional[Sequence[np.ndarray]] = None,
    rope_style: str = "neox",
    scale: Optional[float] = None,
    softcap: Optional[float] = None,
    window: Optional[int] = None,
    threads: Optional[int] = None,
) -> np.ndarray:
    """Multi-head attention on ``q`` ``[B, Sq, H]``, ``k`` ``[B, Sk, H_kv·head_dim]`` and ``v``
    ``[B, Sk, H_kv·v_head_dim]``; returns ``[B, Sq, num_heads·v_head_dim]``.

    ``head_dim = H / num_heads``; ``k`` and ``v`` may have fewer heads (``H_kv`` dividing
    ``num_heads``: GQA/MQA, query head ``h`` reads K/V head ``h // (num_heads // H_kv)``); V's head
    size is read from its shape and may differ from ``head_dim`` (DeepSeek's MLA).
    Scores are ``softcap(scale · q·kᵀ) + bias`` (``scale`` defaults to ``head_dim**-0.5``;
    ``softcap=c`` gives ``c·tanh(s/c)``, Gemma 2's logit soft-cap), then masked:

    * ``mask``: keep mask (``< 0.5`` drops the key), ``[B, Sk]``, ``[B, Sq, Sk]`` or ``[B, H, Sq, Sk]``
      (size-1 dims broadcast; bool, integer or float);
    * ``mask_kind``: ``"custom"`` needs ``mask`` or ``bias``; ``"none"`` takes no mask; ``"causal"``
      drops key ``j > i + Sk − Sq`` for query ``i`` (the queries are the last positions) and also
      applies ``mask`` when given;
    * ``window``: also drops key ``j < i + Sk − Sq − window`` (with ``"causal"``: RLX's
      ``SlidingWindow``, each query sees itself and the ``window`` keys before it); key blocks
      outside every query's window are skipped, so a long sequence costs ``O(S·window)``;
    * ``bias``: float32 added to the scores, shaped like the mask (ALiBi, relative position bias,
      an additive ``-inf`` mask);
    * ``masked_rows``: a dropped key scores ``-1e9`` with ``"uniform"`` (RLX: a fully masked row is
      the mean of V) or ``-inf`` with ``"zero"`` (PyTorch SDPA: a row with no score above ``-inf`` is 0).

    ``rope``: optional ``(cos, sin)`` tables ``[Sk, rotary_dim/2]`` applied to q and k before the
    scores (key ``j`` uses row ``j``, query ``i`` row ``i + Sk − Sq``), ``rope_style`` ``"neox"``
    (dim ``i`` pairs with ``i + rotary_dim/2``) or ``"gptj"`` (``2i`` with ``2i+1``), as RLX's ``Rope``;
    not with ``softcap``, ``window`` or a separate V head size (``KernelError``).
    """
    cos, sin = _rope(rope)
    return _native.attention(q, k, v, mask, num_heads=num_heads, mask_kind=mask_kind, bias=bias,
                             masked_rows=masked_rows, rope_cos=cos, rope_sin=sin, rope_style=rope_style,
                             scale=None if scale is None else float(scale),
                             softcap=None if softcap is None else float(softcap), window=window, threads=threads)


def simd_paths() -> list:
    """SIMD paths this CPU can run, slowest first (``RLX_RULES_SIMD`` accepts these names)."""
    return list(_native.simd_paths())


def selected_simd() -> str:
    """The SIMD path a call would use now."""
    return _native.selected_simd()


def default_threads() -> int:
    """The thread count a call uses with ``threads=None``."""
    return _native.default_threads()
