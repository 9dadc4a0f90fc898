"""Shapes at import: pruning dead nodes, static and computed shapes, topological order."""

from __future__ import annotations

import re
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
               "GeluApprox", "Silu", "LayerNorm", "RmsNorm", "Rsqrt", "Clip", "Cumsum", "Trilu"}


_BROADCAST = {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Eq", "Ne", "Lt", "Le", "Gt", "Ge", "And", "Or", "Xor",
              "Where"}


def is_unknown(d) -> bool:
    """A dim that ONNX shape inference could not name (unk__N) or that the importer invented (unk_N)."""
    return d is None or (isinstance(d, str) and d.startswith("unk"))


_MIN = re.compile(r"^Min\((\d+), (.+)\)$")


def _clipped_to(d, dims: list) -> bool:
    """Whether `d` is "Min(D, S)" (D > 1) with S among `dims`: broadcast against S it is S in every valid run (when
    D < S, D and S differ and neither is 1, so the broadcast fails)."""
    m = _MIN.match(d) if isinstance(d, str) else None
    return m is not None and int(m.group(1)) > 1 and m.group(2) in dims


def _broadcast_dims(dims: list) -> Optional[object]:
    """One output dim of a broadcast: an integer other than 1 wins (every other dim must be it or 1, unknown ones
    included); else equal symbols; 1 when all are 1; None where it is not known."""
    rest = [d for d in dims if d != 1]
    if not rest:
        return 1
    ints = {d for d in rest if isinstance(d, int)}
    if len(ints) > 1:
        raise ValueError("shapes do not broadcast")
    if ints:
        return ints.pop()
    if len(set(rest)) == 1 and rest[0] is not None:  # one name, known or not, is one size
        return rest[0]
    names = {d for d in rest if not _clipped_to(d, rest)}
    if len(names) == 1 and not any(is_unknown(d) for d in names):  # S with Min(D, S): S (see _clipped_to)
        return names.pop()
    if any(is_unknown(d) for d in rest):
        return None
    return rest[0] if len(set(rest)) == 1 else None


def broadcast(shapes: list[list]) -> list:
    rank = max(len(s) for s in shapes)
    padded = [[1] * (rank - len(s)) + list(s) for s in shapes]
    return [_broadcast_dims([s[k] for s in padded]) for k in range(rank)]


def _axes(axes, rank: int) -> list[int]:
    return sorted(a + rank if a < 0 else a for a in axes)


