"""The resolved structure of a rule (slots, lets, roots, group) shared with compile and analyze, and the pattern checks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from . import ast
from ..errors import Diagnostic
from .exprtypes import AGGREGATES, expr_children, free_names

DEFAULT_PHASE = "main"
MAX_PATTERN_NODES = 64


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


def pattern_children(scope: RuleScope) -> dict[str, list[str]]:
    """For each op-pattern slot, the slot names of its operands in order ('_' for a wildcard)."""
    anonymous = {id(s.pattern): name for name, s in scope.slots.items() if s.anonymous}
    return {name: [a.name if isinstance(a, ast.PatRef) else anonymous[id(a)] for a in s.pattern.args]
            for name, s in scope.slots.items() if s.pattern is not None}


def rewrite_reads(item: ast.RewriteItem) -> list[str]:
    """The names a rewrite item reads: a new node's inputs, or a forward's targets."""
    if isinstance(item.node, ast.Forward):
        return list(item.node.targets)
    return [n for n, _, _ in item.node.inputs]


def absorbed(scope: RuleScope) -> set[str]:
    """The op bindings a rewrite removes: all but the roots, the bindings it names or keeps, and what those read."""
    children = pattern_children(scope)
    kept = {n for item in scope.rewrite.items for n in rewrite_reads(item) if n in scope.slots}
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


class PatternChecker:
    """Mixin of the rule checker: the slots a rule's patterns bind, its group, and the pattern's shape."""

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
            stack.extend(expr_children(e))
        return found

    def _check_member_use(self, expr: ast.Expr, scope: RuleScope, where: str) -> None:
        if not scope.members:
            return
        for name in self._member_names_outside_aggregates(expr, scope):
            self.error(name.loc, f"{name.id!r} is per member of group {scope.group.name!r}; in {where}, use it "
                                 "inside all(), any(), sum(), first() or prefix_sum()")

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
            stack.extend(expr_children(e))

    def _count_names(self, expr: ast.Expr, uses: dict[str, int]) -> None:
        for name in free_names(expr):
            uses[name] = uses.get(name, 0) + 1
