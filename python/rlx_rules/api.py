"""The Python API: compile rule files into a RuleSet, and apply it to graphs (the work runs in Rust)."""

from __future__ import annotations

import json
import os
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Optional, Sequence, Union

from . import _native
from .errors import ApplyError, Diagnostic, ParamError, ProgramError, RuleError
from .graph import Graph, count_argument, load_graph
from .lang import MAX_SOURCE_BYTES, cache as rule_cache
from .lang.params import ParamValue, resolve

if TYPE_CHECKING:  # imported where used: a warm `check` (the compiled-rule cache) needs neither the registry
    from .lang.registry import Registry  # nor, to print nothing, the report's classes
    from .report import Report
    from .tools.explain import NearMiss

PathLike = Union[str, os.PathLike]


def bundled_rules_dir() -> Path:
    """The folder of the standard rule library shipped in the package."""
    return Path(str(resources.files(__package__).joinpath("rules")))


def default_rules() -> Path:
    return bundled_rules_dir() / "default.rlxr"


def bundled_rule_sets() -> dict[str, Path]:
    """The bundled rule sets by name, as `@NAME` names them: `@default`, `@seed`, `@onnx`, ..."""
    root = bundled_rules_dir()
    sets = {p.stem: p for p in sorted(root.glob("*.rlxr"))}
    sets.update({p.parent.name: p for p in sorted(root.glob("*/default.rlxr"))})
    return sets


def resolve_rules_path(path: PathLike) -> PathLike:
    """`@NAME` is a bundled rule set (`@onnx`: rules/onnx/default.rlxr); anything else is a path, as given."""
    text = os.fspath(path)
    if not text.startswith("@"):
        return path
    sets = bundled_rule_sets()
    if text[1:] not in sets:
        known = ", ".join(f"@{name}" for name in sets)
        raise RuleError([Diagnostic(None, f"no bundled rule set {text!r}; the bundled sets are {known}")])
    return sets[text[1:]]


