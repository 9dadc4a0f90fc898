"""`rlx-rules import` (ONNX or RLX JSON -> graph.json) and `rlx-rules export` (graph.json -> RLX JSON)."""

from __future__ import annotations

import argparse
import sys

from .errors import GraphError, OnnxImportError

IMPORT_EXAMPLES = """\
examples:
  rlx-rules import model.onnx -o model.graph.json          # weights to model.weights.npz
  rlx-rules import model.onnx -o g.json --weights w.npz --inline-max 64
  rlx-rules import rlx_graph.json -o model.graph.json      # RLX's own serde JSON
"""


def _is_graph_json(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    return b'"rlx-graph"' in head


def cmd_import(args: argparse.Namespace) -> int:
    from .cli import ExitCode

    src = args.model
    try:
        if src.endswith(".onnx") or args.format == "onnx":
            from .onnx.importer import import_onnx
            graph = import_onnx(src, args.output, weights_path=args.weights, inline_max_elements=args.inline_max)
        else:
            if _is_graph_json(src):
                print(f"error: {src} is already a graph.json (format \"rlx-graph\")", file=sys.stderr)
                return ExitCode.USAGE
            from .onnx.rlx_json import import_rlx_json
            graph = import_rlx_json(src, args.output)
    except OnnxImportError as e:
        print(f"error: {src}: {e}", file=sys.stderr)
        return ExitCode.GRAPH_ERROR
    except GraphError as e:
        message = str(e)
        if "cannot write" in message or "write" in message.split(":")[0]:
            print(f"error: {message}", file=sys.stderr)
            return ExitCode.OUTPUT_ERROR
        print(f"error: {src}: {message}", file=sys.stderr)
        return ExitCode.GRAPH_ERROR
    if not args.quiet:
        for w in graph.warnings:
            print(f"warning: {args.output}: {w}", file=sys.stderr)
        ops = ", ".join(f"{op}×{n}" for op, n in graph.op_counts().most_common(8))
        print(f"rlx-rules import: {src} -> {args.output}: {len(graph)} nodes ({ops})")
    return ExitCode.OK


def cmd_export(args: argparse.Namespace) -> int:
    from .cli import ExitCode
    from .graph import Graph
    from .onnx.rlx_json import export_rlx_json

    graph = Graph.load(args.graph)  # a GraphError here is reported by the main CLI (exit code graph_error)
    try:
        if args.output == "-":
            sys.stdout.write(export_rlx_json(graph, allow_non_rlx=args.allow_non_rlx,
                                             indent=1 if args.pretty else None) + "\n")
        else:
            export_rlx_json(graph, args.output, allow_non_rlx=args.allow_non_rlx, indent=1 if args.pretty else None)
    except GraphError as e:
        print(f"error: {e}", file=sys.stderr)
        return ExitCode.OUTPUT_ERROR if str(e).startswith("cannot write") else ExitCode.GRAPH_ERROR
    if not args.quiet and args.output != "-":
        print(f"rlx-rules export: {args.graph} -> {args.output} ({args.format})")
    return ExitCode.OK


def add_commands(subparsers) -> None:
    """Add `import` and `export` to the `rlx-rules` sub-command parser."""
    p = subparsers.add_parser("import", help="convert an ONNX model or RLX JSON to graph.json",
                              epilog=IMPORT_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="MODEL.onnx, or RLX's serde JSON for a Graph (.json)")
    p.add_argument("-o", "--output", required=True, help="output graph.json")
    p.add_argument("--weights", help="weights .npz (default: beside the output, NAME.weights.npz)")
    p.add_argument("--inline-max", type=int, default=16, metavar="N",
                   help="constants with at most N elements stay inline in the graph (default 16)")
    p.add_argument("--format", choices=["onnx", "rlx-json"], help="input format (default: from the file name)")
    p.add_argument("-q", "--quiet", action="store_true")
    p.set_defaults(run=cmd_import)

    e = subparsers.add_parser("export", help="write a graph.json in another format (RLX's serde JSON)")
    e.add_argument("graph", help="input graph.json")
    e.add_argument("-o", "--output", required=True, help="output path ('-' for stdout)")
    e.add_argument("--format", choices=["rlx-json"], default="rlx-json")
    e.add_argument("--allow-non-rlx", action="store_true",
                   help="write ONNX-only ops as if they were RLX variants (RLX will not read them)")
    e.add_argument("--pretty", action="store_true")
    e.add_argument("-q", "--quiet", action="store_true")
    e.set_defaults(run=cmd_export)


def main(argv=None) -> int:
    """Run the two commands alone (for tests, and until the main CLI lists them)."""
    parser = argparse.ArgumentParser(prog="rlx-rules")
    add_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    try:
        return int(args.run(args))
    except GraphError as e:
        from .cli import ExitCode
        print(f"error: {e}", file=sys.stderr)
        return ExitCode.GRAPH_ERROR


if __name__ == "__main__":
    sys.exit(main())
