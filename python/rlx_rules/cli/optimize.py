"""`rlx-rules optimize`: ONNX in, fused ONNX out (import, the @onnx lifting rules and the fusion library, export)."""

from __future__ import annotations

import argparse
import json

from ..errors import ExportError, OnnxImportError, OutputError
from . import ExitCode, add_input_shape_option, add_set_option, fail, int_in, parse_sets, seconds

OPTIMIZE_EXAMPLES = """\
examples:
  rlx-rules optimize model.onnx -o model.fused.onnx             # prints the fusion report
  rlx-rules optimize model.onnx -o m.onnx --input-shape input_ids=1,128 --input-shape attention_mask=1,128
  rlx-rules optimize model.onnx -o m.onnx -r @onnx my_rules.rlxr --json
"""


def run(args: argparse.Namespace) -> int:
    from ..onnx.export import optimize_onnx
    from ..tools.progress import progress

    try:
        with progress(f"rlx-rules optimize: {args.model}", quiet=args.quiet):
            model, report = optimize_onnx(args.model, args.output, rules=args.rules or ["@onnx"],
                                          params=parse_sets(args.set), input_shapes=dict(args.input_shape or []),
                                          external_data=args.external_data or None,
                                          max_rewrites=args.max_rewrites, time_budget_s=args.time_budget)
    except OutputError as e:
        return fail(e, ExitCode.OUTPUT_ERROR)
    except (OnnxImportError, ExportError) as e:
        return fail(f"{args.model}: {e}", ExitCode.GRAPH_ERROR)
    contrib = sorted({n.op_type for n in model.graph.node if n.domain == "com.microsoft"})
    if args.json:
        print(json.dumps(dict(report.data, input=args.model, output=args.output, onnx_nodes=len(model.graph.node),
                              contrib_ops=contrib), indent=2))
    elif not args.quiet:
        print(f"rlx-rules optimize: {args.model} -> {args.output}")
        print(report)
        print(f"onnx: {len(model.graph.node)} nodes; com.microsoft: {', '.join(contrib) or 'none'}")
    return ExitCode.OK


def add_command(subparsers) -> None:
    p = subparsers.add_parser("optimize", help="fuse an ONNX model: import, apply @onnx, export to ONNX",
                              epilog=OPTIMIZE_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="input MODEL.onnx (never overwritten)")
    p.add_argument("-o", "--output", required=True, help="output .onnx")
    p.add_argument("-r", "--rules", nargs="+", default=[], metavar="RULES",
                   help="rule files or @NAME (default: @onnx, the lifting rules then the fusion library)")
    add_set_option(p)
    add_input_shape_option(p)
    p.add_argument("--external-data", action="store_true",
                   help="weights to OUTPUT.data beside the model (automatic past 1 GiB)")
    p.add_argument("--max-rewrites", type=int_in(0), default=None, metavar="N",
                   help="fail if more rewrites than this are needed (default 10 million)")
    p.add_argument("--time-budget", type=seconds, default=None, metavar="SECONDS",
                   help="fail if apply takes longer (default 600)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("-q", "--quiet", action="store_true")
    p.set_defaults(run=run)
