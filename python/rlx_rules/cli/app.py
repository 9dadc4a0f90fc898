"""The `rlx-rules` parser and `main`: each command module adds its sub-command; typed errors become exit codes."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Optional, Sequence

from ..errors import (ApplyError, GraphError, KernelError, OnnxImportError, OutputError, ParamError, ProgramError,
                      RlxRulesError, RuleError)
from . import EXAMPLES, ExitCode, fail
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
    except RuleError as e:
        print(e, file=sys.stderr)
        return ExitCode.RULE_ERROR
    except ParamError as e:
        return fail(e, ExitCode.PARAM_ERROR)
    except OutputError as e:  # before GraphError: a refused or failed write is also a GraphError
        return fail(e, ExitCode.OUTPUT_ERROR)
    except (GraphError, OnnxImportError) as e:
        return fail(e, ExitCode.GRAPH_ERROR)
    except (ApplyError, ProgramError, KernelError) as e:
        return fail(e, ExitCode.APPLY_ERROR)
    except BrokenPipeError:
        return ExitCode.OK
    except RlxRulesError as e:
        return fail(e, ExitCode.INTERNAL_ERROR)
    except (RecursionError, MemoryError) as e:
        return fail(f"the input is too deep or too large to process ({type(e).__name__})", ExitCode.INTERNAL_ERROR)
    except Exception as e:  # noqa: BLE001 - a bug: one line, not a traceback (RLX_RULES_TRACEBACK=1 shows it)
        if os.environ.get("RLX_RULES_TRACEBACK"):
            raise
        return fail(f"internal error (a bug in rlx-rules; please report it): {type(e).__name__}: {e}",
                    ExitCode.INTERNAL_ERROR)


if __name__ == "__main__":
    sys.exit(main())
