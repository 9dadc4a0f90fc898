"""Shapes at import: pruning dead nodes, static and computed shapes, topological order."""

from __future__ import annotations

from typing import Optional

import numpy as np

from ..errors import OnnxImportError


def prune(nodes: list[dict], outputs: list[int]) -> tuple[list[dict], list[int]]:
    """Drop nodes that no output depends on (shape computations that were folded away, dead ONNX nodes), keep
    every Input, and number the rest 0, 1, ... in order."""
    live = set(outputs) | {n["id"] for n in nodes if n["op"] == "Input"}
    for n in reversed(nodes):  # nodes are created in topological order
        if n["id"] in live:
            live.update(n.get("inputs", ()))
    renum = {}
    kept = []
    for n in nodes:
        if n["id"] in live:
            renum[n["id"]] = len(kept)
            n["id"] = len(kept)
            if "inputs" in n:
                n["inputs"] = [renum[i] for i in n["inputs"]]
            kept.append(n)
    return kept, [renum[o] for o in outputs]


_SAME_SHAPE = {"Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Neg", "Abs", "Sin", "Cos", "Tan", "Atan", "Round",
               "Erf", "Reciprocal", "Floor", "Ceil", "Sign", "IsNaN", "IsInf", "Not", "Cast", "Softmax", "Gelu",
               "GeluApprox", "Silu", "LayerNorm", "Rsqrt"}


_BROADCAST = {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Eq", "Ne", "Lt", "Le", "Gt", "Ge", "And", "Or", "Xor",
              "Where"}


def _static_shape(node: Optional[dict]) -> Optional[list[int]]:
    shape = None if node is None else node.get("shape")
    if shape is None or not all(isinstance(d, int) for d in shape):
        return None
    return list(shape)


def _computed_shape(n: dict, ins: list) -> Optional[list[int]]:
    """The output shape of `n` from its static input shapes, for the ops whose shape rule is simple; else None."""
    op, at = n["op"], n.get("attrs", {})
    if not ins or any(s is None for s in ins):
        return None
    try:
        if op in _SAME_SHAPE:
            return ins[0]
        if op in _BROADCAST:
            return list(np.broadcast_shapes(*[tuple(s) for s in ins]))
        if op == "Expand":
            return list(np.broadcast_shapes(tuple(ins[0]), tuple(at["target_shape"])))
        if op == "Transpose":
            return [ins[0][p] for p in at["perm"]]
        if op == "Narrow":
            out = list(ins[0])
            out[at["axis"]] = at["len"]
            return out
        if op == "Concat" and len({len(s) for s in ins}) == 1:
            out = list(ins[0])
            out[at["axis"]] = sum(s[at["axis"]] for s in ins)
            return out
        if op == "Reshape":
            new = list(at["new_shape"])
            total = int(np.prod(ins[0], dtype=np.int64))
            if new.count(-1) == 1:
                rest = int(np.prod([d for d in new if d != -1], dtype=np.int64))
                if rest == 0 or total % rest:
                    return None
                new[new.index(-1)] = total // rest
            return new if int(np.prod(new, dtype=np.int64)) == total and all(d >= 0 for d in new) else None
        if op == "Gemm" and len(ins[0]) == 2 and len(ins[1]) == 2:
            m = ins[0][1] if at.get("transA", 0) else ins[0][0]
            return [m, ins[1][0] if at.get("transB", 0) else ins[1][1]]
        if op == "MatMul" and len(ins[0]) >= 2 and len(ins[1]) >= 2 and ins[0][-1] == ins[1][-2]:
            batch = np.broadcast_shapes(tuple(ins[0][:-2]), tuple(ins[1][:-2]))
            return list(batch) + [ins[0][-2], ins[1][-1]]
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    return None


def refine_shapes(nodes: list[dict]) -> None:
    """Replace the dims that ONNX shape inference could not name ("unk__N", invented) with the static size that
    follows from static input shapes (after constant folding, a legacy export's Expand and Reshape targets are
    known). Only invented dims change, and only when the computed shape has the declared rank and agrees with
    every declared static dim; named symbols ("batch") are kept."""
    by_id = {n["id"]: n for n in nodes}
    for n in nodes:  # ids are in topological order
        shape = n.get("shape")
        if not shape or not any(isinstance(d, str) and d.startswith("unk") for d in shape):
            continue
        got = _computed_shape(n, [_static_shape(by_id.get(i)) for i in n.get("inputs", ())])
        if got is None or len(got) != len(shape):
            continue
        if any(isinstance(d, int) and d != g for d, g in zip(shape, got)):
            continue
        if any(isinstance(d, str) and not d.startswith("unk") for d in shape):
            continue
        n["shape"] = [int(g) for g in got]


def toposorted(graph) -> list:
    """The graph's nodes in an order where every tensor is produced before it is used, for a graph whose own
    order is not one (Converter.check_opsets finds out); raises OnnxImportError on a cycle."""
    producers = {o: k for k, n in enumerate(graph.node) for o in n.output}
    order, state = [], {}

    def visit(k):  # iterative DFS
        stack = [(k, 0)]
        while stack:
            idx, pos = stack.pop()
            if pos == 0:
                if state.get(idx) == 2:
                    continue
                state[idx] = 1
            ins = [i for i in graph.node[idx].input if i in producers]
            if pos < len(ins):
                stack.append((idx, pos + 1))
                dep = producers[ins[pos]]
                if state.get(dep) == 1:
                    raise OnnxImportError(f"the ONNX graph has a cycle through node {graph.node[dep].name!r}")
                if state.get(dep) != 2:
                    stack.append((dep, 0))
            else:
                state[idx] = 2
                order.append(graph.node[idx])
    for k in range(len(graph.node)):
        if state.get(k) != 2:
            visit(k)
    return order
