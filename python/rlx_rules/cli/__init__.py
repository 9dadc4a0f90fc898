"""The `rlx-rules` command line: exit codes and the option parsing its commands share (one module per command;
the parser and `main` are in cli.app)."""

from __future__ import annotations

import argparse
import enum
import math
import os
import sys
from typing import Callable, Sequence

from ..errors import ParamError

EXAMPLES = """\
examples:
  rlx-rules apply model.graph.json                 # bundled rules; writes model.graph.fused.json
  rlx-rules apply g.json -o out.json --json        # report as JSON on stdout
  rlx-rules apply g.json -o - > fused.json         # graph on stdout, report on stderr
  rlx-rules apply g.json -r my_rules.rlxr --set RLX_FUSE_ATTN_THRESHOLD=128
  rlx-rules check rules/default.rlxr               # check rule files, print every error
  rlx-rules explain g.json --rule fuse_attention_block   # why a rule did not fire, with values
  rlx-rules verify                                 # every bundled rule proves itself by execution
  rlx-rules import model.onnx -o model.graph.json  # ONNX (or RLX serde JSON) to graph.json
  rlx-rules show g.json -r --node 12 --svg g.svg   # summary, and a drawing before and after rewriting
"""


class ExitCode(enum.IntEnum):
    OK = 0
    USAGE = 2
    RULE_ERROR = 3
    GRAPH_ERROR = 4
    PARAM_ERROR = 5
    APPLY_ERROR = 6
    OUTPUT_ERROR = 7
    VERIFY_FAILED = 8
    INTERNAL_ERROR = 70


def fail(message: object, code: ExitCode) -> ExitCode:
    """Print `error: MESSAGE` on stderr and return `code`: how a command reports a failure."""
    print(f"error: {message}", file=sys.stderr)
    return code


def report_error(e: Exception) -> ExitCode:
    """Report an error that escaped a command as `main` does (a typed error: its message; a bug: one line, or
    the traceback with RLX_RULES_TRACEBACK=1) and return its exit code."""
    from ..errors import (ApplyError, GraphError, KernelError, OnnxImportError, OutputError, ProgramError,
                          RlxRulesError, RuleError)

    if isinstance(e, RuleError):
        print(e, file=sys.stderr)
        return ExitCode.RULE_ERROR
    for kinds, code in (((ParamError,), ExitCode.PARAM_ERROR),
                        ((OutputError,), ExitCode.OUTPUT_ERROR),  # before GraphError: a failed write is also one
                        ((GraphError, OnnxImportError), ExitCode.GRAPH_ERROR),
                        ((ApplyError, ProgramError, KernelError), ExitCode.APPLY_ERROR)):
        if isinstance(e, kinds):
            return fail(e, code)
    if isinstance(e, BrokenPipeError):
        return ExitCode.OK
    if isinstance(e, RlxRulesError):
        return fail(e, ExitCode.INTERNAL_ERROR)
    if isinstance(e, (RecursionError, MemoryError)):
        return fail(f"the input is too deep or too large to process ({type(e).__name__})", ExitCode.INTERNAL_ERROR)
    if os.environ.get("RLX_RULES_TRACEBACK"):
        raise e
    return fail(f"internal error (a bug in rlx-rules; please report it): {type(e).__name__}: {e}",
                ExitCode.INTERNAL_ERROR)


def parse_sets(pairs: Sequence[str]) -> dict[str, str]:
    """`--set NAME=VALUE` options as a dict (the values stay strings; the rules' declarations type them)."""
    values = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise ParamError(f"--set expects NAME=VALUE, got {pair!r}")
        values[name.strip()] = value
    return values


def add_set_option(parser: argparse.ArgumentParser) -> None:
    """The `--set NAME=VALUE` option of the commands that load rules."""
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="override a declared parameter")


# The largest values the range-checked options take: counts fit the core's 64-bit integers; a time budget of
# more than a year is refused as a typo rather than clamped.
MAX_COUNT = 2**63 - 1
MAX_SECONDS = 365 * 24 * 3600.0


def int_in(low: int, high: int = MAX_COUNT) -> Callable[[str], int]:
    """An argparse type: an integer in [low, high], else a usage error that names the range."""
    def parse(text: str) -> int:
        try:
            value = int(text, 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if not low <= value <= high:
            bound = f"at least {low}" if high == MAX_COUNT else f"from {low} to {high}"
            raise argparse.ArgumentTypeError(f"must be {bound}, got {text}")
        return value
    parse.__name__ = "integer"  # argparse names the type in "invalid integer value"
    return parse


def seconds(text: str) -> float:
    """An argparse type: a number of seconds, finite, > 0 and at most a year."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not (math.isfinite(value) and 0 < value <= MAX_SECONDS):
        raise argparse.ArgumentTypeError(f"must be more than 0 and at most {MAX_SECONDS:.0f} seconds, got {text}")
    return value


def add_cache_option(parser: argparse.ArgumentParser) -> None:
    """`--no-cache`: compile the rules without the compiled-rule cache (rlx_rules.lang.cache; also
    RLX_RULES_NO_CACHE=1)."""
    parser.add_argument("--no-cache", dest="cache", action="store_false",
                        help="compile the rules again instead of using the compiled-rule cache")


def add_rule_limit_option(parser: argparse.ArgumentParser) -> None:
    """`--max-rule-bytes`: the rule parser's limit on a file's size, for commands that compile rule files."""
    parser.add_argument("--max-rule-bytes", type=int_in(1), default=None, metavar="BYTES",
                        help="refuse a rule file larger than this (default 4 MiB)")


def add_graph_limit_options(parser: argparse.ArgumentParser) -> None:
    """`--max-graph-bytes` and `--max-nodes`: the graph loader's limits (docs/security.md), for commands that
    read a graph.json."""
    parser.add_argument("--max-graph-bytes", type=int_in(1), default=None, metavar="BYTES",
                        help="refuse a graph.json larger than this (default 1 GiB)")
    parser.add_argument("--max-nodes", type=int_in(1), default=None, metavar="N",
                        help="refuse a graph with more nodes than this (default 10 million)")


def load_graph_arg(args: argparse.Namespace):
    """The graph named by `args.graph`, within the limits of add_graph_limit_options."""
    from ..graph import Graph

    return Graph.load(args.graph, max_nodes=args.max_nodes, max_bytes=args.max_graph_bytes)


def add_input_shape_option(parser: argparse.ArgumentParser, *, applies_to: str = "") -> None:
    """`--input-shape NAME=D0,D1,..` (repeatable): pin an ONNX input to a static shape (import, apply, optimize).
    Unpinned inputs keep their symbolic dims, which most attention layers fuse with (docs/import.md)."""
    parser.add_argument("--input-shape", action="append", type=input_shape, metavar="NAME=D0,D1,..",
                        help=f"{applies_to}pin an ONNX input to a static shape (repeatable), e.g. input_ids=1,16; "
                             "without it the model's symbolic dims are kept")


def input_shape(text: str) -> tuple[str, list[int]]:
    """NAME=D0,D1,... -> (NAME, [D0, D1, ...]): the argparse type of `--input-shape`."""
    name, sep, dims = text.rpartition("=")
    try:
        shape = [int(d) for d in dims.split(",")] if dims.strip() else []
    except ValueError:
        shape = None
    if not sep or not name or shape is None or any(d < 0 or d > 2**62 for d in shape):
        raise argparse.ArgumentTypeError(f"expected NAME=D0,D1,... with dims >= 0, got {text!r}")
    return name, shape
