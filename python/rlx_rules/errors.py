"""Typed exceptions of rlx-rules, and diagnostics printed as `file:line:col: message` with a caret."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from .lang.ast import Loc


class RlxRulesError(Exception):
    """Base class of every error that rlx-rules raises on bad input."""


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


class ParamError(RlxRulesError, ValueError):
    """A declared parameter got a value of the wrong type, or an unknown parameter was set."""


class GraphError(RlxRulesError, ValueError):
    """A graph failed to load or validate: bad JSON, dangling id, cycle, arity, attribute type, I/O."""


class ProgramError(RlxRulesError, ValueError):
    """A compiled matcher program was malformed or of an unsupported version."""


class ApplyError(RlxRulesError):
    """Applying rules failed (for example, a rewrite produced an invalid graph); no output was written."""


class OnnxImportError(RlxRulesError):
    """An ONNX model could not be imported faithfully: subgraphs, missing external data, unknown domain or opset."""
