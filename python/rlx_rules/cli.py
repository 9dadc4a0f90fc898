"""The `rlx-rules` command line: a thin shell over the Python API, with named exit codes."""

from __future__ import annotations

import argparse
import enum
import json
import os
import sys
from typing import Optional, Sequence

from .errors import ApplyError, GraphError, ParamError, ProgramError, RuleError

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


def _default_output(graph_path: str) -> str:
    base = graph_path[:-5] if graph_path.endswith(".json") else graph_path
    return base + ".fused.json"


def _parse_sets(pairs: Sequence[str]) -> dict[str, str]:
    values = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise ParamError(f"--set expects NAME=VALUE, got {pair!r}")
        values[name.strip()] = value
    return values


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def cmd_apply(args: argparse.Namespace) -> int:
    from .api import load_rules
    from .graph import Graph

    rules = load_rules(*args.rules, params=_parse_sets(args.set))
    for w in rules.warnings:
        print(w.format(), file=sys.stderr)
    graph = Graph.load(args.graph)
    if not args.quiet:
        for w in graph.warnings:
            print(f"warning: {args.graph}: {w}", file=sys.stderr)
    fail_after = os.environ.get("RLX_RULES_DEBUG_FAIL_AFTER_REWRITES")
    from .progress import progress

    with progress(f"rlx-rules apply: {args.graph}", quiet=args.quiet):
        fused, report = rules.apply(graph, max_rewrites=args.max_rewrites, time_budget_s=args.time_budget,
                                    fail_after_rewrites=int(fail_after) if fail_after else None, explain=args.explain)
    out = args.output or _default_output(args.graph)
    to_stdout = out == "-"
    if not to_stdout and _same_file(out, args.graph) and not args.in_place:
        print(f"error: output {out} is the input graph; pass --in-place to overwrite it", file=sys.stderr)
        return ExitCode.USAGE
    if to_stdout:
        sys.stdout.write(fused.to_json(pretty=args.pretty) + "\n")
    else:
        try:
            fused.write(out, pretty=args.pretty)
        except GraphError as e:
            print(f"error: {e}", file=sys.stderr)
            return ExitCode.OUTPUT_ERROR
    stream = sys.stderr if to_stdout else sys.stdout
    if args.json:
        data = dict(report.data, input=args.graph, output=out)
        print(json.dumps(data, indent=2), file=stream)
    elif not args.quiet:
        print(f"rlx-rules apply: {args.graph} -> {'stdout' if to_stdout else out}", file=stream)
        print(report, file=stream)
    return ExitCode.OK


def cmd_explain(args: argparse.Namespace) -> int:
    from .api import load_rules
    from .graph import Graph
    from .report import format_miss

    rules = load_rules(*args.rules, params=_parse_sets(args.set))
    records = rules.explain(Graph.load(args.graph), rule=args.rule, node=args.node, all=args.all)
    if args.json:
        print(json.dumps(records, indent=2))
    elif not records:
        print("nothing to explain: every candidate matched (see `rlx-rules apply` for what fired)")
    else:
        print("\n".join(format_miss(r) for r in records))
    return ExitCode.OK


def cmd_verify(args: argparse.Namespace) -> int:
    from .verify import verify

    report = verify(args.rules or None, rules=args.rule or None, seed=args.seed, max_mutants=args.max_mutants)
    if args.json:
        print(json.dumps([{"rule": r.rule, "ok": r.ok, "examples": r.examples, "variants": r.variants,
                           "near_misses": r.near_misses, "guards": r.guards, "uncovered": r.uncovered,
                           "failures": r.failures} for r in report.rules], indent=2))
    else:
        print(report)
    return ExitCode.OK if report.ok else ExitCode.VERIFY_FAILED


