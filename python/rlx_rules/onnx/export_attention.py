"""ONNX export of RLX's Attention: com.microsoft MultiHeadAttention (or Attention, on a packed projection) with
RLX's mask kinds mapped exactly, k and v fed as they are (BNSH) or folded (multi-query) rather than repeated."""

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
                   zero_rows: bool = False, proj_bias: str = "") -> str:
    """MultiHeadAttention on [B, S, H·D] q, k, v (k, v of width kv_width) with RLX's mask kinds, exactly;
    `proj_bias`: the q|k|v projections' biases, which the op adds."""
    hint = label(n)
    if isinstance(kv_width, int) and kv_width != heads * hd:
        if kv_width % hd or heads % (kv_width // hd):
            raise ExportError(f"{node_label(n)}: k of width {kv_width} does not hold whole heads of {hd}")
        kvh = kv_width // hd
        batch = (b.shape(n.id) or [None])[0]
        bs = [batch, sk] if isinstance(batch, int) and isinstance(sk, int) else None
        k = repeat_kv(b, k, kvh, heads // kvh, hd, hint, bs)
        v = repeat_kv(b, v, kvh, heads // kvh, hd, hint, bs)
    inputs = [q, k, v] + ([proj_bias] if proj_bias else [])
    extra = {}
    if kind in ("Custom", "Bias") or (kind in ("Causal", "SlidingWindow") and (sq != sk or kind != "Causal")):
        bias = mask_bias(b, n, mask, mask_id, kind, sq, sk, dtype, zero_rows, q, k) if kind in ("Custom", "Bias") \
            else causal_bias(b, sq, sk, window if kind == "SlidingWindow" else None, dtype, q, k, hint)
        inputs += [""] * (5 - len(inputs)) + [bias]
    elif kind == "Causal":
        extra["unidirectional"] = 1
    elif kind != "None":
        raise ExportError(f"{node_label(n)}: mask kind {kind!r} has no ONNX mapping")
    return b.op("MultiHeadAttention", inputs, hint, domain=MS_DOMAIN, num_heads=heads,
                scale=float(hd ** -0.5 if scale is None else scale), **extra)


def zero_masked_rows(b: Builder, n, y: str, mask: str, mask_id: int, kind: str, heads: int, hd: int) -> str:
    """SDPA's dead rows (masked_rows zero): an output row is 0 where its mask keeps no key. y is [B, Sq, H·D]; a
    mask without heads multiplies it as [m0, mq, 1], a per-head one as [m0, mq, H, 1] on [B, Sq, H, D]."""
    hint = label(n)
    key = ("row_keep", mask_id, kind)
    if key not in b.cache:
        keep = b.op("Cast", [keep_of(b, mask, mask_id, kind, hint)], hint,
                    to=onnx.helper.np_dtype_to_tensor_dtype(np.dtype(b.np_dtype(n.id))))
        keep, four = mask4(b, n, keep, mask_id, hint)
        rows = b.op("ReduceMax", [keep, b.ints([-1], "axes")], hint, keepdims=1) if b.opset >= 18 else \
            b.op("ReduceMax", [keep], hint, axes=[-1], keepdims=1)  # [m0, m1, mq, 1]
        b.cache[key] = (b.op("Squeeze", [rows, b.ints([1], "axes")], hint), False) if four[1] == 1 else \
            (b.op("Transpose", [rows], hint, perm=[0, 2, 1, 3]), True)  # [m0, mq, 1] or [m0, mq, m1, 1]
    rows, per_head = b.cache[key]
    if not per_head:
        return b.op("Mul", [y, rows], hint)
    y4 = b.op("Reshape", [y, b.ints([0, 0, heads, hd], "shape")], hint)
    return b.op("Reshape", [b.op("Mul", [y4, rows], hint), b.ints([0, 0, heads * hd], "shape")], hint)


def fold_bias(b: Builder, bias: str, four: list, heads: int, hint: str) -> str:
    """A [m0, m1, Sq, Sk] additive bias (m1: 1 or every head) as the folded attention's [m0, 1, Sq·H, Sk]:
    query row (s, h) keeps mask row s (of head h)."""
    key = ("fold_bias", bias)
    if key not in b.cache:
        m0, m1, sq, sk = four
        if m1 == heads:
            y = b.op("Transpose", [bias], hint, perm=[0, 2, 1, 3])
        else:
            y = b.op("Expand", [unsqueeze(b, bias, [3], hint), b.ints([m0, 1, sq, heads, sk], "shape")], hint)
        b.cache[key] = b.op("Reshape", [y, b.ints([m0, 1, sq * heads, sk], "shape")], hint)
    return b.cache[key]


def folded_attention(b: Builder, n, ins, layout: str, qs, ks, dtype, kind: str) -> str:
    """Multi-query attention (one kv head) without repeating k and v: [B, Sq, H·D] queries are [B, Sq·H, D], one
    MultiHeadAttention head over Sq·H query rows, each keeping its own mask row (RLX: every head reads kv head 0).
    Static shapes; q in [B, S, H·D] or [B, S, H, D]; the output [B, Sq, H·D]."""
    a, hint = n.attrs, label(n)
    heads, hd = int(a["num_heads"]), int(a["head_dim"])
    bsz, sq, sk = qs[0], qs[1], ks[1]
    q = b.op("Reshape", [ins[0], b.ints([bsz, sq * heads, hd], "shape")], hint)
    k, v = (x if len(ks) == 3 else b.op("Reshape", [x, b.ints([bsz, sk, hd], "shape")], hint) for x in ins[1:3])
    inputs = [q, k, v]
    if kind in ("Custom", "Bias"):
        ms = b.shape(n.inputs[3])
        four = [ms[0], ms[1] if len(ms) == 4 else 1, sq, sk]  # mask_bias's [m0, m1, Sq, Sk]
        inputs += ["", "", fold_bias(b, mask_bias(b, n, ins[3], n.inputs[3], kind, sq, sk, dtype), four, heads, hint)]
    elif kind in ("Causal", "SlidingWindow"):
        bias = causal_bias(b, sq, sk, a.get("window") if kind == "SlidingWindow" else None, dtype, q, k, hint)
        inputs += ["", "", fold_bias(b, bias, [1, 1, sq, sk], heads, hint)]
    elif kind != "None":
        raise ExportError(f"{node_label(n)}: mask kind {kind!r} has no ONNX mapping")
    scale = a.get("score_scale")
    y = b.op("MultiHeadAttention", inputs, hint, domain=MS_DOMAIN, num_heads=1,
             scale=float(hd ** -0.5 if scale is None else scale))
    return b.op("Reshape", [y, b.ints([bsz, sq, heads * hd], "shape")], hint)


def kv_layout(shape, heads: int) -> str:
    """k's and v's layout as RLX reads them: rank 3 [B, S, Hkv·D]; rank 4 [B, S, Hkv, D] unless axis 1 alone
    holds the query heads ([B, H, S, D])."""
    if shape is None or len(shape) not in (3, 4):
        return "?"
    return "bsh" if len(shape) == 3 else "bshd" if shape[2] == heads or shape[1] != heads else "bhsd"


def bnsh_of(b: Builder, nid: int, heads: int, hd: int) -> Optional[str]:
    """Node `nid` ([B, S, H·D], [B, S, H, D] or [B, H, S, D]) as an ONNX tensor [B, H, S, D]: itself, or the
    input of its head transpose (Transpose [0, 2, 1, 3] of a [B, H, S, D], maybe reshaped to [B, S, H·D]); None
    when it is neither (the Transpose and Reshape then have no other reader left, and are not written)."""
    n, s = b.node(nid), b.shape(nid)
    if s is not None and len(s) == 4 and kv_layout(s, heads) == "bhsd":
        return b.names[nid]
    if n.op == "Reshape" and s is not None and len(s) == 3:
        src = b.shape(n.inputs[0])
        if src is None or len(src) != 4 or src[:2] != s[:2] or src[2:] != [heads, hd]:
            return None
        n = b.node(n.inputs[0])
    if n.op != "Transpose" or [int(p) for p in n.attrs.get("perm", [])] != [0, 2, 1, 3]:
        return None
    src = b.shape(n.inputs[0])
    return b.names[n.inputs[0]] if src is not None and len(src) == 4 and src[1] == heads and src[3] == hd else None


def packed_qkv(b: Builder, n, width: int) -> Optional[tuple]:
    """(x, W, bias or None) when q, k and v are the [0, W), [W, 2W), [2W, 3W) slices of the last axis of one
    projection x·W (+ bias) with W a [K, 3W] weight, read by nothing else: ONNX Runtime's Attention computes
    that projection itself (no Split)."""
    cuts = [b.node(i) for i in n.inputs[:3]]
    if any(c.op not in ("Narrow", "Slice") or int(c.attrs.get("step", 1)) != 1 or len(b.readers(c.id)) != 1
           or int(c.attrs["axis"]) not in (-1, 2) or int(c.attrs["len"]) != width for c in cuts):
        return None
    src = b.node(cuts[0].inputs[0])
    if [int(c.attrs["start"]) for c in cuts] != [0, width, 2 * width] or any(c.inputs[0] != src.id for c in cuts) \
            or len(b.readers(src.id)) != 3 or src.id in b.graph.outputs:
        return None
    if src.op == "FusedMatMulBiasAct" and src.attrs.get("activation") is None and \
            has_vector_shape(b, src.inputs[2], 3 * width):
        bias = src.inputs[2]
    elif src.op == "MatMul":
        bias = None
    else:
        return None
    xs, ws = b.shape(src.inputs[0]), b.shape(src.inputs[1])
    if xs is None or len(xs) != 3 or ws is None or ws != [xs[2], 3 * width]:
        return None
    return src.inputs[0], src.inputs[1], bias


def emit_attention(b, n, ins):
    a = n.attrs
    if a.get("attn_logit_softcap") is not None or a.get("v_head_dim") not in (None, a.get("head_dim")):
        raise ExportError(f"{node_label(n)}: Attention with a logit soft-cap or a separate v_head_dim has no "
                          "ONNX Runtime mapping")
    heads, hd, kind = int(a["num_heads"]), int(a["head_dim"]), a.get("mask_kind", "None")
    qs, ks = b.shape(n.inputs[0]), b.shape(n.inputs[1])
    layout, kl = layout_of(qs, heads, hd, n), kv_layout(ks, heads)
    if kl == "?" or ks[-1] % hd and kl == "bsh" or kl != "bsh" and ks[-1] != hd:
        raise ExportError(f"{node_label(n)}: k of shape {ks} does not hold heads of {hd}")
    (sq, _), (sk, kv_width) = seq_and_width(qs, layout), seq_and_width(ks, kl)
    mask, mask_id = (ins[3], n.inputs[3]) if len(ins) > 3 else (None, None)
    zero_rows = a.get("masked_rows") == "zero" and kind in ("Custom", "Bias")
    dtype = b.np_dtype(n.inputs[0])
    known = static(*qs, *ks, *(b.shape(mask_id) or [None] if mask_id is not None else []))
    packed = packed_qkv(b, n, heads * hd) if known and layout == kl == "bsh" and sq == sk and \
        kv_width == heads * hd and kind in ("None", "Causal", "SlidingWindow", "Custom", "Bias") else None
    if packed is not None:  # ONNX Runtime's Attention: the packed projection and attention in one kernel
        x, w, bias_id = packed
        inputs = [b.names[x], b.name_of(w), b.name_of(bias_id) if bias_id is not None else
                  b.const(np.zeros(3 * heads * hd, dtype=dtype), f"{label(n)}/qkv_zero_bias")]
        if kind in ("Custom", "Bias"):  # an additive bias, never mask_index (its -10000 fill: a dead row differs)
            inputs += ["", "", mask_bias(b, n, mask, mask_id, kind, sq, sk, dtype, zero_rows)]
        elif kind == "SlidingWindow":
            inputs += ["", "", causal_bias(b, sq, sk, a.get("window"), dtype, "", "", label(n))]
        scale = a.get("score_scale")
        y = b.op("Attention", inputs, label(n), domain=MS_DOMAIN, num_heads=heads,
                 scale=float(hd ** -0.5 if scale is None else scale), unidirectional=1 if kind == "Causal" else None)
    elif known and kv_width == hd != heads * hd and layout != "bhsd" and kl != "bhsd":
        y = folded_attention(b, n, ins, layout, qs, ks, dtype, kind)
    else:
        y = unfolded_attention(b, n, ins, layout, kl, known, sq, sk, kv_width, dtype, zero_rows)
    if zero_rows:
        y = zero_masked_rows(b, n, y, mask, mask_id, kind, heads, hd)
    if layout == "bshd":
        y = b.op("Reshape", [y, b.ints([0, 0, heads, hd], "shape")], label(n))
    elif layout == "bhsd":
        y = b.op("Transpose", [b.op("Reshape", [y, b.ints([0, 0, heads, hd], "shape")], label(n))], label(n),
                 perm=[0, 2, 1, 3])
    return y


def unfolded_attention(b: Builder, n, ins, layout: str, kl: str, known: bool, sq, sk, kv_width, dtype,
                       zero_rows: bool) -> str:
    """MultiHeadAttention on q [B, Sq, H·D] and k, v as [B, H, Sk, D] or [B, Sk, H·D]; the output [B, Sq, H·D]."""
    a = n.attrs
    heads, hd, kind = int(a["num_heads"]), int(a["head_dim"]), a.get("mask_kind", "None")
    mask, mask_id = (ins[3], n.inputs[3]) if len(ins) > 3 else (None, None)
    q = to_bsh(b, ins[0], layout, label(n))
    # k and v as [B, H, Sk, D] (MultiHeadAttention's BNSH key and value) when they are, or were before a head
    # transpose, and the lengths are static; else [B, Sk, H·D]
    k, v = (bnsh_of(b, i, heads, hd) if known and kv_width == heads * hd else None for i in n.inputs[1:3])
    if k is None or v is None:
        k, v = (x if kl == "bhsd" and known else to_bsh(b, x, kl, label(n)) for x in ins[1:3])
    projections = projection_biases(b, n)
    proj_bias = "" if projections is None else b.op("Concat", [b.name_of(b.node(i).inputs[2]) for i in projections],
                                                    label(n), axis=0)
    return attention_core(b, n, q, k, v, sq, sk, kv_width, mask, mask_id, kind, heads, hd, a.get("score_scale"),
                          a.get("window"), dtype, zero_rows, proj_bias)


def projection_biases(b: Builder, n) -> Optional[list[int]]:
    """The q, k and v projections (FusedMatMulBiasAct without activation, a vector bias, read by `n` alone) of an
    Attention on [B, S, H·D] operands that MultiHeadAttention runs as they are, whose biases the op adds (they are
    written as MatMuls alone); None when any of them is not one."""
    if n.op != "Attention":
        return None
    width = int(n.attrs["num_heads"]) * int(n.attrs["head_dim"])
    shapes = [b.shape(i) for i in n.inputs[:3]]
    if len(set(n.inputs[:3])) != 3 or any(s is None or len(s) != 3 or s[-1] != width or not static(*s)
                                          for s in shapes):
        return None
    for i in n.inputs[:3]:
        p = b.node(i)
        if p.op != "FusedMatMulBiasAct" or p.attrs.get("activation") is not None or len(p.inputs) != 3 or \
                len(b.readers(i)) != 1 or i in b.graph.outputs or not has_vector_shape(b, p.inputs[2], width) or \
                b.dtype(p.inputs[2]) != b.dtype(i):
            return None
    return list(n.inputs[:3])
