"""verify: every bundled rule proves itself by execution, and deliberately wrong rules are caught."""

from __future__ import annotations

import pathlib

import pytest

import rlx_rules
from rlx_rules.cli import ExitCode
from rlx_rules.cli.app import main
from rlx_rules.tools.verify import verify

WRONG = pathlib.Path(__file__).parent / "rules" / "wrong"


@pytest.fixture(scope="module")
def library_report():
    return verify()


def test_every_bundled_rule_verifies(library_report):
    assert [r.rule for r in library_report.rules] == rlx_rules.load_rules().rule_names
    failures = [f for r in library_report.rules for f in r.failures]
    assert library_report.ok, "\n".join(failures)


def test_each_rule_fires_on_its_examples_and_refuses_derived_near_misses(library_report):
    for verdict in library_report.rules:
        assert verdict.examples >= 1, verdict.rule
        assert verdict.variants >= 1, verdict.rule  # graphs it fired on, values checked
        assert verdict.near_misses >= 1 or not verdict.guards, verdict.rule  # one guard broken, did not fire
        # most guards have a derived near miss; the report lists the rest
        assert len(verdict.guards_covered) >= len(verdict.guards) / 3, (verdict.rule, verdict.uncovered)


def test_every_seed_guard_is_covered_by_a_derived_near_miss(library_report):
    seed = next(r for r in library_report.rules if r.rule == "fuse_attention_block")
    assert seed.uncovered == [] and len(seed.guards) >= 20


@pytest.mark.parametrize("path, needle", [
    (WRONG / "narrow_off_by_one.rlxr", "differs by up to"),
    (WRONG / "swapped_halves.rlxr", "differs by up to"),
])
def test_deliberately_wrong_rules_are_caught(path, needle):
    report = verify([path])
    assert not report.ok
    assert any(needle in f for r in report.rules for f in r.failures), str(report)


def test_every_library_rule_gets_a_graph_synthesized_from_its_pattern_and_guards(library_report):
    assert all(v.synthesized for v in library_report.rules), [v.rule for v in library_report.rules if not v.synthesized]


def test_a_rule_without_examples_is_verified_on_its_synthesized_graph(tmp_path):
    path = tmp_path / "r.rlxr"
    path.write_text("""
rule fold_scale {
  match { m = Mul(Narrow(c), s) { } }
  where rank(s) == 0
  rewrite m => Narrow(Mul(c, s)) { }
}
""".replace("Narrow(Mul(c, s)) { }", "Relu(c)").replace("Mul(Narrow(c), s) { }", "Mul(Narrow(c), s)"))
    report = verify([path])
    [verdict] = report.rules
    assert verdict.synthesized and "verified on the synthesized graph" in str(report)
    # this rewrite is wrong (Relu(c) is not c[...] * s), and running the synthesized graph shows it
    assert not report.ok and "on <synthesized>: the rewritten graph does not run" in str(report)


def test_a_rule_no_graph_can_be_built_for_fails_naming_the_construct(tmp_path):
    path = tmp_path / "r.rlxr"
    path.write_text("rule odd { match { n = Gelu(x) } where rank(x) == 2 and rank(x) == 3 rewrite n => Relu(x) }\n")
    report = verify([path])
    assert not report.ok and "nothing to verify on" not in str(report)
    assert "no graph could be synthesized (no repair satisfies the guards `rank(x) == " in str(report), str(report)


# Each deliberately wrong rule says, in its first comment, why it is wrong; verify must reject every one.
WRONG_RULES = sorted(WRONG.glob("*.rlxr"))
WHY_WRONG = {
    "add_or_sub_as_bias_add.rlxr": "is a Sub): the rule fired and output 0 differs",
    "hardcoded_activation.rlxr": "is a Silu): the rule fired and output 0 differs",
    "transpose_any_shape_preserving_perm.rlxr": "(dims 4)",
    "cast_ignoring_dtype.rlxr": ".to = f16): the guards admit a forward that changes the value's type",
    "reshape_forward_without_shape_check.rlxr": "the guards admit a forward that changes the value's type",
    "mul_by_any_constant.rlxr": "on <synthesized>: output 0 differs",
    "narrow_off_by_one.rlxr": "differs by up to",
    "swapped_halves.rlxr": "does not run",
}


def test_every_wrong_rule_states_why_it_is_wrong_and_is_known():
    assert {p.name for p in WRONG_RULES} == set(WHY_WRONG)
    for path in WRONG_RULES:
        assert path.read_text().startswith("# "), path.name


