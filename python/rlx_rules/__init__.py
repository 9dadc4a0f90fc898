"""rlx-rules: declarative pattern-matching rewrites for ML computation graphs, with a Rust core.

    >>> import rlx_rules
    >>> rules = rlx_rules.load_rules()                 # the bundled standard library
    >>> graph = rlx_rules.load_graph(rlx_rules.examples.bert_encoder(layers=2))
    >>> fused, report = rules.apply(graph)
    >>> fused.op_counts()["FusedAttentionBlock"]
    2
"""

from . import examples
from ._native import __version__
from .api import RuleSet, bundled_rules_dir, compile_rules, compile_text, default_rules, load_rules
from .errors import ApplyError, Diagnostic, GraphError, ParamError, ProgramError, RlxRulesError, RuleError
from .graph import Graph, Node, load_graph
from .report import Report

# The kernels import numpy (about 60 ms); load them on first use so that `rlx-rules apply` does not pay for it.
_KERNEL_NAMES = ("FusedAttentionBlock", "attention", "fused_attention_block")


def __getattr__(name: str):
    if name in _KERNEL_NAMES:
        from . import kernels

        return getattr(kernels, name)
    if name == "run":  # the reference interpreter (numpy too): also loaded on first use
        from .interpret.core import run

        return run
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "ApplyError", "Diagnostic", "Graph", "GraphError", "Node", "ParamError", "ProgramError", "Report",
    "RlxRulesError", "RuleError", "RuleSet", "__version__", "bundled_rules_dir", "compile_rules", "compile_text",
    "default_rules", "examples", "load_graph", "load_rules", "run",
]
