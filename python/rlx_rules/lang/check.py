"""Semantic checks of parsed rule files: names, ops, arity, attributes, types and rewrites; all errors collected."""

from __future__ import annotations

from typing import Optional

from . import ast
from ..errors import Diagnostic, RuleError
from .registry import OpSpec, Registry
from .scope import DEFAULT_PHASE, CheckedRules, PatternChecker, RuleScope
from .exprtypes import (ANY, BOOL, MAX_EXPR_DEPTH, NOT_LITERAL, PARAM_TYPES, ExprTyper, Type, assignable, attr_type,
                        comparable, expr_children, free_names, literal_value, param_type, suggest)
from .params import value_fits

DEFAULT_MAX_ITERATIONS = 16
MAX_LETS = 256  # per rule; lets are substituted where they are used, so their chains are bounded too


def inlined_depth(expr: ast.Expr, let_depth: dict[str, int]) -> int:
    """How deep `expr` nests once the lets it names (depths in `let_depth`) are substituted; iterative."""
    deepest, stack = 0, [(expr, 1)]
    while stack:
        e, level = stack.pop()
        extra = let_depth.get(e.id, 0) if isinstance(e, ast.Name) else 0
        deepest = max(deepest, level + max(extra - 1, 0))
        stack.extend((c, level + 1) for c in expr_children(e))
    return deepest


