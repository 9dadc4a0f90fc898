"""rlx-rules: declarative pattern-matching rewrites for ML computation graphs, with a Rust core.

    >>> import rlx_rules
    >>> rules = rlx_rules.load_rules()                 # the bundled standard library
    >>> graph = rlx_rules.load_graph(rlx_rules.examples.bert_encoder(layers=2))
    >>> fused, report = rules.apply(graph)
    >>> fused.op_counts()["FusedAttentionBlock"]
    2

Every name below is loaded on first use (PEP 562), so that `import rlx_rules` (and the CLI, which imports the
package first) costs nothing but the names a command reads: the kernels and the interpreter import numpy, the
API its modules, and a warm `rlx-rules apply` is a fast start (docs/cli.md).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what the lazy names are, for type checkers and IDEs
    from . import examples
    from ._native import __version__
    from .api import RuleSet, bundled_rules_dir, compile_rules, compile_text, default_rules, load_rules
    from .errors import ApplyError, Diagnostic, GraphError, ParamError, ProgramError, RlxRulesError, RuleError
    from .graph import Graph, Node, load_graph
    from .interpret.core import run
    from .kernels import FusedAttentionBlock, attention, fused_attention_block
    from .report import Report

# Each public name and the module (relative to this package) that defines it.
_LAZY = {
    "__version__": "._native",
    **dict.fromkeys(("RuleSet", "bundled_rules_dir", "compile_rules", "compile_text", "default_rules",
                     "load_rules"), ".api"),
    **dict.fromkeys(("ApplyError", "Diagnostic", "GraphError", "ParamError", "ProgramError", "RlxRulesError",
                     "RuleError"), ".errors"),
    **dict.fromkeys(("Graph", "Node", "load_graph"), ".graph"),
    "Report": ".report",
    **dict.fromkeys(("FusedAttentionBlock", "attention", "fused_attention_block"), ".kernels"),
    "run": ".interpret.core",  # the reference interpreter (numpy)
}


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value  # later reads find it without calling here again
        return value
    if not name.startswith("__"):  # a submodule (`rlx_rules.examples`, `rlx_rules.api`), imported on first use
        try:
            return importlib.import_module(f".{name}", __name__)
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{name}":
                raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | {"examples"})


__all__ = [
    "ApplyError", "Diagnostic", "Graph", "GraphError", "Node", "ParamError", "ProgramError", "Report",
    "RlxRulesError", "RuleError", "RuleSet", "__version__", "bundled_rules_dir", "compile_rules", "compile_text",
    "default_rules", "examples", "load_graph", "load_rules", "run",
]
