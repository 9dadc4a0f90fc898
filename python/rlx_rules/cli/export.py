"""`rlx-rules export`: a graph.json written in another format (RLX serde JSON)."""

from __future__ import annotations

import argparse
import sys

from ..errors import GraphError
from . import ExitCode, fail


def run(args: argparse.Namespace) -> int:
    from ..graph import Graph
    from ..onnx.rlx_json import export_rlx_json

    graph = Graph.load(args.graph)  # a GraphError here is reported by the main CLI (exit code graph_error)
    try:
        if args.output == "-":
            sys.stdout.write(export_rlx_json(graph, allow_non_rlx=args.allow_non_rlx,
                                             indent=1 if args.pretty else None) + "\n")
        else:
            export_rlx_json(graph, args.output, allow_non_rlx=args.allow_non_rlx, indent=1 if args.pretty else None)
    except GraphError as e:
        return fail(e, ExitCode.OUTPUT_ERROR if str(e).startswith("cannot write") else ExitCode.GRAPH_ERROR)
    if not args.quiet and args.output != "-":
        print(f"rlx-rules export: {args.graph} -> {args.output} ({args.format})")
    return ExitCode.OK


def add_command(subparsers) -> None:
    e = subparsers.add_parser("export", help="write a graph.json in another format (RLX's serde JSON)")
    e.add_argument("graph", help="input graph.json")
    e.add_argument("-o", "--output", required=True, help="output path ('-' for stdout)")
    e.add_argument("--format", choices=["rlx-json"], default="rlx-json")
    e.add_argument("--allow-non-rlx", action="store_true",
                   help="write ONNX-only ops as if they were RLX variants (RLX will not read them)")
    e.add_argument("--pretty", action="store_true")
    e.add_argument("-q", "--quiet", action="store_true")
    e.set_defaults(run=run)
