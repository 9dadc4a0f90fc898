"""The `rlx-rules` parser and `main`: each command module adds its sub-command; typed errors become exit codes."""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from . import EXAMPLES, ExitCode, report_error
from . import apply, check, explain, export, import_model, optimize, show, verify


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlx-rules", description="Declarative pattern-matching rewrites for ML computation graphs.",
        epilog=EXAMPLES + "\nexit codes: " + ", ".join(f"{c.value} {c.name.lower()}" for c in ExitCode),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for command in (apply, explain, check, verify, import_model, export, optimize, show):
        command.add_command(sub)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args))
    except Exception as e:  # noqa: BLE001 - typed errors become exit codes; a bug, one line (cli.report_error)
        return report_error(e)


if __name__ == "__main__":
    sys.exit(main())
