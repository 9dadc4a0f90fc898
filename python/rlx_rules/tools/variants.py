"""The variants of a graph a rule fired on that `verify` also tries: the rule's whole space, each made consistent.

Each variant is run in the reference interpreter first and its computed shapes written back (`reinferred`),
so changing an op, a permutation or a leaf's dim gives a graph that runs: every other op of the pattern's
`A|B` alternatives, random permutations, shape attributes reversed, every axis, every dtype of a Cast, all
leaf dims equal (where a permutation keeps the shape without being the identity), and, for each input dim,
the values on both sides of where the rule stops firing (a threshold guard's boundary).
"""

from __future__ import annotations

import copy
from typing import Callable, Iterator, Optional

import numpy as np

from ..errors import RlxRulesError
from ..graph import Graph

# What verify tries for a free permutation, axis or dtype (Cast's `to`).
RANDOM_PERMS = 3
DTYPES = ("f32", "f16", "i64", "bool")
# Ops whose output has their first input's dtype whatever the others are (a shape or axes input).
MOVES_DATA = {"Reshape", "Expand", "OnnxExpand", "Transpose", "Flatten", "Squeeze", "Unsqueeze"}


def _op_alternatives(rule: dict) -> list[list[str]]:
    """The op alternatives of the rule's pattern (`Gelu|Silu`), one list per slot that has several."""
    sets = [rule["root_ops"]] + [i["ops"] for i in rule["code"] if i["i"] == "op"]
    return [list(s) for s in sets if len(s) > 1]


def set_literals(rule: dict) -> dict[str, list]:
    """For each attribute a guard tests for membership (`attr in {..}`), the literals of the set."""
    out: dict[str, list] = {}
    stack = [i["expr"] for i in rule["code"] if i["i"] == "guard"]
    while stack:
        e = stack.pop()
        if isinstance(e, dict):
            if "in" in e and isinstance(e["in"], dict) and "attr" in e["in"]:
                out.setdefault(e["in"]["attr"], []).extend(i["lit"] for i in e["set"] if "lit" in i)
            stack.extend(v for v in e.values() if isinstance(v, (dict, list)))
        elif isinstance(e, list):
            stack.extend(e)
    return out


def reinferred(data: dict, seed: int) -> Optional[dict]:
    """`data` with every computed node's shape as the interpreter finds it (a Cast's dtype is its `to`), so a
    change to an op, a permutation or a leaf's shape gives a consistent graph; None if it does not run."""
    from ..interpret.core import Interpreter, random_values

    d = copy.deepcopy(data)
    for n in d["nodes"]:
        to = (n.get("attrs") or {}).get("to")
        if n["op"] == "Cast" and isinstance(to, str):
            n["dtype"] = to
    try:
        interpreter = Interpreter(Graph.from_dict(d), check_shapes=False)
        interpreter.run(*random_values(interpreter.graph, seed=seed))
    except (RlxRulesError, ValueError, FloatingPointError, TypeError, IndexError):
        return None
    for n in d["nodes"]:
        if n["op"] not in ("Input", "Param", "Constant") and n["id"] in interpreter.values:
            n["shape"] = list(interpreter.values[n["id"]].shape)
    return d


def consistent(data: dict, seed: int) -> bool:
    """Whether every declared shape and Cast dtype is what running the graph gives (no symbolic dim), and every
    other computed node whose inputs share one dtype has it (as elementwise and data-movement ops do; a graph
    where a comparison is bool, say, is not judged)."""
    if reinferred(data, seed) != data or not all(isinstance(d, int) for n in data["nodes"] for d in n.get("shape") or []):
        return False
    dtypes = {n["id"]: n.get("dtype") for n in data["nodes"]}
    for n in data["nodes"]:
        ins = {dtypes[i] for i in n.get("inputs", ())[:1 if n["op"] in MOVES_DATA else None]}
        if n["op"] != "Cast" and len(ins) == 1 and n.get("dtype") not in ins:
            return False
    return True


