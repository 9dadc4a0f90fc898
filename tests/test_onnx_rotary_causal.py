"""Value facts and the rules that need them: rotary chains -> Rope (halves_equal), causal masks -> Causal
(causal_bias), each against ONNX Runtime, with a near miss for every fact and shape guard."""
from __future__ import annotations

import collections
import json
from pathlib import Path

import numpy as np
import pytest

import rlx_rules
from rlx_rules import facts
from rlx_rules.errors import GraphError, RuleError

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from rlx_rules.interpret import load_weights  # noqa: E402
from rlx_rules.onnx.importer import convert, import_onnx  # noqa: E402

from onnx_models import Dims, llama_attention  # noqa: E402 - tests/: the shared ONNX model builders

ROOT = Path(__file__).resolve().parents[1]
RULES = ROOT / "python" / "rlx_rules" / "rules" / "onnx" / "default.rlxr"
B, S, H, D = 2, 6, 2, 8
HD = H * D
DIMS = Dims(B, S, H, D)


@pytest.fixture(scope="module")
def rules():
    return rlx_rules.load_rules(RULES)


# ---- the facts themselves ---------------------------------------------------------------------------------------
def test_holds_each_fact_and_its_near_misses():
    tril = np.tril(np.ones((1, 1, 4, 4), dtype=bool))
    assert facts.facts_of(tril) == ["causal_keep"]
    assert facts.facts_of(np.tril(np.ones((4, 4), dtype=bool), 1)) == []          # one key too many
    assert facts.facts_of(tril.astype(np.float32)) == []                           # keep masks are bool
    bias = np.where(tril, 0.0, -np.inf).astype(np.float32)
    assert facts.facts_of(bias) == ["causal_bias"]
    assert facts.facts_of(np.where(tril, 0.0, -1e4)) == []                         # not masked hard enough
    assert facts.facts_of(np.where(tril, 0.5, -np.inf)) == []                      # kept scores shifted
    assert facts.facts_of(np.ones((2, 4, 3, 3))[..., :2]) == ["halves_equal"]     # [.., 3, 2]: halves 1 == 1
    table = np.arange(12.0).reshape(3, 4)
    assert facts.facts_of(table) == []
    table[:, 2:] = table[:, :2]
    assert facts.facts_of(table) == ["halves_equal"]
    table[2, 3] += 1e-7
    assert facts.facts_of(table) == []                                             # exact, not approximate
    assert facts.facts_of(np.ones(3)) == []                                        # odd last axis


def test_annotate_carries_facts_through_value_preserving_ops():
    table = np.tile(np.arange(3.0), (5, 2))  # [5, 6], halves equal
    g = {"nodes": [
        {"id": 0, "op": "Param", "name": "t", "shape": [5, 6]},
        {"id": 1, "op": "Cos", "inputs": [0], "shape": [5, 6]},
        {"id": 2, "op": "Constant", "attrs": {"value": 2.0}, "shape": []},
        {"id": 3, "op": "Mul", "inputs": [1, 2], "shape": [5, 6]},
        {"id": 4, "op": "Unsqueeze", "inputs": [3], "shape": [1, 5, 6]},
        {"id": 5, "op": "Transpose", "inputs": [4], "attrs": {"perm": [1, 0, 2]}, "shape": [5, 1, 6]},
        {"id": 6, "op": "Transpose", "inputs": [3], "attrs": {"perm": [1, 0]}, "shape": [6, 5]},
        {"id": 7, "op": "Param", "name": "w", "shape": [5, 6]},
        {"id": 8, "op": "Mul", "inputs": [3, 7], "shape": [5, 6]},
        {"id": 9, "op": "Param", "name": "keep", "shape": [1, 1, 3, 3], "dtype": "bool"},
        {"id": 10, "op": "Constant", "attrs": {"value": 0.0}, "shape": []},
        {"id": 11, "op": "Constant", "attrs": {"value": "-inf"}, "shape": []},
        {"id": 12, "op": "Where", "inputs": [9, 10, 11], "shape": [1, 1, 3, 3], "dtype": "f32"},
        {"id": 13, "op": "Constant", "attrs": {"value": -1.0}, "shape": []},
        {"id": 14, "op": "Where", "inputs": [9, 10, 13], "shape": [1, 1, 3, 3], "dtype": "f32"},
    ], "outputs": [5]}
    values = {"t": table, "w": np.random.default_rng(0).standard_normal((5, 6)),
              "keep": np.tril(np.ones((1, 1, 3, 3), dtype=bool))}
    facts.annotate(g, values)
    got = {n["id"]: n.get("facts", []) for n in g["nodes"]}
    assert got[0] == got[1] == got[3] == got[4] == got[5] == ["halves_equal"]
    assert got[6] == []   # the last axis moved
    assert got[8] == []   # times a weight without the fact
    assert got[9] == ["causal_keep"] and got[12] == ["causal_bias"]
    assert got[14] == []  # a fill of -1 does not mask