class Checker(ExprTyper, PatternChecker):
    """Collects every error and warning of a set of rule files (see `check`)."""

    def __init__(self, registry: Registry, sources: dict[str, str]):
        self.registry = registry
        self.sources = sources
        self.errors: list[Diagnostic] = []
        self.warnings: list[Diagnostic] = []
        self.params: dict[str, ast.Param] = {}
        self.gates: dict[str, ast.Gate] = {}
        self.group_name: Optional[str] = None  # of the rule being checked

    def error(self, loc: Optional[ast.Loc], message: str) -> None:
        self.errors.append(Diagnostic(loc, message, "error", self._line(loc)))

    def warn(self, loc: Optional[ast.Loc], message: str) -> None:
        self.warnings.append(Diagnostic(loc, message, "warning", self._line(loc)))

    def _line(self, loc: Optional[ast.Loc]) -> Optional[str]:
        if loc is None or loc.file not in self.sources:
            return None
        lines = self.sources[loc.file].splitlines()
        return lines[loc.line - 1] if 0 < loc.line <= len(lines) else None

    def op_spec(self, name: str, loc: ast.Loc) -> Optional[OpSpec]:
        spec = self.registry.get(name)
        if spec is None:
            self.error(loc, f"unknown op {name!r}{suggest(name, self.registry.ops)}")
        return spec

    # ---- top level ----

    def check_param(self, p: ast.Param) -> None:
        if p.name in self.params:
            self.error(p.loc, f"parameter {p.name!r} is declared twice (first at {self.params[p.name].loc})")
            return
        self.params[p.name] = p
        if p.type not in PARAM_TYPES:
            self.error(p.type_loc, f"unknown parameter type {p.type!r}; use one of int, float, bool, str")
            return
        default = p.default
        if isinstance(default, ast.Call) and default.fn == "env":
            if len(default.args) != 2 or not (isinstance(default.args[0], ast.Lit) and isinstance(default.args[0].value, str)):
                self.error(default.loc, 'env() takes a variable name and a default: env("VAR", 64)')
                return
            default = default.args[1]
        if not isinstance(default, ast.Lit) and not (isinstance(default, ast.UnaryOp) and default.op == "-"
                                                     and isinstance(default.operand, ast.Lit)):
            self.error(default.loc, "a parameter default must be a literal or env(\"VAR\", literal)")
            return
        value = literal_value(default)
        if value is NOT_LITERAL:
            self.error(default.loc, "a parameter default must be a literal or env(\"VAR\", literal)")
        elif not value_fits(value, p.type):
            self.error(default.loc, f"default {value!r} is not a {p.type}")

    def check_gate(self, g: ast.Gate) -> None:
        if g.name in self.gates:
            self.error(g.loc, f"gate {g.name!r} is declared twice (first at {self.gates[g.name].loc})")
            return
        self.gates[g.name] = g
        names = self.param_names()
        if g.op is not None:
            self.op_spec(g.op, g.loc)
            names[g.var] = Type("node", ops=(g.op,))
        self._expect(self.type_of(g.cond, names), BOOL, g.cond.loc, f"gate {g.name!r}")

    def param_names(self) -> dict[str, Type]:
        return {name: param_type(p.type) for name, p in self.params.items() if p.type in PARAM_TYPES}

    # ---- rules ----

    def check_rule(self, rule: ast.Rule, phases: set[str]) -> RuleScope:
        scope = RuleScope(rule)
        self.group_name = None
        if not -(2**63) <= rule.priority < 2**63:
            self.error(rule.loc, f"rule {rule.name!r}: priority does not fit in 64 bits")
        if rule.phase is not None:
            scope.phase = rule.phase
            if rule.phase not in phases:
                self.error(rule.loc, f"rule {rule.name!r} names undeclared phase {rule.phase!r}"
                           f"{suggest(rule.phase, phases)}")
        for gate, loc in rule.gates:
            if gate not in self.gates:
                self.error(loc, f"unknown gate {gate!r}{suggest(gate, self.gates)}")
        uses: dict[str, int] = {}
        self._collect_slots(rule, scope, uses)
        names = self.param_names()
        for slot in scope.slots.values():
            names[slot.name] = Type("node", ops=slot.pattern.ops if slot.pattern else ())
        self._check_lets(rule, scope, names, uses)
        for slot in scope.slots.values():
            if slot.pattern is not None:
                self._check_constraints(slot.pattern, names, uses)
        for w in rule.wheres:
            self._count_names(w.cond, uses)
            self._expect(self.type_of(w.cond, names), BOOL, w.cond.loc, "'where'")
            self._check_member_use(w.cond, scope, "a where clause")
            self._check_no_prefix_sum(w.cond, "a where clause")
        self._check_rewrite(rule, scope, names, uses)
        for keep in rule.keeps:
            for name, loc in keep.names:
                uses[name] = uses.get(name, 0) + 1
                slot = scope.slots.get(name)
                if slot is None or slot.is_leaf:
                    self.error(loc, f"keep names {name!r}, which is not a bound op pattern")
                elif name in scope.roots:
                    self.error(loc, f"keep names {name!r}, the root that the rewrite replaces")
        for ex in rule.expects:
            if ex.path.startswith(("/", "\\")) or (len(ex.path) > 1 and ex.path[1] == ":") \
                    or not ex.path.endswith(".json"):
                self.error(ex.loc, f"expect reads {ex.path!r}: an example must be a relative path to a .json graph")
            for name, value in ex.params:
                if name not in self.params:
                    self.error(ex.loc, f"expect sets unknown parameter {name!r}{suggest(name, self.params)}")
                elif not (isinstance(value, (ast.Lit, ast.UnaryOp))) or not value_fits(literal_value(value),
                                                                                       self.params[name].type):
                    self.error(value.loc, f"expect gives {name} a value that is not a {self.params[name].type} literal")
        self._check_structure(scope)
        for slot in scope.slots.values():
            # a leaf's first pattern reference only introduces it; it is used if referenced again
            needed = 2 if slot.is_leaf else 1
            if not slot.anonymous and uses.get(slot.name, 0) < needed and not slot.name.startswith("_"):
                what = "leaf" if slot.is_leaf else "binding"
                self.error(slot.loc, f"{what} {slot.name!r} is never used; write _ to match any node")
        for name, let in scope.lets.items():
            if uses.get(name, 0) == 0:
                self.error(let.loc, f"let {name!r} is never used")
        return scope

    def _check_lets(self, rule: ast.Rule, scope: RuleScope, names: dict[str, Type], uses: dict[str, int]) -> None:
        for let in rule.lets:
            if let.name in scope.lets or let.name in scope.slots or let.name in self.params:
                self.error(let.loc, f"let {let.name!r} reuses a name already in scope")
                continue
            scope.lets[let.name] = let
        if not self._let_depths_fit(rule, scope):
            for name in scope.lets:
                names[name] = ANY
            for let in scope.lets.values():
                self._count_names(let.value, uses)
            return
        # Lets may be used before they are defined; order them by dependency and reject cycles.
        state: dict[str, int] = {}

        def visit(name: str, trail: list[str]) -> Type:
            if state.get(name) == 2:
                return names[name]
            if state.get(name) == 1:
                self.error(scope.lets[name].loc, f"let {name!r} depends on itself ({' -> '.join(trail + [name])})")
                names[name] = ANY
                return ANY
            state[name] = 1
            for dep in free_names(scope.lets[name].value):
                if dep in scope.lets and dep not in names:
                    visit(dep, trail + [name])
            names[name] = self.type_of(scope.lets[name].value, names)
            state[name] = 2
            return names[name]

        for name, let in scope.lets.items():
            self._count_names(let.value, uses)
            if name not in names:
                visit(name, [])

    def _let_depths_fit(self, rule: ast.Rule, scope: RuleScope) -> bool:
        """Whether the rule has at most MAX_LETS lets and each let and where clause, with the lets it uses
        substituted, nests at most MAX_EXPR_DEPTH levels; else one located error (the shallowest offender)."""
        if len(rule.lets) > MAX_LETS:
            self.error(rule.lets[MAX_LETS].loc, f"rule {rule.name!r} has {len(rule.lets)} lets, more than the "
                       f"limit of {MAX_LETS}")
            return False
        depth: dict[str, int] = {}
        for root in scope.lets:  # iterative post-order over the let dependencies; a cycle counts as 0
            stack, open_ = [(root, False)], set()
            while stack:
                name, ready = stack.pop()
                if name in depth:
                    continue
                if ready:
                    depth[name] = inlined_depth(scope.lets[name].value, depth)
                    continue
                open_.add(name)
                stack.append((name, True))
                stack.extend((d, False) for d in free_names(scope.lets[name].value)
                             if d in scope.lets and d not in depth and d not in open_)
        over = [(d, scope.lets[n].loc, f"let {n!r}") for n, d in depth.items() if d > MAX_EXPR_DEPTH]
        over += [(d, w.cond.loc, "this where clause") for w in rule.wheres
                 if (d := inlined_depth(w.cond, depth)) > MAX_EXPR_DEPTH]
        if not over:
            return True
        d, loc, what = min(over, key=lambda o: o[0])
        self.error(loc, f"{what} nests {d} levels deep once the lets it uses are substituted, more than "
                   f"{MAX_EXPR_DEPTH}")
        return False

    def _check_constraints(self, pattern: ast.OpPattern, names: dict[str, Type], uses: dict[str, int]) -> None:
        for c in pattern.constraints:
            specs = [self.registry.get(op) for op in pattern.ops]
            attr_specs = []
            for op, spec in zip(pattern.ops, specs):
                if spec is None:
                    continue
                if c.attr not in spec.attrs:
                    self.error(c.loc, f"op {op} has no attribute {c.attr!r}{suggest(c.attr, spec.attrs)}")
                else:
                    attr_specs.append(spec.attrs[c.attr])
            want = attr_type(attr_specs[0]) if attr_specs else ANY
            for value in (c.value,) if c.value is not None else c.choices:
                self._count_names(value, uses)
                got = self.type_of(value, names, enum=want.enum)
                if not comparable(want, got):
                    self.error(value.loc, f"attribute {c.attr!r} is {want}; {got} can never match")

    def _check_rewrite(self, rule: ast.Rule, scope: RuleScope, names: dict[str, Type], uses: dict[str, int]) -> None:
        if not rule.rewrites:
            self.error(rule.loc, f"rule {rule.name!r} has no rewrite")
            return
        if len(rule.rewrites) > 1:
            self.error(rule.rewrites[1].loc, f"rule {rule.name!r} has more than one rewrite")
        rewrite = scope.rewrite = rule.rewrites[0]
        made: dict[str, ast.RewriteItem] = {}
        for item in rewrite.items:
            if item.replaces and (scope.group is None) == item.each:
                # a group's members are replaced with `each`; any other root with `=>`
                self.error(item.loc, f"'each {item.name} =>' needs {item.name!r} to be the rule's group" if item.each
                           else f"a rule with a group replaces its members: write 'each {scope.group.name} => ...'")
            elif item.replaces:
                slot = scope.slots.get(item.name)
                if item.each and item.name != scope.group.name:
                    self.error(item.loc, f"'each {item.name} =>' needs {item.name!r} to be the rule's group")
                elif slot is None or slot.is_leaf:
                    self.error(item.loc, f"rewrite replaces {item.name!r}, which is not a bound op pattern")
                elif item.name in scope.roots:
                    self.error(item.loc, f"rewrite replaces {item.name!r} twice")
                else:
                    scope.roots.append(item.name)
                uses[item.name] = uses.get(item.name, 0) + 1
            elif item.name in scope.slots or item.name in made or item.name in scope.lets:
                self.error(item.loc, f"rewrite node {item.name!r} reuses a name already in scope")
            if isinstance(item.node, ast.Forward):
                self._check_forward(item, scope, names, uses)
            else:
                self._check_new_node(item, scope, names, uses, made)
            if not item.replaces:
                made[item.name] = item
        if not scope.roots:
            self.error(rewrite.loc, "rewrite replaces nothing: write 'root => Op(...)'")
        elif len(scope.roots) > 1:
            self.error(rewrite.loc, "a rewrite replaces one root; several roots are not supported yet")

    def _check_forward(self, item: ast.RewriteItem, scope: RuleScope, names: dict[str, Type],
                       uses: dict[str, int]) -> None:
        """`root => x` / `root => if c then x else y`: each target is a binding other than the root."""
        for cond, name, loc in item.node.cases:
            if cond is not None:
                self._count_names(cond, uses)
                self._check_member_use(cond, scope, "a forwarding rewrite")
                self._expect(self.type_of(cond, names), BOOL, cond.loc, "'if'")
            uses[name] = uses.get(name, 0) + 1
            if name == "_":
                self.error(loc, "a rewrite cannot forward to '_'")
            elif name not in scope.slots:
                self.error(loc, f"rewrite forwards to {name!r}, which is not bound by the pattern{suggest(name, scope.slots)}")
            elif name == item.name:
                self.error(loc, f"rewrite forwards {name!r} to itself")

    def _check_new_node(self, item: ast.RewriteItem, scope: RuleScope, names: dict[str, Type],
                        uses: dict[str, int], made: dict[str, ast.RewriteItem]) -> None:
        node = item.node
        spec = self.op_spec(node.op, node.loc)
        spreads = sum(1 for _, _, spread in node.inputs if spread)
        fixed = len(node.inputs) - spreads
        if spec is not None and scope.group is not None and spreads:
            lo, hi = fixed + spreads * scope.group.group.min, fixed + spreads * scope.group.group.max
            if not (spec.accepts_arity(lo) and spec.accepts_arity(hi)):
                self.error(node.loc, f"{node.op} takes {spec.describe_arity()} inputs, the rewrite gives {lo} to {hi}")
        elif spec is not None and not spec.accepts_arity(len(node.inputs)):
            self.error(node.loc, f"{node.op} takes {spec.describe_arity()} inputs, the rewrite gives {len(node.inputs)}")
        for name, loc, spread in node.inputs:
            uses[name] = uses.get(name, 0) + 1
            if spread and name not in scope.members:
                self.error(loc, f"'{name}...' spreads a group's per-member values, but {name!r} is not per member")
            elif not spread and not item.each and name in scope.members:
                self.error(loc, f"{name!r} is per member; write '{name}...' for every member's, or use an each-rewrite")
            if name in made:
                continue
            if name == "_":
                self.error(loc, "a rewrite input cannot be '_'")
            elif name not in scope.slots:
                self.error(loc, f"rewrite input {name!r} is not bound by the pattern{suggest(name, scope.slots)}")
            elif name in scope.roots or (item.replaces and name == item.name):
                self.error(loc, f"rewrite input {name!r} is the root that this rewrite drops and replaces")
        seen = set()
        for attr, value, loc in node.attrs:
            self._count_names(value, uses)
            if attr in seen:
                self.error(loc, f"attribute {attr!r} is given twice")
            seen.add(attr)
            if spec is None:
                self.type_of(value, names)
                continue
            if attr not in spec.attrs:
                self.error(loc, f"op {node.op} has no attribute {attr!r}{suggest(attr, spec.attrs)}")
                self.type_of(value, names)
                continue
            if not item.each:
                self._check_member_use(value, scope, "a node that is not an each-rewrite")
                self._check_no_prefix_sum(value, "a node that is not an each-rewrite")
            want = attr_type(spec.attrs[attr])
            got = self.type_of(value, names, enum=want.enum)
            if not assignable(want, got):
                self.error(value.loc, f"attribute {attr!r} of {node.op} is {want}, not {got}")
        if spec is not None:
            for attr, aspec in spec.attrs.items():
                if attr not in seen and not aspec.optional:
                    self.error(node.loc, f"rewrite to {node.op} is missing attribute {attr!r} ({aspec.describe()})")
        for extra in (node.shape, node.dtype):
            if extra is not None and not item.each:
                self._check_member_use(extra, scope, "a node that is not an each-rewrite")
        if node.shape is not None:
            self._count_names(node.shape, uses)
            t = self.type_of(node.shape, names)
            if t.kind not in ("list", "any"):
                self.error(node.shape.loc, f"shape must be a list such as [dim(x, 0), 4] or shape(x), not {t}")
        elif not item.replaces:
            self.error(node.loc, f"new node {item.name!r} needs a shape (it replaces no matched node)")
        if node.dtype is not None:
            self._count_names(node.dtype, uses)
            t = self.type_of(node.dtype, names)
            if t.kind not in ("str", "any"):
                self.error(node.dtype.loc, f"dtype must be a string such as \"f32\" or dtype(x), not {t}")


