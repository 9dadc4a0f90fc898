"""`rlx-rules show`: a graph's summary, and Graphviz drawings (DOT, SVG) before and after rules."""

from __future__ import annotations

import argparse
import subprocess
import sys

from ..errors import WriteError
from ..safe_write import atomic_write
from ..tools.show import DotMissing, fused_ids, neighbourhood, render_svg, summary, to_dot
from . import (ExitCode, add_cache_option, add_graph_limit_options, add_rule_limit_option, add_set_option, fail,
               int_in, load_graph_arg, parse_sets)

SHOW_EXAMPLES = """\
examples:
  rlx-rules show model.graph.json                        # size, op histogram, inputs, outputs
  rlx-rules show model.graph.json -r                     # also after the bundled rules
  rlx-rules show model.graph.json --node 12 --radius 2 --dot part.dot
  rlx-rules show model.graph.json -r my.rlxr --svg fused.svg   (needs Graphviz's dot)
"""


def run(args: argparse.Namespace) -> int:
    before = load_graph_arg(args)
    after = None
    if args.rules is not None:
        from ..api import load_rules

        rules = load_rules(*args.rules, params=parse_sets(args.set), max_rule_bytes=args.max_rule_bytes,
                           cache=args.cache)
        after, _report = rules.apply(before)
    if args.node is not None:
        part = neighbourhood(before, args.node, args.radius)  # a GraphError for an unknown id
        print(f"around %{args.node} (radius {args.radius}): {len(part)} nodes")
    print(summary(before, "before" if after is not None else "graph"))
    if after is not None:
        fused = fused_ids(before, after)
        print()
        print(summary(after, "after"))
        print(f"fused or new nodes: {len(fused)}" + (f" ({', '.join(f'%{i}' for i in sorted(fused)[:20])}"
                                                       f"{', ...' if len(fused) > 20 else ''})" if fused else ""))
    inputs = [args.graph, before.weights_file, *(args.rules or [])]  # never drawn over
    if args.dot or args.svg:
        text = to_dot(before, after, node=args.node, radius=args.radius)
        if args.dot:
            try:
                if args.dot == "-":
                    sys.stdout.write(text)
                else:
                    atomic_write(args.dot, text, inputs=inputs)
            except WriteError as e:
                return fail(e, ExitCode.OUTPUT_ERROR)
            except OSError as e:
                return fail(f"cannot write {args.dot}: {e.strerror or e}", ExitCode.OUTPUT_ERROR)
        if args.svg:
            try:
                svg = render_svg(text)
            except DotMissing as e:
                return fail(e, ExitCode.USAGE)
            except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
                return fail(e, ExitCode.OUTPUT_ERROR)
            try:
                atomic_write(args.svg, svg, inputs=inputs)
            except WriteError as e:
                return fail(e, ExitCode.OUTPUT_ERROR)
    return ExitCode.OK


def add_command(subparsers) -> None:
    p = subparsers.add_parser("show", help="summarize a graph and draw it (DOT/SVG), before and after rules",
                              epilog=SHOW_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("graph", help="input graph.json")
    p.add_argument("-r", "--rules", nargs="*", default=None, metavar="RULES",
                   help="also show the graph after these rules (no files: the bundled library)")
    add_set_option(p)
    p.add_argument("--node", type=int_in(0), help="draw only the part around this node id")
    p.add_argument("--radius", type=int_in(0, 10_000), default=2, help="with --node: how many edges away (default 2)")
    p.add_argument("--dot", metavar="FILE", help="write the drawing as Graphviz DOT text ('-' for stdout)")
    p.add_argument("--svg", metavar="FILE", help="write the drawing as SVG (needs Graphviz's dot)")
    add_graph_limit_options(p)
    add_rule_limit_option(p)
    add_cache_option(p)
    p.set_defaults(run=run)
