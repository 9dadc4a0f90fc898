"""ONNX export of RLX's fused ops, norms, blocks and RoPE: ONNX Runtime contrib ops where their semantics were
checked equal (tests/test_onnx_export.py), exact standard-op decompositions elsewhere (attention: export_attention.py)."""

from __future__ import annotations

from typing import Optional

import numpy as np

from ..errors import ExportError
from .export_attention import attention_core, has_vector_shape, label, mask_bias, zero_masked_rows
from .export_builder import MS_DOMAIN, Builder, node_label


# ---- activations and norms ------------------------------------------------------------------------------------------
def emit_gelu(b, n, ins):
    return b.op("Gelu", ins, label(n), domain=MS_DOMAIN)


def emit_gelu_approx(b, n, ins):
    return b.op("FastGelu", ins, label(n), domain=MS_DOMAIN)


def activation(b: Builder, act: Optional[str], x: str, hint: str, at) -> str:
    if act is None:
        return x
    if act == "Gelu":
        return b.op("Gelu", [x], hint, domain=MS_DOMAIN)
    if act == "GeluApprox":
        return b.op("FastGelu", [x], hint, domain=MS_DOMAIN)
    if act == "Silu":
        return b.op("Mul", [x, b.op("Sigmoid", [x], hint)], hint)
    if act in ("Relu", "Sigmoid", "Tanh", "Exp", "Neg", "Abs"):
        return b.op(act, [x], hint)
    raise ExportError(f"{node_label(at)}: activation {act!r} has no ONNX mapping")


def last_axis(b: Builder, n, axis) -> None:
    s = b.shape(n.inputs[0])
    if not (axis == -1 or (s is not None and axis == len(s) - 1)):
        raise ExportError(f"{node_label(n)}: {n.op} over axis {axis}, not the last one, has no ONNX mapping "
                          "(ONNX normalizes over every axis from `axis` on)")


def emit_layer_norm(b, n, ins):
    last_axis(b, n, int(n.attrs.get("axis", -1)))
    return b.op("LayerNormalization", ins, label(n), axis=-1, epsilon=float(n.attrs["eps"]))


def rms(b: Builder, x: str, gamma: str, eps: float, dtype, hint: str) -> str:
    """x / sqrt(mean(x²) + eps) · γ in standard ops, in the form ONNX Runtime fuses into SimplifiedLayerNormalization."""
    two = b.const(np.asarray(2.0, dtype=dtype), "two")
    ms = b.op("ReduceMean", [b.op("Pow", [x, two], hint), b.ints([-1], "axes")], hint, keepdims=1) \
        if b.opset >= 18 else b.op("ReduceMean", [b.op("Pow", [x, two], hint)], hint, axes=[-1], keepdims=1)
    den = b.op("Sqrt", [b.op("Add", [ms, b.const(np.asarray(eps, dtype=dtype), f"{hint}/eps")], hint)], hint)
    return b.op("Mul", [b.op("Div", [x, den], hint), gamma], hint)


def plus_beta(b: Builder, y: str, beta_id: int, beta: str, hint: str) -> str:
    return y if b.is_zero(beta_id) else b.op("Add", [y, beta], hint)


def emit_rms_norm(b, n, ins):
    last_axis(b, n, int(n.attrs.get("axis", -1)))
    y = rms(b, ins[0], ins[1], float(n.attrs["eps"]), b.np_dtype(n.id), label(n))
    return plus_beta(b, y, n.inputs[2], ins[2], label(n))


def residual_parts(n, ins):
    """(x, residual, bias or None, gamma, beta) with their node ids."""
    if n.attrs.get("has_bias") or len(ins) == 5:
        return list(zip(ins, n.inputs))
    return [(ins[0], n.inputs[0]), (ins[1], n.inputs[1]), (None, None), (ins[2], n.inputs[2]), (ins[3], n.inputs[3])]