def cmd_check(args: argparse.Namespace) -> int:
    from .api import compile_rules

    rules = compile_rules(args.rules)
    for w in rules.warnings:
        print(w.format(), file=sys.stderr)
    if not args.quiet:
        params = ", ".join(p["name"] for p in rules.program["params"]) or "none"
        print(f"ok: {len(rules.rule_names)} rules in {len(rules.phases)} phases "
              f"({', '.join(rules.phases)}); params: {params}")
    if args.strict and rules.warnings:
        return ExitCode.RULE_ERROR
    return ExitCode.OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlx-rules", description="Declarative pattern-matching rewrites for ML computation graphs.",
        epilog=EXAMPLES + "\nexit codes: " + ", ".join(f"{c.value} {c.name.lower()}" for c in ExitCode),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("apply", help="apply rules to a graph.json", epilog=EXAMPLES,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("graph", help="input graph.json (never overwritten unless --in-place)")
    p.add_argument("-r", "--rules", nargs="+", default=[], metavar="RULES",
                   help="rule files, or @NAME for a bundled set (@default, @seed, @onnx; default: @default)")
    p.add_argument("-o", "--output", help="output path (default: GRAPH.fused.json; '-' for stdout)")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="override a declared parameter")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--pretty", action="store_true", help="write the graph with one node per line")
    p.add_argument("--in-place", action="store_true", help="allow the output to replace the input graph")
    p.add_argument("--max-rewrites", type=int, default=None, help="fail if more rewrites than this are needed")
    p.add_argument("--time-budget", type=float, default=None, metavar="SECONDS", help="fail if apply takes longer")
    p.add_argument("--explain", action="store_true", help="add each unfired rule's best near miss to the report")
    p.add_argument("-q", "--quiet", action="store_true", help="print no report")
    p.set_defaults(run=cmd_apply)

    e = sub.add_parser("explain", help="why rules did (not) fire: near misses with the failing check and values")
    e.add_argument("graph", help="input graph.json")
    e.add_argument("-r", "--rules", nargs="+", default=[], metavar="RULES",
                   help="rule files, or @NAME for a bundled set (default: @default)")
    e.add_argument("--rule", help="only this rule")
    e.add_argument("--node", type=int, help="only candidates whose match involves this node id")
    e.add_argument("--all", action="store_true", help="every near miss, not just the best per rule")
    e.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="override a declared parameter")
    e.add_argument("--json", action="store_true", help="print the records as JSON")
    e.set_defaults(run=cmd_explain)

    c = sub.add_parser("check", help="check rule files and print every error")
    c.add_argument("rules", nargs="+", help="rule files")
    c.add_argument("--strict", action="store_true", help="treat warnings as errors")
    c.add_argument("-q", "--quiet", action="store_true")
    c.set_defaults(run=cmd_check)

    v = sub.add_parser("verify", help="prove each rule by execution: examples, derived near misses, numerics")
    v.add_argument("rules", nargs="*", help="rule files (default: the bundled library)")
    v.add_argument("--rule", action="append", default=[], help="only this rule (repeatable)")
    v.add_argument("--seed", type=int, default=0, help="seed of the random inputs and parameters")
    v.add_argument("--max-mutants", type=int, default=None, help="cap the derived graphs per example")
    v.add_argument("--json", action="store_true", help="print the verdicts as JSON")
    v.set_defaults(run=cmd_verify)

    from .import_cli import add_commands
    from .show import add_commands as add_show

    add_commands(sub)
    add_show(sub)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args))
    except RuleError as e:
        print(e, file=sys.stderr)
        return ExitCode.RULE_ERROR
    except ParamError as e:
        print(f"error: {e}", file=sys.stderr)
        return ExitCode.PARAM_ERROR
    except GraphError as e:
        print(f"error: {e}", file=sys.stderr)
        return ExitCode.GRAPH_ERROR
    except (ApplyError, ProgramError) as e:
        print(f"error: {e}", file=sys.stderr)
        return ExitCode.APPLY_ERROR
    except BrokenPipeError:
        return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())
