"""`rlx-rules apply`: apply rules to a graph.json and print the report (text or JSON); several graphs or a folder
run on every core (run_batch), with one report per graph and a summary."""

from __future__ import annotations

import argparse
import json
import os
import sys

from ..errors import GraphError
from . import (EXAMPLES, ExitCode, add_cache_option, add_graph_limit_options, add_input_shape_option,
               add_rule_limit_option, add_set_option, fail, int_in, load_graph_arg, parse_sets, seconds)


def default_output(graph_path: str) -> str:
    base = graph_path[:-5] if graph_path.endswith((".json", ".onnx")) else graph_path
    return base + ".fused.json"


def default_rule_sets(graph) -> list[str]:
    """No -r: an imported ONNX graph (its "source" field) is lifted first (@onnx); any other gets @default."""
    return ["@onnx"] if graph.field("source") == "onnx" else []  # one field, not the whole graph as a dict


def same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def run(args: argparse.Namespace) -> int:
    if len(args.graphs) > 1 or os.path.isdir(args.graphs[0]):
        return run_batch(args)
    args.graph = args.graphs[0]
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
    if not getattr(args, "rule_warnings_shown", False):
        for w in rules.warnings:
            print(w.format(), file=sys.stderr)
    if not args.quiet:
        for w in graph.warnings:
            print(f"warning: {args.graph}: {w}", file=sys.stderr)
    fail_after = os.environ.get("RLX_RULES_DEBUG_FAIL_AFTER_REWRITES")
    from ..tools.progress import progress

    limits = {"max_rewrites": args.max_rewrites, "time_budget_s": args.time_budget,
              "max_iterations": args.max_iterations, "fail_after_rewrites": int(fail_after) if fail_after else None}
    weights_file = graph.weights_file  # read now: the apply consumes the graph
    with progress(f"rlx-rules apply: {args.graph}", quiet=args.quiet):
        # The input graph is never read again: the core takes its nodes rather than copying them. With no report
        # printed, none is built (a faster start).
        fused, report = rules._apply_taking(graph, report=args.json or not args.quiet, explain=args.explain, **limits)
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
                fused.write(out, pretty=args.pretty, inputs=[*args.rules, weights_file])
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


def batch_inputs(paths: list[str]) -> list[str]:
    """The graphs named: each file as given, and each folder's *.json and *.onnx files (not its *.fused.json
    outputs), sorted."""
    graphs = []
    for path in paths:
        if os.path.isdir(path):
            graphs += sorted(os.path.join(path, name) for name in os.listdir(path)
                             if name.endswith((".json", ".onnx")) and not name.endswith(".fused.json")
                             and os.path.isfile(os.path.join(path, name)))
        else:
            graphs.append(path)
    return graphs


def batch_outputs(args: argparse.Namespace, graphs: list[str]) -> list[str]:
    """Each graph's output: GRAPH.fused.json beside it, or in the folder -o names. Raises ParamError when two
    graphs would write one file or an output is one of the inputs (inputs are never overwritten)."""
    from ..errors import ParamError

    if args.output == "-" or args.in_place:
        raise ParamError("with several graphs or a folder, -o names a folder (not '-') and --in-place is refused")
    if args.output and os.path.exists(args.output) and not os.path.isdir(args.output):
        raise ParamError(f"with several graphs or a folder, -o names a folder; {args.output} is a file")
    outputs = [os.path.join(args.output, os.path.basename(default_output(g))) if args.output else default_output(g)
               for g in graphs]
    seen: dict[str, str] = {}
    for graph, out in zip(graphs, outputs):
        if os.path.realpath(out) in seen:
            raise ParamError(f"{seen[os.path.realpath(out)]} and {graph} would both write {out}")
        seen[os.path.realpath(out)] = graph
        clash = next((g for g in graphs if same_file(out, g)), None)
        if clash is not None:
            raise ParamError(f"the output of {graph}, {out}, is the input {clash} (inputs are never overwritten)")
    return outputs


