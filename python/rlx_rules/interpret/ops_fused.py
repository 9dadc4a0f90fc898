"""Op semantics of the fused ops, with the optional Rust-kernel backend for attention and attention blocks."""

from __future__ import annotations

import logging
from typing import Callable, Optional

import numpy as np

from ..errors import KernelError
from ..graph import Node
from .numerics import ACTIVATIONS, attention, cast, layer_norm, merge_heads, rms_norm, rope, silu, split_heads
from .optable import node_attr, register_op

log = logging.getLogger(__name__)


@register_op("FusedMatMulBiasAct")
def _fused_matmul_bias_act(it, node, args):
    y = np.matmul(args[0], args[1]) + args[2]
    act = node.attrs.get("activation")
    return ACTIVATIONS[act](y) if act else y


def _residual_parts(node: Node, args: list):
    has_bias = bool(node_attr(node, "has_bias", False))
    if len(args) != (5 if has_bias else 4):
        raise ValueError(f"has_bias={has_bias} needs {5 if has_bias else 4} inputs, got {len(args)}")
    pre = args[0] + args[1]
    if has_bias:
        pre = pre + args[2]
    return pre, args[-2], args[-1]


@register_op("FusedResidualLN")
def _fused_residual_ln(it, node, args):
    pre, gamma, beta = _residual_parts(node, args)
    return layer_norm(pre, gamma, beta, node_attr(node, "eps"))


@register_op("FusedResidualRmsNorm")
def _fused_residual_rms(it, node, args):
    pre, gamma, beta = _residual_parts(node, args)
    return rms_norm(pre, gamma, beta, node_attr(node, "eps"))


@register_op("FusedSwiGLU")
def _fused_swiglu(it, node, args):
    x = args[0]
    if x.shape[-1] % 2:
        raise ValueError(f"the last axis ({x.shape[-1]}) must split into two halves")
    n = x.shape[-1] // 2
    low, high = x[..., :n], x[..., n:]
    gate, up = (low, high) if node_attr(node, "gate_first", False) else (high, low)
    out = silu(gate) * up
    to = node.attrs.get("cast_to")
    return cast(out, to) if to else out


def _block_inputs(node: Node, args: list):
    has_bias, has_rope = bool(node_attr(node, "has_bias")), bool(node_attr(node, "has_rope"))
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
    heads, hd = int(node_attr(node, "num_heads")), int(node_attr(node, "head_dim"))
    if it.backend == "kernels":
        why_not = _kernel_block_refusal(hidden, qkv_w, out_w, mask, qkv_b, out_b, tables, heads, hd)
        out = run_kernel(it, node, why_not,
                         lambda: _kernel_block(hidden, qkv_w, out_w, mask, qkv_b, out_b, tables, heads, hd))
        if out is not None:
            return out
    return attention_block(hidden, qkv_w, out_w, mask, qkv_b, out_b, num_heads=heads, head_dim=hd,
                           rope_tables=tables)


@register_op("FusedAttentionBlock")
def _fused_attention_block(it, node, args):
    return _attention_block(it, node, *_block_inputs(node, args))


@register_op("FusedTransformerLayer")
def _fused_transformer_layer(it, node, args):
    has_bias = bool(node_attr(node, "has_bias"))
    if len(args) != (14 if has_bias else 10):
        raise ValueError(f"has_bias={has_bias} needs {14 if has_bias else 10} inputs, got {len(args)}")
    if has_bias:
        hidden, qkv_w, qkv_b, out_w, out_b, ln1_g, ln1_b, fc1_w, fc1_b, fc2_w, fc2_b, ln2_g, ln2_b, mask = args
    else:
        hidden, qkv_w, out_w, ln1_g, ln1_b, fc1_w, fc2_w, ln2_g, ln2_b, mask = args
        qkv_b = out_b = fc1_b = fc2_b = None
    inter = int(node_attr(node, "intermediate_size"))
    if fc1_w.shape[-1] != inter:
        raise ValueError(f"fc1_w {list(fc1_w.shape)} does not give intermediate_size {inter}")
    attn = _attention_block(it, node, hidden, qkv_w, out_w, mask, qkv_b, out_b, None)
    h1 = layer_norm(attn + hidden, ln1_g, ln1_b, node_attr(node, "eps1"))
    up = h1 @ fc1_w
    up = ACTIVATIONS[node_attr(node, "activation")](up + fc1_b if fc1_b is not None else up)
    down = up @ fc2_w
    if fc2_b is not None:
        down = down + fc2_b
    return layer_norm(down + h1, ln2_g, ln2_b, node_attr(node, "eps2"))


