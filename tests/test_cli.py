"""The rlx-rules command: outputs, exit codes, never over the input, atomic writes, parameters."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import rlx_rules
from rlx_rules.cli import ExitCode
from rlx_rules.cli.app import main

from conftest import seed_graph


@pytest.fixture
def graph_file(tmp_path):
    path = tmp_path / "model.graph.json"
    path.write_text(json.dumps(rlx_rules.examples.bert_encoder(layers=2)))
    return path


def test_apply_writes_graph_fused_json_beside_the_input_and_prints_the_report(graph_file, capsys):
    assert main(["apply", str(graph_file)]) == ExitCode.OK
    out = graph_file.with_name("model.graph.fused.json")
    fused = rlx_rules.Graph.load(out)
    assert fused.op_counts()["FusedAttentionBlock"] == 2
    text = capsys.readouterr().out
    assert "fuse_attention_block" in text and "RLX_FUSE_ATTN_THRESHOLD = 64 (default)" in text
    assert "nodes: 60 -> 36" in text  # 4 FusedMatMulBiasAct, 2 FusedAttentionBlock, 4 FusedResidualLN


def test_json_report(graph_file, tmp_path, capsys):
    assert main(["apply", str(graph_file), "-o", str(tmp_path / "o.json"), "--json"]) == ExitCode.OK
    report = json.loads(capsys.readouterr().out)
    assert report["ops_after"]["FusedAttentionBlock"] == 2
    assert report["params_in_force"]["RLX_FUSE_ATTN_THRESHOLD"] == {"value": 64, "source": "default"}
    assert all(p["stop"] == "fixpoint" for p in report["phases"])
    assert report["ops_after"]["FusedResidualLN"] == 4


def test_graph_to_stdout_and_report_to_stderr(graph_file, capsys):
    assert main(["apply", str(graph_file), "-o", "-"]) == ExitCode.OK
    captured = capsys.readouterr()
    assert rlx_rules.Graph.from_json(captured.out).op_counts()["FusedAttentionBlock"] == 2
    assert "fuse_attention_block" in captured.err


def test_set_overrides_a_parameter(tmp_path, capsys):
    path = tmp_path / "g.json"
    path.write_text(json.dumps(seed_graph(seq=100)))
    main(["apply", str(path), "-o", str(tmp_path / "a.json"), "-q"])
    assert "FusedAttentionBlock" not in rlx_rules.Graph.load(tmp_path / "a.json").op_counts()
    main(["apply", str(path), "-o", str(tmp_path / "b.json"), "--set", "RLX_FUSE_ATTN_THRESHOLD=100", "-q"])
    assert rlx_rules.Graph.load(tmp_path / "b.json").op_counts()["FusedAttentionBlock"] == 1
    assert main(["apply", str(path), "--set", "RLX_FUSE_ATTN_THRESHOLD=lots"]) == ExitCode.PARAM_ERROR
    assert main(["apply", str(path), "--set", "NOPE=1"]) == ExitCode.PARAM_ERROR
    assert "unknown parameter NOPE" in capsys.readouterr().err


def test_never_overwrites_the_input_unless_asked(graph_file, capsys):
    before = graph_file.read_text()
    assert main(["apply", str(graph_file), "-o", str(graph_file)]) == ExitCode.USAGE
    assert graph_file.read_text() == before
    assert "--in-place" in capsys.readouterr().err
    assert main(["apply", str(graph_file), "-o", str(graph_file), "--in-place", "-q"]) == ExitCode.OK
    assert rlx_rules.Graph.load(graph_file).op_counts()["FusedAttentionBlock"] == 2


def test_unwritable_output_is_a_clear_error_and_leaves_nothing(graph_file, tmp_path, capsys):
    target = tmp_path / "missing_dir" / "out.json"
    assert main(["apply", str(graph_file), "-o", str(target)]) == ExitCode.OUTPUT_ERROR
    assert "missing_dir" in capsys.readouterr().err
    assert not target.parent.exists()


@pytest.mark.parametrize("content, needle", [
    ("{not json", "invalid JSON"),
    ('{"format": "rlx-graph", "version": 1, "nodes": [{"id": 0, "op": "Relu", "inputs": [7]}], "outputs": [0]}',
     "input 7 does not exist"),
    ('{"format": "rlx-graph", "version": 1, "nodes": [{"id": 0, "op": "Relu", "inputs": [1]}, '
     '{"id": 1, "op": "Relu", "inputs": [0]}], "outputs": [0]}', "cycle"),
])
def test_bad_graph_is_a_graph_error_and_writes_nothing(tmp_path, content, needle, capsys):
    path = tmp_path / "bad.json"
    path.write_text(content)
    assert main(["apply", str(path)]) == ExitCode.GRAPH_ERROR
    assert needle in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["bad.json"]


def test_rule_errors_exit_with_rule_error(tmp_path, graph_file, capsys):
    bad = tmp_path / "bad.rlxr"
    bad.write_text("rule r { match { a = Gleu(x) } rewrite a => Relu(x) }\n")
    assert main(["apply", str(graph_file), "-r", str(bad)]) == ExitCode.RULE_ERROR
    assert main(["check", str(bad)]) == ExitCode.RULE_ERROR
    assert "bad.rlxr:1:22: error: unknown op 'Gleu'" in capsys.readouterr().err


def test_check_ok(capsys):
    rules = rlx_rules.load_rules()
    assert main(["check", str(rlx_rules.default_rules())]) == ExitCode.OK
    assert f"ok: {len(rules.rule_names)} rules in {len(rules.phases)} phases" in capsys.readouterr().out


def test_failure_in_the_middle_of_apply_leaves_input_and_existing_output_untouched(graph_file, tmp_path):
    out = tmp_path / "out.json"
    out.write_text("previous result")
    before = graph_file.read_bytes()
    env = dict(os.environ, RLX_RULES_DEBUG_FAIL_AFTER_REWRITES="3")
    proc = subprocess.run([sys.executable, "-m", "rlx_rules.cli", "apply", str(graph_file), "-o", str(out)],
                          env=env, capture_output=True, text=True)
    assert proc.returncode == ExitCode.APPLY_ERROR, proc.stderr
    assert "failing on purpose after 3 rewrites" in proc.stderr
    assert out.read_text() == "previous result" and graph_file.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == sorted(["model.graph.json", "out.json"])


def test_the_program_flushes_its_report_and_exits_with_the_commands_code(graph_file, tmp_path):
    # `rlx-rules` (app.run) skips the interpreter's teardown: the report, written through a pipe, must still arrive
    # whole, the output file be in place, and a failure keep its exit code and message.
    out = tmp_path / "out.json"
    ok = subprocess.run([sys.executable, "-m", "rlx_rules.cli", "apply", str(graph_file), "-o", str(out), "--json"],
                        capture_output=True, text=True)
    assert ok.returncode == ExitCode.OK, ok.stderr
    assert json.loads(ok.stdout)["rewrites"] > 0
    assert json.loads(out.read_text())["nodes"]
    missing = subprocess.run([sys.executable, "-m", "rlx_rules.cli", "apply", str(tmp_path / "nope.json")],
                             capture_output=True, text=True)
    assert missing.returncode == ExitCode.GRAPH_ERROR and "nope.json" in missing.stderr


def test_console_script_help_lists_examples_and_exit_codes():
    proc = subprocess.run(["rlx-rules", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0
    assert "examples:" in proc.stdout and "3 rule_error" in proc.stdout


def test_apply_works_from_any_folder_with_the_bundled_rules(graph_file, tmp_path):
    proc = subprocess.run(["rlx-rules", "apply", str(graph_file), "-o", "out.json", "-q"], cwd=tmp_path,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert rlx_rules.Graph.load(tmp_path / "out.json").op_counts()["FusedAttentionBlock"] == 2


def test_bundled_rule_sets_by_name(graph_file, tmp_path, capsys):
    """`-r @onnx` (and @default, @seed) names a rule set shipped in the package, wherever it is installed."""
    assert set(rlx_rules.api.bundled_rule_sets()) >= {"default", "seed", "onnx"}
    assert main(["check", "@onnx"]) == ExitCode.OK
    assert capsys.readouterr().out.startswith("ok:")
    out = tmp_path / "fused.json"
    assert main(["apply", str(graph_file), "-r", "@seed", "-o", str(out), "-q"]) == ExitCode.OK
    assert out.exists()
    assert main(["check", "@nope"]) == ExitCode.RULE_ERROR
    assert "no bundled rule set '@nope'; the bundled sets are @default, @seed, @onnx" in capsys.readouterr().err
