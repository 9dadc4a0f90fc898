"""The compiled-rule cache (rlx_rules.lang.cache): hits, misses on any change, and never an error of its own; and
the fast start it serves (a warm `apply` or `check` never imports the parser)."""

from __future__ import annotations

import json
import multiprocessing
import shutil
import subprocess
import sys

import pytest

import rlx_rules
from rlx_rules.cli.app import COMMANDS, build_parser, main
from rlx_rules.lang import cache as rule_cache
from rlx_rules.lang import parse

RULE = "rule {name} {{ match {{ n = Gelu(x) }} rewrite n => Relu(x) }}\n"
PARAM = 'param LIMIT: int = env("H9_TEST_LIMIT", {default})\n'
# Two rules that overlap: the analysis warns about them.
OVERLAP = ("rule a { match { n = Attention(q, k, v) } where q != k and v == v rewrite n => Relu(q) }\n"
           "rule b { match { n = Attention(q, k, v) } where q != k and v == v rewrite n => Relu(q) }\n")


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("RLX_RULES_CACHE_DIR", str(folder))
    monkeypatch.delenv("RLX_RULES_NO_CACHE", raising=False)
    monkeypatch.chdir(tmp_path)
    return folder


def entries(folder):
    return sorted((folder / "programs").glob("*.json")) if (folder / "programs").exists() else []


