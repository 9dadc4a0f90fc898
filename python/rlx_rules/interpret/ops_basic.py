"""Op semantics: activations, elementwise and comparison ops, matmuls, norms, softmax, attention, rope."""

from __future__ import annotations

import numpy as np

from ..graph import Node
from .numerics import INT, ACTIVATIONS, attention, cast, layer_norm, rms_norm, rope, softmax
from .ops_fused import kernel_attention, kernel_attention_refusal, run_kernel
from .optable import checked_indices, node_attr, norm_axis, register_op


@register_op(*ACTIVATIONS)
def _activation(it, node, args):
    return ACTIVATIONS[node.op](args[0])


@register_op("StopGradient")
def _identity(it, node, args):
    return args[0]


@register_op("Cast")
def _cast(it, node, args):
    return cast(args[0], node_attr(node, "to"))


_BINARY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide, "Max": np.maximum,
           "Min": np.minimum, "Pow": np.power}


_COMPARE = {"Eq": np.equal, "Ne": np.not_equal, "Lt": np.less, "Le": np.less_equal, "Gt": np.greater,
            "Ge": np.greater_equal}


@register_op(*_BINARY)
def _binary(it, node, args):
    out = _BINARY[node.op](args[0], args[1])
    if node.op == "Div" and node.dtype in INT:  # integer division truncates toward zero (ONNX, RLX)
        out = np.trunc(out)
    return out


@register_op(*_COMPARE)
def _compare(it, node, args):
    return _COMPARE[node.op](args[0], args[1]).astype(np.float64)  # bool held as 0.0 / 1.0


@register_op("Where")
def _where(it, node, args):
    return np.where(np.asarray(args[0]) != 0, args[1], args[2])


@register_op("Fma")
def _fma(it, node, args):
    return args[0] * args[1] + args[2]


@register_op("MatMul")
def _matmul(it, node, args):
    return np.matmul(args[0], args[1])


@register_op("GroupedMatMul")
def _grouped_matmul(it, node, args):
    x, w, idx = args
    experts = checked_indices(idx, w.shape[0], "expert_idx")
    if x.ndim != 2 or w.ndim != 3 or experts.shape != (x.shape[0],):
        raise ValueError(f"expects input [M, K], weight [E, K, N], expert_idx [M]; got {list(x.shape)}, "
                         f"{list(w.shape)}, {list(np.shape(idx))}")
    return np.einsum("mk,mkn->mn", x, w[experts])


@register_op("LoraMatMul")
def _lora_matmul(it, node, args):
    x, w, a, b = args
    return x @ w + float(node_attr(node, "scale")) * ((x @ a) @ b)


@register_op("LayerNorm")
def _layer_norm(it, node, args):
    return layer_norm(args[0], args[1], args[2], node_attr(node, "eps"), node_attr(node, "axis", -1))


@register_op("RmsNorm")
def _rms_norm(it, node, args):
    y = rms_norm(args[0], args[1], args[2], node_attr(node, "eps"), node_attr(node, "axis", -1))
    # RLX's RmsNorm writes its declared shape: FuseRmsNormReshape gives it the flattened shape of the
    # Reshape it absorbed ([prod(leading), H]), the same elements in the same order.
    shape = node.shape
    if shape is not None and y.ndim >= 2 and list(shape) == [int(np.prod(y.shape[:-1])), y.shape[-1]]:
        y = y.reshape(shape)
    return y


def _channels(v: np.ndarray, ndim: int) -> np.ndarray:
    return np.asarray(v).reshape([1, -1] + [1] * (ndim - 2))


@register_op("LayerNorm2d")
def _layer_norm_2d(it, node, args):
    x, gamma, beta = args
    if x.ndim < 2:
        raise ValueError(f"expects NCHW input, got shape {list(x.shape)}")
    return layer_norm(x, gamma, beta, node_attr(node, "eps"), axis=1)


@register_op("GroupNorm")
def _group_norm(it, node, args):
    x, gamma, beta = args
    groups = int(node_attr(node, "num_groups"))
    n, c = x.shape[:2]
    if groups <= 0 or c % groups:
        raise ValueError(f"{c} channels do not split into num_groups={groups}")
    g = x.reshape(n, groups, -1)
    mean = g.mean(axis=2, keepdims=True)
    var = ((g - mean) ** 2).mean(axis=2, keepdims=True)
    normed = ((g - mean) / np.sqrt(var + node_attr(node, "eps"))).reshape(x.shape)
    return normed * _channels(gamma, x.ndim) + _channels(beta, x.ndim)


@register_op("BatchNormInference")
def _batch_norm(it, node, args):
    x, gamma, beta, mean, var = args  # feature axis: the last (RLX)
    return (x - mean) / np.sqrt(var + node_attr(node, "eps")) * gamma + beta


@register_op("Softmax")
def _softmax(it, node, args):
    return softmax(args[0], norm_axis(args[0], node_attr(node, "axis", -1)))


def _no_mask_input(node: Node, args: list, kind: str):
    if len(args) > 3:
        raise ValueError(f"mask_kind {kind} takes no mask input, but the node has {len(args)} inputs")


@register_op("Attention")
def _attention(it, node, args):
    a = node.attrs
    kind = node_attr(node, "mask_kind")
    if kind in ("None", "Causal", "SlidingWindow"):
        _no_mask_input(node, args, kind)
    elif len(args) < 4:
        raise ValueError(f"mask_kind {kind} needs a 4th input (the mask), but the node has {len(args)} inputs")
    mask = args[3] if len(args) > 3 else None
    q, k, v = args[:3]
    if it.backend == "kernels":
        out = run_kernel(it, node, kernel_attention_refusal(q, k, v, mask, a, kind),
                         lambda: kernel_attention(q, k, v, mask, a, kind))
        if out is not None:
            return out
    return attention(q, k, v, mask, int(node_attr(node, "num_heads")), int(node_attr(node, "head_dim")), kind,
                     a.get("score_scale"), window=a.get("window"), softcap=a.get("attn_logit_softcap"),
                     v_head_dim=a.get("v_head_dim"), masked_rows=a.get("masked_rows") or "uniform")


@register_op("Rope")
def _rope(it, node, args):
    return rope(args[0], args[1], args[2], int(node_attr(node, "head_dim")), int(node_attr(node, "n_rot")),
                node_attr(node, "style", "NeoX"))
