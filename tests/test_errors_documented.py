"""Every exception class a user can catch is exported by rlx_rules.errors, documented in docs/errors.md, and
derives from RlxRulesError; the native ones are declared in the .pyi stub."""

from __future__ import annotations

import inspect
from pathlib import Path

import rlx_rules
from rlx_rules import _native, errors

ROOT = Path(__file__).resolve().parent.parent


def error_classes():
    return [getattr(errors, name) for name in errors.__all__
            if inspect.isclass(getattr(errors, name)) and issubclass(getattr(errors, name), BaseException)]


def test_every_error_class_is_documented_and_shares_the_base():
    doc = (ROOT / "docs" / "errors.md").read_text()
    classes = error_classes()
    assert len(classes) >= 12
    for cls in classes:
        assert issubclass(cls, rlx_rules.RlxRulesError), cls
        assert f"| `{cls.__name__}` |" in doc, f"{cls.__name__} has no row in docs/errors.md"


def test_native_error_classes_are_in_the_stub():
    stub = (ROOT / "python" / "rlx_rules" / "_native.pyi").read_text()
    native = [cls for cls in error_classes() if getattr(_native, cls.__name__, None) is cls]
    assert {cls.__name__ for cls in native} >= {"GraphError", "ProgramError", "ParamError", "ApplyError", "KernelError"}
    for cls in native:
        assert f"class {cls.__name__}(" in stub, cls.__name__