class RuleSet:
    """Compiled rules, ready to apply. `program` is the JSON matcher program (see docs/program.md)."""

    def __init__(self, program: Union[dict, str], warnings: Sequence[Diagnostic] = (),
                 params: Optional[Mapping[str, object]] = None, *, outline: Optional[Mapping[str, list]] = None,
                 compact: Optional[bytes] = None):
        """`program` as a dict, or as its JSON text with its `outline_of` (the compiled-rule cache): the text goes
        to the core as it is, and is parsed in Python only when `.program` is read. `compact` (the cache only) is
        the same program as `_native.Program.to_bytes()` wrote it, whole and of this build: the core loads it
        instead of parsing and validating the text again (rlx_rules.lang.cache says when it may be trusted)."""
        text = program if isinstance(program, str) else None
        if compact is not None:
            self._native = _native.Program.from_bytes(compact)
        else:
            self._native = _native.Program(json.dumps(program) if text is None else text)  # validates it first
        self._compact = compact
        self._text = text
        self._program = program if text is None else None
        self._outline = outline if text is not None and outline is not None else outline_of(self.program)
        self.warnings = list(warnings)
        self._overrides = dict(_mapping("params", params))
        self.param_values()  # validate the overrides and environment now, when the rules load

    @property
    def program(self) -> dict:
        """The JSON matcher program (docs/program.md)."""
        if self._program is None:
            self._program = json.loads(self._text)
        return self._program

    @property
    def rule_names(self) -> list[str]:
        return list(self._native.rule_names)

    @property
    def phases(self) -> list[str]:
        return list(self._outline["phases"])

    @property
    def declared_params(self) -> list[dict]:
        """The parameter declarations of the program (its "params")."""
        return list(self._outline["params"])

    def param_values(self, overrides: Optional[Mapping[str, object]] = None) -> dict[str, ParamValue]:
        """The values in force: overrides, then these rules' own overrides, then env vars, then defaults."""
        merged = {**self._overrides, **_mapping("params", overrides)}
        return resolve(self._outline["params"], merged)

    def with_params(self, **params: object) -> "RuleSet":
        program = self._program if self._text is None else self._text
        return RuleSet(program, self.warnings, {**self._overrides, **params}, outline=self._outline,
                       compact=self._compact)

    def apply(self, graph: Union[Graph, PathLike, dict], params: Optional[Mapping[str, object]] = None, *,
              max_rewrites: Optional[int] = None, time_budget_s: Optional[float] = None,
              max_iterations: Optional[int] = None, fail_after_rewrites: Optional[int] = None,
              explain: bool = False, on_limit: str = "raise") -> tuple[Graph, Report]:
        """Apply the rules; returns the rewritten graph and the report. The input graph is unchanged.

        Limits (None: the core's defaults, docs/security.md): `max_rewrites` per apply, `time_budget_s` of wall
        time, `max_iterations` per phase (a phase's own `max_iterations` cannot raise it). Reaching a rewrite
        or time limit stops the apply with the work done, as egg's Runner does: with `on_limit="stop"` that
        work is returned and `report.stop_reason` says which limit stopped it; with `on_limit="raise"` (the
        default) ApplyError is raised, its `.graph` (a Graph) and `.report` (a Report) holding the work done.
        With `explain=True` the report also holds, for each rule that fired zero times, its best near miss.
        """
        if on_limit not in ("raise", "stop"):
            raise ParamError(f"on_limit must be 'raise' or 'stop', not {on_limit!r}")
        return self._run(graph, params, **_limits(max_rewrites, time_budget_s, max_iterations, fail_after_rewrites),
                         explain="unfired" if explain else None, on_limit=on_limit)

    def rewrite(self, graph: Union[Graph, PathLike, dict], params: Optional[Mapping[str, object]] = None, *,
                max_rewrites: Optional[int] = None, time_budget_s: Optional[float] = None,
                max_iterations: Optional[int] = None, fail_after_rewrites: Optional[int] = None) -> Graph:
        """`apply` for the rewritten graph alone: the same rewrites and limits (a limit raises ApplyError, with
        the work done), without building the report (`rlx-rules apply -q` prints none)."""
        native_graph, _, _ = self._apply_native(
            graph, params, **_limits(max_rewrites, time_budget_s, max_iterations, fail_after_rewrites))
        return Graph(native_graph)

    def explain(self, graph: Union[Graph, PathLike, dict], params: Optional[Mapping[str, object]] = None, *,
                rule: Optional[str] = None, node: Optional[int] = None, all: bool = False) -> list[NearMiss]:
        """Why rules did not fire: near-miss records, best first (the best one per rule unless `all`).

        Each record gives the rule, the candidate root, how much of the pattern matched (`progress` of
        `total` checks), the bindings made, and each failed check with its .rlxr location and the values
        involved. Rules are explained on the graph as their phase sees it, after earlier phases ran.
        """
        node = count_argument("node", node)
        if rule is not None and rule not in self.rule_names:
            raise ParamError(f"unknown rule {rule!r}; the rules are: {', '.join(self.rule_names)}")
        _, report = self._run(graph, params, explain="all" if all else "best", explain_rule=rule, explain_node=node)
        return report.near_misses

    def _apply_taking(self, graph: Graph, *, report: bool = True, explain: bool = False,
                      max_rewrites: Optional[int] = None, time_budget_s: Optional[float] = None,
                      max_iterations: Optional[int] = None,
                      fail_after_rewrites: Optional[int] = None) -> tuple[Graph, Optional[Report]]:
        """`apply` (`rewrite` without `report`) for a caller that never reads `graph` again (the CLI): the core takes
        its nodes instead of copying the ones that survive, and `graph` is left consumed (its methods raise
        GraphError). Not public: the public methods leave a user's graph unchanged."""
        options = dict(_limits(max_rewrites, time_budget_s, max_iterations, fail_after_rewrites), consume=True)
        if report:
            options["explain"] = "unfired" if explain else None
        native_graph, report_json, in_force = self._apply_native(graph, None, **options)
        return Graph(native_graph), _report(report_json, in_force) if report else None

    def _run(self, graph, params, **options) -> tuple[Graph, Report]:
        native_graph, report_json, in_force = self._apply_native(graph, params, **options)
        return Graph(native_graph), _report(report_json, in_force)

    def _apply_native(self, graph, params, **options) -> tuple[_native.Graph, str, dict]:
        """The core's apply: (its graph, its report's JSON, the parameters in force for the report)."""
        graph = load_graph(graph)
        values = self.param_values(params)
        in_force = {k: {"value": v.value, "source": v.source} for k, v in values.items()}
        try:
            native_graph, report_json = self._native.apply(
                graph._native, json.dumps({k: v.value for k, v in values.items()}), **options)
        except ApplyError as limit:
            if getattr(limit, "graph", None) is not None:  # a limit: the work done, as Python types
                limit.graph = Graph(limit.graph)
                limit.report = _report(limit.report, in_force)
            raise
        return native_graph, report_json, in_force

    def __repr__(self) -> str:
        return f"<RuleSet: {len(self.rule_names)} rules in phases {', '.join(self.phases)}>"


def _report(report_json: str, params_in_force: dict) -> Report:
    from .report import Report

    data = json.loads(report_json)
    data["params_in_force"] = params_in_force
    return Report.from_dict(data)


def _limits(max_rewrites: Optional[int], time_budget_s: Optional[float], max_iterations: Optional[int],
            fail_after_rewrites: Optional[int]) -> dict:
    """apply's limit arguments, checked, as the core's keyword arguments."""
    return {"max_rewrites": count_argument("max_rewrites", max_rewrites),
            "time_budget_s": _seconds("time_budget_s", time_budget_s),
            "max_iterations": count_argument("max_iterations", max_iterations),
            "fail_after_rewrites": count_argument("fail_after_rewrites", fail_after_rewrites)}


