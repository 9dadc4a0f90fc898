"""ONNX export of RLX's fused ops, norms, attention and RoPE: ONNX Runtime contrib ops where their semantics were
checked equal (tests/test_onnx_export.py), exact standard-op decompositions elsewhere."""

from __future__ import annotations

from typing import Optional

import numpy as np
import onnx

from ..errors import ExportError
from .export_builder import MS_DOMAIN, Builder, node_label

# RLX's masked score is -1e9 (replaced); an additive -1e30 gives masked keys weight 0 as well, and a fully masked
# row stays uniform (every |score| < 1e22 vanishes next to it in float32) without overflowing to -inf.
MASK_BIAS = -1e30


def label(n) -> str:
    return n.name or f"n{n.id}"


def has_vector_shape(b: Builder, nid: int, width) -> bool:
    s = b.shape(nid)
    return s is not None and len(s) == 1 and s[0] == width


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


def emit_swiglu(b, n, ins):
    lo, hi = b.op("Split", [ins[0]], label(n), n_out=2, axis=-1, num_outputs=2) if b.opset >= 18 else \
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


# ---- attention ----------------------------------------------------------------------------------------------------
def unsqueeze(b: Builder, x: str, axes: list[int], hint: str) -> str:
    return b.op("Unsqueeze", [x, b.ints(axes, "axes")], hint) if b.opset >= 13 else \
        b.op("Unsqueeze", [x], hint, axes=axes)


def mask4(b: Builder, n, x: str, mask_id: int, hint: str) -> tuple[str, list]:
    """A [B, Sk], [B, Sq, Sk] or [B, H, Sq, Sk] mask as rank 4 (RLX's broadcasting), with its dims (sizes or
    symbols); by Unsqueeze, so symbolic dims need no shape arithmetic."""
    ms = b.shape(mask_id)
    if ms is None:
        raise ExportError(f"{node_label(n)}: its mask (node {mask_id}) has no known rank")
    if len(ms) == 4:
        return x, list(ms)
    if len(ms) not in (2, 3):
        raise ExportError(f"{node_label(n)}: a mask of rank {len(ms)} has no ONNX mapping (RLX takes 2 to 4)")
    four = [ms[0], 1, 1, ms[1]] if len(ms) == 2 else [ms[0], 1, ms[1], ms[2]]
    return unsqueeze(b, x, [1, 2] if len(ms) == 2 else [1], hint), four


def seq_len(b: Builder, x: str, hint: str, scalar: bool = False) -> str:
    """Run-time length of axis 1 of x ([B, S, …]): a [1] tensor, or a scalar."""
    key = ("seq_len", x, scalar)
    if key not in b.cache:
        idx = b.const(np.asarray(1, dtype=np.int64), "one_scalar") if scalar else b.ints([1], "axis")
        b.cache[key] = b.op("Gather", [b.op("Shape", [x], hint), idx], hint, axis=0)
    return b.cache[key]


def static(*dims) -> bool:
    return all(isinstance(d, int) for d in dims)


def keep_of(b: Builder, mask: str, mask_id: int, kind: str, hint: str) -> str:
    """Where a key is kept, as bool: a Custom mask ≥ 0.5 (or true), a Bias above -inf."""
    if kind == "Bias":
        return b.op("Not", [b.op("IsInf", [mask], hint, detect_positive=0)], hint)
    if b.dtype(mask_id) == "bool":
        return mask
    half = b.const(np.asarray(0.5, dtype=b.np_dtype(mask_id)), "half")
    return b.op("Not", [b.op("Less", [mask, half], hint)], hint)


def mask_bias(b: Builder, n, mask: str, mask_id: int, kind: str, sq, sk, dtype, zero_rows=False,
              q: Optional[str] = None, k: Optional[str] = None) -> str:
    """The keep mask (Custom) or additive bias (Bias) as an additive [m0, m1, Sq, Sk] float bias, as ONNX
    Runtime's attention_bias wants it (shared by every attention reading the same mask). With a symbolic Sq or
    Sk, the broadcast target is read at run time from axis 1 of q and k ([B, S, H·D])."""
    key = ("mask_bias", mask_id, kind, sq, sk, np.dtype(dtype).str, zero_rows)
    if key in b.cache:
        return b.cache[key]
    hint = f"{b.node(mask_id).name or 'mask'}/bias"
    low = b.const(np.asarray(MASK_BIAS, dtype=dtype), "low")
    if kind == "Custom":
        bias = b.op("Where", [keep_of(b, mask, mask_id, kind, hint), b.const(np.asarray(0, dtype=dtype), "zero"),
                              low], hint)
    else:
        bias = mask if b.np_dtype(mask_id) == np.dtype(dtype) else \
            b.op("Cast", [mask], hint, to=onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))
        if zero_rows:  # -inf becomes a finite floor: same weights, and a dead row is zeroed afterwards, not NaN
            bias = b.op("Max", [bias, low], hint)
    bias, four = mask4(b, n, bias, mask_id, hint)
    target = [four[0], four[1], sq, sk]
    if target != four and static(*target):
        bias = b.op("Expand", [bias, b.ints(target, "shape")], hint)
    elif target != four:  # Expand broadcasts: [1, 1, Sq, Sk] keeps the mask's own batch and head dims
        if q is None or k is None:
            raise ExportError(f"{node_label(n)}: a mask broadcast to symbolic lengths {sq}, {sk} needs q and k")
        bias = b.op("Expand", [bias, b.op("Concat", [b.ints([1, 1], "shape"), seq_len(b, q, hint),
                                                      seq_len(b, k, hint)], hint, axis=0)], hint)
    b.cache[key] = bias
    return bias


