"""`rlx-rules export`: a graph.json written in another format (ONNX for ONNX Runtime, or RLX serde JSON)."""

from __future__ import annotations

import argparse
import sys

from ..errors import ExportError, GraphError, OnnxImportError, OutputError
from . import ExitCode, add_graph_limit_options, fail, int_in, load_graph_arg

EXPORT_EXAMPLES = """\
examples:
  rlx-rules export --format onnx fused.graph.json -o model.fused.onnx    # weights from the graph's .npz
  rlx-rules export --format onnx g.json -o m.onnx --external-data        # weights to m.onnx.data
  rlx-rules export g.json -o g.rlx.json                                  # RLX's serde JSON
"""


def run_onnx(args: argparse.Namespace) -> int:
    from ..onnx.export import export_onnx
    from ..interpret.weights import weights_path

    if args.output == "-":
        return fail("an ONNX model is binary: give a file with -o", ExitCode.USAGE)
    graph = load_graph_arg(args)
    try:
        model = export_onnx(graph, args.output, opset=args.opset, external_data=args.external_data or None,
                            inputs=[args.graph, weights_path(graph)])
    except ExportError as e:
        return fail(f"{args.graph}: {e}", ExitCode.GRAPH_ERROR)
    except OutputError as e:
        return fail(e, ExitCode.OUTPUT_ERROR)
    if not args.quiet:
        contrib = sorted({n.op_type for n in model.graph.node if n.domain == "com.microsoft"})
        print(f"rlx-rules export: {args.graph} -> {args.output} (onnx, opset {model.opset_import[0].version}, "
              f"{len(model.graph.node)} nodes; com.microsoft: {', '.join(contrib) or 'none'})")
    return ExitCode.OK


def run(args: argparse.Namespace) -> int:
    if args.format == "onnx":
        try:
            return run_onnx(args)
        except OnnxImportError as e:
            return fail(e, ExitCode.GRAPH_ERROR)
    from ..onnx.rlx_json import export_rlx_json

    graph = load_graph_arg(args)  # a GraphError here is reported by the main CLI (exit code graph_error)
    try:
        if args.output == "-":
            sys.stdout.write(export_rlx_json(graph, allow_non_rlx=args.allow_non_rlx,
                                             indent=1 if args.pretty else None) + "\n")
        else:
            export_rlx_json(graph, args.output, allow_non_rlx=args.allow_non_rlx, indent=1 if args.pretty else None)
    except GraphError as e:
        return fail(e, ExitCode.OUTPUT_ERROR if str(e).startswith("cannot write") else ExitCode.GRAPH_ERROR)
    if not args.quiet and args.output != "-":
        print(f"rlx-rules export: {args.graph} -> {args.output} ({args.format})")
    return ExitCode.OK


def add_command(subparsers) -> None:
    e = subparsers.add_parser("export", help="write a graph.json as ONNX (ONNX Runtime) or RLX's serde JSON",
                              epilog=EXPORT_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    e.add_argument("graph", help="input graph.json (its \"weights\" .npz gives the ONNX initializers)")
    e.add_argument("-o", "--output", required=True, help="output path ('-' for stdout, RLX JSON only)")
    e.add_argument("--format", choices=["rlx-json", "onnx"], default="rlx-json")
    e.add_argument("--opset", type=int_in(1, 2**31 - 1), default=None,
                   help="ONNX opset (default: the imported model's, at least 17)")
    e.add_argument("--external-data", action="store_true",
                   help="ONNX: weights to OUTPUT.data beside the model (automatic past 1 GiB)")
    e.add_argument("--allow-non-rlx", action="store_true",
                   help="write ONNX-only ops as if they were RLX variants (RLX will not read them)")
    e.add_argument("--pretty", action="store_true")
    e.add_argument("-q", "--quiet", action="store_true")
    add_graph_limit_options(e)
    e.set_defaults(run=run)
