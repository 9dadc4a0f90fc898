"""Hostile input (issue 6 §3): random and mutated rules, graphs and programs give a typed RlxRulesError or succeed.

Bounded for the normal suite; RLX_RULES_FUZZ_EXAMPLES=N runs N examples per property (default 60).
Regressions found by fuzzing are kept as plain tests at the end.
"""

from __future__ import annotations

import copy
import json
import os
from functools import lru_cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rlx_rules
from rlx_rules import RlxRulesError, _native

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = int(os.environ.get("RLX_RULES_FUZZ_EXAMPLES", "60"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize="RLX_RULES_FUZZ_EXAMPLES" not in os.environ,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@lru_cache(maxsize=None)
def rule_sources() -> tuple[str, ...]:
    return tuple(p.read_text(encoding="utf-8") for p in sorted(rlx_rules.bundled_rules_dir().rglob("*.rlxr")))


@lru_cache(maxsize=None)
def program() -> dict:
    return rlx_rules.load_rules().program


@lru_cache(maxsize=None)
def graph_text() -> str:
    return (ROOT / "examples" / "bert_encoder.graph.json").read_text(encoding="utf-8")


def small_graph() -> dict:
    return rlx_rules.examples.bert_encoder(layers=1, hidden=16, heads=2)


def typed_or_ok(fn, *args):
    """Run fn; a typed RlxRulesError is fine, anything else (TypeError, RecursionError, ...) fails the test."""
    try:
        return fn(*args)
    except RlxRulesError as e:
        assert str(e), "errors carry a message"
        return None


# ---- strategies ----

TOKENS = ["{", "}", "(", ")", "[", "]", ",", ":", "=", "=>", "==", "|", "..", "...", "-", "+", "*", "/", "%", ".",
          "rule", "match", "where", "rewrite", "let", "keep", "group", "sharing", "each", "phase", "priority",
          "include", "param", "gate", "any", "all", "when", "not", "and", "or", "in", "is", "null", "true", "false",
          "expect", "fires", "on", "max_iterations", "MatMul", "Add", "Relu", "x", "uses", "shape", "rank",
          "0", "-1", "1e999", "99999999999999999999999", '"s"', '"\\"', "\u00e9", "\U0001F600", "\u202e", "\x00",
          "\ufeff", "#", "\n", " "]


@st.composite
def mutated(draw, sources, alphabet=TOKENS):
    """A valid source with a few edits: delete a span, insert tokens, replace a char, or truncate."""
    text = draw(st.sampled_from(sources))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["delete", "insert", "replace", "truncate", "duplicate"]))
        i = draw(st.integers(0, len(text)))
        if kind == "delete":
            text = text[:i] + text[i + draw(st.integers(1, 40)):]
        elif kind == "insert":
            text = text[:i] + " ".join(draw(st.lists(st.sampled_from(alphabet), min_size=1, max_size=4))) + text[i:]
        elif kind == "replace" and text:
            i = min(i, len(text) - 1)
            text = text[:i] + draw(st.characters(blacklist_categories=["Cs"])) + text[i + 1:]
        elif kind == "truncate":
            text = text[:i]
        else:
            j = draw(st.integers(i, min(len(text), i + 200)))
            text = text[:j] + text[i:j] + text[j:]
    return text


WEIRD = [None, True, False, -1, 0, 1, 2, 255, 256, 2**31, 2**32, 2**63 - 1, 2**63, 2**64, -(2**63) - 1, 10**30,
         0.5, -0.0, 1e308, "", "x", "\u00e9\U0001F600", [], {}, [None], [[]], {"a": 1}, [0] * 40]


def _paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, prefix + (i,))


@st.composite
def mutated_tree(draw, make):
    """A JSON document with a few structural edits: a field removed, replaced by a weird value, a number
    shifted (a wrong slot or id), or a list element duplicated."""
    doc = copy.deepcopy(make())
    paths = list(_paths(doc))[1:]
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(paths))
        parent = doc
        try:
            for k in path[:-1]:
                parent = parent[k]
            key = path[-1]
            value = parent[key]
        except (KeyError, IndexError, TypeError):
            continue
        kind = draw(st.sampled_from(["remove", "weird", "shift", "dup"]))
        if kind == "remove":
            del parent[key]
        elif kind == "shift" and isinstance(value, int) and not isinstance(value, bool):
            parent[key] = value + draw(st.sampled_from([1, -1, 7, 1000, 2**32, -(2**40)]))
        elif kind == "dup" and isinstance(value, list) and value:
            value.append(copy.deepcopy(draw(st.sampled_from(value))))
        else:
            parent[key] = copy.deepcopy(draw(st.sampled_from(WEIRD)))
    return doc


