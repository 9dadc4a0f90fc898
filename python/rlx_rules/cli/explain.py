"""`rlx-rules explain`: why rules did (not) fire, as near misses with the failing check and the values."""

from __future__ import annotations

import argparse
import json

from . import (ExitCode, add_cache_option, add_graph_limit_options, add_rule_limit_option, add_set_option, int_in,
               load_graph_arg, parse_sets)


def run(args: argparse.Namespace) -> int:
    from ..api import load_rules
    from ..tools.explain import format_miss

    rules = load_rules(*args.rules, params=parse_sets(args.set), max_rule_bytes=args.max_rule_bytes,
                       cache=args.cache)
    graph = load_graph_arg(args)
    records = rules.explain(graph, rule=args.rule, node=args.node, all=args.all)
    if args.json:
        print(json.dumps([r.to_dict() for r in records], indent=2))
        return ExitCode.OK
    # What fired, then the candidates where it did not (on the graph as each rule's phase found it).
    _, report = rules.apply(graph)
    fired = {name: s.fired for name, s in report.rules.items() if s.fired and args.rule in (None, name)}
    for name, n in fired.items():
        print(f"{name} fired {n} time{'s' if n != 1 else ''}")
    if records:
        print("\n".join(format_miss(r) for r in records))
    elif not fired:
        what = f"rule {args.rule!r} has" if args.rule else "the rules have"
        print(f"nothing to explain: {what} no candidate that failed a check (no node of the root's op, "
              "or every match was refused as unsafe: see `rlx-rules apply`)")
    return ExitCode.OK


def add_command(subparsers) -> None:
    e = subparsers.add_parser("explain", help="why rules did (not) fire: near misses with the failing check and values")
    e.add_argument("graph", help="input graph.json")
    e.add_argument("-r", "--rules", nargs="+", default=[], metavar="RULES",
                   help="rule files, or @NAME for a bundled set (default: @default)")
    e.add_argument("--rule", help="only this rule")
    e.add_argument("--node", type=int_in(0), help="only candidates whose match involves this node id")
    e.add_argument("--all", action="store_true", help="every near miss, not just the best per rule")
    add_set_option(e)
    add_graph_limit_options(e)
    add_rule_limit_option(e)
    add_cache_option(e)
    e.add_argument("--json", action="store_true", help="print the records as JSON")
    e.set_defaults(run=run)
