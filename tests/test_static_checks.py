"""Static checks on rule sets: overlap (unless guards tell rules apart), shadowing, termination; --strict."""

from __future__ import annotations

import rlx_rules
from rlx_rules.cli import ExitCode
from rlx_rules.cli.app import main

ATTN = "rule {name} {{ match {{ n = Attention(q, k, v){constraint} }} where q != k and v == v{where} rewrite n => Relu(q) }}\n"


def warnings(text: str) -> list[str]:
    return [w.message for w in rlx_rules.compile_text(text, "set.rlxr").warnings]


def rule(name, constraint="", where=""):
    return ATTN.format(name=name, constraint=constraint and f" {{ {constraint} }}", where=where and f" and {where}")


def test_overlapping_rules_are_named_with_both_locations():
    [w] = warnings(rule("a", "mask_kind: Causal") + rule("b"))
    assert "rules 'a' (set.rlxr:1:6) and 'b' overlap" in w and "phase 'main'" in w


def test_disjoint_enum_sets_do_not_overlap():
    assert warnings(rule("a", "mask_kind: Causal") + rule("b", "mask_kind in {None, Custom}")) == []
    assert warnings(rule("a", where="n.mask_kind == Causal") + rule("b", where="n.mask_kind == Custom")) == []


def test_disjoint_integer_ranges_and_null_tests_do_not_overlap():
    assert warnings(rule("a", where="n.num_heads > 8") + rule("b", where="n.num_heads <= 8")) == []
    assert warnings(rule("a", where="n.num_heads == 4") + rule("b", where="n.num_heads >= 5")) == []
    assert warnings(rule("a", "score_scale: null") + rule("b", where="n.score_scale is not null")) == []
    assert len(warnings(rule("a", where="n.num_heads > 8") + rule("b", where="n.num_heads >= 8"))) == 1


def test_priorities_separate_rules_but_structure_decides_first():
    text = rule("a", "mask_kind: Causal").replace("rule a", "rule a priority 2") + rule("b")
    assert warnings(text) == []
    # different root ops, or operand ops that cannot agree, never overlap
    assert warnings("rule a { match { n = Gelu(x) } rewrite n => Relu(x) }\n"
                    "rule b { match { n = Silu(x) } rewrite n => Relu(x) }\n") == []
    assert warnings("rule a { match { n = Gelu(MatMul(x, w)) } where x != w rewrite n => Relu(x) }\n"
                    "rule b { match { n = Gelu(Add(x, w)) } where x != w rewrite n => Relu(x) }\n") == []


def test_commutative_operands_overlap_in_either_order():
    text = ("rule a { match { n = Add(MatMul(x, w), b) } where x != b and w != b rewrite n => Relu(x) }\n"
            "rule b { match { n = Add(c, MatMul(x, w)) } where x != c and w != c rewrite n => Relu(x) }\n")
    assert len(warnings(text)) == 1


def test_a_guardless_general_rule_shadows_a_later_specific_one():
    [w] = warnings("rule e { match { n = Gelu(x) } rewrite n => Relu(x) }\n"
                   "rule f { match { n = Gelu(Add(x, y)) } where x != y rewrite n => Relu(x) }\n")
    assert "rule 'f' is shadowed: 'e' (set.rlxr:1:6) runs first" in w


def test_rules_that_undo_each_other_are_flagged_and_the_cap_stops_them():
    text = ("phase flip max_iterations 3\n"
            "rule g phase flip { match { n = Relu(x) } rewrite n => Sigmoid(x) }\n"
            "rule h phase flip { match { n = Sigmoid(x) } rewrite n => Relu(x) }\n")
    [w] = warnings(text)
    assert "phase 'flip' may not terminate: g -> h -> g" in w
    graph = {"format": "rlx-graph", "version": 1, "nodes": [
        {"id": 0, "op": "Input", "name": "x", "shape": [2]}, {"id": 1, "op": "Relu", "inputs": [0], "shape": [2]}],
        "outputs": [1]}
    report = rlx_rules.compile_text(text).apply(graph)[1]
    assert report.phases[0].stop == "iteration_cap" and report.phases[0]["still_firing"] == ["g", "h"]


