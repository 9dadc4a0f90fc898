"""Parse .rlxr text with the Lark grammar into ast.py dataclasses; syntax errors become RuleError."""

from __future__ import annotations

import functools
from importlib import resources

import lark
from lark import Transformer, v_args

from . import MAX_SOURCE_BYTES, ast  # MAX_SOURCE_BYTES is re-exported; lang/__init__.py defines it
from ..errors import Diagnostic, RuleError

MAX_NESTING = 200
# Parse-tree depth (operator chains such as `1 + 1 + ...` or `not not ...` nest without brackets). The
# checker allows 64 levels of expression and 64 pattern nodes, far below this; the tree is turned into
# the AST recursively, so deeper text would exhaust Python's stack.
MAX_TREE_DEPTH = 300


@functools.lru_cache(maxsize=1)
def _parser() -> lark.Lark:
    grammar = resources.files(__package__).joinpath("grammar.lark").read_text(encoding="utf-8")
    return lark.Lark(grammar, parser="lalr", propagate_positions=True, maybe_placeholders=True, cache=_cache_path())


def _cache_path():
    """Where Lark keeps the built LALR tables (building them costs ~130 ms per process; loading, ~15 ms).

    A per-user folder, not the shared temp dir, since the cache is a pickle. Lark checks the grammar's
    hash stored in the file and rebuilds on a mismatch; the name carries the Lark and Python versions.
    RLX_RULES_NO_GRAMMAR_CACHE=1, or a folder that cannot be made, turns the cache off.
    """
    import os
    import sys

    if os.environ.get("RLX_RULES_NO_GRAMMAR_CACHE"):
        return False
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    folder = os.path.join(base, "rlx-rules")
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
    except OSError:
        return False
    return os.path.join(folder, f"grammar-lark{lark.__version__}-py{sys.version_info[0]}{sys.version_info[1]}.cache")


def _unquote(token: str) -> str:
    body = token[1:-1]
    out, i = [], 0
    escapes = {"n": "\n", "t": "\t", '"': '"', "\\": "\\"}
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body):
            out.append(escapes.get(body[i + 1], body[i + 1]))
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


