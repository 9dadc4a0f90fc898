"""Rules are data (docs/security.md): no code, no files outside the include tree, no env vars but declared params."""

from __future__ import annotations

import builtins
import json
import os
import subprocess

import pytest

import rlx_rules
from rlx_rules.cli import ExitCode
from rlx_rules.cli.app import main

RULE = "rule r {{ match {{ a = Relu(x) }} where {} rewrite a => Gelu(x) }}"


def relu_graph(n: int = 4) -> dict:
    nodes = [{"id": 0, "op": "Input", "shape": [2, 3], "dtype": "f32"}]
    nodes += [{"id": i, "op": "Relu", "inputs": [i - 1], "shape": [2, 3], "dtype": "f32"} for i in range(1, n)]
    return {"format": "rlx-graph", "version": 1, "nodes": nodes, "outputs": [n - 1]}


# ---- files ----

@pytest.mark.parametrize("target", ["/etc/passwd", "/etc/hostname", os.devnull])
def test_absolute_include_is_refused_before_reading(tmp_path, target):
    (tmp_path / "evil.rlxr").write_text(f'include "{target}"\n')
    with pytest.raises(rlx_rules.RuleError, match="an include path must be relative") as info:
        rlx_rules.compile_rules([tmp_path / "evil.rlxr"])
    assert info.value.errors[0].loc.line == 1
    if os.path.exists("/etc/passwd"):
        assert "root:" not in str(info.value)  # nothing of the target's content leaks into the message


def test_parent_and_symlinked_includes_cannot_leave_the_top_level_folder(tmp_path):
    (tmp_path / "secret.rlxr").write_text("rule leaked { match { a = Relu(x) } rewrite a => Gelu(x) }\n")
    rules = tmp_path / "rules"
    (rules / "sub").mkdir(parents=True)
    (rules / "up.rlxr").write_text('include "../secret.rlxr"\n')
    (rules / "deep.rlxr").write_text('include "sub/../../secret.rlxr"\n')
    (rules / "sub" / "link.rlxr").symlink_to(tmp_path / "secret.rlxr")
    (rules / "via_link.rlxr").write_text('include "sub/link.rlxr"\n')
    for name in ["up.rlxr", "deep.rlxr", "via_link.rlxr"]:
        with pytest.raises(rlx_rules.RuleError, match="leaves the include root of the rule file it started from"):
            rlx_rules.compile_rules([rules / name])
    # inside the tree, going up from a subfolder is fine; and files elsewhere can be named on the command line
    (rules / "sub" / "b.rlxr").write_text('include "../c.rlxr"\n')
    (rules / "c.rlxr").write_text("rule c { match { a = Silu(x) } rewrite a => Gelu(x) }\n")
    (rules / "top.rlxr").write_text('include "sub/b.rlxr"\n')
    assert rlx_rules.compile_rules([rules / "top.rlxr"]).rule_names == ["c"]
    assert sorted(rlx_rules.compile_rules([rules / "c.rlxr", tmp_path / "secret.rlxr"]).rule_names) == ["c", "leaked"]


def test_cli_reports_an_escaping_include_as_a_rule_error(tmp_path, capsys):
    (tmp_path / "evil.rlxr").write_text('include "/etc/passwd"\n')
    assert main(["check", str(tmp_path / "evil.rlxr")]) == ExitCode.RULE_ERROR
    assert "must be relative" in capsys.readouterr().err


def test_compile_text_allows_no_include_at_all():
    with pytest.raises(rlx_rules.RuleError, match="include needs a rule file on disk"):
        rlx_rules.compile_text('include "x.rlxr"\n' + RULE.format("true"))


def test_compiling_and_applying_opens_only_the_rule_files(tmp_path, monkeypatch):
    (tmp_path / "main.rlxr").write_text('include "part.rlxr"\n')
    (tmp_path / "part.rlxr").write_text('param T: int = env("RLX_SEC_T", 3)\n' + RULE.format("rank(a) < T"))
    rlx_rules.compile_text(RULE.format("true"))  # warm the grammar (its cache file is the engine's, not the rules')
    opened = []
    real_open = builtins.open

    def spy(file, *args, **kwargs):
        opened.append(os.path.realpath(os.fspath(file)) if not isinstance(file, int) else file)
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", spy)
    rules = rlx_rules.compile_rules([tmp_path / "main.rlxr"])
    rules.apply(relu_graph())
    assert set(opened) <= {str((tmp_path / "main.rlxr").resolve()), str((tmp_path / "part.rlxr").resolve())}


# ---- code ----

@pytest.mark.parametrize("where", [
    '__import__("os").system("touch PWNED")', 'eval("1")', 'exec("x")', 'open("/etc/passwd")',
    'env("HOME", "x") == "x"', 'getattr(a, "__class__")', 'a.__class__ == 1',
])
def test_there_is_no_function_or_attribute_that_runs_code(tmp_path, monkeypatch, where):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(rlx_rules.RuleError):
        rules = rlx_rules.compile_text(RULE.format(where))
        rules.apply(relu_graph())
    assert not (tmp_path / "PWNED").exists()