def as_f32(x) -> np.ndarray:
    return np.ascontiguousarray(x, dtype=np.float32)


# A row whose every key has an additive bias in this range keeps its scores in float64 and loses them in
# float32 (past the upper end float64 loses them too: both give the same uniform row); past float32's range
# a finite bias becomes -inf in float32.
SWAMPING_BIAS = (1e4, 1e30)
# RLX's mask kinds as the attention kernel's: a Bias is an additive bias under "custom" (no keep mask), a
# SlidingWindow is causal with the kernel's window.
_KERNEL_MASK_KINDS = {"None": "none", "Causal": "causal", "SlidingWindow": "causal", "Custom": "custom",
                      "Bias": "custom"}


def kernel_attention_refusal(q, k, v, mask, a, kind) -> Optional[str]:
    """Why the attention kernel cannot run this ``Attention`` node (None: it can; the operands' shapes are
    checked when they are split into heads, the rest by the kernel's binding, which raises KernelError)."""
    if kind not in _KERNEL_MASK_KINDS:
        return f"mask_kind {kind}"
    scale = a.get("score_scale")
    if scale is not None and not np.isfinite(np.float32(scale)):
        return f"score_scale {scale} is not finite in float32"
    if q.ndim != k.ndim or q.ndim != v.ndim:
        return f"q, k, v of ranks {q.ndim}, {k.ndim}, {v.ndim} (one layout for all three)"
    if kind == "Bias" and np.ndim(mask) and np.size(mask):
        top = np.max(mask, axis=-1)  # a row's largest bias: the scores ride on it
        if np.any(((top < -SWAMPING_BIAS[0]) & (top > -SWAMPING_BIAS[1])) | (np.isfinite(top) & np.isinf(top.astype(np.float32)))):
            return f"a score row whose every key has a bias below -{SWAMPING_BIAS[0]:g} (float32 loses the " \
                   f"scores on it, float64 keeps them up to -{SWAMPING_BIAS[1]:g}) or below float32's range"
    return None


def _flat_heads(t: np.ndarray, heads: int, head_dim: int, what: str):
    """`t` (any layout RLX's Attention takes) as the kernel's float32 [B, S, H·D], plus [B, H, S, D]'s layout."""
    th, layout = split_heads(t, heads, head_dim, what)
    b, h, s, d = th.shape
    return as_f32(th.transpose(0, 2, 1, 3).reshape(b, s, h * d)), layout


def kernel_attention(q, k, v, mask, a, kind) -> np.ndarray:
    """RLX's ``Attention`` through ``rlx_rules.kernels.attention`` (float32), in q's layout; the soft-cap, the
    sliding window and V's own head size (``v_head_dim``) included."""
    from .. import kernels
    heads, hd = int(a["num_heads"]), int(a["head_dim"])
    v_dim = int(a.get("v_head_dim") or hd)
    qf, layout = _flat_heads(q, heads, hd, "q")
    if qf.shape[2] != heads * hd:  # the kernel would split q into heads of another head_dim
        raise ValueError(f"q has {qf.shape[2] // hd} heads of {hd}, but num_heads is {heads}")
    kf, _ = _flat_heads(k, heads, hd, "k")
    vf, _ = _flat_heads(v, heads, v_dim, "v")
    window = a.get("window")
    if kind == "SlidingWindow" and window is None:
        raise ValueError("mask_kind SlidingWindow needs the attribute window")
    m = None if mask is None else as_f32(mask)
    scale, cap = a.get("score_scale"), a.get("attn_logit_softcap")
    out = kernels.attention(qf, kf, vf, m if kind == "Custom" else None, num_heads=heads,
                            mask_kind=_KERNEL_MASK_KINDS[kind], bias=m if kind == "Bias" else None,
                            scale=None if scale is None else float(scale),
                            softcap=None if cap is None else float(cap),
                            window=int(window) if kind == "SlidingWindow" else None,
                            masked_rows=a.get("masked_rows") or "uniform")
    b, sq = out.shape[:2]
    return merge_heads(out.astype(np.float64).reshape(b, sq, heads, v_dim).transpose(0, 2, 1, 3), layout)