class _ToAst(Transformer):
    """Builds AST nodes bottom-up; every node gets the span of its parse-tree node or token."""

    def __init__(self, path: str):
        super().__init__()
        self.path = path

    def _loc(self, meta_or_token) -> ast.Loc:
        m = meta_or_token
        line = getattr(m, "line", None)
        if line is None:
            return ast.Loc(self.path, 1, 1)
        return ast.Loc(self.path, line, m.column, getattr(m, "end_line", 0) or 0, getattr(m, "end_column", 0) or 0)

    # ---- expressions ----
    @v_args(meta=True)
    def int_lit(self, meta, children):
        return ast.Lit(int(children[0]), self._loc(meta))

    @v_args(meta=True)
    def float_lit(self, meta, children):
        return ast.Lit(float(children[0]), self._loc(meta))

    @v_args(meta=True)
    def str_lit(self, meta, children):
        return ast.Lit(_unquote(str(children[0])), self._loc(meta))

    @v_args(meta=True)
    def true_lit(self, meta, children):
        return ast.Lit(True, self._loc(meta))

    @v_args(meta=True)
    def false_lit(self, meta, children):
        return ast.Lit(False, self._loc(meta))

    @v_args(meta=True)
    def null_lit(self, meta, children):
        return ast.Lit(None, self._loc(meta))

    @v_args(meta=True)
    def name(self, meta, children):
        return ast.Name(str(children[0]), self._loc(meta))

    @v_args(meta=True)
    def call(self, meta, children):
        fn, *args = children
        return ast.Call(str(fn), tuple(a for a in args if a is not None), self._loc(meta))

    @v_args(meta=True)
    def list_lit(self, meta, children):
        return ast.ListExpr(tuple(c for c in children if c is not None), self._loc(meta))

    @v_args(meta=True)
    def get_attr(self, meta, children):
        return ast.GetAttr(children[0], str(children[1]), self._loc(meta))

    @v_args(meta=True)
    def index(self, meta, children):
        return ast.Call("index", (children[0], children[1]), self._loc(meta))

    @v_args(meta=True)
    def slice(self, meta, children):
        loc = self._loc(meta)
        bounds = tuple(ast.Lit(None, loc) if b is None else b for b in children[1:])
        return ast.Call("slice", (children[0], *bounds), loc)

    def _bin(op):  # noqa: N805 - a small factory used at class creation time
        @v_args(meta=True)
        def build(self, meta, children):
            return ast.BinOp(op, children[0], children[-1], self._loc(meta))

        return build

    or_op, and_op = _bin("or"), _bin("and")
    add, sub, mul, div, mod = _bin("+"), _bin("-"), _bin("*"), _bin("/"), _bin("%")

    @v_args(meta=True)
    def compare(self, meta, children):
        left, op, right = children
        return ast.BinOp(str(op), left, right, self._loc(meta))

    @v_args(meta=True)
    def not_op(self, meta, children):
        return ast.UnaryOp("not", children[0], self._loc(meta))

    @v_args(meta=True)
    def neg(self, meta, children):
        return ast.UnaryOp("-", children[0], self._loc(meta))

    def set_lit(self, children):
        return tuple(c for c in children if c is not None)

    @v_args(meta=True)
    def in_set(self, meta, children):
        return ast.InSet(children[0], children[1], False, self._loc(meta))

    @v_args(meta=True)
    def not_in_set(self, meta, children):
        return ast.InSet(children[0], children[1], True, self._loc(meta))

    @v_args(meta=True)
    def is_null(self, meta, children):
        return ast.IsNull(children[0], False, self._loc(meta))

    @v_args(meta=True)
    def is_not_null(self, meta, children):
        return ast.IsNull(children[0], True, self._loc(meta))

    # ---- patterns ----
    @v_args(meta=True)
    def pattern_ref(self, meta, children):
        return ast.PatRef(str(children[0]), self._loc(meta))

    def pattern_arg(self, children):
        return children[0]

    def op_names(self, children):
        return tuple((str(t), self._loc(t)) for t in children)

    @v_args(meta=True)
    def constraint_eq(self, meta, children):
        return ast.Constraint(str(children[0]), children[1], None, self._loc(children[0]))

    @v_args(meta=True)
    def constraint_in(self, meta, children):
        return ast.Constraint(str(children[0]), None, children[1], self._loc(children[0]))

    def constraints(self, children):
        return tuple(c for c in children if c is not None)

    @v_args(meta=True)
    def op_pattern(self, meta, children):
        names, *rest = children
        constraints = rest[-1] if rest and isinstance(rest[-1], tuple) else ()
        args = tuple(a for a in rest if isinstance(a, (ast.PatRef, ast.OpPattern)))
        loc = names[0][1]
        loc = ast.Loc(loc.file, loc.line, loc.col, loc.end_line, loc.end_col)
        return ast.OpPattern(tuple(n for n, _ in names), args, constraints, loc)

    @v_args(meta=True)
    def binding(self, meta, children):
        return ast.Binding(str(children[0]), children[1], self._loc(children[0]))

    @v_args(meta=True)
    def group_binding(self, meta, children):
        name, lo, hi, pattern, *sharing = children
        spec = ast.GroupSpec(int(lo), int(hi), tuple((str(t), self._loc(t)) for t in sharing))
        return ast.Binding(str(name), pattern, self._loc(name), spec)

    def match_block(self, children):
        return ("match", tuple(children))

    # ---- rule body ----
    def expect_params(self, children):
        return tuple((str(children[i]), children[i + 1]) for i in range(0, len(children), 2))

    @v_args(meta=True)
    def expect_fires(self, meta, children):
        return ast.Expect(int(children[0]), _unquote(str(children[1])), children[2] or (), self._loc(meta))

    @v_args(meta=True)
    def expect_no_fire(self, meta, children):
        return ast.Expect(0, _unquote(str(children[0])), children[1] or (), self._loc(meta))

    @v_args(meta=True)
    def let_stmt(self, meta, children):
        return ast.Let(str(children[0]), children[1], self._loc(children[0]))

    @v_args(meta=True)
    def where_stmt(self, meta, children):
        return ast.Where(children[0], self._loc(meta))

    @v_args(meta=True)
    def keep_stmt(self, meta, children):
        return ast.Keep(tuple((str(t), self._loc(t)) for t in children), self._loc(meta))

    @v_args(meta=True)
    def new_attr(self, meta, children):
        return (str(children[0]), children[1], self._loc(children[0]))

    def new_attrs(self, children):
        return tuple(c for c in children if c is not None)

    @v_args(meta=True)
    def new_node(self, meta, children):
        op = children[0]
        shape, dtype = children[-2], children[-1]
        attrs = children[-3] if children[-3] is not None and isinstance(children[-3], tuple) else ()
        inputs = tuple(t for t in children[1:-3] if t is not None)
        return ast.NewNode(str(op), inputs, attrs, shape, dtype, self._loc(op))

    def new_input_one(self, children):
        return (str(children[0]), self._loc(children[0]), False)

    def new_input_spread(self, children):
        return (str(children[0]), self._loc(children[0]), True)

    @v_args(meta=True)
    def rewrite_each(self, meta, children):
        return ast.RewriteItem(str(children[0]), children[1], True, self._loc(children[0]), each=True)

    @v_args(meta=True)
    def rewrite_one(self, meta, children):
        item = ast.RewriteItem(str(children[0]), children[1], True, self._loc(children[0]))
        return ast.Rewrite((item,), self._loc(meta))

    @v_args(meta=True)
    def rewrite_forward(self, meta, children):
        item = ast.RewriteItem(str(children[0]), children[1], True, self._loc(children[0]))
        return ast.Rewrite((item,), self._loc(meta))

    @v_args(meta=True)
    def forward_to(self, meta, children):
        return ast.Forward(((None, str(children[0]), self._loc(children[0])),), self._loc(meta))

    @v_args(meta=True)
    def forward_if(self, meta, children):
        cond, name, rest = children
        return ast.Forward(((cond, str(name), self._loc(name)), *rest.cases), self._loc(meta))

    @v_args(meta=True)
    def rewrite_let(self, meta, children):
        return ast.RewriteItem(str(children[0]), children[1], False, self._loc(children[0]))

    @v_args(meta=True)
    def rewrite_replace(self, meta, children):
        return ast.RewriteItem(str(children[0]), children[1], True, self._loc(children[0]))

    @v_args(meta=True)
    def rewrite_block(self, meta, children):
        return ast.Rewrite(tuple(children), self._loc(meta))

    def rule_phase(self, children):
        return ("phase", str(children[0]), self._loc(children[0]))

    def rule_priority(self, children):
        return ("priority", int(children[0]), self._loc(children[0]))

    def rule_when(self, children):
        return ("when", tuple((str(t), self._loc(t)) for t in children), None)

    def rule_opt(self, children):
        return children[0]

    @v_args(meta=True)
    def rule(self, meta, children):
        name, *body = children
        phase, priority, gates = None, 0, ()
        bindings, lets, wheres, keeps, rewrites, expects = [], [], [], [], [], []
        for part in body:
            if isinstance(part, tuple) and part and part[0] == "phase":
                phase = part[1]
            elif isinstance(part, tuple) and part and part[0] == "priority":
                priority = part[1]
            elif isinstance(part, tuple) and part and part[0] == "when":
                gates += part[1]
            elif isinstance(part, tuple) and part and part[0] == "match":
                bindings.extend(part[1])
            elif isinstance(part, ast.Let):
                lets.append(part)
            elif isinstance(part, ast.Where):
                wheres.append(part)
            elif isinstance(part, ast.Keep):
                keeps.append(part)
            elif isinstance(part, ast.Rewrite):
                rewrites.append(part)
            elif isinstance(part, ast.Expect):
                expects.append(part)
        return ast.Rule(str(name), phase, priority, gates, tuple(bindings), tuple(lets), tuple(wheres),
                        tuple(keeps), tuple(rewrites), self._loc(name), tuple(expects))

    # ---- top level ----
    @v_args(meta=True)
    def include(self, meta, children):
        return ast.Include(_unquote(str(children[0])), self._loc(meta))

    @v_args(meta=True)
    def param(self, meta, children):
        name, type_name, default = children
        return ast.Param(str(name), str(type_name), self._loc(type_name), default, self._loc(name))

    @v_args(meta=True)
    def phase_decl(self, meta, children):
        cap = int(children[1]) if children[1] is not None else None
        return ast.PhaseDecl(str(children[0]), cap, self._loc(children[0]))

    def _gate(self, quantifier, children):
        name, op, var, cond = children
        return ast.Gate(str(name), quantifier, str(op), str(var), cond, self._loc(name))

    def gate_any(self, children):
        return self._gate("any", children)

    def gate_all(self, children):
        return self._gate("all", children)

    def gate_expr(self, children):
        return ast.Gate(str(children[0]), None, None, None, children[1], self._loc(children[0]))

    def start(self, children):
        return tuple(children)