def check(files: list[ast.RuleFile], sources: dict[str, str], registry: Registry) -> CheckedRules:
    """Check parsed files (already in include order). Raises RuleError listing every error found."""
    c = Checker(registry, sources)
    items = [item for f in files for item in f.items]
    phases: list[ast.PhaseDecl] = []
    for item in items:
        if isinstance(item, ast.Param):
            c.check_param(item)
        elif isinstance(item, ast.PhaseDecl):
            same = next((p for p in phases if p.name == item.name), None)
            if same is not None:
                if same.max_iterations != item.max_iterations and None not in (same.max_iterations, item.max_iterations):
                    c.error(item.loc, f"phase {item.name!r} is declared again with another max_iterations "
                                      f"(first at {same.loc})")
            elif item.max_iterations is not None and not 1 <= item.max_iterations < 2**32:
                c.error(item.loc, "max_iterations must be at least 1" if item.max_iterations < 1
                        else f"max_iterations must be below {2**32}")
            else:
                phases.append(item)
    for item in items:
        if isinstance(item, ast.Gate):
            c.check_gate(item)
    rules, seen = [], {}
    phase_names = {p.name for p in phases}
    for item in items:
        if isinstance(item, ast.Rule):
            if item.name in seen:
                c.error(item.loc, f"rule {item.name!r} is declared twice (first at {seen[item.name]})")
            seen.setdefault(item.name, item.loc)
            rules.append(c.check_rule(item, phase_names))
    if any(r.phase == DEFAULT_PHASE for r in rules) and DEFAULT_PHASE not in phase_names:
        phases.append(ast.PhaseDecl(DEFAULT_PHASE, None, ast.Loc("<implicit>", 1, 1)))
    if c.errors:
        raise RuleError(sorted(c.errors, key=lambda d: (d.loc.file, d.loc.line, d.loc.col) if d.loc else ("", 0, 0)))
    return CheckedRules(c.params, phases, c.gates, rules, c.warnings)
