"""`rlx-rules import`: an ONNX model or RLX serde JSON becomes a graph.json (weights to a .npz beside it)."""

from __future__ import annotations

import argparse
import sys

from ..errors import GraphError, OnnxImportError, OutputError
from ..formats import GRAPH_FORMAT
from . import ExitCode, add_input_shape_option, fail, int_in

IMPORT_EXAMPLES = """\
examples:
  rlx-rules import model.onnx -o model.graph.json          # weights to model.weights.npz
  rlx-rules import model.onnx -o g.json --weights w.npz --inline-max 64
  rlx-rules import rlx_graph.json -o model.graph.json      # RLX's own serde JSON
"""


def is_graph_json(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    return f'"{GRAPH_FORMAT}"'.encode() in head


def run(args: argparse.Namespace) -> int:
    src = args.model
    try:
        if src.endswith(".onnx") or args.format == "onnx":
            from ..onnx.importer import import_onnx
            graph = import_onnx(src, args.output, weights_path=args.weights, inline_max_elements=args.inline_max,
                                input_shapes=dict(args.input_shape or []))
        else:
            if is_graph_json(src):
                return fail(f"{src} is already a graph.json (format \"{GRAPH_FORMAT}\")", ExitCode.USAGE)
            from ..onnx.rlx_json import import_rlx_json
            graph = import_rlx_json(src, args.output)
    except OutputError as e:  # the graph or weights could not be written (also a GraphError)
        return fail(e, ExitCode.OUTPUT_ERROR)
    except (OnnxImportError, GraphError) as e:
        message = str(e)
        return fail(message if message.startswith(src) else f"{src}: {message}", ExitCode.GRAPH_ERROR)
    except RecursionError:
        return fail(f"{src}: the input nests too deeply to read", ExitCode.GRAPH_ERROR)
    if not args.quiet:
        for w in graph.warnings:
            print(f"warning: {args.output}: {w}", file=sys.stderr)
        ops = ", ".join(f"{op}×{n}" for op, n in graph.op_counts().most_common(8))
        print(f"rlx-rules import: {src} -> {args.output}: {len(graph)} nodes ({ops})")
    return ExitCode.OK


def add_command(subparsers) -> None:
    p = subparsers.add_parser("import", help="convert an ONNX model or RLX JSON to graph.json",
                              epilog=IMPORT_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="MODEL.onnx, or RLX's serde JSON for a Graph (.json)")
    p.add_argument("-o", "--output", required=True, help="output graph.json")
    p.add_argument("--weights", help="weights .npz (default: beside the output, NAME.weights.npz)")
    p.add_argument("--inline-max", type=int_in(0), default=16, metavar="N",
                   help="constants with at most N elements stay inline in the graph (default 16)")
    add_input_shape_option(p)
    p.add_argument("--format", choices=["onnx", "rlx-json"], help="input format (default: from the file name)")
    p.add_argument("-q", "--quiet", action="store_true")
    p.set_defaults(run=run)