def run_batch(args: argparse.Namespace) -> int:
    """Apply the rules to every graph on up to --jobs processes. Prints each graph's report (in the order given)
    and a summary; returns 0 when every graph was rewritten and written, else the exit code of the first graph
    that failed. Rule errors stop the batch before any graph runs."""
    from ..api import load_rules
    from ..errors import ParamError
    from ..tools.batch import default_jobs, run_many
    from . import report_error

    graphs = batch_inputs(args.graphs)
    if not graphs:
        return fail(f"no graphs (*.json, *.onnx) in {', '.join(args.graphs)}", ExitCode.USAGE)
    try:
        outputs = batch_outputs(args, graphs)
    except ParamError as e:
        return fail(e, ExitCode.USAGE)
    if args.rules:  # checked once, here, which also fills the compiled-rule cache for the workers
        rules = load_rules(*args.rules, params=parse_sets(args.set), max_rule_bytes=args.max_rule_bytes,
                           cache=args.cache)
        for w in rules.warnings:
            print(w.format(), file=sys.stderr)
    if args.output:
        try:
            os.makedirs(args.output, exist_ok=True)
        except OSError as e:
            return fail(f"cannot make the output folder {args.output}: {e.strerror or e}", ExitCode.OUTPUT_ERROR)
    jobs = [argparse.Namespace(**{**vars(args), "graphs": [g], "output": out, "rule_warnings_shown": bool(args.rules)})
            for g, out in zip(graphs, outputs)]
    workers = min(args.jobs or default_jobs(), len(jobs))
    reports, failed = [], []
    for graph, out, outcome in zip(graphs, outputs, run_many(run, report_error, jobs, workers)):
        if outcome.code != ExitCode.OK:
            failed.append((graph, outcome.code))
            print(f"rlx-rules apply: {graph} failed (exit {outcome.code})", file=sys.stderr)
        sys.stderr.write(outcome.stderr)
        if outcome.code != ExitCode.OK:
            reports.append({"input": graph, "output": out, "exit_code": outcome.code, "error": outcome.stderr.strip()})
        elif args.json:
            reports.append(dict(json.loads(outcome.stdout), exit_code=0))
        else:
            sys.stdout.write(outcome.stdout)
    summary = {"graphs": len(graphs), "done": len(graphs) - len(failed), "failed": len(failed), "processes": workers}
    if args.json:
        print(json.dumps({"graphs": reports, "summary": summary}, indent=2))
    elif not args.quiet or failed:
        names = "" if not failed else ": " + ", ".join(f"{g} (exit {c})" for g, c in failed)
        print(f"rlx-rules apply: {len(graphs)} graphs on {workers} processes, {summary['done']} done, "
              f"{len(failed)} failed{names}", file=sys.stderr if failed else sys.stdout)
    return failed[0][1] if failed else ExitCode.OK


def add_command(subparsers) -> None:
    p = subparsers.add_parser("apply", help="apply rules to a graph.json", epilog=EXAMPLES,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("graphs", nargs="+", metavar="GRAPH",
                   help="input graph.json, or a MODEL.onnx (imported in memory; never overwritten unless --in-place); "
                        "several, or a folder (its *.json and *.onnx): each on its own core, one report per graph "
                        "and a summary; the exit code is the first failed graph's")
    p.add_argument("-r", "--rules", nargs="+", default=[], metavar="RULES",
                   help="rule files, or @NAME for a bundled set (@default, @seed, @onnx; default: @onnx for an "
                        "imported ONNX model, else @default)")
    add_input_shape_option(p, applies_to="with MODEL.onnx: ")
    p.add_argument("-o", "--output", help="output path (default: GRAPH.fused.json; '-' for stdout); with several "
                                          "graphs, a folder for the GRAPH.fused.json files")
    p.add_argument("-j", "--jobs", type=int_in(1), default=None, metavar="N",
                   help="with several graphs: processes at most (default: every core)")
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