def nested(depth_strategy=st.integers(1, 5000)):
    return st.builds(lambda d, o, c, inner: o * d + inner + c * d, depth_strategy,
                     st.sampled_from(["[", "{\"a\":", "("]), st.sampled_from(["]", "}", ")"]),
                     st.sampled_from(["1", "", "null", "\"x\""]))


# ---- the rule parser and checker ----

@FUZZ
@given(st.text(max_size=400))
def test_random_text_as_rules(text):
    typed_or_ok(rlx_rules.compile_text, text)


@FUZZ
@given(st.binary(max_size=400))
def test_random_bytes_as_a_rule_file(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("fuzz") / "r.rlxr"
    path.write_bytes(data)
    typed_or_ok(rlx_rules.compile_rules, [path])


@FUZZ
@given(st.data())
def test_mutated_bundled_rules(data):
    typed_or_ok(rlx_rules.compile_text, data.draw(mutated(rule_sources())))


@FUZZ
@given(st.lists(st.sampled_from(TOKENS), max_size=60))
def test_token_soup(tokens):
    typed_or_ok(rlx_rules.compile_text, " ".join(tokens))


EXPR_TEMPLATE = "rule r {{ match {{ a = Relu(x) }} where {} rewrite a => Gelu(x) }}"


@FUZZ
@given(st.integers(1, 3000), st.sampled_from(["not ", "- ", "abs(", "(", "[", "max(1, "]))
def test_deep_expressions(depth, opener):
    closer = {"not ": "", "- ": "", "abs(": ")", "(": ")", "[": "]", "max(1, ": ")"}[opener]
    inner = "true" if opener == "not " else "1"
    where = opener * depth + inner + closer * depth
    if opener != "not ":
        where = f"uses(a) == {where}" if opener != "[" else f"len({where}) == 1"
    typed_or_ok(rlx_rules.compile_text, EXPR_TEMPLATE.format(where))


@FUZZ
@given(st.integers(1, 5000), st.sampled_from([" + 1", " * 2", " and true", " or false", ".x"]))
def test_long_operator_chains(length, link):
    head = "uses(a) == 1" if link.startswith(" ") and link[1] in "+*" else "true"
    if link == ".x":
        head = "a"
    typed_or_ok(rlx_rules.compile_text, EXPR_TEMPLATE.format(head + link * length + (" == 1" if link == ".x" else "")))


@FUZZ
@given(st.one_of(st.integers(), st.floats(allow_nan=False), st.text(alphabet="0123456789", min_size=1, max_size=6000)))
def test_huge_numbers_in_every_numeric_place(number):
    n = str(number)
    texts = [EXPR_TEMPLATE.format(f"uses(a) < {n}"),
             f"param P: int = {n}\n" + EXPR_TEMPLATE.format("uses(a) < P"),
             f"param P: float = {n}\n" + EXPR_TEMPLATE.format("true"),
             f"phase p max_iterations {n.lstrip('-')}\n" + EXPR_TEMPLATE.format("true").replace("rule r", "rule r phase p"),
             EXPR_TEMPLATE.format("true").replace("rule r", f"rule r priority {n}"),
             f"rule r {{ match {{ group g[1..{n.lstrip('-')}] = Relu(x) sharing x }} rewrite {{ each g => Gelu(x) }} }}",
             EXPR_TEMPLATE.format("true").replace("Gelu(x)", f"Gelu(x) shape [{n}]")]
    for text in texts:
        typed_or_ok(rlx_rules.compile_text, text)


@FUZZ
@given(st.text(alphabet=st.characters(), max_size=60))
def test_unicode_in_strings_names_and_comments(s):
    escaped = s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    for text in [EXPR_TEMPLATE.format(f'op(a) == "{escaped}"'), f"# {s}\n" + EXPR_TEMPLATE.format("true"),
                 EXPR_TEMPLATE.format("true").replace("rule r", f"rule {s}"), s + EXPR_TEMPLATE.format("true")]:
        typed_or_ok(rlx_rules.compile_text, text)


# ---- the graph loader ----

@FUZZ
@given(st.one_of(st.binary(max_size=300), st.text(max_size=300)))
def test_random_bytes_and_text_as_a_graph(data):
    typed_or_ok(rlx_rules.Graph.from_json, data)


@FUZZ
@given(st.data())
def test_mutated_example_graph_text(data):
    typed_or_ok(rlx_rules.Graph.from_json, data.draw(mutated((graph_text(),), alphabet=[
        "{", "}", "[", "]", ",", ":", '"', "null", "-1", "1e999", "18446744073709551616", "1.5", "\u00e9", "\\u0000",
        '"id"', '"inputs"', '"op"', '"shape"', '"attrs"', '"outputs"'])))


@FUZZ
@given(st.data())
def test_structurally_mutated_graphs_load_and_apply(data):
    doc = data.draw(mutated_tree(small_graph))
    graph = typed_or_ok(rlx_rules.Graph.from_dict, doc)
    if graph is not None:  # a graph that loads must also survive the rules
        typed_or_ok(lambda: rlx_rules.load_rules().apply(graph, time_budget_s=30))


@FUZZ
@given(nested())
def test_deeply_nested_json_as_a_graph(text):
    typed_or_ok(rlx_rules.Graph.from_json, text)
    typed_or_ok(rlx_rules.Graph.from_json,
                '{"format": "rlx-graph", "version": 1, "nodes": [{"id": 0, "op": "Input", "attrs": {"a": '
                + text + '}}], "outputs": [0]}')


@FUZZ
@given(st.lists(st.tuples(st.integers(0, 12), st.lists(st.integers(0, 14), max_size=3)), min_size=1, max_size=12),
       st.lists(st.integers(0, 14), max_size=3))
def test_random_topologies_dangling_ids_and_cycles(nodes, outputs):
    doc = {"format": "rlx-graph", "version": 1, "outputs": outputs,
           "nodes": [{"id": i, "op": "Add" if len(ins) == 2 else "Relu" if len(ins) == 1 else "Input",
                      "inputs": ins, "shape": [2], "dtype": "f32"} for i, ins in nodes]}
    graph = typed_or_ok(rlx_rules.Graph.from_dict, doc)
    if graph is not None:
        typed_or_ok(lambda: rlx_rules.load_rules().apply(graph, time_budget_s=30))


@FUZZ
@given(st.binary(max_size=300), st.integers(0, 400))
def test_random_bytes_as_a_graph_file_within_a_byte_limit(tmp_path_factory, data, max_bytes):
    path = tmp_path_factory.mktemp("graph") / "g.json"
    path.write_bytes(data)
    graph = typed_or_ok(lambda: rlx_rules.Graph.load(path, max_bytes=max_bytes))
    assert graph is None or len(data) <= max_bytes


@lru_cache(maxsize=None)
def rlx_json_example() -> dict:
    from rlx_rules.onnx.rlx_json import to_rlx_json

    return to_rlx_json(small_graph())


@FUZZ
@given(st.data())
def test_structurally_mutated_rlx_json_imports_or_is_a_graph_error(data):
    from rlx_rules.onnx.rlx_json import import_rlx_json

    typed_or_ok(import_rlx_json, data.draw(mutated_tree(rlx_json_example)))


# ---- the command line ----

CLI_VALUES = st.one_of(st.integers(-2**70, 2**70).map(str), st.floats().map(repr), st.sampled_from(
    ["", "-", "0", "-1", "1e300", "nan", "inf", "-0", "0x10", "@default", "@nope", "NAME=1", "=", "é", "--",
     "-o"]), st.text(max_size=12).filter(lambda t: not t.startswith("/") and "\x00" not in t))
# (no absolute paths: nothing is written outside the temporary folder; no NUL, which no real argv can hold)
CLI_COMMANDS = {
    "apply": ["-r", "-o", "--set", "--max-rewrites", "--time-budget", "--max-iterations", "--max-graph-bytes",
              "--max-nodes", "--max-rule-bytes", "--json", "--pretty", "--explain", "-q", "--in-place"],
    "explain": ["-r", "--rule", "--node", "--all", "--set", "--max-graph-bytes", "--max-nodes", "--max-rule-bytes",
                "--json"],
    "check": ["--strict", "-q", "--max-rule-bytes"],
    "show": ["-r", "--node", "--radius", "--set", "--max-graph-bytes", "--max-nodes", "--max-rule-bytes"],
    "import": ["-o", "--weights", "--inline-max", "--format", "-q"],
    "export": ["-o", "--format", "--opset", "--allow-non-rlx", "--pretty", "-q", "--max-graph-bytes"],
}
FLAGS = {"--json", "--pretty", "--explain", "-q", "--in-place", "--all", "--strict", "--allow-non-rlx"}
EXIT_CODES = {int(c) for c in __import__("rlx_rules.cli", fromlist=["ExitCode"]).ExitCode} - {70}


@FUZZ
@given(st.data())
def test_random_command_lines_exit_with_a_documented_code(tmp_path_factory, data):
    """Any argv over a small graph: a documented exit code (never 70, internal error), never an exception."""
    from rlx_rules.cli.app import main

    folder = tmp_path_factory.mktemp("cli")
    graph = folder / "g.json"
    graph.write_text(json.dumps(rlx_rules.examples.bert_encoder(layers=1, hidden=16, heads=2)))
    command = data.draw(st.sampled_from(sorted(CLI_COMMANDS)))
    argv = [command, str(graph) if command != "check" else str(rlx_rules.default_rules())]
    for option in data.draw(st.lists(st.sampled_from(CLI_COMMANDS[command]), max_size=5)):
        argv.append(option)
        if option not in FLAGS:
            value = data.draw(CLI_VALUES)
            if option in ("-o", "--weights"):  # outputs: in the temporary folder, the folder itself, stdout, or odd names
                value = data.draw(st.sampled_from([str(folder / "out.json"), str(folder), "-", "", "o.json", value]))
            argv.append(value)
    cwd = os.getcwd()
    os.chdir(folder)  # relative outputs land in the temporary folder
    try:
        code = main(argv)
    except SystemExit as e:  # argparse: a usage error (2) or --help (0)
        code = e.code
    finally:
        os.chdir(cwd)
    assert code in EXIT_CODES, (argv, code)


# ---- the program deserializer ----

@FUZZ
@given(st.one_of(st.binary(max_size=300).map(lambda b: b.decode("latin-1")), st.text(max_size=300)))
def test_random_text_as_a_program(text):
    typed_or_ok(_native.Program, text)


@FUZZ
@given(st.data())
def test_truncated_and_mutated_program_text(data):
    text = json.dumps(program())
    typed_or_ok(_native.Program, data.draw(mutated((text,), alphabet=[
        "{", "}", "[", "]", ",", ":", '"', "null", "-1", "1e999", "18446744073709551616", '"slot"', '"i"', '"expr"'])))


@FUZZ
@given(st.data())
def test_structurally_mutated_programs_load_and_run(data):
    doc = data.draw(mutated_tree(program))
    prog = typed_or_ok(_native.Program, json.dumps(doc))
    if prog is not None:  # a program that loads must run without a crash
        params = json.dumps({p["name"]: p["default"] for p in program()["params"]})
        graph = rlx_rules.Graph.from_dict(small_graph())
        typed_or_ok(lambda: prog.apply(graph._native, params, max_rewrites=10_000, time_budget_s=30))


@FUZZ
@given(nested(st.integers(1, 3000)))
def test_deeply_nested_program_expressions(text):
    doc = copy.deepcopy(program())
    doc["rules"][0]["code"].append({"i": "guard", "expr": {"lit": None}, "loc": "x:1:1", "text": "t"})
    typed_or_ok(_native.Program, json.dumps(doc).replace('{"lit": null}', text.replace("1", '{"lit": 1}')))


# ---- regressions found by fuzzing (each raised an untyped exception or hung before its fix) ----

@pytest.mark.parametrize("text", [
    EXPR_TEMPLATE.format("uses(a) == " + " + ".join(["1"] * 3000)),  # RecursionError in the AST transformer
    EXPR_TEMPLATE.format("not " * 3000 + "true"),
    EXPR_TEMPLATE.format("uses(a) == " + "-" * 3000 + "1"),
    EXPR_TEMPLATE.format("a" + ".x" * 3000 + " == 1"),
])
def test_regression_operator_chains_are_a_rule_error_not_a_recursion_error(text):
    with pytest.raises(rlx_rules.RuleError, match="nests deeper than"):
        rlx_rules.compile_text(text)


def test_regression_nested_calls_and_comparisons_are_checked_in_linear_time():
    # each level was typed twice: 2^depth checks (abs^60 ran for hours); now depth 60 is instant
    rlx_rules.compile_text(EXPR_TEMPLATE.format("uses(a) == " + "abs(" * 60 + "1" + ")" * 60))
    # a bare (enum) name on the left of == typed the right side twice per level
    with pytest.raises(rlx_rules.RuleError, match="unknown name 'Custom'"):
        rlx_rules.compile_text(EXPR_TEMPLATE.format("Custom == (" * 40 + "true" + ")" * 40))
    with pytest.raises(rlx_rules.RuleError, match="nests deeper than 64"):
        rlx_rules.compile_text(EXPR_TEMPLATE.format("uses(a) == " + "max(1, " * 70 + "1" + ")" * 70))


@pytest.mark.parametrize("where, message", [
    ("uses(a) == " + "9" * 5000, "number is too long"),                     # VisitError (int() digit limit)
    ("uses(a) < 1e999", "out of range"),                                    # inf went to Rust as JSON Infinity
    ('op(a) == "\ud800"', "lone surrogate"),                                 # UnicodeEncodeError / bad JSON escape
])
def test_regression_literals_are_rule_errors_at_their_location(where, message):
    with pytest.raises(rlx_rules.RuleError, match=message) as info:
        rlx_rules.compile_text(EXPR_TEMPLATE.format(where))
    assert info.value.errors[0].loc.line == 1 and info.value.errors[0].loc.col > 30


@pytest.mark.parametrize("text, message", [
    (EXPR_TEMPLATE.format("true").replace("rule r", "rule r priority 99999999999999999999999"), "priority"),
    ("phase p max_iterations 99999999999999999999\n" + EXPR_TEMPLATE.format("true").replace("rule r", "rule r phase p"),
     "max_iterations"),
    ("param P: int = 99999999999999999999999\n" + EXPR_TEMPLATE.format("uses(a) < P"), "is not a int"),
    ("param P: float = 1e999\n" + EXPR_TEMPLATE.format("true"), "is not a float"),
    ('param P: int = -"x"\n' + EXPR_TEMPLATE.format("true"), "must be a literal"),
])
def test_regression_out_of_range_declarations_are_rule_errors_not_program_errors(text, message):
    with pytest.raises(rlx_rules.RuleError, match=message):
        rlx_rules.compile_text(text)


def test_regression_a_huge_rule_byte_limit_reads_only_the_file(capsys):
    # fuzzing found it: --max-rule-bytes 25276502546 made read() allocate 25 GB for a small file (MemoryError)
    from rlx_rules.cli.app import main

    assert main(["check", str(rlx_rules.default_rules()), "--max-rule-bytes", str(2**62), "-q"]) == 0
    assert rlx_rules.compile_rules(rlx_rules.default_rules(), max_rule_bytes=2**62).rule_names


@pytest.mark.parametrize("call, arg, error", [
    (rlx_rules.Graph.from_json, b"\xff\xfe{}", rlx_rules.GraphError),       # UnicodeDecodeError
    (rlx_rules.Graph.from_json, '{"name": "\ud800"}', rlx_rules.GraphError),  # UnicodeEncodeError in the binding
    (_native.Program, '{"format": "\ud800"}', rlx_rules.ProgramError),
])
def test_regression_undecodable_text_is_a_typed_error(call, arg, error):
    with pytest.raises(error, match="not UTF-8|surrogate"):
        call(arg)
