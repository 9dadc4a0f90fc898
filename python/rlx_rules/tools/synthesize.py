"""Build a graph that a rule fires on from the rule alone: its pattern's skeleton, then repairs driven by its guards.

The skeleton has one node per op binding, with the pattern's edges, and one Input per leaf or
wildcard. Attributes start at defaults taken from the registry, and leaves start with the shape
[2, 4, 24]. Each round of repair then does two things:

1. The reference interpreter computes every node's shape. An op that cannot run (a MatMul whose
   inner dims differ, a norm whose gamma is the wrong size, and so on) gets its operands fixed by
   the op's own shape rule.
2. `explain` names the first failed guard. A guard of a known form is satisfied directly:
   - `attr == expr`, `attr in {..}` or an ordering: the attribute takes the value;
   - `has_fact(x, "f")` on a leaf: the leaf claims the fact (its random values will have it);
   - `rank(x) <= n`, `dim(x, i) == e`, `shape(a) == shape(b)`: a leaf's shape changes;
   - `a or b`: the first branch is tried.

The result is a graph on which the rule fires, or None if the repairs get stuck (the caller
reports that).
"""

from __future__ import annotations

import copy
import math
from typing import Optional

import numpy as np

from ..graph_builder import GraphBuilder
from ..lang.registry import Registry, builtin_registry

LEAF_SHAPE = [2, 4, 24]
LEAF_OPS = ("Input", "Param", "Constant")  # nodes whose values are given, not computed
MAX_ROUNDS = 60


class _Stuck(Exception):
    pass


def _item(value: object) -> float:
    if np.size(value) != 1:
        raise ValueError(f"item() of {value!r}")
    return float(np.asarray(value, dtype=np.float64).reshape(-1)[0])


def _slice(items: list, a: Optional[int], b: Optional[int]) -> list:
    return list(items[a:b])


# The list builtins as the engine computes them (expr.rs); compose(p, q) is Transpose p then Transpose q.
LIST_FUNCTIONS = {
    "len": len,
    "index": lambda items, k: items[k],
    "slice": _slice,
    "reverse": lambda items: list(reversed(items)),
    "compose": lambda p, q: [p[i] for i in q],
    "is_identity": lambda p: list(p) == list(range(len(p))),
    "is_perm": lambda p: sorted(p) == list(range(len(p))),
    "item": _item,
}


def _default_attr(name: str, spec) -> object:
    if spec.nullable:
        return None
    if spec.type == "int":
        return 1
    if spec.type == "float":
        return 1e-5
    if spec.type == "bool":
        return False
    if spec.type == "enum":
        return spec.values[0]
    if spec.type in ("int_list", "dim_list"):
        return []
    if name == "to":
        return "f32"  # a Cast's target dtype
    return None


