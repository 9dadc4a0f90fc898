"""Typed exceptions of rlx-rules, and diagnostics printed as `file:line:col: message` with a caret.

The classes raised by the Rust core are created there (rust/python/src/errors.rs) and re-exported here,
so Python and Rust share one hierarchy; each carries `.kind`, a stable name of the cause (docs/errors.md).
The classes raised by Python only (`RuleError`, `OnnxImportError`, `ExportError`, `WriteError` and
`OutputRefused`, `UnsupportedOpError`) are defined here, once, and derive from the same base.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Sequence

from ._native import (
    ApplyError,
    GraphError,
    KernelError,
    OutputError,
    ParamError,
    ProgramError,
    RlxRulesError,
)

if TYPE_CHECKING:
    from .lang.ast import Loc

__all__ = [
    "ApplyError", "Diagnostic", "ExportError", "GraphError", "KernelError", "OnnxImportError", "OutputError",
    "OutputRefused", "ParamError", "ProgramError", "RlxRulesError", "RuleError", "UnsupportedOpError", "WriteError",
]


@dataclass(frozen=True)
class Diagnostic:
    """One problem found in a rule file, with its location and severity."""

    loc: Optional[Loc]
    message: str
    severity: str = "error"
    source_line: Optional[str] = None

    def format(self) -> str:
        where = f"{self.loc}: " if self.loc else ""
        text = f"{where}{self.severity}: {self.message}"
        if self.loc is not None and self.source_line is not None:
            line = self.source_line.rstrip("\n").expandtabs(1)
            width = 1
            if self.loc.end_line == self.loc.line and self.loc.end_col > self.loc.col:
                width = self.loc.end_col - self.loc.col
            text += f"\n    {line}\n    {' ' * (self.loc.col - 1)}{'^' * width}"
        return text

    def __str__(self) -> str:
        return self.format()


class RuleError(RlxRulesError):
    """Rule files failed to load: syntax, name, type or registry errors. `.errors` lists them all."""

    def __init__(self, errors: Sequence[Diagnostic]):
        self.errors = list(errors)
        count = len(self.errors)
        body = "\n".join(d.format() for d in self.errors)
        super().__init__(f"{body}\nfound {count} error{'s' if count != 1 else ''}")


class OnnxImportError(RlxRulesError):
    """An ONNX model could not be imported faithfully: subgraphs, missing external data, unknown domain or opset."""


class ExportError(RlxRulesError):
    """A graph could not be exported faithfully: an op (named with its node) has no exact ONNX mapping."""


# A write error is an OutputError (an OSError) and a GraphError, which is what graph writers raised before.
_WRITE_BASES = (OutputError,) if issubclass(OutputError, GraphError) else (OutputError, GraphError)


class WriteError(*_WRITE_BASES):  # type: ignore[misc]
    """An output file could not be written (the message says why); nothing was left half-written."""


class OutputRefused(WriteError):
    """The output path is not one rlx-rules writes to: not a regular file, a symlink, or one of the inputs."""


class UnsupportedOpError(GraphError, NotImplementedError):
    """The interpreter has no semantics for a node's op (or for one of its attribute values)."""