def test_interpreter_rejects_a_claimed_fact_the_values_lack():
    g = {"format": "rlx-graph", "version": 1, "nodes": [
        {"id": 0, "op": "Param", "name": "t", "shape": [2, 4], "dtype": "f32", "facts": ["halves_equal"]},
        {"id": 1, "op": "Neg", "inputs": [0], "shape": [2, 4], "dtype": "f32"}], "outputs": [1]}
    good = np.array([[1.0, 2, 1, 2], [3, 4, 3, 4]])
    (out,) = rlx_rules.run(g, {}, {"t": good})
    np.testing.assert_array_equal(out, -good)
    with pytest.raises(GraphError, match="halves_equal"):
        rlx_rules.run(g, {}, {"t": good + np.array([0, 0, 0, 1.0])})


def test_loader_rejects_malformed_facts():
    g = {"format": "rlx-graph", "version": 1, "nodes": [{"id": 0, "op": "Input", "name": "x", "facts": "causal"}],
         "outputs": [0]}
    with pytest.raises(GraphError, match="facts"):
        rlx_rules.Graph.from_dict(g)


def test_has_fact_names_are_checked():
    text = """rule r { match { y = Neg(x) } where has_fact(x, "halves_equl") rewrite y => Neg(x) }"""
    with pytest.raises(RuleError, match="halves_equal"):
        rlx_rules.compile_text(text)


def test_has_fact_reads_the_node_facts():
    text = """rule r { match { y = Neg(x) } where has_fact(x, "halves_equal") rewrite y => Abs(x) }"""
    rs = rlx_rules.compile_text(text)
    for claimed, fired in ((["halves_equal"], 1), ([], 0), (["causal_keep"], 0)):
        g = {"format": "rlx-graph", "version": 1, "nodes": [
            {"id": 0, "op": "Input", "name": "x", "shape": [2, 4], "facts": claimed},
            {"id": 1, "op": "Neg", "inputs": [0], "shape": [2, 4]}], "outputs": [1]}
        _, report = rs.apply(g)
        assert report.fired("r") == fired


# ---- a LLaMA-style attention block (tests/onnx_models.py) -------------------------------------------------------
def block_model(**options):
    """Bias-free Q/K/V projections, rotary embeddings on q and k, a causal mask by default, at this file's sizes."""
    return llama_attention(DIMS, rope_on=("q", "k"), weight_scale=0.3, **options)


def lift_and_compare(rules, model, tmp_path):
    """Import, apply the ONNX library, and check the result against ONNX Runtime on the original model."""
    rng = np.random.default_rng(1)
    feed = {"x": rng.standard_normal((B, S, HD)).astype(np.float32)}
    if any(i.name == "attention_mask" for i in model.graph.input):
        m = np.ones((B, S), dtype=np.int64)
        m[1, S - 2:] = 0
        feed["attention_mask"] = m
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (ref,) = sess.run(None, feed)
    path = tmp_path / "m.graph.json"
    graph = import_onnx(model, str(path))
    out, report = rules.apply(graph)
    (got,) = rlx_rules.run(out, feed, load_weights(rlx_rules.load_graph(str(path))))
    np.testing.assert_allclose(got, ref, atol=1e-4, rtol=1e-4)
    return graph, out, report


def counts(graph):
    return collections.Counter(n.op for n in graph.nodes)


def attention_kinds(graph):
    return [n.attrs["mask_kind"] for n in graph.nodes if n.op == "Attention"]