def _nesting_depth(text: str) -> int:
    depth = deepest = 0
    for ch in text:
        if ch in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in ")]}":
            depth -= 1
    return deepest


def _syntax_error(path: str, text: str, err: lark.exceptions.UnexpectedInput) -> RuleError:
    line, col = getattr(err, "line", 1) or 1, getattr(err, "column", 1) or 1
    if isinstance(err, lark.exceptions.UnexpectedToken):
        token = err.token
        if token.type == "$END":
            what = "unexpected end of file"
        else:
            what = f"unexpected {str(token)!r}"
        expected = sorted(_describe(t) for t in err.accepts or err.expected)
        message = f"syntax error: {what}; expected one of: {', '.join(expected[:12])}"
    elif isinstance(err, lark.exceptions.UnexpectedCharacters):
        message = f"syntax error: unexpected character {text[err.pos_in_stream]!r}" if err.pos_in_stream < len(text) \
            else "syntax error: unexpected character"
    else:
        message = "syntax error: unexpected end of file"
    lines = text.splitlines()
    source = lines[line - 1] if 0 < line <= len(lines) else None
    return RuleError([Diagnostic(ast.Loc(path, line, col), message, source_line=source)])


_TERMINAL_NAMES = {"NAME": "a name", "INT": "an integer", "SIGNED_INT": "an integer", "STRING": "a string",
                   "DECIMAL": "a number", "COMP_OP": "a comparison"}


