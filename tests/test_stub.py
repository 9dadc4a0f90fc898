"""The .pyi stub of the native module names everything the module exports, with matching keyword arguments."""

from __future__ import annotations

import pathlib
import re

import rlx_rules
from rlx_rules import _native

STUB = (pathlib.Path(rlx_rules.__file__).parent / "_native.pyi").read_text()


def test_every_public_native_name_is_in_the_stub():
    missing = [name for name in dir(_native) if not name.startswith("_") and not re.search(rf"\b{name}\b", STUB)]
    assert missing == []


def test_program_apply_keywords_match_the_stub():
    signature = _native.Program.apply.__text_signature__ or ""
    for keyword in re.findall(r"(\w+)=", signature):
        assert keyword in STUB, keyword
