"""Op semantics of the fused ops, with the optional Rust-kernel backend for attention and attention blocks."""

from __future__ import annotations

import numpy as np

from ..graph import Node
from .numerics import ACTIVATIONS, attention, cast, layer_norm, rms_norm, rope, silu
from .optable import node_attr, register_op


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
    if it.backend == "kernels" and _kernel_block_ok(hidden, qkv_w, out_w, mask, qkv_b, out_b, tables, heads, hd):
        it.kernel_nodes.append(node.id)
        return _kernel_block(hidden, qkv_w, out_w, mask, qkv_b, out_b, tables, heads)
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


def kernel_attention_ok(q, k, v, mask, a, kind) -> bool:
    if q.ndim != 3 or k.ndim != 3 or v.ndim != 3 or k.shape != v.shape or q.shape[0] != k.shape[0]:
        return False
    if q.shape[2] != k.shape[2] or q.shape[2] != a["num_heads"] * a["head_dim"]:
        return False
    if a.get("attn_logit_softcap") is not None or a.get("v_head_dim") not in (None, a["head_dim"]):
        return False
    if kind == "Custom":
        return np.shape(mask) == (q.shape[0], k.shape[1])
    return kind == "None" or (kind == "Causal" and q.shape[1] == k.shape[1])


def kernel_attention(q, k, v, mask, a, kind) -> np.ndarray:
    from .. import kernels
    out = kernels.attention(as_f32(q), as_f32(k), as_f32(v), None if mask is None else as_f32(mask),
                            num_heads=int(a["num_heads"]), mask_kind=kind.lower(), scale=a.get("score_scale"),
                            masked_rows=a.get("masked_rows") or "uniform")
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
    from .. import kernels
    rope_pair = None
    if tables is not None:
        s = hidden.shape[1]
        rope_pair = (as_f32(np.asarray(tables[0])[:s]), as_f32(np.asarray(tables[1])[:s]))
    out = kernels.fused_attention_block(as_f32(hidden), as_f32(qkv_w), as_f32(out_w), as_f32(mask),
                                        None if qkv_b is None else as_f32(qkv_b),
                                        None if out_b is None else as_f32(out_b), num_heads=heads, rope=rope_pair)
    return out.astype(np.float64)
