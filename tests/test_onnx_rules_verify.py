"""verify: every ONNX lifting rule (rules/onnx/default.rlxr) proves itself on the examples it carries
(rules/onnx/examples, written by tests/make_onnx_rule_examples.py): it fires as declared, keeps the values, and
refuses the near misses derived from them."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import rlx_rules
from rlx_rules.tools.verify import verify

ROOT = Path(__file__).resolve().parents[1]
RULES = ROOT / "python" / "rlx_rules" / "rules" / "onnx" / "default.rlxr"

@pytest.fixture(scope="module")
def report():
    with np.errstate(all="ignore"):  # mutants such as a zero divisor make inf on purpose
        return verify([RULES])  # ~11 s on two cores; no max_mutants needed


@pytest.fixture(scope="module")
def lifting(report):
    rules = rlx_rules.load_rules(RULES)
    phase = {r["name"]: r["phase"] for r in rules.program["rules"]}
    return [v for v in report.rules if phase[v.rule].startswith("onnx_")]


def test_every_onnx_rule_verifies(report):
    assert [r.rule for r in report.rules] == rlx_rules.load_rules(RULES).rule_names
    assert report.ok, "\n".join(f"{r.rule}: {f}" for r in report.rules for f in r.failures)


def test_each_lifting_rule_fires_on_its_examples_and_refuses_derived_near_misses(lifting):
    assert len(lifting) == 44  # canon 8, activations 11, rms_norm 3, rotary 1, attention 21
    for verdict in lifting:
        assert verdict.examples - verdict.synthesized >= 1, verdict.rule  # an example it carries
        assert verdict.variants >= 1, verdict.rule      # graphs it fired on, values checked
        assert verdict.near_misses >= 1, verdict.rule   # one guard broken, did not fire
        assert len(verdict.guards_covered) >= len(verdict.guards) / 3, (verdict.rule, verdict.uncovered)