def test_bundled_library_is_clean_and_strict_check_fails_on_warnings(tmp_path, capsys):
    assert rlx_rules.load_rules().warnings == []
    assert main(["check", "--strict", str(rlx_rules.default_rules())]) == ExitCode.OK
    path = tmp_path / "ov.rlxr"
    path.write_text(rule("a") + rule("b"))
    assert main(["check", str(path)]) == ExitCode.OK
    capsys.readouterr()
    assert main(["check", "--strict", str(path)]) == ExitCode.RULE_ERROR
    out = capsys.readouterr()
    assert "ov.rlxr:2:6: warning: rules 'a'" in out.err
    assert "1 warning treated as errors (--strict)" in out.err and "ok" not in out.out


def test_a_name_used_twice_means_one_node_and_graphs_stay_acyclic():
    # Erf vs Tanh deep inside; only a cyclic "graph" could satisfy both, so no overlap is reported
    text = ("rule e { match { y = Mul(x, Add(Erf(Div(x, c)), o))  o = Constant() } where c != o rewrite y => Gelu(x) }\n"
            "rule t { match { y = Mul(x, Add(Tanh(Div(x, c)), o))  o = Constant() } where c != o "
            "rewrite y => GeluApprox(x) }\n")
    assert warnings(text) == []
    # without `o = Constant()`, Mul(x, Add(Erf(..), Tanh(..))) really matches both: o is the other one
    assert len(warnings(text.replace("  o = Constant()", ""))) == 1


def test_rules_that_shrink_the_graph_do_not_count_as_non_terminating():
    text = ("rule drop_double_neg { match { n = Neg(Neg(x)) } rewrite n => Relu(x) }\n"
            "rule relu_of_relu { match { n = Relu(Relu(x)) } rewrite { t = Neg(x) shape shape(x)  n => Neg(t) } }\n")
    # the second creates as many nodes as it removes, so the cycle is reported
    assert any("may not terminate" in w for w in warnings(text))
    shrinking = "rule drop_cast { match { n = Relu(Relu(x)) } rewrite n => Relu(x) }\n"
    assert warnings(shrinking) == []


def test_a_rewrite_whose_result_the_pattern_cannot_match_again_terminates():
    # the new Attention reads Narrows, the pattern needs Adds: it cannot fire on its own result
    merge = ("rule merge { match { n = Attention(Add(q, _), Add(k, _), v) }\n"
             "  rewrite { c = Concat(q, k) { axis: 0 } shape shape(q)  s = Narrow(c) { axis: 0, start: 0, len: 1 } shape shape(q)\n"
             "            n => Attention(s, s, v) { num_heads: 1, head_dim: 1, mask_kind: None,\n"
             "              score_scale: null, attn_logit_softcap: null } } }\n")
    assert not any("may not terminate" in w for w in warnings(merge))
    # ... while one that reads its own kind of input again is reported
    again = merge.replace("n => Attention(s, s, v)", "t = Add(s, s) shape shape(q)  n => Attention(t, t, v)")
    assert any("may not terminate: merge -> merge" in w for w in warnings(again))


def test_literal_permutations_tell_rewrites_apart():
    split = ("rule split { match { kt = Transpose(r) { perm: [0, 2, 3, 1] }  s = MatMul(q, kt) }\n"
             "  rewrite { k4 = Transpose(r) { perm: [0, 2, 1, 3] } shape shape(r)\n"
             "            k5 = Transpose(k4) { perm: [0, 1, 3, 2] } shape shape(kt)  s => MatMul(q, k5) } }\n")
    assert warnings(split) == []
    assert any("may not terminate" in w for w in warnings(split.replace("perm: [0, 1, 3, 2]", "perm: [0, 2, 3, 1]")))