def run_kernel(it, node: Node, why_not: Optional[str], call: Callable[[], np.ndarray]) -> Optional[np.ndarray]:
    """`call()` (a Rust kernel) for `node` unless `why_not` names what the kernel cannot do; a refusal, or the
    kernel's own KernelError, is recorded in ``it.kernel_fallbacks`` (and logged) and returns None: numpy runs."""
    if why_not is None:
        try:
            value = call()
        except KernelError as e:
            why_not = f"the kernel refused the operands: {e}"
        else:
            it.kernel_nodes.append(node.id)
            return value
    it.kernel_fallbacks[node.id] = why_not
    log.debug("%s runs in numpy: %s", node.op, why_not)
    return None


def _kernel_block_refusal(hidden, qkv_w, out_w, mask, qkv_b, out_b, tables, heads, hd) -> Optional[str]:
    """Why the fused-block kernel cannot run this block (None: it can)."""
    h = heads * hd
    if hidden.ndim != 3 or hidden.shape[2] != h or np.shape(qkv_w) != (h, 3 * h) or np.shape(out_w) != (h, h):
        return f"hidden {list(hidden.shape)}, qkv_w {list(np.shape(qkv_w))}, out_w {list(np.shape(out_w))} " \
               f"are not [B, S, {h}], [{h}, {3 * h}], [{h}, {h}]"
    if np.ndim(mask) not in (2, 3, 4):
        return f"keep mask {list(np.shape(mask))} is not [B, S], [B, S, S] or [B, H, S, S]"
    if (qkv_b is not None and np.shape(qkv_b) != (3 * h,)) or (out_b is not None and np.shape(out_b) != (h,)):
        return f"biases {list(np.shape(qkv_b))}, {list(np.shape(out_b))} are not [{3 * h}], [{h}]"
    if tables is not None:
        cos, sin = (np.asarray(t) for t in tables)
        rows = cos.size // max(cos.shape[-1], 1) if cos.ndim else 0
        if cos.shape != sin.shape or cos.ndim < 1 or cos.shape[-1] < hd // 2 or rows < hidden.shape[1] or \
                (rows == hidden.shape[0] * hidden.shape[1] and rows != hidden.shape[1]):
            return f"RoPE tables {list(cos.shape)} are not position tables [>= {hidden.shape[1]}, >= {hd // 2}]"
    return None


def _key_mask(mask, b: int, s: int) -> Optional[np.ndarray]:
    """The keep mask as the fused kernel's [B, S] when it is one, or drops the same keys for every query and
    head ([B, 1, S, S] padding); None when it varies by query (causal and padding: the split path)."""
    m = np.asarray(mask)
    if m.shape == (b, s):
        return m
    if m.shape[-1] != s or m.shape[0] not in (1, b):
        return None
    dropped = m.reshape(m.shape[0], -1, s) < 0.5
    if not np.array_equal(dropped, np.broadcast_to(dropped[:, :1], dropped.shape)):
        return None
    return np.broadcast_to(~dropped[:, 0], (b, s))


def _kernel_block(hidden, qkv_w, out_w, mask, qkv_b, out_b, tables, heads, hd) -> np.ndarray:
    """The block through ``kernels.fused_attention_block`` with a [B, S] keep mask; with a mask that varies by
    query, the projections in numpy and the attention (RoPE and the mask included) through ``kernels.attention``."""
    from .. import kernels
    b, s = hidden.shape[:2]
    rope_pair = None
    if tables is not None:
        rope_pair = tuple(as_f32(np.asarray(t).reshape(-1, np.shape(t)[-1])[:s, :hd // 2]) for t in tables)
    keys = _key_mask(mask, b, s)
    if keys is not None:
        out = kernels.fused_attention_block(as_f32(hidden), as_f32(qkv_w), as_f32(out_w), as_f32(keys),
                                            None if qkv_b is None else as_f32(qkv_b),
                                            None if out_b is None else as_f32(out_b), num_heads=heads,
                                            rope=rope_pair)
        return out.astype(np.float64)
    h = heads * hd
    qkv = hidden @ qkv_w if qkv_b is None else hidden @ qkv_w + qkv_b
    ctx = kernels.attention(as_f32(qkv[..., :h]), as_f32(qkv[..., h:2 * h]), as_f32(qkv[..., 2 * h:]),
                            as_f32(mask), num_heads=heads, rope=rope_pair)
    out = ctx.astype(np.float64) @ out_w
    return out if out_b is None else out + out_b
