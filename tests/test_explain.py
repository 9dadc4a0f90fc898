"""explain: why a rule did not fire, as records with the failed check, its location and the values."""

from __future__ import annotations

import json

from rlx_rules.cli.app import main

from conftest import add_node, node_named, seed_graph


def test_use_count_miss_names_the_check_the_values_and_the_consumers(rules):
    g = seed_graph()
    qkv = node_named(g, "qkv")
    extra = add_node(g, "Relu", [qkv["id"]], shape=qkv["shape"])
    g["outputs"].append(extra)
    [record] = rules.explain(g, rule="fuse_attention_block")
    assert record["structure_matched"] and record["root"] == 11
    [failed] = record["failed"]
    assert failed["check"] == "uses(qkv) == 3"
    assert failed["loc"].endswith("attention_block.rlxr:20:9")
    assert failed["detail"].startswith(f"4 (consumers %7 %8 %9 %{extra}) == 3")
    assert record["bindings"]["qkv"].startswith('%6 "qkv"')


def test_threshold_miss_names_the_gate_the_input_and_the_parameter(rules):
    [record] = rules.explain(seed_graph(seq=128), rule="fuse_attention_block")
    assert record["root"] is None
    [failed] = record["failed"]
    assert failed["check"].startswith("gate small_batch_seq")
    assert '%0 "hidden" Input [1, 128, 64]: 128 <= 64' in failed["detail"]
    assert "env RLX_FUSE_ATTN_THRESHOLD, default 64" in failed["detail"]


def test_structure_miss_reports_progress_and_the_structural_check(rules):
    g = seed_graph()
    node_named(g, "out").update(op="FusedMatMulBiasAct", inputs=[4, 10, 5])  # attention in the weight slot
    [record] = rules.explain(g, rule="fuse_attention_block")
    assert not record["structure_matched"]
    assert 0 < record["progress"] < record["total"]
    assert "must be Attention" in record["failed"][0]["check"]


def test_near_misses_are_ranked_and_all_lists_every_candidate(rules):
    g = seed_graph()
    node_named(g, "k")["attrs"]["start"] = 65
    best = rules.explain(g, rule="fuse_attention_block")
    every = rules.explain(g, rule="fuse_attention_block", all=True)
    assert len(best) == 1 and len(every) == 2  # both FusedMatMulBiasAct nodes are candidate roots
    assert every[0] == best[0] and every[0]["progress"] >= every[1]["progress"]
    assert best[0]["failed"][0]["check"] == "k.start: h"


def test_node_filter_keeps_candidates_that_bind_the_node(rules):
    g = seed_graph()
    node_named(g, "v")["attrs"]["len"] = 3
    assert rules.explain(g, rule="fuse_attention_block", node=9)
    assert all(r["root"] != 6 for r in rules.explain(g, rule="fuse_attention_block", node=9, all=True))


def test_apply_explain_adds_the_best_near_miss_of_unfired_rules(rules):
    fused, report = rules.apply(seed_graph(seq=100), explain=True)
    names = {r["rule"] for r in report.near_misses}
    assert "fuse_attention_block" in names
    assert "near misses" in str(report)
    _, quiet = rules.apply(seed_graph(seq=100))
    assert quiet.near_misses == []


def test_cli_explain_json(tmp_path, capsys):
    path = tmp_path / "g.json"
    path.write_text(json.dumps(seed_graph(seq=100)))
    assert main(["explain", str(path), "--rule", "fuse_attention_block", "--json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert records[0]["rule"] == "fuse_attention_block"
    assert main(["explain", str(path), "--rule", "no_such_rule"]) != 0


GELU_RULES = """
rule relu_of_gelu {
  match { g = Gelu(x)  r = Relu(g) }
  where rank(x) == 2
  rewrite r => Relu(x)
}
"""


def _two_gelus(path):
    """Relu(Gelu(x)) twice: once with a rank-2 input (fires), once rank 3 (a near miss)."""
    graph = {"format": "rlx-graph", "version": 1, "nodes": [
        {"id": 0, "op": "Input", "name": "a", "shape": [2, 3]},
        {"id": 1, "op": "Gelu", "inputs": [0], "shape": [2, 3]},
        {"id": 2, "op": "Relu", "inputs": [1], "shape": [2, 3]},
        {"id": 3, "op": "Input", "name": "b", "shape": [2, 3, 4]},
        {"id": 4, "op": "Gelu", "inputs": [3], "shape": [2, 3, 4]},
        {"id": 5, "op": "Relu", "inputs": [4], "shape": [2, 3, 4]}], "outputs": [2, 5]}
    path.write_text(json.dumps(graph))
    return path


def test_cli_explain_says_how_often_a_rule_fired_and_explains_the_graph_before_its_phase(tmp_path, capsys):
    rules_path = tmp_path / "r.rlxr"
    rules_path.write_text(GELU_RULES)
    graph = _two_gelus(tmp_path / "g.json")
    assert main(["explain", str(graph), "-r", str(rules_path), "--rule", "relu_of_gelu", "--all"]) == 0
    out = capsys.readouterr().out
    assert "relu_of_gelu fired 1 time\n" in out
    # the candidate it fired on is not reported as failing; the rank-3 one is, with its values
    assert "relu_of_gelu at %5 Relu" in out and "rank(x) == 2 failed: 3 == 2" in out, out
    assert "%2 Relu" not in out


def test_explain_records_describe_the_graph_as_the_phase_found_it(tmp_path):
    import rlx_rules

    rules = rlx_rules.compile_text(GELU_RULES + """
rule gelu_to_approx { match { g = Gelu(x) } where rank(x) == 3 rewrite g => GeluApprox(x) }
""")
    # gelu_to_approx fires on node 4 in the same phase; relu_of_gelu's miss at node 5 still sees the Gelu
    records = rules.explain(json.loads(_two_gelus(tmp_path / "g.json").read_text()), rule="relu_of_gelu", all=True)
    assert [r.root for r in records] == [5] and records[0].structure_matched


def test_cli_explain_without_candidates_does_not_claim_they_matched(tmp_path, capsys):
    rules_path = tmp_path / "r.rlxr"
    rules_path.write_text("rule s { match { t = Tanh(x) } rewrite t => Relu(x) }\n")
    graph = _two_gelus(tmp_path / "g.json")
    assert main(["explain", str(graph), "-r", str(rules_path)]) == 0
    out = capsys.readouterr().out
    assert "every candidate matched" not in out and "no candidate that failed a check" in out
