"""ONNX export of a residual Add read by a LayerNorm or RmsNorm (and by other nodes): one com.microsoft
SkipLayerNormalization / SkipSimplifiedLayerNormalization, whose fourth output is the sum the other readers take.

Pre-norm transformers read each residual sum twice (the next norm, the next residual), so RLX's FusedResidualLN
(one output) does not match them, and ONNX Runtime's own session fusion takes only an Add with a single reader:
without this the sum and the norm are two kernels and the norm reads the sum back from memory.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Optional

from .export_builder import MS_DOMAIN, Builder
from .export_attention import projection_biases
from .export_fused import emit_attention_block, has_vector_shape, label, plus_beta, residual_parts, skip_ok

NORMS = ("LayerNorm", "RmsNorm")
RESIDUAL = ("FusedResidualLN", "FusedResidualRmsNorm")
DTYPES = ("f32", "f16")


def _norm_ok(b: Builder, norm, width) -> bool:
    axis = int(norm.attrs.get("axis", -1))
    if axis not in (-1, 2) or norm.dtype not in DTYPES:
        return False
    params = norm.inputs[1:3]  # γ, β: weights; RmsNorm's β is added after (any shape that broadcasts)
    vectors = params if norm.op == "LayerNorm" else params[:1]
    return len(params) == 2 and all(b.node(p).op in ("Param", "Constant") for p in params) and \
        all(has_vector_shape(b, p, width) for p in vectors)


def bias_of(b: Builder, n) -> Optional[int]:
    """The node id of the vector bias `n` adds last: a FusedMatMulBiasAct's without activation, a
    FusedAttentionBlock's output bias."""
    if n.op == "FusedMatMulBiasAct" and n.attrs.get("activation") is None and len(n.inputs) == 3:
        return n.inputs[2]
    if n.op == "FusedAttentionBlock" and n.attrs.get("has_bias"):
        return n.inputs[5]
    return None


def bias_source(b: Builder, nid: int, readers, width, outputs) -> bool:
    """Node `nid` adds a vector bias last and has no other reader (nor is a graph output): the Skip*Normalization
    can add that bias instead (one kernel adds x, skip and bias)."""
    n = b.node(nid)
    bias = bias_of(b, n)
    return bias is not None and len(readers[nid]) == 1 and nid not in outputs and has_vector_shape(b, bias, width) \
        and b.dtype(bias) == n.dtype


def emit_unbiased(b: Builder, n, ins: list[str]) -> str:
    """`n` without its last bias (a Skip*Normalization adds it)."""
    if n.op == "FusedMatMulBiasAct":
        return b.op("MatMul", ins[:2], label(n))
    return emit_attention_block(b, n, ins, with_out_bias=False)


def plan(graph, b: Builder, live: set[int]) -> tuple[dict[int, int], dict[int, int], set[int]]:
    """(Add node id -> the norm it becomes one Skip*Normalization with, Add or residual norm node id -> the node
    whose last bias it adds, the nodes written without their last bias): a live two-input Add of rank-3 operands
    of one shape (what the contrib kernels take), read as input 0 by a last-axis norm with vector γ and β."""
    readers = defaultdict(list)
    for n in graph.nodes:
        if n.id in live:
            for i in n.inputs:
                readers[i].append(n)
    out, biased = {}, {}
    for n in graph.nodes:
        if n.op != "Add" or n.id not in live or len(n.inputs) != 2 or n.dtype not in DTYPES:
            continue
        s, xs, rs = b.shape(n.id), b.shape(n.inputs[0]), b.shape(n.inputs[1])
        if s is None or len(s) != 3 or xs != s or rs != s or any(b.dtype(i) != n.dtype for i in n.inputs):
            continue
        norm = next((u for u in readers[n.id] if u.op in NORMS and u.inputs[0] == n.id and u.dtype == n.dtype
                     and _norm_ok(b, u, s[-1])), None)
        if norm is not None and norm.id not in out.values():
            out[n.id] = norm.id
    for n in graph.nodes:  # the residual Adds above, and RLX's own residual norms without a bias
        if n.id in out or n.op in RESIDUAL and n.id in live and len(n.inputs) == 4 and not n.attrs.get("has_bias") \
                and skip_ok(b, n, residual_parts(n, [""] * 4)):
            width = b.shape(n.inputs[0])[-1]
            src = next((i for i in n.inputs[:2] if bias_source(b, i, readers, width, set(graph.outputs))), None)
            if src is not None:
                biased[n.id] = src
    unbiased = set(biased.values())
    for n in graph.nodes:  # q, k and v projections whose biases MultiHeadAttention adds
        if n.op == "Attention" and n.id in live:
            unbiased.update(projection_biases(b, n) or [])
    return out, biased, unbiased


def emit_residual(b: Builder, n, ins: list[str], source) -> str:
    """RLX's FusedResidualLN / FusedResidualRmsNorm (no bias of its own) adding `source`'s last bias too."""
    bias, eps = b.name_of(bias_of(b, source)), float(n.attrs["eps"])
    if n.op == "FusedResidualLN":
        return b.op("SkipLayerNormalization", [*ins, bias], label(n), domain=MS_DOMAIN, epsilon=eps)
    y = b.op("SkipSimplifiedLayerNormalization", [*ins[:3], bias], label(n), domain=MS_DOMAIN, epsilon=eps)
    return plus_beta(b, y, n.inputs[3], ins[3], label(n))


def emit(b: Builder, add, norm, ins: list[str], sum_read: bool, source=None) -> tuple[str, str]:
    """(the sum, the norm's output); the sum is not computed when nothing else reads it (`sum_read`); `source`:
    the node (written without it) whose bias the kernel adds."""
    gamma, beta = b.name_of(norm.inputs[1]), b.name_of(norm.inputs[2])
    bias = [b.name_of(bias_of(b, source))] if source is not None else []
    eps, hint = float(norm.attrs["eps"]), label(norm)
    unused = (1, 2) if sum_read else (1, 2, 3)
    if norm.op == "LayerNorm":
        y, _, _, total = b.op("SkipLayerNormalization", [ins[0], ins[1], gamma, beta, *bias], hint, n_out=4,
                              unused=unused, domain=MS_DOMAIN, epsilon=eps)
    else:
        y, _, _, total = b.op("SkipSimplifiedLayerNormalization", [ins[0], ins[1], gamma, *bias], hint, n_out=4,
                              unused=unused, domain=MS_DOMAIN, epsilon=eps)
        y = plus_beta(b, y, norm.inputs[2], beta, hint)
    return total, y
