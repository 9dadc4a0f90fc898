"""Runs the examples in docs/*.md: rlxr blocks must compile, rlxr-error blocks must fail as stated, python runs."""

from __future__ import annotations

import pathlib
import re

import pytest

import rlx_rules

DOCS = pathlib.Path(__file__).parent.parent / "docs"
BLOCK = re.compile(r"^```(rlxr|rlxr-error|python)\n(.*?)^```", re.S | re.M)


def blocks():
    for path in sorted(DOCS.glob("*.md")):
        for n, match in enumerate(BLOCK.finditer(path.read_text())):
            line = path.read_text()[:match.start()].count("\n") + 1
            yield pytest.param(match.group(1), match.group(2), id=f"{path.name}:{line}")


@pytest.mark.parametrize("kind, code", list(blocks()))
def test_doc_example(kind, code):
    if kind == "rlxr":
        assert rlx_rules.compile_text(code, "doc.rlxr").rule_names is not None
    elif kind == "rlxr-error":
        expected = code.splitlines()[0].split("# error:", 1)[1].strip()
        with pytest.raises(rlx_rules.RuleError, match=re.escape(expected)):
            rlx_rules.compile_text(code, "doc.rlxr")
    else:
        exec(compile(code, "doc-example", "exec"), {})


def test_the_docs_have_examples():
    assert len(list(blocks())) >= 8