class Skeleton:
    """The rule's pattern as concrete nodes: ops, inputs, attributes, leaf shapes."""

    def __init__(self, rule: dict, registry: Registry):
        self.rule = rule
        self.registry = registry
        code = rule["code"]
        names = [s["name"] for s in rule["slots"]]
        ops = {0: rule["root_ops"][0]}
        arity: dict[int, int] = {}
        edges: dict[tuple[int, int], int] = {}
        for ins in code:
            if ins["i"] == "op":
                ops[ins["slot"]] = ins["ops"][0]
            elif ins["i"] == "arity":
                arity[ins["slot"]] = ins["n"]
            elif ins["i"] in ("input", "same"):
                edges[(ins["slot"], ins["index"])] = ins["to"] if ins["i"] == "input" else ins["as"]
        group = rule.get("group")
        members = group["min"] if group else 1
        per_member = set(group["members"]) if group else set()
        self.nodes: dict[int, dict] = {}
        self.slot_nodes: list[dict[int, int]] = []  # per member: slot -> node id
        next_id = [0]

        def new_node(op, name=None):
            nid = next_id[0]
            next_id[0] += 1
            self.nodes[nid] = {"id": nid, "op": op, "inputs": [], "attrs": {}, "name": name}
            return nid

        shared: dict[int, int] = {}
        for m in range(members):
            mapping: dict[int, int] = {}
            for s, name in enumerate(names):
                if s in shared:
                    mapping[s] = shared[s]
                    continue
                suffix = f"_{m}" if m and s in per_member else ""
                nid = new_node(ops.get(s, "Input"), name + suffix)
                mapping[s] = nid
                if group and s not in per_member:
                    shared[s] = nid
            for s, op in ops.items():
                nid = mapping[s]
                if m and s not in per_member:
                    continue
                inputs = []
                for i in range(arity.get(s, 0)):
                    if (s, i) in edges:
                        inputs.append(mapping[edges[(s, i)]])
                    else:
                        inputs.append(new_node("Input", f"_{nid}_{i}"))
                self.nodes[nid]["inputs"] = inputs
                spec = registry.get(op)
                if spec is not None:
                    self.nodes[nid]["attrs"] = {a: _default_attr(a, sp) for a, sp in spec.attrs.items() if not sp.optional}
            self.slot_nodes.append(mapping)
        self.shapes: dict[int, list] = {nid: list(LEAF_SHAPE) for nid, n in self.nodes.items() if n["op"] in LEAF_OPS}
        for n in self.nodes.values():
            if n["op"] in LEAF_OPS and n["op"] != "Input":
                n["attrs"].pop("value", None)  # a Constant or Param starts with random values
        self.root = self.slot_nodes[0][0]
        self.outputs = [mapping[0] for mapping in self.slot_nodes]

    # ---- graph.json ----
    def order(self) -> list[int]:
        seen, out = set(), []

        def visit(n):
            if n in seen:
                return
            seen.add(n)
            for i in self.nodes[n]["inputs"]:
                visit(i)
            out.append(n)

        for n in sorted(self.nodes):
            visit(n)
        return out

    def graph(self) -> dict:
        b = GraphBuilder(f"synthesized_{self.rule['name']}", default_dtype="f32")
        for nid in self.order():
            n = self.nodes[nid]
            dtype = n["attrs"].get("to") if n["op"] == "Cast" else n.get("dtype")
            b.add(n["op"], n["inputs"], dict(n["attrs"]), self.shapes.get(nid), name=n["name"], id=nid, dtype=dtype,
                  extra={"facts": list(n["facts"])} if n.get("facts") else None)
        return b.graph(self.outputs)

    # ---- shapes, by running the ops ----
    def infer_shapes(self) -> None:
        from ..interpret.core import Interpreter
        from ..interpret.optable import OPS

        runner = Interpreter(GraphBuilder().graph([]))
        self.consistent = True
        for _ in range(MAX_ROUNDS):
            values = {nid: self._leaf_value(nid) for nid, n in self.nodes.items() if n["op"] in LEAF_OPS}
            repaired = False
            for nid in self.order():
                n = self.nodes[nid]
                if n["op"] in LEAF_OPS:
                    continue
                args = [values[i] for i in n["inputs"]]
                try:
                    out = np.asarray(OPS[n["op"]](runner, _as_node(nid, n), args))
                except Exception as err:  # noqa: BLE001 - any failure means the operands need repair
                    try:
                        self.repair_op(nid, err, values)
                        repaired = True
                        break
                    except _Stuck:
                        # a guard may still fix it: keep a provisional shape and go on
                        self.consistent = False
                        out = np.zeros(self.shapes.get(nid) or (list(args[0].shape) if args else []))
                values[nid] = out
                self.shapes[nid] = list(out.shape)
            if not repaired:
                return
        raise _Stuck("shapes do not settle")

    def _leaf_value(self, nid: int) -> np.ndarray:
        value = self.nodes[nid]["attrs"].get("value")
        if value is not None:  # an inline constant (a guard asked for its value)
            return np.broadcast_to(np.asarray(value, dtype=np.float64), self.shapes[nid]).copy()
        return np.random.default_rng(0).standard_normal(self.shapes[nid]) * 0.1

    def repair_op(self, nid: int, err: Exception, values: dict) -> None:
        n = self.nodes[nid]
        op, ins = n["op"], n["inputs"]
        shape = lambda i: list(values[i].shape) if i in values else list(self.shapes.get(i, LEAF_SHAPE))  # noqa: E731
        leaf = lambda i: self.nodes[i]["op"] in LEAF_OPS  # noqa: E731

        def set_leaf(i, new_shape) -> bool:
            if leaf(i) and self.shapes.get(i) != list(new_shape):
                self.shapes[i] = [int(d) for d in new_shape]
                return True
            return False

        if op in ("MatMul", "FusedMatMulBiasAct"):
            x = shape(ins[0])
            w = shape(ins[1])
            width = w[-1] if w else 24
            if set_leaf(ins[1], [x[-1], width]):
                return
            if len(ins) > 2 and set_leaf(ins[2], [width]):
                return
        if op in ("Add", "Sub", "Mul", "Div"):
            a, b = shape(ins[0]), shape(ins[1])
            if set_leaf(ins[1], a) or set_leaf(ins[0], b):
                return
        if op in ("LayerNorm", "RmsNorm"):
            h = shape(ins[0])[-1]
            if any(set_leaf(i, [h]) for i in ins[1:]):
                return
        if op in ("FusedResidualLN", "FusedResidualRmsNorm"):
            x = shape(ins[0])
            if set_leaf(ins[1], x) or any(set_leaf(i, [x[-1]]) for i in ins[2:]):
                return
        if op == "Narrow":
            a = n["attrs"]
            src = shape(ins[0])
            if src:
                ax = a.get("axis", 0) % len(src)
                need = a.get("start", 0) + a.get("len", 1)
                if src[ax] < need and ax != len(src) - 1:
                    a["axis"] = len(src) - 1  # narrows slice the last axis, as a rule
                    return
                if src[ax] < need:
                    src[ax] = need
                    if set_leaf(ins[0], src):
                        return
                    producer = self.nodes[ins[0]]  # widen the projection that makes the sliced tensor
                    if producer["op"] in ("MatMul", "FusedMatMulBiasAct"):
                        w = producer["inputs"][1]
                        if set_leaf(w, shape(w)[:-1] + [need]):
                            if len(producer["inputs"]) > 2:
                                set_leaf(producer["inputs"][2], [need])
                            return
        if op == "Reshape":
            n["attrs"]["new_shape"] = shape(ins[0])
            return
        if op == "Transpose" and len(n["attrs"].get("perm") or []) != len(shape(ins[0])):
            n["attrs"]["perm"] = list(range(len(shape(ins[0]))))[::-1]  # a permutation of the right length
            return
        if op == "Expand":
            n["attrs"]["target_shape"] = shape(ins[0])
            return
        if op == "OnnxExpand" and leaf(ins[1]) and self.nodes[ins[1]]["op"] != "Constant":
            target = self.nodes[ins[1]]  # the shape input: a constant holding the input's shape
            target.update(op="Constant", dtype="i64", attrs={"value": shape(ins[0])})
            self.shapes[ins[1]] = [len(shape(ins[0]))]
            return
        if op == "Attention":
            kind = n["attrs"].get("mask_kind")
            if len(ins) > 3 and kind not in ("Custom", "Bias"):
                n["attrs"]["mask_kind"] = "Custom"  # a fourth input is a mask
                return
            q = shape(ins[0])
            heads = n["attrs"].get("num_heads") or 1
            if q[-1] % heads == 0 and n["attrs"].get("head_dim") != q[-1] // heads:
                n["attrs"]["head_dim"] = q[-1] // heads
                return
            if len(ins) > 3 and set_leaf(ins[3], q[:2]):
                return
            if any(set_leaf(i, q) for i in ins[1:3]):
                return
        if op == "FusedAttentionBlock":
            h = shape(ins[0])
            hidden = h[-1]
            a = n["attrs"]
            a["num_heads"] = a.get("num_heads") or 1
            a["head_dim"] = hidden // a["num_heads"]
            a["has_bias"], a["has_rope"] = len(ins) >= 6, False
            wanted = [[hidden, 3 * hidden], [hidden, hidden], h[:2], [3 * hidden], [hidden]]
            if any(set_leaf(i, s) for i, s in zip(ins[1:6], wanted)):
                return
        raise _Stuck(f"{op} (node {nid}) cannot run: {err}")

    # ---- guards ----
    def node_of(self, slot: int, member: int = 0) -> int:
        return self.slot_nodes[member][slot]

    def evaluate(self, e: dict, params: dict) -> object:
        if "lit" in e:
            return e["lit"]
        if "slot" in e:
            return ("node", self.node_of(e["slot"]))
        if "param" in e:
            return params[e["param"]]
        if "attr" in e:
            node = self.evaluate(e["of"], params)[1]
            return self.nodes[node]["attrs"].get(e["attr"])
        if "bin" in e:
            op = e["bin"]
            left, right = self.evaluate(e["l"], params), self.evaluate(e["r"], params)
            table = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
                     "/": lambda a, b: a // b, "%": lambda a, b: a % b, "==": lambda a, b: a == b,
                     "!=": lambda a, b: a != b, "<": lambda a, b: a < b, "<=": lambda a, b: a <= b,
                     ">": lambda a, b: a > b, ">=": lambda a, b: a >= b, "and": lambda a, b: a and b,
                     "or": lambda a, b: a or b}
            return table[op](left, right)
        if "un" in e:
            v = self.evaluate(e["e"], params)
            return (not v) if e["un"] == "not" else -v
        if "call" in e:
            fn, args = e["call"], e["args"]
            if fn in ("rank", "shape", "numel", "dim"):
                node = self.evaluate(args[0], params)[1]
                shape = self.shapes.get(node, [])
                if fn == "rank":
                    return len(shape)
                if fn == "shape":
                    return list(shape)
                if fn == "numel":
                    return int(np.prod(shape))
                return shape[self.evaluate(args[1], params)]
            if fn in ("min", "max"):
                vals = [self.evaluate(a, params) for a in args]
                return min(vals) if fn == "min" else max(vals)
            if fn == "abs":
                return abs(self.evaluate(args[0], params))
            if fn == "sqrt":
                return math.sqrt(self.evaluate(args[0], params))
            if fn == "replace_dim":
                lst = list(self.evaluate(args[0], params))
                lst[self.evaluate(args[1], params)] = self.evaluate(args[2], params)
                return lst
            vals = [self.evaluate(a, params) for a in args]
            if fn in LIST_FUNCTIONS:
                return LIST_FUNCTIONS[fn](*vals)
            if fn == "dtype":
                return self.nodes[vals[0][1]].get("dtype", "f32")
            if fn == "op":
                return self.nodes[vals[0][1]]["op"]
        if "list" in e:
            return [self.evaluate(i, params) for i in e["list"]]
        if "in" in e:
            value = self.evaluate(e["in"], params)
            return (value in [self.evaluate(i, params) for i in e["set"]]) != e.get("negated", False)
        if "is_null" in e:
            return (self.evaluate(e["is_null"], params) is None) != e.get("negated", False)
        raise _Stuck(f"cannot evaluate {e}")

    def repair_guard(self, e: dict, params: dict, attempt: int = 0) -> bool:
        """Change the skeleton so that guard `e` holds; False if its form is not one we know. A guard that
        keeps failing (`attempt` > 0) is repaired from its other side, so two guards cannot undo each other."""
        if e.get("bin") == "or":
            return self.repair_guard(e["l"], params, attempt)
        if e.get("bin") == "and":
            return self.repair_guard(e["l"], params, attempt) or self.repair_guard(e["r"], params, attempt)
        if "is_null" in e and "attr" in e["is_null"]:
            target = e["is_null"]
            if not e.get("negated"):
                return self._set_attr(target, None)
            node = self.node_of(target["of"]["slot"])
            spec = self.registry.get(self.nodes[node]["op"])
            attr = spec.attrs.get(target["attr"]) if spec else None
            if attr is None:
                return False
            value = attr.values[0] if attr.values else {"int": 1, "float": 0.5, "bool": True}.get(attr.type, "x")
            return self._set_attr(target, value)
        if e.get("call") == "has_fact":  # a leaf claims the fact; random_values then gives it values that have it
            node = self.evaluate(e["args"][0], params)[1]
            fact = self.evaluate(e["args"][1], params)
            if self.nodes[node]["op"] != "Input" or fact in self.nodes[node].get("facts", ()):
                return False
            self.nodes[node].setdefault("facts", []).append(fact)
            return True
        if e.get("call") == "is_identity":
            arg = e["args"][0]
            if arg.get("call") == "compose":  # the second permutation undoes the first
                first, second = arg["args"]
                p = self.evaluate(first, params)
                if "attr" in second and isinstance(p, list) and sorted(p) == list(range(len(p))):
                    return self._set_attr(second, [p.index(i) for i in range(len(p))])
            elif "attr" in arg:
                p = self.evaluate(arg, params)
                return isinstance(p, list) and self._set_attr(arg, list(range(len(p))))
        if e.get("un") == "not" and e["e"].get("call") == "is_identity" and e["e"]["args"][0].get("call") == "compose":
            first, second = e["e"]["args"][0]["args"]
            p = self.evaluate(first, params)
            if "attr" in second and isinstance(p, list) and len(p) > 1:
                identity = list(range(len(p)))
                return self._set_attr(second, identity if p != identity else identity[::-1])
        if e.get("un") == "not" and e["e"].get("call") == "is_identity" and "attr" in e["e"]["args"][0]:
            p = self.evaluate(e["e"]["args"][0], params)
            if isinstance(p, list) and len(p) > 1:
                return self._set_attr(e["e"]["args"][0], list(range(len(p)))[::-1])
        if "in" in e and "attr" in e["in"] and not e.get("negated"):
            literals = [i["lit"] for i in e["set"] if "lit" in i]
            if literals:
                return self._set_attr(e["in"], literals[0])
        op = e.get("bin")
        if op in ("==", "<=", ">=", "<", ">"):
            sides = [(e["l"], e["r"], False), (e["r"], e["l"], True)]
            if attempt % 2:
                sides.reverse()
            for target, other, flip in sides:
                value = self.evaluate(other, params)
                if op != "==":
                    sense = op if not flip else {"<": ">", "<=": ">=", ">": "<", ">=": "<="}[op]
                    if isinstance(value, (int, float)):
                        value = value - 1 if sense == "<" else value + 1 if sense == ">" else value
                if "attr" in target and self._set_attr(target, value):
                    return True
                if target.get("call") == "item" and "attr" in target["args"][0] and self._set_attr(target["args"][0], value):
                    return True
                if target.get("call") == "rank" and isinstance(value, int) and value >= 0:
                    node = self.evaluate(target["args"][0], params)[1]
                    if self.nodes[node]["op"] in LEAF_OPS:
                        shape = self.shapes[node]
                        self.shapes[node] = (shape + [1] * value)[-value:] if value else []
                        if value > len(shape):
                            self.shapes[node] = [1] * (value - len(shape)) + shape
                        return True
                if target.get("call") == "dim" and isinstance(value, int):
                    node = self.evaluate(target["args"][0], params)[1]
                    if self.nodes[node]["op"] in LEAF_OPS:
                        self.shapes[node][self.evaluate(target["args"][1], params)] = value
                        return True
                if target.get("call") == "numel" and isinstance(value, int) and value >= 1:
                    node = self.evaluate(target["args"][0], params)[1]
                    if self.nodes[node]["op"] in LEAF_OPS and self.shapes[node] != [value]:
                        self.shapes[node] = [value]
                        return True
                if target.get("call") == "dtype" and isinstance(value, str):
                    node = self.evaluate(target["args"][0], params)[1]
                    if self.nodes[node]["op"] in LEAF_OPS and self.nodes[node].get("dtype", "f32") != value:
                        self.nodes[node]["dtype"] = value
                        return True
                if target.get("call") == "shape" and isinstance(value, list):
                    node = self.evaluate(target["args"][0], params)[1]
                    if self.nodes[node]["op"] in LEAF_OPS and self.shapes[node] != value:
                        self.shapes[node] = list(value)
                        return True
        return False

    def _set_attr(self, target: dict, value: object) -> bool:
        node = self.node_of(target["of"]["slot"]) if "slot" in target["of"] else None
        if node is None or self.nodes[node]["attrs"].get(target["attr"]) == value:
            return False
        for mapping in self.slot_nodes:  # every member of a group alike
            self.nodes[mapping[target["of"]["slot"]]]["attrs"][target["attr"]] = value
        return True


