"""The rule language's syntax tree: frozen dataclasses, each carrying its source span (Loc)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Union


@dataclass(frozen=True)
class Loc:
    """A position in a rule file: 1-based line and column."""

    file: str
    line: int
    col: int
    end_line: int = 0
    end_col: int = 0

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


# ---- expressions ----


@dataclass(frozen=True)
class Lit:
    """A literal: int, float, str, bool or None (null)."""

    value: object
    loc: Loc


@dataclass(frozen=True)
class Name:
    """A bare name: a binding, a let, a parameter, a gate variable, or an enum constant."""

    id: str
    loc: Loc


@dataclass(frozen=True)
class GetAttr:
    """`node.attr`: an attribute of a bound node."""

    obj: "Expr"
    attr: str
    loc: Loc


@dataclass(frozen=True)
class Call:
    """A built-in function call such as `uses(x)` or `dim(x, -1)`."""

    fn: str
    args: tuple["Expr", ...]
    loc: Loc


@dataclass(frozen=True)
class BinOp:
    """Arithmetic (+ - * / %), comparison (== != < <= > >=) or logic (and, or)."""

    op: str
    left: "Expr"
    right: "Expr"
    loc: Loc


@dataclass(frozen=True)
class UnaryOp:
    """`not e` or `-e`."""

    op: str
    operand: "Expr"
    loc: Loc


@dataclass(frozen=True)
class InSet:
    """`e in {a, b}` (or `not in` when negated)."""

    value: "Expr"
    items: tuple["Expr", ...]
    negated: bool
    loc: Loc


@dataclass(frozen=True)
class IsNull:
    """`e is null` (or `is not null` when negated)."""

    value: "Expr"
    negated: bool
    loc: Loc


@dataclass(frozen=True)
class ListExpr:
    """`[a, b, c]`: a list, used for shapes."""

    items: tuple["Expr", ...]
    loc: Loc


Expr = Union[Lit, Name, GetAttr, Call, BinOp, UnaryOp, InSet, IsNull, ListExpr]


# ---- patterns ----


@dataclass(frozen=True)
class Constraint:
    """An inline attribute constraint: `attr: expr` (equality) or `attr in {..}`."""

    attr: str
    value: Optional[Expr]
    choices: Optional[tuple[Expr, ...]]
    loc: Loc


@dataclass(frozen=True)
class PatRef:
    """A pattern operand that is a name: a leaf binding, another binding, or `_`."""

    name: str
    loc: Loc


@dataclass(frozen=True)
class OpPattern:
    """`Op1|Op2(arg, ...) { constraints }`: matches one node."""

    ops: tuple[str, ...]
    args: tuple["PatArg", ...]
    constraints: tuple[Constraint, ...]
    loc: Loc


PatArg = Union[PatRef, OpPattern]


@dataclass(frozen=True)
class GroupSpec:
    """`group name[lo..hi] = Pattern sharing a, b`: every node matching the pattern with the shared operands."""

    min: int
    max: int
    sharing: tuple[tuple[str, Loc], ...]


@dataclass(frozen=True)
class Binding:
    """`name = OpPattern` inside `match { }`, or a group binding when `group` is set."""

    name: str
    pattern: OpPattern
    loc: Loc
    group: Optional[GroupSpec] = None


# ---- rule body ----


@dataclass(frozen=True)
class Let:
    name: str
    value: Expr
    loc: Loc


@dataclass(frozen=True)
class Where:
    cond: Expr
    loc: Loc


@dataclass(frozen=True)
class Keep:
    names: tuple[tuple[str, Loc], ...]
    loc: Loc


@dataclass(frozen=True)
class NewNode:
    """`Op(input, ...) { attr: expr } shape expr dtype expr` on the right of a rewrite."""

    op: str
    inputs: tuple[tuple[str, Loc, bool], ...]  # (name, loc, spread): `w...` spreads a group's per-member values
    attrs: tuple[tuple[str, Expr, Loc], ...]
    shape: Optional[Expr]
    dtype: Optional[Expr]
    loc: Loc


@dataclass(frozen=True)
class Forward:
    """`root => x` or `root => if c then x else y`: the root's uses read an existing binding instead.

    `cases` are tried in order: (condition, binding name, loc); the last one has no condition."""

    cases: tuple[tuple[Optional[Expr], str, Loc], ...]
    loc: Loc

    @property
    def targets(self) -> tuple[str, ...]:
        return tuple(name for _, name, _ in self.cases)


@dataclass(frozen=True)
class RewriteItem:
    """`name = NewNode` (a new helper node), `root => NewNode` (replaces a matched root), or
    `each group => NewNode` (one new node per group member, each replacing its member)."""

    name: str
    node: Union[NewNode, Forward]
    replaces: bool
    loc: Loc
    each: bool = False


@dataclass(frozen=True)
class Rewrite:
    items: tuple[RewriteItem, ...]
    loc: Loc


@dataclass(frozen=True)
class Expect:
    """`expect fires N on "graph.json" [with P = v, ...]`: an example that `verify` runs (N = 0: no_fire)."""

    fires: int
    path: str
    params: tuple[tuple[str, Expr], ...]
    loc: Loc


@dataclass(frozen=True)
class Rule:
    name: str
    phase: Optional[str]
    priority: int
    gates: tuple[tuple[str, Loc], ...]
    bindings: tuple[Binding, ...]
    lets: tuple[Let, ...]
    wheres: tuple[Where, ...]
    keeps: tuple[Keep, ...]
    rewrites: tuple[Rewrite, ...]
    loc: Loc
    expects: tuple[Expect, ...] = ()


# ---- top level ----


@dataclass(frozen=True)
class Include:
    path: str
    loc: Loc


@dataclass(frozen=True)
class Param:
    """`param NAME: type = default` where default is a literal or `env("VAR", literal)`."""

    name: str
    type: str
    type_loc: Loc
    default: Expr
    loc: Loc


@dataclass(frozen=True)
class PhaseDecl:
    name: str
    max_iterations: Optional[int]
    loc: Loc


@dataclass(frozen=True)
class Gate:
    """A whole-graph predicate: `any|all OP var where expr`, or a plain expression over params."""

    name: str
    quantifier: Optional[str]
    op: Optional[str]
    var: Optional[str]
    cond: Expr
    loc: Loc


Item = Union[Include, Param, PhaseDecl, Gate, Rule]


@dataclass(frozen=True)
class RuleFile:
    path: str
    items: tuple[Item, ...] = field(default=())
