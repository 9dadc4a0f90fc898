"""`rlx-rules apply` over several graphs or a folder: every graph on a process pool, one report per graph and a
summary, failures reported without stopping the others, inputs never overwritten."""

from __future__ import annotations

import json

import pytest

import rlx_rules
from rlx_rules.cli import ExitCode
from rlx_rules.cli.app import main


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RLX_RULES_CACHE_DIR", str(tmp_path / "cache"))


def write_graphs(folder, layers=(1, 2, 3)):
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for n in layers:
        path = folder / f"g{n}.json"
        path.write_text(json.dumps(rlx_rules.examples.bert_encoder(layers=n, hidden=64, heads=4)))
        paths.append(path)
    return paths


def single(path, tmp_path):
    out = tmp_path / f"single-{path.name}"
    assert main(["apply", str(path), "-o", str(out), "-q"]) == 0
    return json.loads(out.read_text())


def test_a_folder_is_applied_graph_by_graph_and_one_failure_stops_nothing(tmp_path, capsys):
    graphs = write_graphs(tmp_path / "in")
    (tmp_path / "in" / "bad.json").write_text("{not json")
    before = {p: p.read_bytes() for p in (tmp_path / "in").iterdir()}
    code = main(["apply", str(tmp_path / "in"), "-o", str(tmp_path / "out"), "-j", "2"])
    captured = capsys.readouterr()
    assert code == ExitCode.GRAPH_ERROR  # the failed graph's exit code
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["g1.fused.json", "g2.fused.json", "g3.fused.json"]
    for path in graphs:
        assert json.loads((tmp_path / "out" / f"{path.stem}.fused.json").read_text()) == single(path, tmp_path)
    assert {p: p.read_bytes() for p in before} == before  # inputs untouched
    assert captured.out.count("rlx-rules apply: ") == 3  # one report per graph that was rewritten
    assert f"{tmp_path / 'in' / 'bad.json'} failed (exit 4)" in captured.err
    assert "4 graphs on 2 processes, 3 done, 1 failed" in captured.err


def test_several_files_write_beside_each_input(tmp_path, capsys):
    graphs = write_graphs(tmp_path)
    assert main(["apply", *map(str, graphs)]) == 0
    for path in graphs:
        assert json.loads((tmp_path / f"{path.stem}.fused.json").read_text()) == single(path, tmp_path)
    assert "3 graphs on" in capsys.readouterr().out


def test_one_process_gives_the_same_results(tmp_path):
    graphs = write_graphs(tmp_path / "in")
    assert main(["apply", str(tmp_path / "in"), "-o", str(tmp_path / "one"), "-j", "1", "-q"]) == 0
    assert main(["apply", str(tmp_path / "in"), "-o", str(tmp_path / "two"), "-j", "2", "-q"]) == 0
    for path in graphs:
        name = f"{path.stem}.fused.json"
        assert (tmp_path / "one" / name).read_text() == (tmp_path / "two" / name).read_text()


def test_json_gives_every_report_and_a_summary(tmp_path, capsys):
    write_graphs(tmp_path / "in", layers=(1, 2))
    (tmp_path / "in" / "bad.json").write_text("[]")
    assert main(["apply", str(tmp_path / "in"), "--json", "-o", str(tmp_path / "out")]) == ExitCode.GRAPH_ERROR
    data = json.loads(capsys.readouterr().out)
    assert data["summary"] == {"graphs": 3, "done": 2, "failed": 1, "processes": data["summary"]["processes"]}
    assert [(r["input"].rsplit("/", 1)[1], r["exit_code"]) for r in data["graphs"]] == \
        [("bad.json", 4), ("g1.json", 0), ("g2.json", 0)]
    assert data["graphs"][1]["nodes_after"] < data["graphs"][1]["nodes_before"]
    assert "error:" in data["graphs"][0]["error"]


@pytest.mark.parametrize("extra", [["-o", "-"], ["--in-place"]])
def test_stdout_and_in_place_are_refused(tmp_path, extra, capsys):
    graphs = write_graphs(tmp_path, layers=(1, 2))
    assert main(["apply", *map(str, graphs), *extra]) == ExitCode.USAGE
    assert not list(tmp_path.glob("*.fused.json"))


def test_an_output_that_is_an_input_is_refused(tmp_path, capsys):
    [graph] = write_graphs(tmp_path, layers=(1,))
    fused = tmp_path / "g1.fused.json"
    fused.write_text(graph.read_text())
    assert main(["apply", str(graph), str(fused)]) == ExitCode.USAGE
    assert "inputs are never overwritten" in capsys.readouterr().err
    assert fused.read_text() == graph.read_text()


def test_two_graphs_that_would_write_one_file_are_refused(tmp_path, capsys):
    a = write_graphs(tmp_path / "a", layers=(1,))
    b = write_graphs(tmp_path / "b", layers=(1,))
    assert main(["apply", str(a[0]), str(b[0]), "-o", str(tmp_path / "out")]) == ExitCode.USAGE
    assert "would both write" in capsys.readouterr().err


def test_a_rule_error_stops_the_batch_before_any_graph(tmp_path, capsys):
    write_graphs(tmp_path / "in", layers=(1, 2))
    (tmp_path / "bad.rlxr").write_text("rule broken {\n")
    code = main(["apply", str(tmp_path / "in"), "-o", str(tmp_path / "out"), "-r", str(tmp_path / "bad.rlxr")])
    assert code == ExitCode.RULE_ERROR
    assert not (tmp_path / "out").exists()
    assert capsys.readouterr().err.count("found 1 error") == 1


def test_a_folder_without_graphs_is_a_usage_error(tmp_path):
    (tmp_path / "empty").mkdir()
    assert main(["apply", str(tmp_path / "empty")]) == ExitCode.USAGE
