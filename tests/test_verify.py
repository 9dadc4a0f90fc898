"""verify: every bundled rule proves itself by execution, and deliberately wrong rules are caught."""

from __future__ import annotations

import pathlib

import pytest

import rlx_rules
from rlx_rules.cli import ExitCode, main
from rlx_rules.verify import verify

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
        assert verdict.near_misses >= 1, verdict.rule  # one guard broken, did not fire
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


def test_a_rule_without_examples_is_reported():
    report = verify([pathlib.Path(__file__).parent / "rules" / "pass" / "features.rlxr"])
    assert not report.ok and "carries no example" in str(report)


def test_cli_verify_exit_codes(capsys):
    assert main(["verify", "--rule", "fuse_swiglu"]) == ExitCode.OK
    assert "fuse_swiglu" in capsys.readouterr().out
    assert main(["verify", str(WRONG / "swapped_halves.rlxr")]) == ExitCode.VERIFY_FAILED
