"""`rlx-rules apply`: apply rules to a graph.json and print the report (text or JSON)."""

from __future__ import annotations

import argparse
import json
import os
import sys

from ..errors import GraphError
from . import (EXAMPLES, ExitCode, add_cache_option, add_graph_limit_options, add_rule_limit_option, add_set_option,
               fail, input_shape, int_in, load_graph_arg, parse_sets, seconds)


def default_output(graph_path: str) -> str:
    base = graph_path[:-5] if graph_path.endswith((".json", ".onnx")) else graph_path
    return base + ".fused.json"


def default_rule_sets(graph) -> list[str]:
    """No -r: an imported ONNX graph (its "source" field) is lifted first (@onnx); any other gets @default."""
    return ["@onnx"] if graph.to_dict().get("source") == "onnx" else []


def same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def run(args: argparse.Namespace) -> int:
    from ..api import load_rules

    onnx_weights = None
    if args.graph.endswith(".onnx"):  # imported in memory; the fused graph's weights go beside the output
        from ..errors import OnnxImportError
        from ..onnx.importer import load_onnx_graph
        try:
            graph, onnx_weights = load_onnx_graph(args.graph, input_shapes=dict(args.input_shape or []))
        except OnnxImportError as e:
            return fail(f"{args.graph}: {e}", ExitCode.GRAPH_ERROR)
    elif args.input_shape:
        return fail("--input-shape applies to an .onnx model (a graph.json's shapes are fixed at import)", ExitCode.USAGE)
    else:
        graph = load_graph_arg(args)
    rules = load_rules(*(args.rules or default_rule_sets(graph)), params=parse_sets(args.set),
                       max_rule_bytes=args.max_rule_bytes, cache=args.cache)
    for w in rules.warnings:
        print(w.format(), file=sys.stderr)
    if not args.quiet:
        for w in graph.warnings:
            print(f"warning: {args.graph}: {w}", file=sys.stderr)
    fail_after = os.environ.get("RLX_RULES_DEBUG_FAIL_AFTER_REWRITES")
    from ..tools.progress import progress

    with progress(f"rlx-rules apply: {args.graph}", quiet=args.quiet):
        fused, report = rules.apply(graph, max_rewrites=args.max_rewrites, time_budget_s=args.time_budget,
                                    max_iterations=args.max_iterations,
                                    fail_after_rewrites=int(fail_after) if fail_after else None, explain=args.explain)
    out = args.output or default_output(args.graph)
    to_stdout = out == "-"
    if not to_stdout and same_file(out, args.graph) and not args.in_place:
        return fail(f"output {out} is the input graph; pass --in-place to overwrite it", ExitCode.USAGE)
    if to_stdout:
        sys.stdout.write(fused.to_json(pretty=args.pretty) + "\n")
    else:
        try:
            if onnx_weights is not None:
                from ..onnx.importer import write_graph_with_weights
                write_graph_with_weights(fused, out, onnx_weights, pretty=args.pretty, inputs=[*args.rules, args.graph])
            else:
                fused.write(out, pretty=args.pretty, inputs=args.rules)
        except GraphError as e:
            return fail(e, ExitCode.OUTPUT_ERROR)
    stream = sys.stderr if to_stdout else sys.stdout
    if args.json:
        data = dict(report.data, input=args.graph, output=out)
        print(json.dumps(data, indent=2), file=stream)
    elif not args.quiet:
        print(f"rlx-rules apply: {args.graph} -> {'stdout' if to_stdout else out}", file=stream)
        print(report, file=stream)
    return ExitCode.OK


def add_command(subparsers) -> None:
    p = subparsers.add_parser("apply", help="apply rules to a graph.json", epilog=EXAMPLES,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("graph", help="input graph.json, or a MODEL.onnx (imported in memory; never overwritten unless "
                                 "--in-place)")
    p.add_argument("-r", "--rules", nargs="+", default=[], metavar="RULES",
                   help="rule files, or @NAME for a bundled set (@default, @seed, @onnx; default: @onnx for an "
                        "imported ONNX model, else @default)")
    p.add_argument("--input-shape", action="append", type=input_shape, metavar="NAME=D0,D1,..",
                   help="with MODEL.onnx: pin an input to a static shape (repeatable), e.g. input_ids=1,16")
    p.add_argument("-o", "--output", help="output path (default: GRAPH.fused.json; '-' for stdout)")
    add_set_option(p)
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--pretty", action="store_true", help="write the graph with one node per line")
    p.add_argument("--in-place", action="store_true", help="allow the output to replace the input graph")
    p.add_argument("--max-rewrites", type=int_in(0), default=None, metavar="N",
                   help="fail if more rewrites than this are needed (default 10 million)")
    p.add_argument("--time-budget", type=seconds, default=None, metavar="SECONDS",
                   help="fail if apply takes longer (default 600)")
    p.add_argument("--max-iterations", type=int_in(1, 2**32 - 1), default=None, metavar="N",
                   help="iterations per phase at most (default 1000; a rule file's max_iterations cannot raise it)")
    add_graph_limit_options(p)
    add_rule_limit_option(p)
    add_cache_option(p)
    p.add_argument("--explain", action="store_true", help="add each unfired rule's best near miss to the report")
    p.add_argument("-q", "--quiet", action="store_true", help="print no report")
    p.set_defaults(run=run)
