"""Value facts: what a constant's values guarantee, found from the values, carried through the ops that keep them,
and checked again wherever the values are at hand.

A rule cannot read a weight's values, only its shape and dtype. Some rewrites are exact only for particular
values: a rotary chain is RLX's NeoX ``Rope`` only if its cos/sin tables repeat their first half, and a mask is
RLX's ``Causal`` only if it is the lower triangle. Whoever holds the values (the ONNX importer) records such
facts in the node's ``"facts"`` list, and rules test them with ``has_fact(node, "name")``:

``halves_equal``
    The last axis has an even length n >= 2 and ``x[..., :n/2] == x[..., n/2:]`` exactly.
``causal_keep``
    The last two axes are square (S x S) and every S x S slice is the boolean lower triangle: true exactly
    where key <= query.
``causal_bias``
    The last two axes are square and every S x S slice is an additive causal mask: 0 where key <= query, and
    at most -1e30 (or -inf) where key > query.

`annotate` finds the facts of a graph's constants and carries them through value-preserving ops (elementwise
maps, broadcasts along other axes, reshapes that keep the axes a fact is about, and ``Where(causal_keep, 0,
fill)``). The interpreter checks every claimed fact against the values it computes (`check`), so a stale
or hand-edited claim is an error there, never a silent wrong answer.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

import numpy as np

from .lang.exprtypes import FACTS  # the fact names has_fact() accepts (kept there, free of numpy, for the rule checker)

# the most a masked score may be for causal_bias: exp() of it is 0 in float32 and float64 next to any real score
MASKED_MAX = -1e30

_UNARY = {"Cos", "Sin", "Neg", "Exp", "Abs", "Sqrt", "Rsqrt", "Reciprocal", "Tanh", "Sigmoid", "Identity",
          "Relu", "Silu", "Gelu", "GeluApprox", "Log", "Erf", "Floor", "Ceil", "Round", "Sign"}
_BINARY = {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min"}
_RESHAPES = {"Reshape", "Unsqueeze", "Squeeze", "Expand", "Flatten"}


def _lower_triangle(s: int) -> np.ndarray:
    return np.tril(np.ones((s, s), dtype=bool))


def holds(value: Any, fact: str) -> bool:
    """Whether the array `value` has `fact` (one of FACTS)."""
    a = np.asarray(value)
    if fact == "halves_equal":
        if a.ndim < 1 or a.shape[-1] < 2 or a.shape[-1] % 2:
            return False
        h = a.shape[-1] // 2
        nan_equal = a.dtype.kind in "fc"
        if a.size:  # a cheap first look: most weights differ already in the first row's first pair
            first = a.reshape(-1, a.shape[-1])[0]
            x, y = first[0], first[h]
            if not (x == y or (nan_equal and x != x and y != y)):  # (x != x: NaN)
                return False
        return bool(np.array_equal(a[..., :h], a[..., h:], equal_nan=nan_equal))
    if fact in ("causal_keep", "causal_bias"):
        if a.ndim < 2 or a.shape[-1] != a.shape[-2] or a.shape[-1] < 1:
            return False
        if fact == "causal_keep" and a.dtype != bool or fact == "causal_bias" and a.dtype.kind != "f":
            return False
        corner = a.reshape(-1, a.shape[-2], a.shape[-1])[0]
        if a.shape[-1] > 1 and (bool(corner[0, 1]) if fact == "causal_keep" else not corner[0, 1] <= MASKED_MAX):
            return False  # a cheap first look before the whole triangle
        keep = _lower_triangle(a.shape[-1])
        if fact == "causal_keep":
            return a.dtype == bool and bool(np.all(a == keep))
        return bool(np.all(np.where(keep, a == 0.0, a <= MASKED_MAX)))
    raise ValueError(f"unknown fact {fact!r}; the facts are {', '.join(FACTS)}")


def facts_of(value: Any) -> list[str]:
    """The facts that the array `value` has, in FACTS order."""
    return [f for f in FACTS if holds(value, f)]


def sample(shape, facts, rng: np.random.Generator, scale: float = 1.0) -> np.ndarray:
    """Random float64 values of `shape` that have every fact in `facts` (for verify's random graphs).
    causal_keep values are 0/1 floats here (the interpreter computes in float64 and casts on use)."""
    shape = tuple(int(d) for d in shape)
    facts = set(facts)
    if "causal_keep" in facts or "causal_bias" in facts:
        if len(shape) < 2 or shape[-1] != shape[-2]:
            raise ValueError(f"a causal mask needs square last axes, not {list(shape)}")
        keep = np.broadcast_to(_lower_triangle(shape[-1]), shape)
        if "causal_keep" in facts:
            return keep.astype(np.float64)
        return np.where(keep, 0.0, -np.inf)
    value = rng.standard_normal(shape) * scale
    if "halves_equal" in facts:
        if not shape or shape[-1] % 2:
            raise ValueError(f"halves_equal needs an even last axis, not {list(shape)}")
        h = shape[-1] // 2
        value[..., h:] = value[..., :h]
    return value


def check(node_label: str, value: Any, facts) -> None:
    """Raise ValueError if `value` lacks one of the `facts` its node claims."""
    for fact in facts:
        if fact in FACTS and not holds(value, fact):
            raise ValueError(f"{node_label} claims the fact {fact!r}, but its values do not have it "
                             f"(stale or hand-edited \"facts\"?)")


# ---- annotation of a graph (as a dict) ----------------------------------------------------------------------------

def _constant_value(node: dict) -> Optional[np.ndarray]:
    """The value of a Constant node with an inline value, shaped as the node says; else None."""
    if node.get("op") != "Constant" or "value" not in node.get("attrs", {}):
        return None
    v = node["attrs"]["value"]
    try:  # numpy reads the strings "inf", "-inf" and "nan" that non-finite values are written as
        arr = np.array(v, dtype=float) if not (node.get("dtype") == "bool") else np.array(v, dtype=bool)
    except (TypeError, ValueError):
        return None
    shape = node.get("shape")
    if shape is not None and all(isinstance(d, int) for d in shape) and arr.size == int(np.prod(shape)):
        arr = arr.reshape(shape)
    return arr


def _scalar(node: dict) -> Optional[float]:
    """The value of a one-element numeric Constant node, else None."""
    arr = _constant_value(node)
    if arr is None or arr.size != 1 or arr.dtype == bool or np.asarray(node["attrs"]["value"]).dtype == bool:
        return None
    return float(arr.reshape(-1)[0])


def _carried(node: dict, ins: list[dict]) -> list[str]:
    """The facts that `node` inherits from its inputs (already annotated)."""
    op, shape = node.get("op"), node.get("shape")
    if shape is None or not ins:
        return []
    out: list[str] = []
    in_facts = [set(i.get("facts", ())) for i in ins]
    last = shape[-1] if shape else None

    def keeps_last_axis(i: dict) -> bool:
        s = i.get("shape")
        return s is not None and len(s) >= 1 and len(shape) >= 1 and s[-1] == last

    def keeps_last_two(i: dict) -> bool:
        s = i.get("shape")
        return s is not None and len(s) >= 2 and len(shape) >= 2 and list(s[-2:]) == list(shape[-2:])

    if op in _BINARY:
        def ok(i: dict, f: set) -> bool:
            s = i.get("shape")
            if s is None:
                return False
            return ("halves_equal" in f and keeps_last_axis(i)) or len(s) == 0 or s[-1] == 1
        if any("halves_equal" in f for f in in_facts) and all(ok(i, f) for i, f in zip(ins, in_facts)):
            out.append("halves_equal")
    elif op in _UNARY or op == "Cast" or op in _RESHAPES or (op == "Transpose" and _keeps_last(node, 1)):
        if "halves_equal" in in_facts[0] and keeps_last_axis(ins[0]):  # each row of the last axis kept
            out.append("halves_equal")
    if op in _RESHAPES or (op == "Transpose" and _keeps_last(node, 2)):
        for f in ("causal_keep", "causal_bias"):
            if f in in_facts[0] and keeps_last_two(ins[0]):
                out.append(f)
    if op == "Where" and len(ins) == 3 and "causal_keep" in in_facts[0] and keeps_last_two(ins[0]):
        zero, fill = _scalar(ins[1]), _scalar(ins[2])
        if zero == 0.0 and fill is not None and fill <= MASKED_MAX and node.get("dtype") in ("f32", "f64", "f16",
                                                                                          "bf16"):
            out.append("causal_bias")
    return [f for f in FACTS if f in out]


def _keeps_last(node: dict, k: int) -> bool:
    """A Transpose whose perm leaves the last `k` axes where they are."""
    perm = node.get("attrs", {}).get("perm")
    if not isinstance(perm, list) or not perm:
        return False
    n = len(perm)
    return all(perm[n - j] % n == n - j for j in range(1, k + 1))


def annotate(graph: dict, values: Mapping[str, np.ndarray]) -> int:
    """Record every fact of `graph`'s constants (Params by name in `values`, Constants by their value) and
    carry them through value-preserving ops, in the nodes' "facts" lists. `graph` is a graph.json dict in
    topological order, changed in place. Returns how many nodes got facts."""
    by_id: dict[int, dict] = {}
    count = 0
    for node in graph["nodes"]:
        by_id[node["id"]] = node
        node.pop("facts", None)
        op = node.get("op")
        if op == "Param":
            value = values.get(node.get("name", ""))
            found = facts_of(value) if value is not None else []
        elif op == "Constant":
            value = _constant_value(node)
            found = facts_of(value) if value is not None else []
        elif any("facts" in by_id.get(i, ()) for i in node.get("inputs", ())):
            ins = [by_id[i] for i in node.get("inputs", ()) if i in by_id]
            found = _carried(node, ins) if len(ins) == len(node.get("inputs", ())) else []
        else:
            found = []
        if found:
            node["facts"] = found
            count += 1
    return count
