"""Semantic checks of parsed rule files: names, ops, arity, attributes, types and rewrites; all errors collected."""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field
from typing import Iterable, Optional

from . import ast
from .errors import Diagnostic, RuleError
from .registry import AttrSpec, OpSpec, Registry

PARAM_TYPES = {"int", "float", "bool", "str"}
DEFAULT_PHASE = "main"
DEFAULT_MAX_ITERATIONS = 16
MAX_PATTERN_NODES = 64
MAX_EXPR_DEPTH = 64


# ---- types of guard expressions ----


@dataclass(frozen=True)
class Type:
    """The static type of an expression. `dim` is an int that may be symbolic at run time."""

    kind: str  # int, float, bool, str, null, dim, node, list, any
    nullable: bool = False
    enum: tuple[str, ...] = ()
    ops: tuple[str, ...] = ()  # for node: the ops it may have (empty: any op)

    def __str__(self) -> str:
        return f"{self.kind} or null" if self.nullable and self.kind != "null" else self.kind

    @property
    def numeric(self) -> bool:
        return self.kind in ("int", "float", "dim", "any")


ANY, INT, FLOAT, BOOL, STR, NULL, DIM, LIST = (Type(k) for k in ("any", "int", "float", "bool", "str", "null", "dim", "list"))


def attr_type(spec: AttrSpec) -> Type:
    kind = {"int": "int", "float": "float", "bool": "bool", "string": "str", "enum": "str", "int_list": "list"}.get(spec.type, "any")
    return Type(kind, spec.nullable, spec.values if spec.type == "enum" else ())


def _param_type(name: str) -> Type:
    return Type(name)


# (argument kinds, result) of the built-in functions; "node" arguments must name bindings.
BUILTINS: dict[str, tuple[tuple[str, ...], bool, Type]] = {
    # name: (argument kinds, variadic last, result)
    "uses": (("node",), False, INT),
    "is_output": (("node",), True, BOOL),
    "rank": (("node",), False, INT),
    "dim": (("node", "int"), False, DIM),
    "shape": (("node",), False, LIST),
    "numel": (("node",), False, INT),
    "is_static": (("value",), True, BOOL),
    "op": (("node",), False, STR),
    "dtype": (("node",), False, Type("str", nullable=True)),
    "input_count": (("node",), False, INT),
    "len": (("list",), False, INT),
    "replace_dim": (("list", "int", "int"), False, LIST),
    # aggregates over the members of a group (see docs/language.md, "Groups")
    "count": (("group",), False, INT),
    "all": (("bool",), False, BOOL),
    "any": (("bool",), False, BOOL),
    "sum": (("num",), False, INT),
    "first": (("value",), False, ANY),
    "prefix_sum": (("num",), False, INT),
    "min": (("num", "num"), False, INT),
    "max": (("num", "num"), False, INT),
    "abs": (("num",), False, INT),
    "sqrt": (("num",), False, FLOAT),
    "has_fact": (("node", "fact"), False, BOOL),
}

# What has_fact() can ask of a node: facts about a constant's values, which the graph's producer (the ONNX
# importer, rlx_rules.facts) records in the node's "facts" list. See docs/graph-format.md, "Value facts".
FACTS = ("halves_equal", "causal_keep", "causal_bias")


AGGREGATES = {"count", "all", "any", "sum", "first", "prefix_sum"}


