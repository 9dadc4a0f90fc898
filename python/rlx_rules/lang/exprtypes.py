"""Static types of guard expressions, the rule language's builtin functions, and the expression typer."""

from __future__ import annotations

import difflib
import json
import math
from importlib import resources
from dataclasses import dataclass
from typing import Iterable, Optional

from . import ast
from .registry import AttrSpec

MAX_EXPR_DEPTH = 64
PARAM_TYPES = {"int", "float", "bool", "str"}


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
    kind = {"int": "int", "float": "float", "bool": "bool", "string": "str", "enum": "str", "int_list": "list", "dim_list": "list"}.get(spec.type, "any")
    return Type(kind, spec.nullable, spec.values if spec.type == "enum" else ())


def param_type(name: str) -> Type:
    return Type(name)


def _load_builtins() -> tuple[dict[str, tuple[tuple[str, ...], bool, Type]], tuple[str, ...], frozenset[str]]:
    """The builtin table from data/builtins.json, the one the Rust program loader embeds (docs/program.md)."""
    table = json.loads(resources.files("rlx_rules").joinpath("data/builtins.json").read_text(encoding="utf-8"))
    functions = {name: (tuple(f["args"]), bool(f.get("variadic", False)), Type(f["result"], bool(f.get("nullable", False))))
                 for name, f in table["functions"].items()}
    aggregates = frozenset(name for name, f in table["functions"].items() if f.get("aggregate", False))
    return functions, tuple(table.get("facts", ())), aggregates


# name: (argument kinds, variadic last, result); "node" arguments must name bindings. What has_fact() can ask
# of a node: facts about a constant's values, which the graph's producer (the ONNX importer, rlx_rules.facts)
# records in the node's "facts" list (docs/graph-format.md, "Value facts"). Aggregates run over a group's
# members (docs/language.md, "Groups").
BUILTINS, FACTS, AGGREGATES = _load_builtins()


def suggest(name: str, candidates: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def expr_children(e: ast.Expr) -> list[ast.Expr]:
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


def free_names(expr: ast.Expr) -> list[str]:
    out, stack = [], [expr]
    while stack:
        e = stack.pop()
        if isinstance(e, ast.Name):
            out.append(e.id)
        stack.extend(expr_children(e))
    return out


def comparable(a: Type, b: Type) -> bool:
    if "any" in (a.kind, b.kind):
        return True
    if a.kind == "null" or b.kind == "null":
        other = b if a.kind == "null" else a
        return other.nullable or other.kind == "null"
    if a.numeric and b.numeric:
        return True
    return a.kind == b.kind


def assignable(want: Type, got: Type) -> bool:
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



class ExprTyper:
    """Mixin of the rule checker: the type of a guard expression, reporting errors through `self.error`."""


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
                if not comparable(t, it):
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
            if not comparable(left, right):
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
        shown = {"index": "a list index p[i]", "slice": "a slice p[a:b]"}.get(expr.fn, f"{expr.fn}()")
        arg_types = []
        for i, arg in enumerate(expr.args):
            kind = kinds[min(i, len(kinds) - 1)]
            t = self.type_of(arg, names, depth)
            arg_types.append(t)
            if kind == "node" and t.kind not in ("node", "any"):
                self.error(arg.loc, f"{shown} needs a bound node here, not a {t}")
            elif kind == "int" and t.kind not in ("int", "dim", "any"):
                self.error(arg.loc, f"{shown} needs an int here, not a {t}")
            elif kind == "num" and not t.numeric:
                self.error(arg.loc, f"{shown} needs a number here, not a {t}")
            elif kind == "list" and t.kind not in ("list", "any"):
                self.error(arg.loc, f"{shown} needs a list here, not a {t}")
            elif kind == "value" and t.kind == "node" and expr.fn != "first":
                self.error(arg.loc, f"{expr.fn}() takes dims or shapes, not a node (write shape(x))")
            elif kind == "bool" and t.kind not in ("bool", "any"):
                self.error(arg.loc, f"{shown} needs a condition, not a {t}")
            elif kind == "fact" and not (isinstance(arg, ast.Lit) and arg.value in FACTS):
                hint = suggest(arg.value, FACTS) if isinstance(arg, ast.Lit) and isinstance(arg.value, str) else ""
                self.error(arg.loc, f"{shown} needs a fact name in quotes, one of {', '.join(FACTS)}{hint}")
            elif kind == "group" and not (isinstance(arg, ast.Name) and arg.id == self.group_name):
                self.error(arg.loc, f"{expr.fn}() takes the name of the rule's group")
        # Reuse the argument types: typing them again doubled the work per nested call (2^depth).
        if expr.fn in ("min", "max", "abs", "sum") and any(t.kind == "float" for t in arg_types):
            return FLOAT
        if expr.fn == "first" and expr.args:
            return arg_types[0]
        return result
