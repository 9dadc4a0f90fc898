"""The CLI's fast start: `apply -q` builds no report and `rewrite` gives apply's graph under the same limits; a
warm `apply` or `check` imports only what it needs; apply without -r reads one field of the graph for its rules."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import rlx_rules
from rlx_rules.cli.app import main
from rlx_rules.cli.apply import default_rule_sets


@pytest.fixture
def graph_file(tmp_path):
    path = tmp_path / "g.json"
    path.write_text(json.dumps(rlx_rules.examples.bert_encoder(layers=2, hidden=64, heads=4)))
    return path


def test_rewrite_gives_applys_graph_and_raises_at_its_limits():
    rules = rlx_rules.load_rules()
    graph = rlx_rules.load_graph(rlx_rules.examples.bert_encoder(layers=2, hidden=64, heads=4))
    fused, report = rules.apply(graph)
    assert rules.rewrite(graph).to_json() == fused.to_json() and report.rewrites > 1
    with pytest.raises(rlx_rules.ApplyError) as limit:
        rules.rewrite(graph, max_rewrites=1)
    assert limit.value.kind == "rewrite_limit" and limit.value.report.rewrites == 1
    assert len(limit.value.graph) < len(graph)
    with pytest.raises(rlx_rules.ParamError):
        rules.rewrite(graph, max_rewrites=-1)


def test_quiet_apply_writes_what_a_reporting_apply_writes(tmp_path, graph_file, capsys):
    assert main(["apply", str(graph_file), "-o", str(tmp_path / "quiet.json"), "-q"]) == 0
    assert capsys.readouterr().out == ""
    assert main(["apply", str(graph_file), "-o", str(tmp_path / "loud.json")]) == 0
    assert "FusedAttentionBlock" in capsys.readouterr().out
    assert (tmp_path / "quiet.json").read_text() == (tmp_path / "loud.json").read_text()


def test_apply_without_rules_lifts_an_imported_onnx_graph(tmp_path, graph_file):
    data = json.loads(graph_file.read_text())
    for source, expected in ((None, "@default"), ("onnx", "@onnx")):
        if source:
            data["source"] = source
        graph = rlx_rules.Graph.from_dict(data)
        assert (default_rule_sets(graph) or ["@default"]) == [expected]


@pytest.mark.parametrize("command", ["apply", "check"])
def test_a_warm_start_imports_only_what_the_command_needs(tmp_path, graph_file, command, monkeypatch):
    monkeypatch.setenv("RLX_RULES_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("RLX_RULES_NO_CACHE", raising=False)
    argv = {"apply": ["apply", str(graph_file), "-o", str(tmp_path / "out.json"), "-q", "-r", "@onnx"],
            "check": ["check", "@onnx", "-q"]}[command]
    unneeded = ["hashlib", "lark", "rlx_rules.report", "rlx_rules.tools.explain", "rlx_rules.lang.registry",
                "rlx_rules.examples", "rlx_rules.cli.show", "rlx_rules.cli.export"]
    code = ("import sys\nfrom rlx_rules.cli.app import main\n"
            f"code = main({argv!r})\n"
            f"print(code, [m for m in {unneeded!r} if m in sys.modules])\n")
    for _ in range(2):  # the first run fills the cache
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "0 []"