def suggest(name: str, candidates: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


# ---- the resolved structure of a rule, shared with compile.py ----


@dataclass
class Slot:
    """A node the pattern binds: an op pattern (named or anonymous) or a leaf (any node)."""

    name: str
    pattern: Optional[ast.OpPattern]
    loc: ast.Loc
    anonymous: bool = False

    @property
    def is_leaf(self) -> bool:
        return self.pattern is None


@dataclass
class RuleScope:
    rule: ast.Rule
    slots: dict[str, Slot] = field(default_factory=dict)
    lets: dict[str, ast.Let] = field(default_factory=dict)
    roots: list[str] = field(default_factory=list)
    rewrite: Optional[ast.Rewrite] = None
    phase: str = DEFAULT_PHASE
    group: Optional[ast.Binding] = None  # the group binding, if the rule has one
    members: set[str] = field(default_factory=set)  # per-member names of the group (the group name included)


@dataclass
class CheckedRules:
    params: dict[str, ast.Param]
    phases: list[ast.PhaseDecl]
    gates: dict[str, ast.Gate]
    rules: list[RuleScope]
    warnings: list[Diagnostic]


class _Checker:
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

    # ---- expressions ----

    def type_of(self, expr: ast.Expr, names: dict[str, Type], depth: int = 0, enum: tuple[str, ...] = ()) -> Type:
        """The type of `expr`; reports errors. `enum` lets a bare name stand for an enum value."""
        if depth > MAX_EXPR_DEPTH:
            self.error(expr.loc, f"expression nests deeper than {MAX_EXPR_DEPTH} levels")
            return ANY
        sub = depth + 1
        if isinstance(expr, ast.Lit):
            v = expr.value
            if v is None:
                return NULL
            if isinstance(v, bool):
                return BOOL
            if isinstance(v, int):
                if not -(2**63) <= v < 2**63:
                    self.error(expr.loc, "integer literal does not fit in 64 bits")
                return INT
            if isinstance(v, float):
                if not math.isfinite(v):
                    self.error(expr.loc, "number literal is out of range (not a finite 64-bit float)")
                return FLOAT
            return Type("str", enum=enum)
        if isinstance(expr, ast.Name):
            if expr.id in names:
                return names[expr.id]
            if enum:
                if expr.id in enum:
                    return Type("str", enum=enum)
                self.error(expr.loc, f"{expr.id!r} is neither a name in scope nor one of {', '.join(enum)}"
                           f"{suggest(expr.id, enum)}")
                return ANY
            self.error(expr.loc, f"unknown name {expr.id!r}{suggest(expr.id, names)}")
            return ANY
        if isinstance(expr, ast.GetAttr):
            obj = self.type_of(expr.obj, names, sub)
            if obj.kind == "any":
                return ANY
            if obj.kind != "node":
                self.error(expr.loc, f"'.{expr.attr}' needs a bound node, not a {obj}")
                return ANY
            if not obj.ops:
                return ANY  # a leaf: any op, checked at run time
            found = []
            for op in obj.ops:
                spec = self.registry.get(op)
                if spec is not None and expr.attr not in spec.attrs:
                    self.error(expr.loc, f"op {op} has no attribute {expr.attr!r}{suggest(expr.attr, spec.attrs)}")
                    return ANY
                if spec is not None:
                    found.append(attr_type(spec.attrs[expr.attr]))
            if found and all(t == found[0] for t in found):
                return found[0]
            return ANY
        if isinstance(expr, ast.Call):
            return self._call_type(expr, names, sub)
        if isinstance(expr, ast.UnaryOp):
            t = self.type_of(expr.operand, names, sub)
            if expr.op == "not":
                self._expect(t, BOOL, expr.operand.loc, "'not'")
                return BOOL
            if not t.numeric:
                self.error(expr.loc, f"unary '-' needs a number, not a {t}")
            return INT if t.kind == "dim" else t
        if isinstance(expr, ast.BinOp):
            return self._binop_type(expr, names, sub)
        if isinstance(expr, ast.InSet):
            t = self.type_of(expr.value, names, sub)
            for item in expr.items:
                it = self.type_of(item, names, sub, enum=t.enum)
                if not _comparable(t, it):
                    self.error(item.loc, f"set item of type {it} can never equal a {t}")
            return BOOL
        if isinstance(expr, ast.IsNull):
            self.type_of(expr.value, names, sub)
            return BOOL
        if isinstance(expr, ast.ListExpr):
            for item in expr.items:
                t = self.type_of(item, names, sub)
                if not (t.numeric or t.kind == "null"):
                    self.error(item.loc, f"list items must be numbers, not {t}")
            return LIST
        raise AssertionError(f"unknown expression {expr!r}")

    def _expect(self, got: Type, want: Type, loc: ast.Loc, what: str) -> None:
        if got.kind == "any" or want.kind == "any":
            return
        if want.kind == "bool" and got.kind != "bool":
            self.error(loc, f"{what} needs a bool, not a {got}")

    def _binop_type(self, expr: ast.BinOp, names: dict[str, Type], depth: int) -> Type:
        op = expr.op
        if op in ("and", "or"):
            for side in (expr.left, expr.right):
                self._expect(self.type_of(side, names, depth), BOOL, side.loc, f"'{op}'")
            return BOOL
        if op in ("==", "!="):
            left, right = self._maybe_enum_type(expr.left, expr.right, names, depth)
            # Only a bare name or a string literal reads `enum`: anything else is typed once (not 2^depth times).
            if right is None or isinstance(expr.right, (ast.Name, ast.Lit)):
                right = self.type_of(expr.right, names, depth, enum=left.enum)
            if not _comparable(left, right):
                self.error(expr.loc, f"cannot compare {left} with {right} using '{op}'")
            return BOOL
        left, right = self.type_of(expr.left, names, depth), self.type_of(expr.right, names, depth)
        if op in ("<", "<=", ">", ">="):
            if not (left.numeric and right.numeric):
                self.error(expr.loc, f"'{op}' compares numbers, not {left} and {right}")
            return BOOL
        if not (left.numeric and right.numeric):
            self.error(expr.loc, f"'{op}' needs numbers, not {left} and {right}")
            return ANY
        if "float" in (left.kind, right.kind):
            return FLOAT
        if "any" in (left.kind, right.kind):
            return ANY
        return INT

    def _maybe_enum_type(self, left: ast.Expr, right: ast.Expr, names: dict[str, Type],
                         depth: int) -> tuple[Type, Optional[Type]]:
        """Type of the left side of ==; a bare enum name on the left takes its values from the right side.

        Also the right side's type when it had to be computed first (else None)."""
        if isinstance(left, ast.Name) and left.id not in names:
            right_t = self.type_of(right, names, depth)
            return self.type_of(left, names, depth, enum=right_t.enum), right_t
        return self.type_of(left, names, depth), None

    def _call_type(self, expr: ast.Call, names: dict[str, Type], depth: int) -> Type:
        if expr.fn not in BUILTINS:
            hint = " (env() is only allowed as a param default)" if expr.fn == "env" else suggest(expr.fn, BUILTINS)
            self.error(expr.loc, f"unknown function {expr.fn!r}{hint}")
            for a in expr.args:
                self.type_of(a, names, depth)
            return ANY
        kinds, variadic, result = BUILTINS[expr.fn]
        n = len(expr.args)
        if n < len(kinds) or (n > len(kinds) and not variadic):
            want = f"at least {len(kinds)}" if variadic else str(len(kinds))
            self.error(expr.loc, f"{expr.fn}() takes {want} argument{'s' if want != '1' else ''}, got {n}")
        arg_types = []
        for i, arg in enumerate(expr.args):
            kind = kinds[min(i, len(kinds) - 1)]
            t = self.type_of(arg, names, depth)
            arg_types.append(t)
            if kind == "node" and t.kind not in ("node", "any"):
                self.error(arg.loc, f"{expr.fn}() needs a bound node here, not a {t}")
            elif kind == "int" and t.kind not in ("int", "dim", "any"):
                self.error(arg.loc, f"{expr.fn}() needs an int here, not a {t}")
            elif kind == "num" and not t.numeric:
                self.error(arg.loc, f"{expr.fn}() needs a number here, not a {t}")
            elif kind == "list" and t.kind not in ("list", "any"):
                self.error(arg.loc, f"{expr.fn}() needs a list here, not a {t}")
            elif kind == "value" and t.kind == "node" and expr.fn != "first":
                self.error(arg.loc, f"{expr.fn}() takes dims or shapes, not a node (write shape(x))")
            elif kind == "bool" and t.kind not in ("bool", "any"):
                self.error(arg.loc, f"{expr.fn}() needs a condition, not a {t}")
            elif kind == "fact" and not (isinstance(arg, ast.Lit) and arg.value in FACTS):
                hint = suggest(arg.value, FACTS) if isinstance(arg, ast.Lit) and isinstance(arg.value, str) else ""
                self.error(arg.loc, f"{expr.fn}() needs a fact name in quotes, one of {', '.join(FACTS)}{hint}")
            elif kind == "group" and not (isinstance(arg, ast.Name) and arg.id == self.group_name):
                self.error(arg.loc, f"{expr.fn}() takes the name of the rule's group")
        # Reuse the argument types: typing them again doubled the work per nested call (2^depth).
        if expr.fn in ("min", "max", "abs", "sum") and any(t.kind == "float" for t in arg_types):
            return FLOAT
        if expr.fn == "first" and expr.args:
            return arg_types[0]
        return result

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
        return {name: _param_type(p.type) for name, p in self.params.items() if p.type in PARAM_TYPES}

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

    def _collect_slots(self, rule: ast.Rule, scope: RuleScope, uses: dict[str, int]) -> None:
        bound = {}
        for b in rule.bindings:
            if b.name == "_":
                self.error(b.loc, "'_' cannot be bound; it matches any node")
            elif b.name in bound:
                self.error(b.loc, f"{b.name!r} is bound twice (first at {bound[b.name].loc}); "
                                  "reuse the name to mean the same node")
            elif b.name in self.params:
                self.error(b.loc, f"{b.name!r} is a parameter name; bind the node under another name")
            else:
                bound[b.name] = b
        counter = [0]

        def walk(pattern: ast.OpPattern) -> None:
            for op in pattern.ops:
                spec = self.op_spec(op, pattern.loc)
                if spec is not None and not spec.accepts_arity(len(pattern.args)):
                    self.error(pattern.loc, f"{op} takes {spec.describe_arity()} input"
                                            f"{'s' if spec.describe_arity() != '1' else ''}, the pattern gives {len(pattern.args)}")
            for arg in pattern.args:
                if isinstance(arg, ast.OpPattern):
                    counter[0] += 1
                    name = f"${counter[0]}"
                    scope.slots[name] = Slot(name, arg, arg.loc, anonymous=True)
                    walk(arg)
                elif arg.name != "_":
                    uses[arg.name] = uses.get(arg.name, 0) + 1
                    if arg.name not in bound and arg.name not in scope.slots:
                        scope.slots[arg.name] = Slot(arg.name, None, arg.loc)

        for b in bound.values():
            scope.slots[b.name] = Slot(b.name, b.pattern, b.loc)
        for b in bound.values():
            if b.group is None:
                walk(b.pattern)
        groups = [b for b in bound.values() if b.group is not None]
        if groups:
            self._collect_group(groups, bound, scope, walk)
        if len(scope.slots) > MAX_PATTERN_NODES:
            self.error(rule.loc, f"pattern has {len(scope.slots)} nodes, more than the limit of {MAX_PATTERN_NODES}")

    def _collect_group(self, groups, bound, scope: RuleScope, walk) -> None:
        """A group's pattern names are per member, except the `sharing` names, which all members share."""
        g = groups[0]
        for extra in groups[1:]:
            self.error(extra.loc, "a rule may have one group")
        others = [b for b in bound.values() if b.group is None]
        for b in others:
            self.error(b.loc, f"{b.name!r}: a rule with a group may bind nothing else yet")
        spec = g.group
        if not 1 <= spec.min <= spec.max < 2**32:
            self.error(g.loc, f"group size {spec.min}..{spec.max} needs 1 <= min <= max")
        direct = {a.name for a in g.pattern.args if isinstance(a, ast.PatRef)}
        sharing = set()
        for name, loc in spec.sharing:
            if name not in direct:
                self.error(loc, f"shared name {name!r} must be an operand of the group pattern")
            sharing.add(name)
        before = set(scope.slots)
        walk(g.pattern)
        scope.group = g
        scope.members = {g.name} | {n for n in scope.slots if n not in before and n not in sharing}
        self.group_name = g.name

    def _member_names_outside_aggregates(self, expr: ast.Expr, scope: RuleScope) -> list[ast.Name]:
        """Per-member names used where no member is selected (outside all/any/sum/first/prefix_sum/count)."""
        found, stack, seen_lets = [], [expr], set()
        while stack:
            e = stack.pop()
            if isinstance(e, ast.Call) and e.fn in AGGREGATES:
                continue
            if isinstance(e, ast.Name):
                if e.id in scope.members:
                    found.append(e)
                elif e.id in scope.lets and e.id not in seen_lets:
                    seen_lets.add(e.id)
                    stack.append(scope.lets[e.id].value)
                continue
            stack.extend(_children(e))
        return found

    def _check_member_use(self, expr: ast.Expr, scope: RuleScope, where: str) -> None:
        if not scope.members:
            return
        for name in self._member_names_outside_aggregates(expr, scope):
            self.error(name.loc, f"{name.id!r} is per member of group {scope.group.name!r}; in {where}, use it "
                                 "inside all(), any(), sum(), first() or prefix_sum()")

    def _check_lets(self, rule: ast.Rule, scope: RuleScope, names: dict[str, Type], uses: dict[str, int]) -> None:
        for let in rule.lets:
            if let.name in scope.lets or let.name in scope.slots or let.name in self.params:
                self.error(let.loc, f"let {let.name!r} reuses a name already in scope")
                continue
            scope.lets[let.name] = let
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
            for dep in _free_names(scope.lets[name].value):
                if dep in scope.lets and dep not in names:
                    visit(dep, trail + [name])
            names[name] = self.type_of(scope.lets[name].value, names)
            state[name] = 2
            return names[name]

        for name, let in scope.lets.items():
            self._count_names(let.value, uses)
            if name not in names:
                visit(name, [])

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
                if not _comparable(want, got):
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
            self._check_new_node(item, scope, names, uses, made)
            if not item.replaces:
                made[item.name] = item
        if not scope.roots:
            self.error(rewrite.loc, "rewrite replaces nothing: write 'root => Op(...)'")
        elif len(scope.roots) > 1:
            self.error(rewrite.loc, "a rewrite replaces one root; several roots are not supported yet")

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
            if not _assignable(want, got):
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

    def _check_structure(self, scope: RuleScope) -> None:
        """Every op pattern must feed the root, and the pattern must be acyclic."""
        if len(scope.roots) != 1:
            return
        root = scope.roots[0]
        children = pattern_children(scope)
        reached, state = set(), {}

        def visit(name: str) -> None:
            if state.get(name) == 1:
                self.error(scope.slots[name].loc, f"pattern has a cycle through {name!r}")
                return
            if state.get(name) == 2:
                return
            state[name] = 1
            reached.add(name)
            for child in children.get(name, ()):
                if child != "_":
                    visit(child)
            state[name] = 2

        visit(root)
        for name, s in scope.slots.items():
            if s.pattern is not None and name not in reached:
                self.error(s.loc, f"{name!r} does not feed the root {root!r}; every op pattern must be an input, "
                                  "directly or not, of the node that the rewrite replaces")

    def _check_no_prefix_sum(self, expr: ast.Expr, where: str) -> None:
        stack = [expr]
        while stack:
            e = stack.pop()
            if isinstance(e, ast.Call) and e.fn == "prefix_sum":
                self.error(e.loc, f"prefix_sum() needs a selected member; it is allowed in an each-rewrite, not in {where}")
            stack.extend(_children(e))

    def _count_names(self, expr: ast.Expr, uses: dict[str, int]) -> None:
        for name in _free_names(expr):
            uses[name] = uses.get(name, 0) + 1


def pattern_children(scope: RuleScope) -> dict[str, list[str]]:
    """For each op-pattern slot, the slot names of its operands in order ('_' for a wildcard)."""
    anonymous = {id(s.pattern): name for name, s in scope.slots.items() if s.anonymous}
    return {name: [a.name if isinstance(a, ast.PatRef) else anonymous[id(a)] for a in s.pattern.args]
            for name, s in scope.slots.items() if s.pattern is not None}


def absorbed(scope: RuleScope) -> set[str]:
    """The op bindings a rewrite removes: all but the roots, the bindings it names or keeps, and what those read."""
    children = pattern_children(scope)
    kept = {n for item in scope.rewrite.items for n, _, _ in item.node.inputs if n in scope.slots}
    kept |= {n for keep in scope.rule.keeps for n, _ in keep.names}
    closure: set[str] = set()
    stack = list(kept)
    while stack:
        n = stack.pop()
        if n in closure or n == "_":
            continue
        closure.add(n)
        stack.extend(children.get(n, ()))
    return {n for n, s in scope.slots.items() if s.pattern is not None and n not in scope.roots and n not in closure}


def _children(e: ast.Expr) -> list[ast.Expr]:
    if isinstance(e, ast.GetAttr):
        return [e.obj]
    if isinstance(e, ast.Call):
        return list(e.args)
    if isinstance(e, ast.BinOp):
        return [e.left, e.right]
    if isinstance(e, ast.UnaryOp):
        return [e.operand]
    if isinstance(e, ast.InSet):
        return [e.value, *e.items]
    if isinstance(e, (ast.IsNull,)):
        return [e.value]
    if isinstance(e, ast.ListExpr):
        return list(e.items)
    return []


def _free_names(expr: ast.Expr) -> list[str]:
    out, stack = [], [expr]
    while stack:
        e = stack.pop()
        if isinstance(e, ast.Name):
            out.append(e.id)
        stack.extend(_children(e))
    return out


def _comparable(a: Type, b: Type) -> bool:
    if "any" in (a.kind, b.kind):
        return True
    if a.kind == "null" or b.kind == "null":
        other = b if a.kind == "null" else a
        return other.nullable or other.kind == "null"
    if a.numeric and b.numeric:
        return True
    return a.kind == b.kind


def _assignable(want: Type, got: Type) -> bool:
    if "any" in (want.kind, got.kind):
        return True
    if got.kind == "null":
        return want.nullable
    if want.kind == "float":
        return got.numeric
    if want.kind == "int":
        return got.kind in ("int", "dim")
    return want.kind == got.kind


class _NotLiteral:
    def __repr__(self) -> str:
        return "a value that is not a literal"


NOT_LITERAL = _NotLiteral()


def literal_value(expr: ast.Expr) -> object:
    """A literal's value, or a negated number literal's; NOT_LITERAL otherwise (`-"x"`, `-(1 + 2)`)."""
    if isinstance(expr, ast.UnaryOp):
        v = expr.operand.value if expr.op == "-" and isinstance(expr.operand, ast.Lit) else None
        return -v if isinstance(v, (int, float)) and not isinstance(v, bool) else NOT_LITERAL
    return expr.value if isinstance(expr, ast.Lit) else NOT_LITERAL


def value_fits(value: object, type_name: str) -> bool:
    """Whether a literal is a value of the type that Rust can hold (64-bit ints, finite floats)."""
    if type_name == "int":
        return isinstance(value, int) and not isinstance(value, bool) and -(2**63) <= value < 2**63
    if type_name == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if type_name == "bool":
        return isinstance(value, bool)
    return isinstance(value, str)


def check(files: list[ast.RuleFile], sources: dict[str, str], registry: Registry) -> CheckedRules:
    """Check parsed files (already in include order). Raises RuleError listing every error found."""
    c = _Checker(registry, sources)
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