def causal_bias(b: Builder, sq, sk, window: Optional[int], dtype, q: str, k: str, hint: str) -> str:
    """RLX's causal (or sliding-window) mask as a [1, 1, Sq, Sk] additive bias, query i at key position
    i + Sk - Sq: a constant for static lengths, else built at run time from axis 1 of q and k."""
    if static(sq, sk):
        qpos = np.arange(sq)[:, None] + (sk - sq)
        kpos = np.arange(sk)[None, :]
        masked = kpos > qpos
        if window is not None:
            masked |= kpos < qpos - window
        return b.const(np.where(masked, MASK_BIAS, 0).astype(dtype)[None, None], "causal_bias")
    key = ("causal_bias", q, k, window, np.dtype(dtype).str)
    if key in b.cache:
        return b.cache[key]
    n_q, n_k = seq_len(b, q, hint, scalar=True), seq_len(b, k, hint, scalar=True)
    zero, one = b.const(np.asarray(0, dtype=np.int64), "zero_i"), b.const(np.asarray(1, dtype=np.int64), "one_i")
    qpos = unsqueeze(b, b.op("Add", [b.op("Range", [zero, n_q, one], hint), b.op("Sub", [n_k, n_q], hint)], hint),
                     [1], hint)
    kpos = b.op("Range", [zero, n_k, one], hint)
    masked = b.op("Greater", [kpos, qpos], hint)
    if window is not None:
        below = b.op("Sub", [qpos, b.const(np.asarray(window, dtype=np.int64), "window")], hint)
        masked = b.op("Or", [masked, b.op("Less", [kpos, below], hint)], hint)
    bias = b.op("Where", [masked, b.const(np.asarray(MASK_BIAS, dtype=dtype), "low"),
                          b.const(np.asarray(0, dtype=dtype), "zero")], hint)
    b.cache[key] = unsqueeze(b, bias, [0, 1], hint)
    return b.cache[key]


def layout_of(shape, heads: int, hd: int, at) -> str:
    """RLX's attention operand layouts: [B, S, H·D], [B, S, H, D] or [B, H, S, D] (heads at axis 2 when both fit)."""
    if shape is not None and len(shape) == 3:
        return "bsh"
    if shape is not None and len(shape) == 4 and shape[3] == hd:
        if shape[2] == heads:
            return "bshd"
        if shape[1] == heads:
            return "bhsd"
    raise ExportError(f"{node_label(at)}: attention operand of shape {shape} does not hold {heads} heads of {hd}")


def to_bsh(b: Builder, x: str, layout: str, hint: str) -> str:
    if layout == "bhsd":
        x = b.op("Transpose", [x], hint, perm=[0, 2, 1, 3])
    return x if layout == "bsh" else b.op("Reshape", [x, b.ints([0, 0, -1], "shape")], hint)


def seq_and_width(shape, layout: str):
    if layout == "bsh":
        return shape[1], shape[2]
    if layout == "bshd":
        return shape[1], shape[2] * shape[3] if isinstance(shape[2], int) else None
    return shape[2], shape[1] * shape[3] if isinstance(shape[1], int) else None


def repeat_kv(b: Builder, x: str, kv_heads: int, n_rep: int, hd: int, hint: str, bs=None) -> str:
    """[B, S, hkv·D] -> [B, S, hkv·n·D], each kv head repeated n times in place (RLX's grouped-query attention);
    `bs`: the static [B, S] when known (a constant target shape, no shape arithmetic at run time)."""
    if bs is not None:
        x5 = b.op("Reshape", [x, b.ints([*bs, kv_heads, 1, hd], "shape")], hint)
        target = b.ints([*bs, kv_heads, n_rep, hd], "shape")
    else:
        x5 = b.op("Unsqueeze", [b.op("Reshape", [x, b.ints([0, 0, kv_heads, hd], "shape")], hint),
                                b.ints([3], "axes")], hint)
        sh = b.op("Shape", [x5], hint)
        target = b.op("Concat", [b.op("Slice", [sh, b.ints([0]), b.ints([3])], hint), b.ints([n_rep, hd])], hint,
                      axis=0)
    return b.op("Reshape", [b.op("Expand", [x5, target], hint), b.ints([0, 0, -1], "shape")], hint)


