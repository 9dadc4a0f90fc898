"""Static checks on a whole rule set: overlapping rules, shadowed rules, and phases that may not terminate.

All three are warnings (errors with `rlx-rules check --strict`), each naming the rules and their locations.

- Overlap: two rules in the same phase and priority whose patterns can match the same root. The
  first one declared wins. No warning is given when the guards tell the rules apart: disjoint sets
  or ranges, or null against non-null, required of the same attribute at the same position.
- Shadowing: an earlier rule of the same phase that has no guards and matches everything a later
  rule matches. The later rule can never fire (unless the engine refuses the earlier rule's
  rewrite as unsafe).
- Termination: within a phase, a cycle of rules where each one replaces its root with a node that
  the next one's root could match (same op, no attribute literal ruled out), unless every rule in
  the cycle shrinks the graph. At run time the iteration cap stops such a phase, and the report
  says "cap reached".

The analysis is bounded (docs/security.md): each later rule gets at most one shadowing and one overlap
warning, at most MAX_PAIR_CHECKS rule pairs (and termination walk steps) are examined, and at most
MAX_WARNINGS warnings are kept; one last warning says what was left out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from . import ast
from .scope import CheckedRules, RuleScope, absorbed, pattern_children
from ..errors import Diagnostic

MAX_DEPTH = 8
MAX_WARNINGS = 100  # per analysis; the rest are counted in one closing warning
MAX_PAIR_CHECKS = 200_000  # rule pairs compared (and termination walk steps) per analysis


class _Budget:
    """How many more rule pairs or walk steps the analysis may examine; `take` is False once spent."""

    def __init__(self, steps: int):
        self.left = steps
        self.spent = False

    def take(self) -> bool:
        if self.left <= 0:
            self.spent = True
            return False
        self.left -= 1
        return True


@dataclass
class Allowed:
    """What one attribute at one position may be: a finite set, an int interval, and null-ness."""

    values: Optional[frozenset] = None  # None: any value
    low: float = float("-inf")
    high: float = float("inf")
    null: Optional[bool] = None  # True: must be null; False: must not be null; None: either

    def disjoint(self, other: "Allowed") -> bool:
        if self.null is not None and other.null is not None and self.null != other.null:
            return True
        if self.values is not None and other.values is not None and not (self.values & other.values):
            return True
        lo, hi = max(self.low, other.low), min(self.high, other.high)
        if lo > hi:
            return True
        for a, b in ((self, other), (other, self)):
            if a.values is not None and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                            and not b.low <= v <= b.high for v in a.values):
                return True
        return False


@dataclass
class PNode:
    """A pattern position: the ops it may have (None: any node), its operands, attribute constraints.

    `key` names the node: positions with the same key are the same graph node (a name used twice).
    """

    ops: Optional[frozenset]
    commutative: bool = False
    children: list["PNode"] = field(default_factory=list)
    attrs: dict[str, Allowed] = field(default_factory=dict)
    key: object = None


def _literal(e: ast.Expr, scope: RuleScope) -> tuple[bool, object]:
    if isinstance(e, ast.Lit):
        return True, e.value
    if isinstance(e, ast.UnaryOp) and e.op == "-" and isinstance(e.operand, ast.Lit) \
            and isinstance(e.operand.value, (int, float)):
        return True, -e.operand.value
    if isinstance(e, ast.Name) and e.id not in scope.slots and e.id not in scope.lets:
        return True, e.id  # an enum value (the checker verified it)
    if isinstance(e, ast.Name) and e.id in scope.lets:
        return _literal(scope.lets[e.id].value, scope)
    if isinstance(e, ast.ListExpr):  # a literal list, such as a permutation: compared as a tuple
        items = [_literal(x, scope) for x in e.items]
        if all(ok for ok, _ in items):
            return True, tuple(v for _, v in items)
    return False, None


def _conjuncts(e: ast.Expr) -> list[ast.Expr]:
    if isinstance(e, ast.BinOp) and e.op == "and":
        return _conjuncts(e.left) + _conjuncts(e.right)
    return [e]


def _attr_of(e: ast.Expr, scope: RuleScope) -> Optional[tuple[str, str]]:
    if isinstance(e, ast.GetAttr) and isinstance(e.obj, ast.Name) and e.obj.id in scope.slots:
        return e.obj.id, e.attr
    return None


def _constraints(scope: RuleScope) -> dict[tuple[str, str], Allowed]:
    """(binding, attribute) -> what the rule requires of it, from inline constraints and where clauses."""
    out: dict[tuple[str, str], Allowed] = {}

    def narrow(key, update):
        allowed = out.setdefault(key, Allowed())
        update(allowed)

    for name, slot in scope.slots.items():
        if slot.pattern is None:
            continue
        for c in slot.pattern.constraints:
            if c.value is not None:
                ok, v = _literal(c.value, scope)
                if ok:
                    narrow((name, c.attr), lambda a, v=v: _require_value(a, v))
            else:
                lits = [_literal(x, scope) for x in c.choices]
                if all(ok for ok, _ in lits):
                    narrow((name, c.attr), lambda a, vs=frozenset(v for _, v in lits): _require_set(a, vs))
    for w in scope.rule.wheres:
        for part in _conjuncts(w.cond):
            if isinstance(part, ast.IsNull) and (key := _attr_of(part.value, scope)):
                narrow(key, lambda a, n=not part.negated: setattr(a, "null", n))
            elif isinstance(part, ast.InSet) and not part.negated and (key := _attr_of(part.value, scope)):
                lits = [_literal(x, scope) for x in part.items]
                if all(ok for ok, _ in lits):
                    narrow(key, lambda a, vs=frozenset(v for _, v in lits): _require_set(a, vs))
            elif isinstance(part, ast.BinOp) and part.op in ("==", "<", "<=", ">", ">="):
                left, right, op = part.left, part.right, part.op
                if not _attr_of(left, scope):
                    left, right = right, left
                    op = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}.get(op, op)
                key = _attr_of(left, scope)
                ok, v = _literal(right, scope)
                if not key or not ok:
                    continue
                if op == "==":
                    narrow(key, lambda a, v=v: _require_value(a, v))
                elif isinstance(v, (int, float)) and not isinstance(v, bool):
                    narrow(key, lambda a, op=op, v=v: _require_range(a, op, v))
    return out


def _require_value(a: Allowed, v: object) -> None:
    if v is None:
        a.null = True
    else:
        _require_set(a, frozenset([v]))
        a.null = False


def _require_set(a: Allowed, vs: frozenset) -> None:
    a.values = vs if a.values is None else a.values & vs
    if None in vs and len(vs) == 1:
        a.null = True


def _require_range(a: Allowed, op: str, v: float) -> None:
    step = 1 if isinstance(v, int) else 0
    if op == "<":
        a.high = min(a.high, v - step)
    elif op == "<=":
        a.high = min(a.high, v)
    elif op == ">":
        a.low = max(a.low, v + step)
    else:
        a.low = max(a.low, v)


def pattern_tree(scope: RuleScope, registry, side: str = "", start: Optional[str] = None) -> Optional[PNode]:
    """The pattern as a tree of positions, from its root (or from the binding `start`)."""
    if not scope.roots:
        return None
    children = pattern_children(scope)
    constraints = _constraints(scope)

    def build(name: str, depth: int) -> PNode:
        slot = scope.slots.get(name)
        if name == "_" or slot is None or depth > MAX_DEPTH:
            return PNode(None, key=object())  # a wildcard: a node of its own
        if slot.pattern is None:
            return PNode(None, key=(side, name))
        ops = frozenset(slot.pattern.ops)
        commutative = all((spec := registry.get(op)) is not None and spec.commutative for op in ops)
        node = PNode(ops, commutative and len(children[name]) == 2, key=(side, name))
        node.children = [build(c, depth + 1) for c in children[name]]
        node.attrs = {attr: allowed for (n, attr), allowed in constraints.items() if n == name}
        return node

    return build(start or scope.roots[0], 0)


def rewrite_tree(scope: RuleScope, item: "ast.RewriteItem", registry, side: str) -> PNode:
    """The node a rewrite item creates, as a pattern position: its op, its literal attributes, and its inputs
    (nodes the same rewrite creates, or the matched bindings, as the rule's pattern describes them)."""
    created = {i.name: i for i in scope.rewrite.items}

    def build(it: "ast.RewriteItem", depth: int) -> PNode:
        spec = registry.get(it.node.op)
        node = PNode(frozenset([it.node.op]), bool(spec is not None and spec.commutative and len(it.node.inputs) == 2),
                     key=(side, it.name, depth))
        for attr, value, _ in it.node.attrs:
            ok, v = _literal(value, scope)
            if ok:
                node.attrs[attr] = _exactly(v)
        for name, _, spread in it.node.inputs:
            if spread or depth >= MAX_DEPTH:
                node.children.append(PNode(None, key=object()))
            elif name in created and not created[name].replaces:
                node.children.append(build(created[name], depth + 1))
            elif name in scope.slots:
                node.children.append(pattern_tree(scope, registry, side, start=name))
            else:
                node.children.append(PNode(None, key=object()))
        return node

    return build(item, 0)


class _Classes:
    """Union-find over node keys: which pattern positions stand for the same graph node, the structure
    (ops, operands, attribute constraints) that node must have, and the position pairs already
    unified. Copied to branch at commutative operands."""

    def __init__(self, parent=None, shape=None, done=None):
        self.parent = dict(parent or {})
        self.shape = dict(shape or {})
        self.done = set(done or ())

    def copy(self) -> "_Classes":
        return _Classes(self.parent, self.shape, self.done)

    def find(self, k):
        while self.parent.get(k, k) != k:
            k = self.parent[k]
        return k


def _unify(a: PNode, b: PNode, classes: _Classes) -> Optional[_Classes]:
    """Unify two positions: their node classes merge, and their structures must agree."""
    if a is b or (id(a), id(b)) in classes.done:
        return classes
    classes = classes.copy()
    classes.done.add((id(a), id(b)))
    ra, rb = classes.find(a.key), classes.find(b.key)
    if ra != rb:
        classes.parent[ra] = rb
    shaped = []
    for x in (classes.shape.get(ra), classes.shape.get(rb), a, b):
        if x is not None and x.ops is not None and all(x is not y for y in shaped):
            shaped.append(x)
    if not shaped:
        return classes
    base = shaped[0]
    classes.shape[rb] = base
    for other in shaped[1:]:
        classes = _unify_structure(base, other, classes)
        if classes is None:
            return None
    return classes


def _unify_structure(sa: PNode, sb: PNode, classes: _Classes) -> Optional[_Classes]:
    if not (sa.ops & sb.ops) or len(sa.children) != len(sb.children):
        return None
    if any(sa.attrs[k].disjoint(sb.attrs[k]) for k in sa.attrs.keys() & sb.attrs.keys()):
        return None
    orders = [list(zip(sa.children, sb.children))]
    if sa.commutative and sb.commutative:
        orders.append(list(zip(sa.children, reversed(sb.children))))
    for pairs in orders:
        attempt: Optional[_Classes] = classes
        for x, y in pairs:
            attempt = _unify(x, y, attempt)
            if attempt is None:
                break
        if attempt is not None:
            return attempt
    return None


def _occurrences(node: PNode) -> list[PNode]:
    out, stack = [], [node]
    while stack:
        n = stack.pop()
        out.append(n)
        stack.extend(n.children)
    return out


def can_overlap(a: PNode, b: PNode) -> bool:
    """Whether some node could match both patterns: they unify, a name used twice standing for one
    node everywhere it occurs (guards other than attribute constraints are ignored)."""
    classes = _unify(a, b, _Classes())
    if classes is None:
        return False
    # A name may occur again inside a subtree that unified with a bare name on the other side:
    # every occurrence must still agree with what its node class became.
    occurrences = _occurrences(a) + _occurrences(b)
    for _ in range(len(occurrences)):
        before = len(classes.done)
        for occ in occurrences:
            shape = classes.shape.get(classes.find(occ.key))
            if shape is not None and occ.ops is not None and shape is not occ:
                classes = _unify(occ, shape, classes)
                if classes is None:
                    return False
        if len(classes.done) == before:
            break
    return not _cyclic(occurrences, classes)


def _cyclic(occurrences: list[PNode], classes: _Classes) -> bool:
    """Whether the unified node classes would need a node to be its own input (no real graph has one)."""
    edges: dict = {}
    for occ in occurrences:
        for child in occ.children:
            edges.setdefault(classes.find(occ.key), set()).add(classes.find(child.key))
    state: dict = {}

    def visit(k) -> bool:
        if state.get(k) == 1:
            return True
        if state.get(k) == 2:
            return False
        state[k] = 1
        if any(visit(c) for c in edges.get(k, ())):
            return True
        state[k] = 2
        return False

    return any(visit(k) for k in list(edges))


def subsumes(general: PNode, specific: PNode) -> bool:
    """Whether every node matching `specific` also matches `general` (which has no attribute constraints)."""
    if general.ops is None:
        return True
    if general.attrs or specific.ops is None or not specific.ops <= general.ops:
        return False
    if len(general.children) != len(specific.children):
        return False
    return all(subsumes(g, s) for g, s in zip(general.children, specific.children))


def _has_guards(scope: RuleScope) -> bool:
    r = scope.rule
    return bool(r.wheres or r.gates or any(s.pattern is not None and s.pattern.constraints
                                            for s in scope.slots.values()) or scope.group is not None)


def _uses_names_twice(scope: RuleScope) -> bool:
    """A repeated name is a same-node constraint that pattern trees do not model."""
    children = pattern_children(scope)
    refs = [c for cs in children.values() for c in cs if c != "_"]
    return len(refs) != len(set(refs))


def analyze(checked: CheckedRules, registry, sources: dict[str, str]) -> list[Diagnostic]:
    split = {path: text.splitlines() for path, text in sources.items()}

    def line(loc):
        lines = split.get(loc.file, [])
        return lines[loc.line - 1] if 0 < loc.line <= len(lines) else None

    warnings: list[Diagnostic] = []
    budget = _Budget(MAX_PAIR_CHECKS)
    order = {id(s): i for i, s in enumerate(checked.rules)}
    for phase in checked.phases:
        members = sorted((s for s in checked.rules if s.phase == phase.name),
                         key=lambda s: (-s.rule.priority, order[id(s)]))
        trees = {id(s): pattern_tree(s, registry, side=s.rule.name) for s in members}
        root_ops = {id(s): frozenset(s.slots[s.roots[0]].pattern.ops) if s.roots else frozenset() for s in members}
        unguarded = {id(s) for s in members if not _has_guards(s) and not _uses_names_twice(s)}
        # one warning per later rule: the first earlier rule that shadows it, or else the first it overlaps
        # with and how many others (a count, not a list: memory stays linear in the rules)
        overlaps: dict[int, tuple[RuleScope, int]] = {}
        for j, later in enumerate(members):
            b = trees[id(later)]
            for first in members[:j]:
                a = trees[id(first)]
                if a is None or b is None or not (root_ops[id(first)] & root_ops[id(later)]):
                    continue  # different root ops never overlap, nor shadow each other
                if not budget.take():
                    break
                if id(first) in unguarded and subsumes(a, b):
                    warnings.append(Diagnostic(later.rule.loc, (
                        f"rule {later.rule.name!r} is shadowed: {first.rule.name!r} ({first.rule.loc}) runs first in "
                        f"phase {phase.name!r}, has no guards and matches everything it matches"),
                        "warning", line(later.rule.loc)))
                    overlaps.pop(id(later), None)
                    break
                if first.rule.priority == later.rule.priority and can_overlap(a, b):
                    seen = overlaps.get(id(later))
                    overlaps[id(later)] = (first, 1) if seen is None else (seen[0], seen[1] + 1)
        for later in members:
            if id(later) not in overlaps:
                continue
            first, count = overlaps[id(later)]
            others = f" (and {count - 1} more earlier rules)" if count > 1 else ""
            warnings.append(Diagnostic(later.rule.loc, (
                f"rules {first.rule.name!r} ({first.rule.loc}) and {later.rule.name!r} overlap{others}: both can match "
                f"the same root in phase {phase.name!r} at priority {first.rule.priority}; "
                f"{first.rule.name!r} is tried first (give one a priority, or guards that tell them apart)"),
                "warning", line(later.rule.loc)))
        warnings.extend(_termination(phase, members, line, registry, budget))
    return _summarized(warnings, budget, len(checked.rules))


def _summarized(warnings: list[Diagnostic], budget: _Budget, n_rules: int) -> list[Diagnostic]:
    """At most MAX_WARNINGS warnings, then one that counts the rest and says if the analysis stopped early."""
    notes = []
    if len(warnings) > MAX_WARNINGS:
        notes.append(f"{len(warnings) - MAX_WARNINGS} more warnings of the rule analysis are not shown")
        warnings = warnings[:MAX_WARNINGS]
    if budget.spent:
        notes.append(f"the rule analysis stopped after {MAX_PAIR_CHECKS} rule pairs ({n_rules} rules): overlaps, "
                     "shadowing and cycles past that point are not reported")
    if notes:
        warnings.append(Diagnostic(None, "; ".join(notes), "warning"))
    return warnings


def _termination(phase, members: list[RuleScope], line, registry, budget: _Budget) -> list[Diagnostic]:
    """Cycles of rules where each replaces its root with a node the next rule's root could match.

    A cycle in which every rule removes more nodes than it creates cannot go on forever (the graph
    shrinks), so it is not reported.
    """
    roots = {s.rule.name: s for s in members if s.roots and s.rewrite is not None}

    def shrinks(s: RuleScope) -> bool:
        created = sum(1 for item in s.rewrite.items if not isinstance(item.node, ast.Forward))
        return created < 1 + len(absorbed(s))

    # each rule's pattern, and what each rule puts in place of its roots, built once for all pairs
    patterns = {name: pattern_tree(s, registry, "b") for name, s in roots.items()}
    # a forwarding rewrite puts an existing node in place of its root, and removes the root: it creates nothing
    results = {name: [rewrite_tree(s, item, registry, "a") for item in s.rewrite.items
                      if item.replaces and not isinstance(item.node, ast.Forward)]
               for name, s in roots.items()}

    def feeds(a: str, b: str) -> bool:
        """Whether b's pattern could match a node that a's rewrite puts in place of a's root."""
        return any(can_overlap(made, patterns[b]) for made in results[a])

    # only rules whose root op is among the ops a rewrite makes are compared (an index, not every pair)
    by_op: dict[object, list[str]] = {}
    for b, tree in patterns.items():
        for op in (tree.ops if tree is not None and tree.ops is not None else (None,)):
            by_op.setdefault(op, []).append(b)

    def candidates(a: str) -> set[str]:
        ops = {op for made in results[a] for op in (made.ops if made.ops is not None else by_op)}
        return {b for op in ops | {None} for b in by_op.get(op, ())}

    edges = {a: sorted(b for b in candidates(a) if budget.take() and feeds(a, b)) for a in roots}
    found, seen_cycles = [], set()

    def walk(start: str, node: str, path: list[str]) -> None:
        for nxt in edges.get(node, ()):
            if not budget.take():
                return
            if nxt == start:
                cycle = tuple(sorted(path))
                if cycle not in seen_cycles and not all(shrinks(roots[r]) for r in path):
                    seen_cycles.add(cycle)
                    found.append(path + [start])
            elif nxt not in path and len(path) < 8:
                walk(start, nxt, path + [nxt])

    for name in roots:
        walk(name, name, [name])
    out = []
    for cycle in found:
        head = roots[cycle[0]]
        out.append(Diagnostic(head.rule.loc, (
            f"phase {phase.name!r} may not terminate: {' -> '.join(cycle)} can re-create what the next rule consumes "
            f"(each replaces its root with a node the next one can match, and not every step shrinks the graph); "
            f"the iteration cap ({phase.max_iterations or 16}) will stop it"), "warning", line(head.rule.loc)))
    return out


def _exactly(v: object) -> Allowed:
    allowed = Allowed()
    _require_value(allowed, v)
    return allowed
