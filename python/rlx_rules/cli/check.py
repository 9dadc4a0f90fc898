"""`rlx-rules check`: check rule files and print every error and warning."""

from __future__ import annotations

import argparse
import sys

from . import ExitCode, add_cache_option, add_rule_limit_option


def run(args: argparse.Namespace) -> int:
    from ..api import compile_rules

    rules = compile_rules(args.rules, max_rule_bytes=args.max_rule_bytes, cache=args.cache)
    for w in rules.warnings:
        print(w.format(), file=sys.stderr)
    if args.strict and rules.warnings:
        n = len(rules.warnings)
        print(f"{n} warning{'s' if n != 1 else ''} treated as errors (--strict)", file=sys.stderr)
        return ExitCode.RULE_ERROR
    if not args.quiet:
        params = ", ".join(p["name"] for p in rules.declared_params) or "none"
        print(f"ok: {len(rules.rule_names)} rules in {len(rules.phases)} phases "
              f"({', '.join(rules.phases)}); params: {params}")
    return ExitCode.OK


def add_command(subparsers) -> None:
    c = subparsers.add_parser("check", help="check rule files and print every error")
    c.add_argument("rules", nargs="+", help="rule files")
    c.add_argument("--strict", action="store_true", help="treat warnings as errors")
    add_rule_limit_option(c)
    add_cache_option(c)
    c.add_argument("-q", "--quiet", action="store_true")
    c.set_defaults(run=run)