def attention_core(b: Builder, n, q: str, k: str, v: str, sq, sk, kv_width, mask: Optional[str], mask_id,
                   kind: str, heads: int, hd: int, scale: Optional[float], window=None, dtype=np.float32,
                   zero_rows: bool = False) -> str:
    """MultiHeadAttention on [B, S, H·D] q, k, v (k, v of width kv_width) with RLX's mask kinds, exactly."""
    hint = label(n)
    if isinstance(kv_width, int) and kv_width != heads * hd:
        if kv_width % hd or heads % (kv_width // hd):
            raise ExportError(f"{node_label(n)}: k of width {kv_width} does not hold whole heads of {hd}")
        kvh = kv_width // hd
        batch = (b.shape(n.id) or [None])[0]
        bs = [batch, sk] if isinstance(batch, int) and isinstance(sk, int) else None
        k = repeat_kv(b, k, kvh, heads // kvh, hd, hint, bs)
        v = repeat_kv(b, v, kvh, heads // kvh, hd, hint, bs)
    inputs = [q, k, v]
    extra = {}
    if kind in ("Custom", "Bias") or (kind in ("Causal", "SlidingWindow") and (sq != sk or kind != "Causal")):
        bias = mask_bias(b, n, mask, mask_id, kind, sq, sk, dtype, zero_rows, q, k) if kind in ("Custom", "Bias") \
            else causal_bias(b, sq, sk, window if kind == "SlidingWindow" else None, dtype, q, k, hint)
        inputs += ["", "", bias]
    elif kind == "Causal":
        extra["unidirectional"] = 1
    elif kind != "None":
        raise ExportError(f"{node_label(n)}: mask kind {kind!r} has no ONNX mapping")
    return b.op("MultiHeadAttention", inputs, hint, domain=MS_DOMAIN, num_heads=heads,
                scale=float(hd ** -0.5 if scale is None else scale), **extra)


def zero_masked_rows(b: Builder, n, y: str, mask: str, mask_id: int, kind: str, heads: int, hd: int) -> str:
    """SDPA's dead rows (masked_rows zero): an output row is 0 where its mask keeps no key. y is [B, Sq, H·D]."""
    hint = label(n)
    key = ("row_keep", mask_id, kind)
    if key not in b.cache:
        keep = b.op("Cast", [keep_of(b, mask, mask_id, kind, hint)], hint,
                    to=onnx.helper.np_dtype_to_tensor_dtype(np.dtype(b.np_dtype(n.id))))
        keep, _ = mask4(b, n, keep, mask_id, hint)
        rows = b.op("ReduceMax", [keep, b.ints([-1], "axes")], hint, keepdims=1) if b.opset >= 18 else \
            b.op("ReduceMax", [keep], hint, axes=[-1], keepdims=1)
        b.cache[key] = b.op("Transpose", [rows], hint, perm=[0, 2, 1, 3])  # [m0, mq, m1, 1]
    y4 = b.op("Reshape", [y, b.ints([0, 0, heads, hd], "shape")], hint)
    return b.op("Reshape", [b.op("Mul", [y4, b.cache[key]], hint), b.ints([0, 0, heads * hd], "shape")], hint)


def emit_attention(b, n, ins):
    a = n.attrs
    if a.get("attn_logit_softcap") is not None or a.get("v_head_dim") not in (None, a.get("head_dim")):
        raise ExportError(f"{node_label(n)}: Attention with a logit soft-cap or a separate v_head_dim has no "
                          "ONNX Runtime mapping")
    heads, hd, kind = int(a["num_heads"]), int(a["head_dim"]), a.get("mask_kind", "None")
    qs, ks = b.shape(n.inputs[0]), b.shape(n.inputs[1])
    layout = layout_of(qs, heads, hd, n)
    q, k, v = (to_bsh(b, x, layout, label(n)) for x in ins[:3])
    (sq, _), (sk, kv_width) = seq_and_width(qs, layout), seq_and_width(ks, layout)
    mask, mask_id = (ins[3], n.inputs[3]) if len(ins) > 3 else (None, None)
    zero_rows = a.get("masked_rows") == "zero" and kind in ("Custom", "Bias")
    y = attention_core(b, n, q, k, v, sq, sk, kv_width, mask, mask_id, kind, heads, hd, a.get("score_scale"),
                       a.get("window"), b.np_dtype(n.inputs[0]), zero_rows)
    if zero_rows:
        y = zero_masked_rows(b, n, y, mask, mask_id, kind, heads, hd)
    if layout == "bshd":
        y = b.op("Reshape", [y, b.ints([0, 0, heads, hd], "shape")], label(n))
    elif layout == "bhsd":
        y = b.op("Transpose", [b.op("Reshape", [y, b.ints([0, 0, heads, hd], "shape")], label(n))], label(n),
                 perm=[0, 2, 1, 3])
    return y


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


def emit_attention_block(b, n, ins):
    a = n.attrs
    has_bias, has_rope = bool(a.get("has_bias")), bool(a.get("has_rope"))
    qkv_b, out_b = (ins[4], ins[5]) if has_bias else (None, None)
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
