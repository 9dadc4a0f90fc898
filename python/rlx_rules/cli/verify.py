"""`rlx-rules verify`: prove each rule by execution (examples, derived near misses, numerics)."""

from __future__ import annotations

import argparse
import json

from . import ExitCode, fail, int_in


def run(args: argparse.Namespace) -> int:
    from ..tools.verify import verify

    report = verify(args.rules or None, rules=args.rule or None, seed=args.seed, max_mutants=args.max_mutants)
    unknown = sorted(set(args.rule) - {r.rule for r in report.rules})
    if unknown:
        return fail(f"no rule named {', '.join(map(repr, unknown))} in the rule files", ExitCode.PARAM_ERROR)
    if args.json:
        print(json.dumps([{"rule": r.rule, "ok": r.ok, "examples": r.examples, "variants": r.variants,
                           "near_misses": r.near_misses, "guards": r.guards, "uncovered": r.uncovered,
                           "failures": r.failures} for r in report.rules], indent=2))
    else:
        print(report)
    return ExitCode.OK if report.ok else ExitCode.VERIFY_FAILED


def add_command(subparsers) -> None:
    v = subparsers.add_parser("verify", help="prove each rule by execution: examples, derived near misses, numerics")
    v.add_argument("rules", nargs="*", help="rule files (default: the bundled library)")
    v.add_argument("--rule", action="append", default=[], help="only this rule (repeatable)")
    v.add_argument("--seed", type=int_in(0, 2**32 - 1), default=0, help="seed of the random inputs and parameters")
    v.add_argument("--max-mutants", type=int_in(0), default=None, help="cap the derived graphs per example")
    v.add_argument("--json", action="store_true", help="print the verdicts as JSON")
    v.set_defaults(run=run)
