"""Compile checked rules into the versioned matcher program (JSON) that the Rust core runs; see docs/program.md."""

from __future__ import annotations

import os
from typing import Optional

from . import ast
from .exprtypes import literal_value
from .scope import CheckedRules, RuleScope, absorbed, pattern_children
from ..formats import PROGRAM_FORMAT, PROGRAM_VERSION
from .registry import Registry



class _Sources:
    """Source text lookup, so that each guard carries the text it was written as."""

    def __init__(self, sources: dict[str, str]):
        self.lines = {path: text.splitlines() for path, text in sources.items()}

    def text(self, loc: ast.Loc) -> str:
        lines = self.lines.get(loc.file)
        if not lines or not 0 < loc.line <= len(lines):
            return ""
        if loc.end_line == loc.line and loc.end_col > loc.col:
            return lines[loc.line - 1][loc.col - 1:loc.end_col - 1]
        if loc.end_line > loc.line:
            parts = [lines[loc.line - 1][loc.col - 1:]]
            parts += [ln.strip() for ln in lines[loc.line:loc.end_line - 1]]
            parts.append(lines[loc.end_line - 1][:max(loc.end_col - 1, 0)].strip())
            return " ".join(p.strip() for p in parts if p.strip())
        return lines[loc.line - 1].strip()


class _ExprCompiler:
    """Turns AST expressions into program expressions, inlining lets and resolving names to slots."""

    def __init__(self, slots: dict[str, int], lets: dict[str, ast.Let], params: set[str]):
        self.slots, self.lets, self.params = slots, lets, params

    def __call__(self, e: ast.Expr) -> dict:
        if isinstance(e, ast.Lit):
            return {"lit": e.value}
        if isinstance(e, ast.Name):
            if e.id in self.slots:
                return {"slot": self.slots[e.id]}
            if e.id in self.lets:
                return self(self.lets[e.id].value)
            if e.id in self.params:
                return {"param": e.id}
            return {"lit": e.id}  # an enum value; the checker verified it
        if isinstance(e, ast.GetAttr):
            return {"attr": e.attr, "of": self(e.obj)}
        if isinstance(e, ast.Call):
            return {"call": e.fn, "args": [self(a) for a in e.args]}
        if isinstance(e, ast.BinOp):
            return {"bin": e.op, "l": self(e.left), "r": self(e.right)}
        if isinstance(e, ast.UnaryOp):
            return {"un": e.op, "e": self(e.operand)}
        if isinstance(e, ast.InSet):
            return {"in": self(e.value), "set": [self(i) for i in e.items], "negated": e.negated}
        if isinstance(e, ast.IsNull):
            return {"is_null": self(e.value), "negated": e.negated}
        if isinstance(e, ast.ListExpr):
            return {"list": [self(i) for i in e.items]}
        raise AssertionError(f"unknown expression {e!r}")

    def slots_used(self, e: ast.Expr) -> set[int]:
        used, stack = set(), [self(e)]
        while stack:
            node = stack.pop()
            if isinstance(node, dict):
                if "slot" in node and len(node) == 1:
                    used.add(node["slot"])
                stack.extend(node.values())
            elif isinstance(node, list):
                stack.extend(node)
        return used


def _split_and(e: ast.Expr) -> list[ast.Expr]:
    """`a and b and c` as separate guards, so that a failure names the exact conjunct."""
    if isinstance(e, ast.BinOp) and e.op == "and":
        return _split_and(e.left) + _split_and(e.right)
    return [e]