def skip_ok(b: Builder, n, parts) -> bool:
    xs, rs = b.shape(parts[0][1]), b.shape(parts[1][1])
    if xs is None or len(xs) != 3 or xs != rs:
        return False
    return all(nid is None or has_vector_shape(b, nid, xs[-1]) for _, nid in parts[2:])


def emit_residual_ln(b, n, ins):
    (x, _), (r, _), (bias, _), (g, _), (beta, _) = parts = residual_parts(n, ins)
    eps = float(n.attrs["eps"])
    if skip_ok(b, n, parts):
        return b.op("SkipLayerNormalization", [x, r, g, beta] + ([bias] if bias else []), label(n),
                    domain=MS_DOMAIN, epsilon=eps)
    s = b.op("Add", [x, r], label(n))
    s = b.op("Add", [s, bias], label(n)) if bias else s
    return b.op("LayerNormalization", [s, g, beta], label(n), axis=-1, epsilon=eps)


def emit_residual_rms(b, n, ins):
    (x, _), (r, _), (bias, _), (g, _), (beta, beta_id) = parts = residual_parts(n, ins)
    eps = float(n.attrs["eps"])
    if skip_ok(b, n, parts):
        y = b.op("SkipSimplifiedLayerNormalization", [x, r, g] + ([bias] if bias else []), label(n),
                 domain=MS_DOMAIN, epsilon=eps)
    else:
        s = b.op("Add", [x, r], label(n))
        y = rms(b, b.op("Add", [s, bias], label(n)) if bias else s, g, eps, b.np_dtype(n.id), label(n))
    return plus_beta(b, y, beta_id, beta, label(n))


def unpacked(b: Builder, nid: int, widths: list[int]) -> Optional[list[str]]:
    """Node `nid`, a MatMul of a weight that is a Concat (last axis) of weights of `widths`, read only as those
    pieces: one MatMul per weight, which costs the same as the packed one without the Split after it (measured
    at LLaMA-768 sizes: 0.3 ms a Split of 128 x 4096). None when it is not such a MatMul."""
    n = b.node(nid)
    if n.op != "MatMul" or nid in b.graph.outputs:
        return None
    w = b.node(n.inputs[1])
    ws = b.shape(w.id)
    if w.op != "Concat" or ws is None or len(ws) != 2 or int(w.attrs["axis"]) not in (-1, 1):
        return None
    if [(b.shape(i) or [None, None])[-1] for i in w.inputs] != widths:
        return None
    return [b.op("MatMul", [b.names[n.inputs[0]], b.names[i]], label(n)) for i in w.inputs]


