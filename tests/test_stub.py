"""The .pyi stub of the native module matches the module, as mypy's stubtest sees it (names, signatures, classes)."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("mypy.stubtest")


def test_stubtest_finds_no_mismatch():
    done = subprocess.run([sys.executable, "-m", "mypy.stubtest", "rlx_rules._native"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