def compile_rule(scope: RuleScope, registry: Registry, params: set[str], sources: _Sources) -> dict:
    rule = scope.rule
    root = scope.roots[0]
    children = pattern_children(scope)
    index: dict[str, int] = {root: 0}
    structure: list[dict] = []

    def expand(name: str) -> None:
        slot = index[name]
        pattern = scope.slots[name].pattern
        structure.append({"i": "arity", "slot": slot, "n": len(pattern.args)})
        commutative = [op for op in pattern.ops if (spec := registry.get(op)) is not None and spec.commutative]
        if commutative and len(pattern.args) == 2 and children[name][0] != children[name][1]:
            structure.append({"i": "commute", "slot": slot, "ops": commutative})
        for i, child in enumerate(children[name]):
            if child == "_":
                continue
            if child in index:
                structure.append({"i": "same", "slot": slot, "index": i, "as": index[child]})
                continue
            index[child] = len(index)
            structure.append({"i": "input", "slot": slot, "index": i, "to": index[child]})
            child_pattern = scope.slots[child].pattern
            if child_pattern is not None:
                structure.append({"i": "op", "slot": index[child], "ops": list(child_pattern.ops)})
                expand(child)

    expand(root)
    # Bindings may denote the same node (aliasing); `where distinct(a, b)` says when they may not.

    expr = _ExprCompiler(index, scope.lets, params)
    guards: list[tuple[set[int], dict]] = []
    for name, slot in scope.slots.items():
        if slot.pattern is None:
            continue
        for c in slot.pattern.constraints:
            attr = {"attr": c.attr, "of": {"slot": index[name]}}
            if c.value is not None:
                code = {"bin": "==", "l": attr, "r": expr(c.value)}
                needs = expr.slots_used(c.value)
            else:
                code = {"in": attr, "set": [expr(i) for i in c.choices], "negated": False}
                needs = set().union(*(expr.slots_used(i) for i in c.choices))
            text = _constraint_text(c, sources)
            guards.append((needs | {index[name]}, _guard(code, c.loc, text if slot.anonymous else f"{name}.{text}")))
    # In a group rule, where clauses judge the whole group, so they run after the members are collected.
    group_guards = []
    for w in scope.rule.wheres:
        for conjunct in _split_and(w.cond):
            guard = _guard(expr(conjunct), conjunct.loc, sources.text(conjunct.loc))
            if scope.group is not None:
                group_guards.append(guard)
            else:
                guards.append((expr.slots_used(conjunct), guard))

    code = _place_guards(structure, guards)
    absorb = sorted(index[n] for n in absorbed(scope))

    made: dict[str, int] = {}
    new_nodes = []
    forward = []
    for k, item in enumerate(scope.rewrite.items):
        node = item.node
        if isinstance(node, ast.Forward):
            forward = [{"when": expr(cond) if cond is not None else None, "slot": index[name]}
                       for cond, name, _ in node.cases]
            continue
        inputs = [{"new": made[n]} if n in made else {"spread": index[n]} if spread else {"slot": index[n]}
                  for n, _, spread in node.inputs]
        new_nodes.append({
            "name": item.name,
            "op": node.op,
            "inputs": inputs,
            "attrs": [[a, expr(v)] for a, v, _ in node.attrs],
            "shape": expr(node.shape) if node.shape is not None else None,
            "dtype": expr(node.dtype) if node.dtype is not None else None,
            "replaces": index[item.name] if item.replaces else None,
            "each": item.each,
        })
        if not item.replaces:
            made[item.name] = k

    group = None
    if scope.group is not None:
        spec = scope.group.group
        group = {"min": spec.min, "max": spec.max, "shared": sorted(index[n] for n, _ in spec.sharing),
                 "members": sorted(index[n] for n in scope.members if n in index)}
    examples = [{"path": os.path.join(os.path.dirname(ex.loc.file), ex.path), "fires": ex.fires,
                 "params": {name: literal_value(v) for name, v in ex.params}, "loc": str(ex.loc)}
                for ex in rule.expects]
    compiled = {
        "name": rule.name,
        "loc": str(rule.loc),
        "examples": [dict(e, path=os.path.abspath(e["path"])) for e in examples],
        "phase": scope.phase,
        "priority": rule.priority,
        "gates": [g for g, _ in rule.gates],
        "root_ops": list(scope.slots[root].pattern.ops),
        "slots": [{"name": n, "leaf": scope.slots[n].pattern is None} for n in sorted(index, key=index.get)],
        "code": code,
        "absorb": absorb,
        "rewrite": new_nodes,
        "group": group,
        "group_guards": group_guards,
    }
    if forward:
        compiled["forward"] = forward  # `root => x`: no new node; the root's uses read a binding
    return compiled