def _as_node(nid: int, n: dict):
    from ..graph import Node

    return Node(nid, n["op"], tuple(n["inputs"]), dict(n["attrs"]), None, "f32", n["name"])


def synthesize(rule: dict, program: dict, ruleset, params: Optional[dict] = None,
               registry: Optional[Registry] = None) -> Optional[dict]:
    """A graph on which `rule` fires, built from its pattern and guards; None if the repairs get stuck."""
    return synthesize_or_reason(rule, program, ruleset, params, registry)[0]


def synthesize_or_reason(rule: dict, program: dict, ruleset, params: Optional[dict] = None,
                         registry: Optional[Registry] = None) -> tuple[Optional[dict], str]:
    """A graph on which `rule` fires, or None and the construct that could not be built or satisfied."""
    registry = registry or builtin_registry()
    declared = {p["name"]: p["default"] for p in program["params"]}
    params = {**declared, **(params or {})}
    reason = f"the repairs did not settle in {MAX_ROUNDS} rounds"
    try:
        sk = Skeleton(rule, registry)
        guards = {(i["loc"], i["text"]): i["expr"] for i in rule["code"] if i["i"] == "guard"}
        guards.update({(g["loc"], g["text"]): g["expr"] for g in rule.get("group_guards", [])})
        tries: dict = {}
        for _ in range(MAX_ROUNDS):
            sk.infer_shapes()
            graph = sk.graph()
            _, report = ruleset.apply(copy.deepcopy(graph), params)
            if report.fired(rule["name"]) and sk.consistent:
                return graph, ""
            stats = report.rules.get(rule["name"])
            if stats is not None and stats.first_refusal:
                return None, f"the engine refused the rewrite on the synthesized graph: {stats.first_refusal}"
            records = [r for r in ruleset.explain(graph, params, rule=rule["name"], all=True)
                       if r["root"] in (sk.root, None)]
            if not records:
                return None, "the pattern matched but the rule did not fire" if sk.consistent else \
                    "an op of the pattern cannot run on the shapes the guards need"
            check = records[0]["failed"][0]
            key = (check["loc"], check["check"])
            expr = guards.get(key)
            tries[key] = tries.get(key, 0) + 1
            if expr is None:
                return None, f"the pattern's structure: {check['check']}"
            if not sk.repair_guard(expr, params, tries[key] - 1):
                return None, f"no repair satisfies the guard `{check['check']}` ({check['loc']})"
        stuck = sorted(tries, key=tries.get, reverse=True)[:2]
        reason = f"no repair satisfies the guards {' and '.join(f'`{text}`' for _, text in stuck)} together"
    except _Stuck as err:
        reason = str(err)
    except (KeyError, TypeError, IndexError, ZeroDivisionError, ValueError) as err:
        reason = f"{type(err).__name__} while building the graph: {err}"
    return None, reason