def computed_shape(n: dict, ins: list) -> Optional[list]:
    """The output shape of `n` from its input shapes (ints or symbols; None for an unknown dim), for the ops whose
    shape rule is simple; None where it cannot be computed."""
    op, at = n["op"], n.get("attrs", {})
    if not ins or any(s is None for s in ins):
        return None
    try:
        if op in _SAME_SHAPE:
            return list(ins[0])
        if op in _BROADCAST:
            return broadcast(ins)
        if op == "Expand":
            target = list(at["target_shape"])
            lead = len(target) - len(ins[0])
            target = [ins[0][k - lead] if d == -1 and k >= lead else d for k, d in enumerate(target)]
            return broadcast([ins[0], target])
        if op == "Transpose":
            return [ins[0][p] for p in at["perm"]]
        if op == "Narrow":
            out = list(ins[0])
            out[at["axis"]] = at["len"]
            return out
        if op == "OnnxSlice" and len(ins) == 1 and "starts" in at:  # a strided slice with constant bounds
            out = list(ins[0])
            starts = at["starts"]
            for a, b, e, st in zip(at.get("axes", range(len(starts))), starts, at["ends"],
                                   at.get("steps", [1] * len(starts))):
                a = a + len(out) if a < 0 else a
                out[a] = len(range(*slice(b, e, st).indices(out[a]))) if isinstance(out[a], int) else None
            return out
        if op == "Unsqueeze":
            out = list(ins[0])
            for a in _axes(at["axes"], len(out) + len(at["axes"])):
                out.insert(a, 1)
            return out
        if op == "Squeeze" and "axes" in at:
            drop = set(_axes(at["axes"], len(ins[0])))
            return [d for k, d in enumerate(ins[0]) if k not in drop]
        if op == "Gather" and len(ins) == 2:
            axis = at.get("axis", 0)
            axis = axis + len(ins[0]) if axis < 0 else axis
            return list(ins[0][:axis]) + list(ins[1]) + list(ins[0][axis + 1:])
        if op == "GatherND" and not at.get("batch_dims", 0) and isinstance(ins[1][-1], int):
            return list(ins[1][:-1]) + list(ins[0][ins[1][-1]:])
        if op == "GatherElements":
            return list(ins[1])
        if op == "Reduce":
            axes = set(_axes(at["axes"], len(ins[0])))
            if at.get("keep_dim"):
                return [1 if k in axes else d for k, d in enumerate(ins[0])]
            return [d for k, d in enumerate(ins[0]) if k not in axes]
        if op == "Concat" and len({len(s) for s in ins}) == 1:
            axis = at["axis"]
            out = broadcast([[1 if k == axis else d for k, d in enumerate(s)] for s in ins])
            along = [s[axis] for s in ins]
            out[axis] = sum(along) if all(isinstance(d, int) for d in along) else None
            return out
        if op == "Tile" and len(at.get("repeats", ())) == len(ins[0]):
            return [d if r == 1 else d * r if isinstance(d, int) else None for d, r in zip(ins[0], at["repeats"])]
        if op == "Reshape":
            new = list(at["new_shape"])
            if -1 not in new and 0 not in new:
                return new
            if not all(isinstance(d, int) for d in ins[0]):
                return _minus_one_as_symbol(ins[0], new)
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
        if op == "MatMul" and len(ins[0]) >= 2 and len(ins[1]) >= 2:
            batch = broadcast([ins[0][:-2], ins[1][:-2]]) if len(ins[0]) > 2 or len(ins[1]) > 2 else []
            return list(batch) + [ins[0][-2], ins[1][-1]]
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    return None


def _minus_one_as_symbol(src: list, new: list) -> Optional[list]:
    """A Reshape target's -1 where the input's dim symbols, less those the target names, are one symbol S and the
    static sizes' products agree: -1 is S ([1, S, 1, 2, 2] -> [1, -1, 1, 4] and [B, S] -> [-1, S] name it)."""
    left = [d for d in src if not isinstance(d, int)]
    if any(is_unknown(d) for d in left) or new.count(-1) != 1 or 0 in new:
        return None
    for d in new:
        if not isinstance(d, int):
            if d not in left:
                return None
            left.remove(d)
    if len(left) != 1:
        return None
    have = int(np.prod([d for d in src if isinstance(d, int)], dtype=np.int64))
    rest = int(np.prod([d for d in new if isinstance(d, int) and d != -1], dtype=np.int64))
    return [left[0] if d == -1 else d for d in new] if have == rest else None


def merge_shapes(declared: Optional[list], got: Optional[list]) -> Optional[list]:
    """The declared shape with each unknown dim (unk_*) replaced by the computed one where that is known; the
    computed shape where nothing was declared. A declared dim that is known always wins."""
    if got is None or any(d is None for d in got) and declared is None:
        return declared
    if declared is None:
        return list(got)
    if len(declared) != len(got):
        return declared
    return [g if is_unknown(d) and g is not None else d for d, g in zip(declared, got)]


def refine_shapes(nodes: list[dict]) -> None:
    """Replace the dims that ONNX shape inference could not name ("unk__N", invented) with the size or symbol that
    follows from the inputs' shapes (after constant folding, a legacy export's Expand and Reshape targets are
    known). Only unknown dims change; named symbols ("batch") and static dims are kept."""
    by_id = {n["id"]: n for n in nodes}
    for n in nodes:  # ids are in topological order
        shape = n.get("shape")
        if shape is not None and not any(is_unknown(d) for d in shape):
            continue
        got = computed_shape(n, [by_id[i].get("shape") if i in by_id else None for i in n.get("inputs", ())])
        merged = merge_shapes(shape, got)
        if merged is not None:
            n["shape"] = merged


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