def emit_swiglu(b, n, ins):
    w = (b.shape(n.inputs[0]) or [0])[-1]
    halves = unpacked(b, n.inputs[0], [w // 2, w // 2]) if len(b.readers(n.inputs[0])) == 1 else None
    lo, hi = halves if halves else \
        b.op("Split", [ins[0]], label(n), n_out=2, axis=-1, num_outputs=2) if b.opset >= 18 else \
        b.op("Split", [ins[0]], label(n), n_out=2, axis=-1)
    gate, up = (lo, hi) if n.attrs.get("gate_first") else (hi, lo)
    y = b.op("Mul", [b.op("Mul", [gate, b.op("Sigmoid", [gate], label(n))], label(n)), up], label(n))
    cast = n.attrs.get("cast_to")
    if cast:
        from .export_builder import ONNX_TYPES
        if cast not in ONNX_TYPES:
            raise ExportError(f"{node_label(n)}: cast_to {cast!r} has no ONNX type")
        y = b.op("Cast", [y], label(n), to=ONNX_TYPES[cast])
    return y


def matmul_bias_act(b: Builder, x: str, w: str, bias: Optional[str], bias_id, act, hint: str, at) -> str:
    y = b.op("MatMul", [x, w], hint)
    bs = b.shape(bias_id) if bias is not None else None
    vector = bs is not None and len(bs) == 1
    if vector and act in ("Gelu", "GeluApprox"):
        return b.op("BiasGelu" if act == "Gelu" else "FastGelu", [y, bias], hint, domain=MS_DOMAIN)
    if bias is not None:
        y = b.op("Add", [y, bias], hint)
    return activation(b, act, y, hint, at)


def emit_matmul_bias_act(b, n, ins):
    return matmul_bias_act(b, ins[0], ins[1], ins[2], n.inputs[2], n.attrs.get("activation"), label(n), n)


# ---- rotary embeddings ----------------------------------------------------------------------------------------------
def rope_tables(b: Builder, n, cos: str, sin: str, table_id: int, half: int) -> tuple[str, str]:
    """RLX's [P, W] tables (W ≥ n_rot/2) as RotaryEmbedding's [P, n_rot/2] caches."""
    ts = b.static_shape(table_id, "RotaryEmbedding", n)
    out = []
    for t in (cos, sin):
        if len(ts) != 2:
            t = b.op("Reshape", [t, b.ints([-1, ts[-1]], "shape")], label(n))
        if ts[-1] != half:
            t = b.op("Slice", [t, b.ints([0]), b.ints([half]), b.ints([1])], label(n))
        out.append(t)
    return out[0], out[1]


def rope_on(b: Builder, n, x: str, x_shape, cos: str, sin: str, table_id: int, hd: int, n_rot: int,
            style: str) -> str:
    """RLX's Rope on [B, S, …] (or [S, …]) through com.microsoft RotaryEmbedding on [B, S, heads·hd]."""
    if style not in ("NeoX", "GptJ"):
        raise ExportError(f"{node_label(n)}: rope style {style!r} has no ONNX mapping")
    if n_rot == 0:
        return x
    hint = label(n)
    if x_shape is None or len(x_shape) < 2 or not all(isinstance(d, int) for d in x_shape):
        raise ExportError(f"{node_label(n)}: Rope needs the static shape of its input, found {x_shape}")
    xs = [1] + list(x_shape) if len(x_shape) == 2 else list(x_shape)
    bsz, s = xs[0], xs[1]
    rest = int(np.prod(xs[2:]))
    rows = int(np.prod(b.static_shape(table_id, "Rope", n)[:-1]))
    if rows == bsz * s and rows != s:
        pos = b.ints(np.arange(bsz * s).tolist(), "position_ids")
        pos = b.op("Reshape", [pos, b.ints([bsz, s], "shape")], hint)
    elif rows >= s:
        pos = b.ints([0], "position_offset")  # RotaryEmbedding reads a [1] tensor as the first position
    else:
        raise ExportError(f"{node_label(n)}: the rope tables have {rows} rows, fewer than the sequence length {s}")
    c, si = rope_tables(b, n, cos, sin, table_id, n_rot // 2)
    flat = b.op("Reshape", [x, b.ints([bsz, s, rest], "shape")], hint) if xs != [bsz, s, rest] or \
        len(x_shape) == 2 else x
    y = b.op("RotaryEmbedding", [flat, pos, c, si], hint, domain=MS_DOMAIN, num_heads=rest // hd,
             interleaved=1 if style == "GptJ" else 0, rotary_embedding_dim=n_rot if n_rot != hd else None)
    return y if flat is x else b.op("Reshape", [y, b.ints(list(x_shape), "shape")], hint)


def emit_rope(b, n, ins):
    hd = int(n.attrs["head_dim"])
    n_rot = int(n.attrs.get("n_rot", hd) if n.attrs.get("n_rot") is not None else hd)
    return rope_on(b, n, ins[0], b.shape(n.inputs[0]), ins[1], ins[2], n.inputs[1], hd, n_rot,
                   n.attrs.get("style", "NeoX") or "NeoX")


# ---- blocks ---------------------------------------------------------------------------------------------------------
def attention_block(b: Builder, n, hidden: str, hidden_id: int, qkv_w: str, qkv_b: Optional[str], out_w: str,
                    out_b: Optional[str], mask: str, mask_id: int, tables, heads: int, hd: int) -> str:
    """qkv projection, attention with the Custom keep mask (and NeoX RoPE on q, k), output projection."""
    hs = b.static_shape(hidden_id, "FusedAttentionBlock", n)
    if len(hs) != 3:
        raise ExportError(f"{node_label(n)}: FusedAttentionBlock's hidden must be [B, S, H], found {hs}")
    width, hint, dtype = heads * hd, label(n), b.np_dtype(hidden_id)
    masked_zero = n.attrs.get("masked_rows") == "zero"
    if tables is None:
        bias = mask_bias(b, n, mask, mask_id, "Custom", hs[1], hs[1], dtype)
        qkv_b = qkv_b or b.const(np.zeros(3 * width, dtype=dtype), f"{hint}/qkv_zero_bias")
        y = b.op("Attention", [hidden, qkv_w, qkv_b, "", "", bias], hint, domain=MS_DOMAIN, num_heads=heads,
                 scale=float(hd ** -0.5))
    else:
        qkv = b.op("MatMul", [hidden, qkv_w], hint)
        qkv = b.op("Add", [qkv, qkv_b], hint) if qkv_b else qkv
        q, k, v = b.op("Split", [qkv, b.ints([width] * 3, "split")], hint, n_out=3, axis=-1)
        shape = [hs[0], hs[1], width]
        q = rope_on(b, n, q, shape, tables[0], tables[1], tables[2], hd, hd, "NeoX")
        k = rope_on(b, n, k, shape, tables[0], tables[1], tables[2], hd, hd, "NeoX")
        y = attention_core(b, n, q, k, v, hs[1], hs[1], width, mask, mask_id, "Custom", heads, hd, None, None, dtype)
    if masked_zero:
        y = zero_masked_rows(b, n, y, mask, mask_id, "Custom", heads, hd)
    y = b.op("MatMul", [y, out_w], hint)
    return b.op("Add", [y, out_b], hint) if out_b else y


def emit_attention_block(b, n, ins, with_out_bias: bool = True):
    a = n.attrs
    has_bias, has_rope = bool(a.get("has_bias")), bool(a.get("has_rope"))
    qkv_b, out_b = (ins[4], ins[5] if with_out_bias else None) if has_bias else (None, None)
    r = 4 + 2 * has_bias
    tables = (ins[r], ins[r + 1], n.inputs[r]) if has_rope else None
    return attention_block(b, n, ins[0], n.inputs[0], ins[1], qkv_b, ins[2], out_b, ins[3], n.inputs[3], tables,
                           int(a["num_heads"]), int(a["head_dim"]))


def emit_transformer_layer(b, n, ins):
    a = n.attrs
    if a.get("has_bias"):
        hidden, qkv_w, qkv_b, out_w, out_b, g1, b1, fc1_w, fc1_b, fc2_w, fc2_b, g2, b2, mask = ins
        fc1_b_id = n.inputs[8]
    else:
        hidden, qkv_w, out_w, g1, b1, fc1_w, fc2_w, g2, b2, mask = ins
        qkv_b = out_b = fc1_b = fc2_b = fc1_b_id = None
    hint = label(n)
    attn = attention_block(b, n, hidden, n.inputs[0], qkv_w, qkv_b, out_w, out_b, mask, n.inputs[-1], None,
                           int(a["num_heads"]), int(a["head_dim"]))
    h1 = b.op("SkipLayerNormalization", [attn, hidden, g1, b1], hint, domain=MS_DOMAIN, epsilon=float(a["eps1"]))
    up = matmul_bias_act(b, h1, fc1_w, fc1_b, fc1_b_id, a.get("activation"), hint, n)
    down = b.op("MatMul", [up, fc2_w], hint)
    return b.op("SkipLayerNormalization", [down, h1, g2, b2] + ([fc2_b] if fc2_b else []), hint, domain=MS_DOMAIN,
                epsilon=float(a["eps2"]))