def _describe(terminal: str) -> str:
    if terminal in _TERMINAL_NAMES:
        return _TERMINAL_NAMES[terminal]
    try:
        pattern = _parser().get_terminal(terminal).pattern
        return repr(pattern.value)
    except (KeyError, AttributeError):
        return terminal


def _error_at(path: str, text: str, line: int, col: int, message: str) -> RuleError:
    lines = text.splitlines()
    source = lines[line - 1] if 0 < line <= len(lines) else None
    return RuleError([Diagnostic(ast.Loc(path, line, col), message, source_line=source)])


def _too_deep(tree: lark.Tree, limit: int):
    """The first subtree deeper than `limit` levels (iteratively: the tree may be too deep to recurse), or None."""
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return node
        stack.extend((child, depth + 1) for child in node.children if isinstance(child, lark.Tree))
    return None


def parse_text(text: str, path: str = "<string>", *, max_bytes: int = MAX_SOURCE_BYTES) -> ast.RuleFile:
    """Parse one rule file's text (at most `max_bytes` bytes of UTF-8). Raises RuleError (with file:line:col and
    a caret) on a syntax error."""
    if len(text.encode("utf-8", "surrogatepass")) > max_bytes:
        raise RuleError([Diagnostic(ast.Loc(path, 1, 1), f"rule file is larger than {max_bytes} bytes")])
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:  # only text given as a str can hold one; a file would not decode
        line = text.count("\n", 0, e.start) + 1
        col = e.start - (text.rfind("\n", 0, e.start) + 1) + 1
        raise _error_at(path, text, line, col, "rule text holds a lone surrogate (not valid Unicode)") from None
    if _nesting_depth(text) > MAX_NESTING:
        raise RuleError([Diagnostic(ast.Loc(path, 1, 1), f"brackets nest deeper than {MAX_NESTING} levels")])
    try:
        tree = _parser().parse(text)
    except lark.exceptions.UnexpectedInput as err:
        raise _syntax_error(path, text, err) from None
    deep = _too_deep(tree, MAX_TREE_DEPTH)
    if deep is not None:
        line, col = getattr(deep.meta, "line", 1), getattr(deep.meta, "column", 1)
        raise _error_at(path, text, line, col, f"expression nests deeper than {MAX_TREE_DEPTH} levels") from None
    try:
        return ast.RuleFile(path, _ToAst(path).transform(tree))
    except lark.exceptions.VisitError as e:  # a number too long to convert (int() refuses > 4300 digits)
        obj = e.obj
        meta = obj.meta if isinstance(obj, lark.Tree) else obj
        line, col = getattr(meta, "line", 1) or 1, getattr(meta, "column", 1) or 1
        what = "number is too long" if isinstance(e.orig_exc, ValueError) else str(e.orig_exc)
        raise _error_at(path, text, line, col, f"{what} (in {e.rule})") from None