@pytest.mark.parametrize("path", WRONG_RULES, ids=lambda p: p.stem)
def test_verify_rejects_each_wrong_rule_for_its_reason(path):
    report = verify([path])
    assert not report.ok
    failures = [f for r in report.rules for f in r.failures]
    assert any(WHY_WRONG[path.name] in f for f in failures), str(report)


def test_a_right_rule_next_to_each_wrong_one_verifies(tmp_path):
    """The fixed forms of the wrong rules pass: the rejections come from the errors, not from the constructs."""
    path = tmp_path / "right.rlxr"
    path.write_text("""
rule matmul_add_bias {
  match { mm = MatMul(x, w)  out = Add(mm, bias) }
  where rank(bias) <= 1 and uses(mm) == 1 and not is_output(mm)
  rewrite out => FusedMatMulBiasAct(x, w, bias) { activation: null }
}
rule matmul_bias_gelu_or_silu {
  match { act = Gelu|Silu(Add(MatMul(x, w), bias)) }
  where rank(bias) <= 1
  rewrite act => FusedMatMulBiasAct(x, w, bias) { activation: op(act) }
}
rule transpose_cancel {
  match { t1 = Transpose(x)  t2 = Transpose(t1) }
  where is_identity(compose(t1.perm, t2.perm))
  rewrite t2 => x
}
rule cast_remove_noop {
  match { c = Cast(x) }
  where c.to == dtype(x) and dtype(c) == dtype(x)
  rewrite c => x
}
rule reshape_remove_noop {
  match { r = Reshape(x) }
  where shape(r) == shape(x)
  rewrite r => x
}
""")
    report = verify([path])
    assert report.ok, str(report)
    assert all(v.synthesized and v.variants >= 1 for v in report.rules), str(report)


def test_cli_verify_exit_codes(capsys):
    assert main(["verify", "--rule", "fuse_swiglu"]) == ExitCode.OK
    assert "fuse_swiglu" in capsys.readouterr().out
    assert main(["verify", str(WRONG / "swapped_halves.rlxr")]) == ExitCode.VERIFY_FAILED


HALVES_RULE = """
rule halves_neg phase p {
  match { y = Neg(Neg(x)) }
  where rank(x) == 2 and dim(x, 1) == 4 and has_fact(x, "%s")
  rewrite {
    one = Constant() { value: 1.0 } shape [] dtype dtype(y)
    y => %s
  }
}
phase p
"""


def test_a_fact_guard_is_synthesized_and_covered_by_dropping_the_fact(tmp_path):
    path = tmp_path / "r.rlxr"
    path.write_text(HALVES_RULE % ("halves_equal", "Mul(x, one)"))
    report = verify([path])
    [verdict] = report.rules
    assert report.ok and verdict.synthesized, str(report)
    assert 'has_fact(x, "halves_equal")' in verdict.guards_covered, verdict.uncovered


def test_a_rewrite_that_needs_more_than_its_fact_is_caught(tmp_path):
    # Neg(Neg(x)) is x, not -x: the fact-respecting random values still show it
    path = tmp_path / "r.rlxr"
    path.write_text(HALVES_RULE % ("halves_equal", "Neg(x)"))
    report = verify([path])
    assert not report.ok and "differs by up to" in str(report), str(report)


def test_mutants_of_an_inline_tensor_attribute():
    from rlx_rules.tools.verify import _attr_alternatives

    assert _attr_alternatives([[1.0, 2.0], [3.0, 4.0]]) == [[[1.0, 2.0]]]
    assert _attr_alternatives([0, 2, 1, 3]) == [[0, 2, 1], [0, 2, 1, 4]]


def test_dim_boundaries_find_both_sides_of_a_threshold_guard():
    """`dim(x, 0) * dim(x, 1) <= 40` from a [2, 4, 24] input: the last dims that fire and the first that do not."""
    from rlx_rules.tools.variants import dim_boundaries

    graph = {"format": "rlx-graph", "version": 1, "outputs": [1], "nodes": [
        {"id": 0, "op": "Input", "name": "x", "shape": [2, 4, 24]},
        {"id": 1, "op": "Neg", "inputs": [0], "shape": [2, 4, 24]}]}
    found = {change: data["nodes"][1]["shape"] for change, data in dim_boundaries(
        graph, lambda m: m["nodes"][0]["shape"][0] * m["nodes"][0]["shape"][1] <= 40, seed=0)}
    assert found == {"%0.shape[0] = 10 (where the rule stops firing)": [10, 4, 24],
                     "%0.shape[0] = 11 (where the rule stops firing)": [11, 4, 24],
                     "%0.shape[1] = 20 (where the rule stops firing)": [2, 20, 24],
                     "%0.shape[1] = 21 (where the rule stops firing)": [2, 21, 24]}
