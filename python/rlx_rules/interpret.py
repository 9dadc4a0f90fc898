"""A reference interpreter: runs a graph with numpy, one op at a time, to check that rewrites keep values."""

from __future__ import annotations

import math
from typing import Callable, Mapping

import numpy as np

from .errors import GraphError
from .graph import Graph, Node, load_graph


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def gelu(x: np.ndarray) -> np.ndarray:
    """Exact-erf GELU."""
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "Gelu": gelu,
    "GeluApprox": lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
    "Silu": silu,
    "Relu": lambda x: np.maximum(x, 0),
    "Sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "Tanh": np.tanh,
    "Exp": np.exp,
}


def attention(q, k, v, mask, num_heads: int, head_dim: int, mask_kind: str, score_scale=None) -> np.ndarray:
    """RLX attention on [B, S, H] inputs; a Custom keep mask [B, S] sends scores of keys < 0.5 to -1e9."""
    b, s, _ = q.shape
    sk = k.shape[1]

    def heads(t, n):
        return t.reshape(b, n, num_heads, head_dim).transpose(0, 2, 1, 3)

    qh, kh, vh = heads(q, s), heads(k, sk), heads(v, sk)
    scale = score_scale if score_scale is not None else head_dim ** -0.5
    scores = qh @ kh.transpose(0, 1, 3, 2) * scale
    if mask_kind == "Custom":
        scores = np.where(np.asarray(mask).reshape(b, 1, 1, sk) < 0.5, -1e9, scores)
    elif mask_kind == "Causal":
        scores = np.where(np.triu(np.ones((s, sk), dtype=bool), k=1 + sk - s), -1e9, scores)
    elif mask_kind != "None":
        raise NotImplementedError(f"mask_kind {mask_kind}")
    scores = scores - scores.max(axis=-1, keepdims=True)
    p = np.exp(scores)
    p /= p.sum(axis=-1, keepdims=True)
    return (p @ vh).transpose(0, 2, 1, 3).reshape(b, s, num_heads * head_dim)


def layer_norm(x, gamma, beta, eps: float) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def _narrow(x, axis, start, length):
    index = [slice(None)] * x.ndim
    index[axis] = slice(start, start + length)
    return x[tuple(index)]


def _eval(node: Node, args: list[np.ndarray]) -> np.ndarray:
    a = node.attrs
    op = node.op
    if op == "MatMul":
        return args[0] @ args[1]
    if op in ("Add", "Sub", "Mul", "Div"):
        return {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}[op](args[0], args[1])
    if op in ACTIVATIONS:
        return ACTIVATIONS[op](args[0])
    if op == "Narrow":
        return _narrow(args[0], a["axis"], a["start"], a["len"])
    if op == "LayerNorm":
        return layer_norm(args[0], args[1], args[2], a["eps"])
    if op == "Attention":
        mask = args[3] if len(args) > 3 else None
        return attention(args[0], args[1], args[2], mask, a["num_heads"], a["head_dim"], a["mask_kind"],
                         a.get("score_scale"))
    if op == "FusedMatMulBiasAct":
        y = args[0] @ args[1] + args[2]
        return ACTIVATIONS[a["activation"]](y) if a.get("activation") else y
    if op == "FusedAttentionBlock":
        hidden, qkv_w, out_w, mask = args[:4]
        qkv_b, out_b = (args[4], args[5]) if a["has_bias"] else (0.0, 0.0)
        h = a["num_heads"] * a["head_dim"]
        qkv = hidden @ qkv_w + qkv_b
        ctx = attention(qkv[..., :h], qkv[..., h:2 * h], qkv[..., 2 * h:3 * h], mask, a["num_heads"], a["head_dim"],
                        "Custom")
        return ctx @ out_w + out_b
    raise NotImplementedError(f"the reference interpreter has no semantics for op {op}")


def run(graph, inputs: Mapping[str, np.ndarray], params: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """Execute `graph` in float64; Input and Param nodes are looked up by name. Returns the outputs."""
    graph = load_graph(graph)
    values: dict[int, np.ndarray] = {}
    for node in graph.nodes:
        if node.op in ("Input", "Param"):
            table = inputs if node.op == "Input" else params
            if node.name not in table:
                raise GraphError(f"{node.op} {node.name!r} (node {node.id}) has no value")
            value = np.asarray(table[node.name], dtype=np.float64)
            if node.shape is not None and all(isinstance(d, int) for d in node.shape) \
                    and tuple(value.shape) != tuple(node.shape):
                raise GraphError(f"{node.op} {node.name!r}: expected shape {list(node.shape)}, got {list(value.shape)}")
            values[node.id] = value
        else:
            values[node.id] = _eval(node, [values[i] for i in node.inputs])
    return [values[i] for i in graph.outputs]


def random_values(graph: Graph, seed: int = 0, scale: float = 0.1) -> tuple[dict, dict]:
    """Random inputs and params for every Input and Param of a static-shaped graph (masks get 0/1 values)."""
    rng = np.random.default_rng(seed)
    inputs, params = {}, {}
    for node in load_graph(graph).nodes:
        if node.op == "Input":
            if node.name and "mask" in node.name:
                m = np.ones(node.shape)
                m[..., -max(1, node.shape[-1] // 4):] = 0.0  # padded tail
                inputs[node.name] = m
            else:
                inputs[node.name] = rng.standard_normal(node.shape)
        elif node.op == "Param":
            params[node.name] = rng.standard_normal(node.shape) * scale
    return inputs, params