MAX_INCLUDE_DEPTH = 16


def parse_files(paths: list[str], *, max_bytes: int = MAX_SOURCE_BYTES) -> tuple[list[ast.RuleFile], dict[str, str]]:
    """Parse rule files and, depth first, the files they include (each file once, in include order).

    Include paths are relative to the including file, and must stay inside the include root of the file
    named in `paths` that the include chain started from (see `include_root`): rules are data, and a
    rule file reads no file outside its own tree (docs/security.md). Returns the files in the order
    their items apply, and each file's source text (for diagnostics). Raises RuleError for unreadable
    files, syntax errors, include cycles, includes that leave the tree, includes nested deeper than
    MAX_INCLUDE_DEPTH, and files over `max_bytes` or not regular files (a FIFO would block the read).
    """
    import os
    import stat

    files: list[ast.RuleFile] = []
    sources: dict[str, str] = {}
    done: set[str] = set()

    def load(path: str, stack: list[str], at: ast.Loc | None, root: str) -> None:
        real = os.path.realpath(path)
        if real in stack:
            cycle = " -> ".join(os.path.basename(p) for p in stack[stack.index(real):] + [real])
            raise RuleError([Diagnostic(at, f"include cycle: {cycle}", source_line=_source_line(sources, at))])
        if real in done:
            return
        if len(stack) >= MAX_INCLUDE_DEPTH:
            raise RuleError([Diagnostic(at, f"includes nest deeper than {MAX_INCLUDE_DEPTH} files",
                                        source_line=_source_line(sources, at))])
        try:
            st = os.stat(path)
            if not stat.S_ISREG(st.st_mode):
                raise RuleError([Diagnostic(at, f"cannot read rule file {path!r}: not a regular file",
                                            source_line=_source_line(sources, at))])
            with open(path, encoding="utf-8-sig") as fh:  # a leading byte-order mark is not syntax
                # bounded: parse_text refuses anything longer; the file's size bounds the buffer read() allocates
                text = fh.read(min(max_bytes, st.st_size) + 1)
        except (OSError, UnicodeDecodeError) as err:
            reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
            raise RuleError([Diagnostic(at, f"cannot read rule file {path!r}: {reason}",
                                        source_line=_source_line(sources, at))]) from None
        display = os.path.relpath(path) if not os.path.relpath(path).startswith("..") else path
        sources[display] = text
        parsed = parse_text(text, display, max_bytes=max_bytes)
        done.add(real)
        for item in parsed.items:
            if isinstance(item, ast.Include):
                if os.path.isabs(item.path):
                    raise RuleError([Diagnostic(item.loc, f"include {item.path!r}: an include path must be relative "
                                                          "to the including file", source_line=_source_line(sources, item.loc))])
                target = os.path.join(os.path.dirname(path), item.path)
                if os.path.commonpath([root, os.path.realpath(target)]) != root:
                    raise RuleError([Diagnostic(item.loc, f"include {item.path!r} leaves the include root of the rule file it "
                                                          f"started from ({root}); a rule file may include only files "
                                                          "under that folder (pass other files separately)",
                                                source_line=_source_line(sources, item.loc))])
                load(target, stack + [real], item.loc, root)
        files.append(ast.RuleFile(display, tuple(i for i in parsed.items if not isinstance(i, ast.Include))))

    for path in paths:
        load(str(path), [], None, include_root(str(path)))
    return files, sources


def include_root(path: str) -> str:
    """The folder a rule file's includes must stay in: its own folder, or, when it lies inside a folder
    named `rules` (a rule library, such as the bundled one), that whole library, so that
    `rules/onnx/default.rlxr` may include `../default.rlxr`. Symbolic links are resolved first."""
    import os

    folder = os.path.dirname(os.path.realpath(path))
    probe = folder
    while True:
        if os.path.basename(probe) == "rules":
            return probe
        parent = os.path.dirname(probe)
        if parent == probe:
            return folder
        probe = parent


def _source_line(sources: dict[str, str], loc: ast.Loc | None) -> str | None:
    if loc is None or loc.file not in sources:
        return None
    lines = sources[loc.file].splitlines()
    return lines[loc.line - 1] if 0 < loc.line <= len(lines) else None