def space_mutants(data: dict, rule: dict, seed: int) -> Iterator[tuple[str, dict]]:
    """The rule's whole space around a graph it fires on, each made consistent by running it: every other op
    alternative of the pattern, random permutations, shape attributes in reverse order, every axis, every dtype
    of a Cast, and all dims equal (where a permutation can keep the shape without being the identity)."""
    rng = np.random.default_rng(seed)
    alternatives = _op_alternatives(rule)

    def changed(d: dict, i: int, **fields) -> Optional[dict]:
        m = copy.deepcopy(d)
        for key, value in fields.items():
            if key == "op":
                m["nodes"][i]["op"] = value
            else:
                m["nodes"][i].setdefault("attrs", {})[key] = value
        return reinferred(m, seed)

    def around(d: dict, tag: str) -> Iterator[tuple[str, Optional[dict]]]:
        for i, node in enumerate(d["nodes"]):
            label = f"{tag}%{node['id']}"
            for ops in alternatives:
                if node["op"] in ops:
                    for op in ops:
                        if op != node["op"]:
                            yield f"{label} is a {op}", changed(d, i, op=op)
            rank = len(d["nodes"][i].get("shape") or [])
            for attr, value in (node.get("attrs") or {}).items():
                if isinstance(value, list) and len(value) > 1 and sorted(value) == list(range(len(value))):
                    for _ in range(RANDOM_PERMS):
                        perm = [int(k) for k in rng.permutation(len(value))]
                        if perm != value:
                            yield f"{label}.{attr} = {perm}", changed(d, i, **{attr: perm})
                elif isinstance(value, list) and len(value) > 1 and all(type(v) is int for v in value) \
                        and value != value[::-1]:  # a shape attribute: the same dims in another order
                    yield f"{label}.{attr} = {value[::-1]}", changed(d, i, **{attr: value[::-1]})
                elif attr in ("axis", "dim") and isinstance(value, int) and not isinstance(value, bool):
                    for axis in range(-rank, rank):
                        if axis != value:
                            yield f"{label}.{attr} = {axis}", changed(d, i, **{attr: axis})
                elif attr == "to" and node["op"] == "Cast":
                    for dtype in DTYPES:
                        if dtype != value:
                            yield f"{label}.to = {dtype}", changed(d, i, to=dtype)

    yield from around(data, "")
    square = copy.deepcopy(data)
    for n in square["nodes"]:
        if n["op"] in ("Input", "Param") and all(isinstance(k, int) for k in n.get("shape") or []):
            n["shape"] = [4 for _ in n.get("shape") or []]
    square = reinferred(square, seed)
    if square is not None and square != data:
        yield "every leaf dim 4", square
        yield from around(square, "(dims 4) ")


# The values an input dim is first tried at (as multiples of it, and small ones); bisection then finds the
# exact place where the rule stops firing.
DIM_PROBES = (1, 2, 0.5, 2.0, 4.0, 16.0)
MAX_BOUNDARY_LEAVES = 6


def dim_boundaries(data: dict, fires: Callable[[dict], bool], seed: int) -> Iterator[tuple[str, dict]]:
    """For each dim of each graph Input (the first few), the consistent variants on both sides of the value
    where `fires` changes, found by probing and bisecting from the dim the rule fired at. A guard such as
    `dim(x, 0) * dim(x, 1) <= 64` is then checked at 64 (it must fire, and keep values) and just past it
    (it must not)."""
    leaves = [i for i, n in enumerate(data["nodes"]) if n["op"] == "Input"][:MAX_BOUNDARY_LEAVES]
    for i in leaves:
        shape = data["nodes"][i].get("shape") or []
        for k, d in enumerate(shape):
            if not isinstance(d, int) or d < 1:
                continue

            def variant(v: int) -> Optional[dict]:
                m = copy.deepcopy(data)
                m["nodes"][i]["shape"][k] = v
                return reinferred(m, seed)

            seen: dict[int, Optional[bool]] = {d: True}

            def state(v: int) -> Optional[bool]:
                if v not in seen:
                    m = variant(v)
                    seen[v] = None if m is None else fires(m)
                return seen[v]

            label = f"%{data['nodes'][i]['id']}.shape[{k}]"
            for probe in DIM_PROBES:
                v = max(1, int(d * probe)) if isinstance(probe, float) else probe
                if v == d or state(v) is not False:
                    continue
                lo, hi = sorted((d, v))  # fires at d, not at v: bisect for the last value that fires
                fire_low = v > d
                while hi - lo > 1:
                    mid = (lo + hi) // 2
                    if state(mid) is None:
                        break
                    if state(mid) == fire_low:
                        lo = mid
                    else:
                        hi = mid
                for edge in (lo, hi):
                    m = variant(edge) if state(edge) is not None else None
                    if m is not None and edge != d:
                        yield f"{label} = {edge} (where the rule stops firing)", m
