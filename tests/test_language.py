"""The rule language end to end: each tests/rules/fail file names the errors it must produce; pass files compile."""

from __future__ import annotations

import pathlib

import pytest

import rlx_rules
from rlx_rules.lang.parse import parse_text

HERE = pathlib.Path(__file__).parent
FAIL = sorted((HERE / "rules" / "fail").glob("*.rlxr"))
PASS = sorted((HERE / "rules" / "pass").glob("*.rlxr"))


def expectations(path: pathlib.Path) -> list[str]:
    return [line.split("# expect:", 1)[1].strip() for line in path.read_text().splitlines() if "# expect:" in line]


@pytest.mark.parametrize("path", FAIL, ids=[p.stem for p in FAIL])
def test_bad_rule_file_reports_each_expected_error(path):
    with pytest.raises(rlx_rules.RuleError) as info:
        rlx_rules.compile_rules([path])
    text = str(info.value)
    expected = expectations(path)
    assert expected, f"{path.name} names no expected error"
    for want in expected:
        assert want in text, f"{path.name}: expected {want!r} in:\n{text}"
    for diagnostic in info.value.errors:  # every error points into the file, with the source line and a caret
        assert diagnostic.loc is not None and diagnostic.loc.file.endswith(path.name)
        formatted = diagnostic.format()
        assert formatted.count("\n") == 2 and formatted.rstrip().endswith("^"), formatted


@pytest.mark.parametrize("path", PASS, ids=[p.stem for p in PASS])
def test_good_rule_file_compiles(path):
    rules = rlx_rules.compile_rules([path])
    assert rules.rule_names


def test_bundled_library_checks_clean():
    rules = rlx_rules.load_rules()
    simplify = rlx_rules.load_rules(pathlib.Path(rlx_rules.default_rules()).parent / "simplify" / "simplify.rlxr")
    assert rules.rule_names == simplify.rule_names + ["fuse_matmul_bias_act", "fuse_matmul_bias", "fuse_attention_block", "fuse_residual_ln",
                                "fuse_residual_rms_norm", "fuse_rms_norm_reshape", "fuse_transformer_layer",
                                "fuse_swiglu_dual_matmul", "fuse_shared_input_matmul", "fuse_swiglu"]
    # RLX's pipeline order
    assert rules.phases == ["simplify", "matmul_bias_act", "attention_block", "residual_ln", "residual_rms_norm", "rms_norm_reshape",
                            "transformer_layer", "swiglu_dual_matmul", "shared_input_matmul", "swiglu"]
    assert rules.warnings == []


def test_caret_points_at_the_column():
    with pytest.raises(rlx_rules.RuleError) as info:
        rlx_rules.compile_text("rule r {\n  match { a = Gleu(x) }\n  rewrite a => Relu(x)\n}\n", "inline.rlxr")
    assert str(info.value).splitlines()[:3] == [
        "inline.rlxr:2:15: error: unknown op 'Gleu' (did you mean 'Gelu'?)",
        "      match { a = Gleu(x) }",
        "                  ^^^^",
    ]


def test_comments_and_several_rules_in_one_file():
    rules = rlx_rules.compile_text("""
# a comment line
rule one { match { a = Gelu(x) } rewrite a => Relu(x) }   # trailing comment
rule two priority 5 { match { a = Silu(x) } rewrite a => Relu(x) }
""")
    assert rules.rule_names == ["two", "one"]  # higher priority first within a phase


def test_include_is_relative_to_the_including_file_and_each_file_loads_once(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.rlxr").write_text('rule a { match { n = Gelu(x) } rewrite n => Relu(x) }\n')
    (tmp_path / "sub" / "b.rlxr").write_text('include "a.rlxr"\nrule b { match { n = Silu(x) } rewrite n => Relu(x) }\n')
    (tmp_path / "main.rlxr").write_text('include "sub/a.rlxr"\ninclude "sub/b.rlxr"\n')
    assert rlx_rules.compile_rules([tmp_path / "main.rlxr"]).rule_names == ["a", "b"]


def test_include_cycle_is_an_error(tmp_path):
    (tmp_path / "a.rlxr").write_text('include "b.rlxr"\n')
    (tmp_path / "b.rlxr").write_text('include "a.rlxr"\n')
    with pytest.raises(rlx_rules.RuleError, match="include cycle: a.rlxr -> b.rlxr -> a.rlxr"):
        rlx_rules.compile_rules([tmp_path / "a.rlxr"])


def test_missing_include_names_the_file_and_location(tmp_path):
    (tmp_path / "a.rlxr").write_text('\ninclude "nope.rlxr"\n')
    with pytest.raises(rlx_rules.RuleError) as info:
        rlx_rules.compile_rules([tmp_path / "a.rlxr"])
    assert ":2:1: error: cannot read rule file" in str(info.value) and "nope.rlxr" in str(info.value)


def test_deep_nesting_is_a_clear_error_not_a_crash():
    deep = "rule r { match { a = Gelu(x) } where " + "(" * 500 + "true" + ")" * 500 + " rewrite a => Relu(x) }"
    with pytest.raises(rlx_rules.RuleError, match="nest deeper"):
        rlx_rules.compile_text(deep)


def test_enum_values_and_attribute_constraints_compile_to_guards():
    rules = rlx_rules.compile_text("""
rule r {
  match { a = Attention(q, k, v, m) { mask_kind in {Custom, Causal}, score_scale: null } }
  where q != k and v == v and m == m
  rewrite a => Relu(q)
}
""")
    code = rules.program["rules"][0]["code"]
    guards = [i["text"] for i in code if i["i"] == "guard"]
    assert "a.mask_kind in {Custom, Causal}" in guards and "a.score_scale: null" in guards


def test_parse_round_trip_keeps_locations():
    f = parse_text("rule r {\n  match { a = Gelu(x) }\n  rewrite a => Relu(x)\n}\n", "x.rlxr")
    rule = f.items[0]
    assert (rule.loc.line, rule.loc.col) == (1, 6)
    assert (rule.bindings[0].loc.line, rule.bindings[0].loc.col) == (2, 11)


def _without_locations(value):
    if isinstance(value, dict):
        return {k: _without_locations(v) for k, v in value.items() if k not in ("loc", "examples")}
    if isinstance(value, list):
        return [_without_locations(v) for v in value]
    return value


def test_rust_test_fixture_is_the_current_compiled_library():
    """rust/core/tests/fixtures/default_program.json lets `cargo test` run the real rules without Python."""
    import json

    fixture = HERE.parent / "rust" / "core" / "tests" / "fixtures" / "default_program.json"
    current = _without_locations(rlx_rules.load_rules().program)
    assert _without_locations(json.loads(fixture.read_text())) == current, (
        "regenerate: python -c \"import json, rlx_rules; p = rlx_rules.load_rules().program; "
        "[r.pop('examples', None) for r in p['rules']]; "
        "json.dump(p, open('rust/core/tests/fixtures/default_program.json', 'w'), indent=1, sort_keys=True)\"")