def test_strings_in_rules_are_never_evaluated(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    payload = '__import__(\\"os\\").system(\\"touch PWNED\\")'
    rules = rlx_rules.compile_text(RULE.format(f'op(a) != "{payload}"'))
    fused, _ = rules.apply(relu_graph())
    assert fused.op_counts()["Gelu"] == 3 and not (tmp_path / "PWNED").exists()


# ---- environment ----

class SpyEnviron(dict):
    """os.environ stand-in that records every variable looked up."""

    def __init__(self, base):
        super().__init__(base)
        self.read: set[str] = set()

    def __getitem__(self, key):
        self.read.add(key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        self.read.add(key)
        return super().get(key, default)

    def __contains__(self, key):
        self.read.add(key)
        return super().__contains__(key)


PARAM_RULES = 'param T: int = env("RLX_SEC_THRESHOLD", 3)\nparam U: int = 0\n' + RULE.format("rank(a) < T + U")


def test_only_declared_env_vars_are_read(monkeypatch):
    spy = SpyEnviron(os.environ)
    spy["RLX_SEC_SENTINEL"] = "1"
    spy["U"] = "999"          # a variable with a parameter's name but no env() declaration
    monkeypatch.setattr(os, "environ", spy)
    rules = rlx_rules.compile_text(PARAM_RULES)
    rules.apply(relu_graph())
    rules.explain(relu_graph())
    assert "RLX_SEC_SENTINEL" not in spy.read and "U" not in spy.read
    assert "RLX_SEC_THRESHOLD" in spy.read
    engine_config = {"RLX_RULES_NO_GRAMMAR_CACHE", "XDG_CACHE_HOME", "HOME"}  # the engine's own, fixed names
    assert spy.read <= {"RLX_SEC_THRESHOLD"} | engine_config


def test_an_undeclared_env_var_never_changes_results(monkeypatch):
    rules = rlx_rules.compile_text(PARAM_RULES)
    graph = relu_graph()
    baseline = rules.apply(graph)[0].to_json()
    for name in ["RLX_SEC_SENTINEL", "U", "T", "RLX_FUSE_ATTN_THRESHOLD", "RLX_SEC_THRESHOLD_X"]:
        monkeypatch.setenv(name, "0")
        assert rules.apply(graph)[0].to_json() == baseline, name
        assert rlx_rules.compile_text(PARAM_RULES).apply(graph)[0].to_json() == baseline, name
    monkeypatch.setenv("RLX_SEC_THRESHOLD", "0")  # the declared one does change them: rank 2 < 0 is false
    assert rules.apply(graph)[0].op_counts().get("Gelu", 0) == 0


def test_bundled_rules_read_only_their_declared_env_vars(monkeypatch):
    rules = rlx_rules.load_rules()
    declared = {p["env"] for p in rules.program["params"] if p.get("env")}
    spy = SpyEnviron(os.environ)
    monkeypatch.setattr(os, "environ", spy)
    rules.apply(rlx_rules.examples.bert_encoder(layers=1, hidden=64, heads=4))
    assert spy.read <= declared, spy.read - declared


def test_rust_engine_reads_no_environment_while_applying(tmp_path):
    # the whole CLI in a child process: the same output with and without unrelated variables set
    graph = tmp_path / "g.json"
    graph.write_text(json.dumps(rlx_rules.examples.bert_encoder(layers=1, hidden=64, heads=4)))
    outs = []
    for extra in [{}, {"RLX_SEC_SENTINEL": "1", "RLX_RULES_MAX_NODES": "1", "RAYON_NUM_THREADS": "1"}]:
        out = tmp_path / f"o{len(outs)}.json"
        env = {k: v for k, v in os.environ.items() if not k.startswith("RLX_")} | extra
        proc = subprocess.run(["rlx-rules", "apply", str(graph), "-o", str(out), "-q"], env=env,
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        outs.append(out.read_text())
    assert outs[0] == outs[1]


def test_a_rules_library_is_one_include_tree_wherever_it_is_installed(tmp_path):
    lib = tmp_path / "rules"
    (lib / "onnx").mkdir(parents=True)
    (lib / "default.rlxr").write_text("rule a { match { n = Gelu(x) } rewrite n => Relu(x) }\n")
    (lib / "onnx" / "default.rlxr").write_text('include "../default.rlxr"\n')
    assert rlx_rules.compile_rules([lib / "onnx" / "default.rlxr"]).rule_names == ["a"]
    (tmp_path / "outside.rlxr").write_text("rule b { match { n = Silu(x) } rewrite n => Relu(x) }\n")
    (lib / "onnx" / "escape.rlxr").write_text('include "../../outside.rlxr"\n')
    with pytest.raises(rlx_rules.RuleError, match="leaves the include root"):
        rlx_rules.compile_rules([lib / "onnx" / "escape.rlxr"])
