"""The `rlx-rules` command line: exit codes and the option parsing its commands share (one module per command;
the parser and `main` are in cli.app)."""

from __future__ import annotations

import argparse
import enum
import sys
from typing import Sequence

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