def outline_of(program: Mapping) -> dict[str, list]:
    """What a RuleSet needs of its program without parsing it: the phase names and the parameter declarations."""
    return {"phases": [p["name"] for p in program["phases"]], "params": list(program["params"])}


def _mapping(name: str, value: Optional[Mapping[str, object]]) -> Mapping[str, object]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ParamError(f"{name} must be a mapping of parameter names to values, not {type(value).__name__}")
    return value


def _seconds(name: str, value: Optional[float]) -> Optional[float]:
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise ParamError(f"{name} must be a number of seconds, not {type(value).__name__}")
    return value


def rule_paths(paths: Union[PathLike, Sequence[PathLike]]) -> list[str]:
    """Rule file arguments as a list of paths: one path (str or os.PathLike) or a sequence of them; `@NAME`
    is a bundled set. Anything else is a ParamError."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    if isinstance(paths, (bytes, Mapping)) or not isinstance(paths, Sequence):
        raise ParamError(f"rule files must be a path or a list of paths, not {type(paths).__name__}")
    for p in paths:
        if not isinstance(p, (str, os.PathLike)):
            raise ParamError(f"a rule file must be a path (str or os.PathLike), not {type(p).__name__}: {p!r}")
    return [os.fspath(resolve_rules_path(p)) for p in paths]


def compile_rules(paths: Union[PathLike, Sequence[PathLike]], *, params: Optional[Mapping[str, object]] = None,
                  registry: Optional[Registry] = None, max_rule_bytes: Optional[int] = None,
                  cache: bool = False) -> RuleSet:
    """Parse, check and compile rule files (and what they include): one path or a list of them, each at most
    `max_rule_bytes` bytes (default 4 MiB). Raises RuleError listing every error.

    With `cache=True` (and the built-in registry) the compiled program and warnings are read from, or written
    to, the compiled-rule cache (rlx_rules.lang.cache; RLX_RULES_NO_CACHE=1 turns it off): the same result,
    without parsing the rules again when no file they read has changed."""
    limit = count_argument("max_rule_bytes", max_rule_bytes)
    max_bytes = MAX_SOURCE_BYTES if limit is None else limit
    files = rule_paths(paths)
    cached = cache and registry is None and rule_cache.enabled()
    if cached:
        hit = rule_cache.load(files, max_bytes)
        if hit is not None:
            try:
                return RuleSet(hit.text, hit.warnings, params, outline=hit.outline, compact=hit.compact)
            except ProgramError:  # an entry the core refuses is corrupt: compile, and write it again
                pass
    from .lang.analyze import analyze
    from .lang.check import check
    from .lang.compile import compile_program
    from .lang.parse import parse_files
    from .lang.registry import builtin_registry

    registry = registry or builtin_registry()
    parsed, sources = parse_files(files, max_bytes=max_bytes)
    checked = check(parsed, sources, registry)
    warnings = checked.warnings + analyze(checked, registry, sources)
    program = compile_program(checked, registry, sources)
    rules = RuleSet(program, warnings, params)
    if cached:
        rule_cache.store(files, sources, json.dumps(program), outline_of(program), warnings, rules._native.to_bytes())
    return rules


def compile_text(text: str, filename: str = "<rules>", *, params: Optional[Mapping[str, object]] = None,
                 registry: Optional[Registry] = None) -> RuleSet:
    """Compile rules given as text (includes are not allowed here)."""
    from .lang import ast
    from .lang.analyze import analyze
    from .lang.check import check
    from .lang.compile import compile_program
    from .lang.parse import parse_text
    from .lang.registry import builtin_registry

    if not isinstance(text, str):
        raise ParamError(f"rule text must be a str, not {type(text).__name__}")
    registry = registry or builtin_registry()
    parsed = parse_text(text, filename)
    includes = [i for i in parsed.items if isinstance(i, ast.Include)]
    if includes:
        raise RuleError([Diagnostic(includes[0].loc, "include needs a rule file on disk; use compile_rules(paths)",
                                    source_line=text.splitlines()[includes[0].loc.line - 1])])
    sources = {filename: text}
    checked = check([parsed], sources, registry)
    warnings = checked.warnings + analyze(checked, registry, sources)
    return RuleSet(compile_program(checked, registry, sources), warnings, params)


def load_rules(*paths: PathLike, params: Optional[Mapping[str, object]] = None,
               max_rule_bytes: Optional[int] = None, cache: bool = False) -> RuleSet:
    """Compile the given rule files, or the bundled standard library when none are given (`cache`: see
    compile_rules)."""
    return compile_rules(list(paths) or [default_rules()], params=params, max_rule_bytes=max_rule_bytes,
                         cache=cache)