def no_parsing(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the rules were parsed again")
    monkeypatch.setattr(parse, "parse_files", refuse)


def library(tmp_path, default=4):
    (tmp_path / "lib").mkdir(exist_ok=True)
    (tmp_path / "lib" / "sub.rlxr").write_text(PARAM.format(default=default) + RULE.format(name="sub"))
    (tmp_path / "lib" / "main.rlxr").write_text('include "sub.rlxr"\n' + RULE.format(name="top"))
    return str(tmp_path / "lib" / "main.rlxr")


def test_a_second_compile_is_served_from_the_cache(tmp_path, cache_dir, monkeypatch):
    path = library(tmp_path)
    first = rlx_rules.compile_rules(path, cache=True)
    assert len(entries(cache_dir)) == 1
    no_parsing(monkeypatch)
    second = rlx_rules.compile_rules(path, cache=True)
    assert second.program == json.loads(json.dumps(first.program))
    assert second.rule_names == first.rule_names and sorted(first.rule_names) == ["sub", "top"]


def test_the_bundled_library_round_trips_with_its_warnings(cache_dir, monkeypatch):
    first = rlx_rules.compile_rules("@onnx", cache=True)
    no_parsing(monkeypatch)
    second = rlx_rules.compile_rules("@onnx", cache=True)
    assert [w.format() for w in second.warnings] == [w.format() for w in first.warnings]
    assert second.phases == first.phases


def test_warnings_come_back_from_the_cache_with_their_locations(tmp_path, monkeypatch):
    (tmp_path / "w.rlxr").write_text(OVERLAP)
    first = rlx_rules.compile_rules("w.rlxr", cache=True)
    assert first.warnings
    no_parsing(monkeypatch)
    second = rlx_rules.compile_rules("w.rlxr", cache=True)
    assert [w.format() for w in second.warnings] == [w.format() for w in first.warnings]
    assert second.warnings == first.warnings


def test_a_changed_included_file_is_a_miss(tmp_path, cache_dir):
    path = library(tmp_path, default=4)
    assert rlx_rules.compile_rules(path, cache=True).param_values()["LIMIT"].value == 4
    library(tmp_path, default=5)  # only the included file changes
    assert rlx_rules.compile_rules(path, cache=True).param_values()["LIMIT"].value == 5
    assert len(entries(cache_dir)) == 1  # the same key, rewritten


def test_a_changed_compiler_or_registry_is_a_miss(tmp_path, cache_dir, monkeypatch):
    path = library(tmp_path)
    rlx_rules.compile_rules(path, cache=True)
    monkeypatch.setattr(rule_cache, "compiler_fingerprint", lambda: "another compiler")
    assert rule_cache.load([path], 1 << 20) is None


def test_the_fingerprint_covers_the_op_registry_and_the_front_end(tmp_path):
    package = tmp_path / "pkg"
    shutil.copytree(rule_cache.PACKAGE / "lang", package / "lang")
    shutil.copytree(rule_cache.PACKAGE / "data", package / "data")
    for name in ("errors.py", "api.py"):
        shutil.copy(rule_cache.PACKAGE / name, package / name)
    base = rule_cache.fingerprint(package)
    assert rule_cache.fingerprint(package) == base == rule_cache.compiler_fingerprint()
    for name in ("data/ops.json", "data/builtins.json", "lang/check.py", "lang/grammar.lark", "api.py"):
        original = (package / name).read_bytes()
        (package / name).write_bytes(original + b"\n")
        assert rule_cache.fingerprint(package) != base, name
        (package / name).write_bytes(original)


def test_parameters_are_resolved_when_applied_not_cached(tmp_path, monkeypatch):
    path = library(tmp_path, default=4)
    assert rlx_rules.compile_rules(path, cache=True, params={"LIMIT": 7}).param_values()["LIMIT"].value == 7
    monkeypatch.setenv("H9_TEST_LIMIT", "9")
    no_parsing(monkeypatch)
    assert rlx_rules.compile_rules(path, cache=True).param_values()["LIMIT"].value == 9
    with pytest.raises(rlx_rules.ParamError):
        rlx_rules.compile_rules(path, cache=True, params={"LIMIT": "many"})


def test_a_failure_is_never_cached(tmp_path, cache_dir):
    (tmp_path / "bad.rlxr").write_text("rule broken {\n")
    for _ in range(2):
        with pytest.raises(rlx_rules.RuleError):
            rlx_rules.compile_rules("bad.rlxr", cache=True)
    assert entries(cache_dir) == []


def test_the_size_limit_still_applies_on_a_hit(tmp_path):
    path = library(tmp_path)
    rlx_rules.compile_rules(path, cache=True)
    with pytest.raises(rlx_rules.RuleError, match="larger than 10 bytes"):
        rlx_rules.compile_rules(path, cache=True, max_rule_bytes=10)


def test_an_unwritable_cache_folder_falls_back_to_compiling(tmp_path, monkeypatch):
    (tmp_path / "a_file").write_text("not a folder")
    monkeypatch.setenv("RLX_RULES_CACHE_DIR", str(tmp_path / "a_file" / "cache"))
    path = library(tmp_path)
    for _ in range(2):
        assert sorted(rlx_rules.compile_rules(path, cache=True).rule_names) == ["sub", "top"]


@pytest.mark.parametrize("damage", ["garbage", "truncated", "valid digest, wrong shape", "program the core refuses"])
def test_a_corrupt_entry_is_ignored_and_rewritten(tmp_path, cache_dir, damage):
    path = library(tmp_path)
    expected = rlx_rules.compile_rules(path, cache=True).program
    [entry] = entries(cache_dir)
    raw = entry.read_bytes()
    body = {"garbage": None, "truncated": None, "valid digest, wrong shape": b'{"files": []}',
            "program the core refuses": json.dumps({"files": [], "outline": {"phases": [], "params": []},
                                                    "warnings": [], "compact": 0}).encode() + b"\n{}"}[damage]
    if damage == "garbage":
        entry.write_bytes(b"\x00\xff not an entry")
    elif damage == "truncated":
        entry.write_bytes(raw[: len(raw) // 2])
    else:
        import hashlib
        entry.write_bytes(hashlib.sha256(body).hexdigest().encode() + b"\n" + body)
    if damage == "program the core refuses":
        assert rule_cache.load([path], 1 << 20).text == "{}"  # well-formed: only the core can tell
    assert rlx_rules.compile_rules(path, cache=True).program == json.loads(json.dumps(expected))
    hit = rule_cache.load([path], 1 << 20)  # rewritten whole
    assert hit is not None and json.loads(hit.text) == json.loads(json.dumps(expected))


def test_no_cache_writes_nothing(tmp_path, cache_dir, monkeypatch):
    path = library(tmp_path)
    rlx_rules.compile_rules(path)  # the API's default: no cache
    assert main(["check", path, "--no-cache", "-q"]) == 0
    monkeypatch.setenv("RLX_RULES_NO_CACHE", "1")
    rlx_rules.compile_rules(path, cache=True)
    assert main(["check", path, "-q"]) == 0
    assert entries(cache_dir) == []


def test_check_prints_the_same_on_a_warm_cache(tmp_path, cache_dir, capsys):
    (tmp_path / "w.rlxr").write_text(OVERLAP)
    outputs = []
    for _ in range(2):
        assert main(["check", "w.rlxr"]) == 0
        outputs.append(capsys.readouterr())
    assert len(entries(cache_dir)) == 1
    assert outputs[0] == outputs[1] and "overlap" in outputs[0].err
    assert main(["check", "w.rlxr", "--strict"]) == 3  # the cached warnings still count


def compile_in_child(path: str) -> list:
    return rlx_rules.compile_rules(path, cache=True).program["phases"]


def test_concurrent_writers_leave_one_valid_entry(tmp_path, cache_dir):
    path = library(tmp_path)
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        results = pool.map(compile_in_child, [path] * 8)
    assert all(r == results[0] for r in results)
    assert len(entries(cache_dir)) == 1
    assert [p.name for p in (cache_dir / "programs").iterdir() if p.suffix != ".json"] == []  # no temp files left
    assert rule_cache.load([path], 1 << 20) is not None


@pytest.mark.parametrize("command", ["apply", "check"])
def test_a_warm_start_imports_no_parser(tmp_path, command):
    graph = tmp_path / "g.json"
    graph.write_text(json.dumps(rlx_rules.examples.bert_encoder(layers=1, hidden=64, heads=4)))
    argv = {"apply": ["apply", str(graph), "-o", str(tmp_path / "out.json"), "-q", "-r", "@onnx"],
            "check": ["check", "@onnx", "-q"]}[command]
    code = ("import sys\nfrom rlx_rules.cli.app import main\n"
            f"code = main({argv!r})\n"
            "print(code, [m for m in ('lark', 'numpy', 'onnx', 'rlx_rules.lang.check') if m in sys.modules])\n")
    run = [sys.executable, "-c", code]
    cold = subprocess.run(run, capture_output=True, text=True, check=True).stdout.split(None, 1)
    warm = subprocess.run(run, capture_output=True, text=True, check=True).stdout.split(None, 1)
    assert cold == ["0", "['lark', 'rlx_rules.lang.check']\n"]
    assert warm == ["0", "[]\n"]


@pytest.mark.parametrize("name", COMMANDS)
def test_each_command_parser_is_built_alone(name, capsys):
    with pytest.raises(SystemExit):
        build_parser(name).parse_args([name, "--help"])
    assert capsys.readouterr().out.startswith(f"usage: rlx-rules {name} ")