def test_rotary_and_causal_mask_lift_to_rope_and_causal(rules, tmp_path):
    graph, out, report = lift_and_compare(rules, block_model(), tmp_path)
    assert report.fired("rotary_rope") == 2 and counts(out)["Rope"] == 2
    assert attention_kinds(out) == ["Causal"]
    assert counts(out)["Softmax"] == counts(out)["Neg"] == counts(out)["Where"] == 0
    rope = next(n for n in out.nodes if n.op == "Rope")
    assert (rope.attrs["head_dim"], rope.attrs["n_rot"]) == (D, D)
    # the Rope takes the projection itself, so the attention's q/k inputs are [B, S, H·D] again
    attn = next(n for n in out.nodes if n.op == "Attention")
    assert [out.node(i).op for i in attn.inputs[:2]] == ["Rope", "Rope"]


@pytest.mark.parametrize("mask", ["causal_bias", "causal_where"])
def test_causal_with_minus_inf_and_the_sdpa_nan_guard(rules, tmp_path, mask):
    _, out, report = lift_and_compare(rules, block_model(rope=None, mask=mask, fill=-np.inf, nan_guard=True), tmp_path)
    assert attention_kinds(out) == ["Causal"] and report.fired("attention_causal_mask_nan_guard") == 1


def test_uneven_rotary_tables_are_not_rope_and_explained(rules, tmp_path):
    graph, out, _ = lift_and_compare(rules, block_model(rope="uneven"), tmp_path)
    assert counts(out)["Rope"] == 0 and attention_kinds(out) == ["Causal"]
    text = "\n".join(str(r) for r in rules.explain(graph, rule="rotary_rope"))
    assert 'has_fact(cos, "halves_equal")' in text, text


def test_per_batch_rotary_tables_are_not_rope(rules, tmp_path):
    # [B, 1, S, D] tables: halves equal, but RLX's Rope has one row per position, not per (batch, position)
    graph, out, _ = lift_and_compare(rules, block_model(rope="per_batch"), tmp_path)
    assert counts(out)["Rope"] == 0
    text = "\n".join(str(r) for r in rules.explain(graph, rule="rotary_rope"))
    assert "shape(cos)" in text, text


def test_rotation_the_other_way_is_not_rope(rules, tmp_path):
    # Concat(x1, -x2) rotates by -θ on one half: not rotate_half, so not RLX's Rope
    _, out, _ = lift_and_compare(rules, block_model(rotate="reversed"), tmp_path)
    assert counts(out)["Rope"] == 0


def test_causal_and_padding_stays_custom(rules, tmp_path):
    _, out, _ = lift_and_compare(rules, block_model(mask="causal_and_padding"), tmp_path)
    assert attention_kinds(out) == ["Custom"]


def test_a_triangle_one_key_too_wide_is_not_causal(rules, tmp_path):
    graph, out, _ = lift_and_compare(rules, block_model(mask="shifted"), tmp_path)
    assert attention_kinds(out) in (["Custom"], ["Bias"])  # the model's own mask, kept as an input
    # the importer folds Where(tril, 0, fill) of constants into one float mask, which has no causal fact
    assert next(n for n in graph.nodes if n.name == "am").facts == ()


def test_a_finite_fill_that_does_not_mask_is_bias_not_causal(rules, tmp_path):
    _, out, _ = lift_and_compare(rules, block_model(rope=None, mask="causal_bias", fill=-5.0), tmp_path)
    assert attention_kinds(out) == ["Bias"]


def test_facts_are_written_to_graph_json(tmp_path):
    path = tmp_path / "m.graph.json"
    import_onnx(block_model(), str(path))
    data = json.loads(path.read_text())
    by_name = {n.get("name"): n for n in data["nodes"]}
    # Where(tril, 0, fill) of constants is folded into the mask "am"
    assert by_name["cos"]["facts"] == ["halves_equal"] and by_name["am"]["facts"] == ["causal_bias"]
    assert "facts" not in by_name["Wq"]


def test_stale_facts_fail_in_the_interpreter(tmp_path):
    path = tmp_path / "m.graph.json"
    import_onnx(block_model(), str(path))
    weights = load_weights(rlx_rules.load_graph(str(path)))
    weights["cos"] = weights["cos"] + np.linspace(0, 1, D, dtype=np.float32)  # halves no longer equal
    graph = convert(block_model()).graph
    with pytest.raises(GraphError, match="halves_equal"):
        rlx_rules.run(graph, {"x": np.zeros((B, S, HD), np.float32)}, weights)
