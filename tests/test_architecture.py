"""The package's shape: import graph without cycles, no private names across modules, files of bounded size
(Python and Rust), CLI command modules independent of each other, and a CLI that starts without numpy (or onnx)
when it can."""

from __future__ import annotations

import ast
import json
import pathlib
import subprocess
import sys

import pytest

import rlx_rules

PACKAGE = pathlib.Path(rlx_rules.__file__).parent
MAX_LINES = 600
CLI_SHARED = {"rlx_rules.cli", "rlx_rules.cli.app", "rlx_rules.cli.__main__"}  # not command modules


def module_name(path: pathlib.Path) -> str:
    parts = ("rlx_rules",) + path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def resolve(importer: str, level: int, module: str | None) -> str:
    """The absolute name of a relative import's base in `importer`."""
    base = importer if is_package(importer) else importer.rsplit(".", 1)[0]
    for _ in range(level - 1):
        base = base.rsplit(".", 1)[0]
    return f"{base}.{module}" if module else base


def imports(name: str):
    """(target module, imported name or None, line) for every import of a package module in `name`, at any
    depth (imports inside functions count: a lazy import is still a dependency)."""
    tree = ast.parse(MODULES[name].read_text(), str(MODULES[name]))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("rlx_rules"):
                    yield alias.name, None, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = resolve(name, node.level, node.module) if node.level else (node.module or "")
            if not base.startswith("rlx_rules"):
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if sub in MODULES or sub == "rlx_rules._native":
                    yield sub, None, node.lineno  # a submodule
                else:
                    yield base, alias.name, node.lineno


def graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {name: set() for name in MODULES}
    for name in MODULES:
        for target, _, _ in imports(name):
            if target in MODULES and target != name:
                edges[name].add(target)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_the_walk_sees_the_package():
    assert {"rlx_rules.lang.check", "rlx_rules.interpret.optable", "rlx_rules.cli.apply"} <= set(MODULES)
    edges = graph()
    assert "rlx_rules.interpret.optable" in edges["rlx_rules.onnx.ops"]
    assert "rlx_rules.cli" in edges["rlx_rules.cli.apply"]


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles():
    assert cycles(graph()) == []


def test_the_op_table_imports_no_op_semantics():
    reached, todo = set(), ["rlx_rules.interpret.optable"]
    edges = graph()
    while todo:
        for nxt in edges[todo.pop()] - reached:
            reached.add(nxt)
            todo.append(nxt)
    assert not {m for m in reached if m.startswith(("rlx_rules.onnx", "rlx_rules.interpret.ops_"))}


def test_no_module_imports_a_private_name_of_another():
    bad = [f"{name}:{line}: {target}.{imported}" for name in MODULES for target, imported, line in imports(name)
           if imported is not None and imported.startswith("_") and not imported.startswith("__")]
    assert bad == []


def test_no_file_over_the_line_limit():
    long = {name: n for name, path in MODULES.items() if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert long == {}


RUST_SOURCES = sorted((pathlib.Path(__file__).resolve().parent.parent / "rust").rglob("*.rs"))


@pytest.mark.skipif(not RUST_SOURCES, reason="no Rust sources beside these tests")
def test_no_rust_file_over_the_line_limit():
    long = {str(p): n for p in RUST_SOURCES if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


@pytest.mark.skipif(not RUST_SOURCES, reason="no Rust sources beside these tests")
def test_every_rust_file_says_what_it_is_for():
    assert [str(p) for p in RUST_SOURCES if not p.read_text().startswith("//")] == []


def test_every_module_says_what_it_is_for():
    missing = [name for name, path in MODULES.items() if not ast.get_docstring(ast.parse(path.read_text()))]
    assert missing == []


def test_cli_command_modules_do_not_import_each_other():
    commands = {name for name in MODULES if name.startswith("rlx_rules.cli.") and name not in CLI_SHARED}
    assert {"rlx_rules.cli.apply", "rlx_rules.cli.import_model", "rlx_rules.cli.show"} <= commands
    edges = graph()
    assert {name: sorted(edges[name] & commands) for name in commands if edges[name] & commands} == {}
    assert not edges["rlx_rules.cli"] & (commands | {"rlx_rules.cli.app"})  # the package imports no command


@pytest.mark.parametrize("command, banned", [("apply", ["numpy", "onnx"]), ("check", ["numpy", "onnx"])])
def test_cli_commands_start_without_heavy_imports(tmp_path, command, banned):
    graph_file = tmp_path / "g.json"
    graph_file.write_text(json.dumps(rlx_rules.examples.bert_encoder(layers=1, hidden=64, heads=4)))
    argv = {"apply": ["apply", str(graph_file), "-o", str(tmp_path / "out.json"), "-q"],
            "check": ["check", str(rlx_rules.api.default_rules()), "-q"]}[command]
    code = ("import sys\nfrom rlx_rules.cli.app import main\n"
            f"code = main({argv!r})\n"
            f"loaded = [m for m in {banned!r} if m in sys.modules]\n"
            "print(code, loaded)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "0 []"