def _constraint_text(c: ast.Constraint, sources: _Sources) -> str:
    line = sources.lines.get(c.loc.file, [])
    if 0 < c.loc.line <= len(line):
        rest = line[c.loc.line - 1][c.loc.col - 1:]
        depth, end = 0, len(rest)
        for i, ch in enumerate(rest):
            if ch in "([{":
                depth += 1
            elif ch in ")]}":
                if depth == 0:
                    end = i
                    break
                depth -= 1
            elif ch == "," and depth == 0:
                end = i
                break
        return rest[:end].strip()
    return c.attr


def _guard(code: dict, loc: ast.Loc, text: str) -> dict:
    return {"i": "guard", "expr": code, "loc": str(loc), "text": text}


def _place_guards(structure: list[dict], guards: list[tuple[set[int], dict]]) -> list[dict]:
    """Put each guard right after the instruction that binds the last slot it reads (structure first)."""
    op_slots = {0} | {ins["slot"] for ins in structure if ins["i"] == "op"}
    bound_after = []
    bound = set()
    for ins in structure:
        # a leaf is ready once loaded; an op slot once its op and arity are checked
        if ins["i"] == "input" and ins["to"] not in op_slots:
            bound.add(ins["to"])
        elif ins["i"] == "arity":
            bound.add(ins["slot"])
        bound_after.append(set(bound))
    out_slots: list[list[dict]] = [[] for _ in range(len(structure) + 1)]
    for needs, guard in guards:
        position = 0
        if needs:
            position = next((i + 1 for i, b in enumerate(bound_after) if needs <= b), len(structure))
        out_slots[position].append(guard)
    code = list(out_slots[0])
    for i, ins in enumerate(structure):
        code.append(ins)
        code.extend(out_slots[i + 1])
    return code


def _param_default(p: ast.Param) -> tuple[object, Optional[str]]:
    d = p.default
    if isinstance(d, ast.Call) and d.fn == "env":
        return literal_value(d.args[1]), d.args[0].value
    return literal_value(d), None


def compile_program(checked: CheckedRules, registry: Registry, sources: dict[str, str]) -> dict:
    """The whole program: params, gates, phases (in declaration order) and their rules (by priority)."""
    src = _Sources(sources)
    params = set(checked.params)
    program_params = []
    for p in checked.params.values():
        default, env = _param_default(p)
        program_params.append({"name": p.name, "type": p.type, "default": default, "env": env, "loc": str(p.loc)})
    gates = []
    for g in checked.gates.values():
        slots = {g.var: 0} if g.var else {}
        gates.append({"name": g.name, "quantifier": g.quantifier, "op": g.op,
                      "expr": _ExprCompiler(slots, {}, params)(g.cond), "loc": str(g.loc),
                      "text": src.text(g.cond.loc)})
    rules, phases = [], []
    for phase in checked.phases:
        members = [(i, s) for i, s in enumerate(checked.rules) if s.phase == phase.name]
        members.sort(key=lambda pair: (-pair[1].rule.priority, pair[0]))
        compiled = [compile_rule(s, registry, params, src) for _, s in members]
        rules.extend(compiled)
        phases.append({"name": phase.name, "max_iterations": phase.max_iterations or 16,
                       "rules": [r["name"] for r in compiled]})
    return {"format": PROGRAM_FORMAT, "version": PROGRAM_VERSION, "params": program_params,
            "gates": gates, "phases": phases, "rules": rules}
