"""Real-model benchmark (issue 5 §3-§4): fusion counts on the ONNX corpus, rlx-rules vs ONNX Runtime's and onnxscript's optimizers, and import+apply time on stacked BERTs of 2..192 layers.

    python benchmarks/bench_onnx.py table              # (a) fusion table on ../shared/corpus
    python benchmarks/bench_onnx.py speed --layers 2,4,8,16,32,64,128,192 [--peers-max 192] [--repeat 5]
    python benchmarks/bench_onnx.py stack 24 -o /tmp/bert24.onnx   # just write a stacked BERT
    python benchmarks/bench_onnx.py phases 192 [--repeat 7]           # where rlx-rules' import+apply time goes
    python benchmarks/bench_onnx.py run [--files bert,llama] [--realistic DIR] [--threads 1,2]   # ORT latency table
                                   # (DIR: from benchmarks/onnx_realistic_export.py, run with a torch environment)
    python benchmarks/bench_onnx.py profile DIR        # per op type, original vs rlx-rules (ORT's profiler)
    python benchmarks/bench_onnx.py profile --files falcon.eager --peers --runs 300   # corpus files, every variant
    python benchmarks/bench_onnx.py gemm               # single-core GEMM GFLOP/s at the realistic shapes (ceiling)

The stacks are built from the corpus BERT (legacy export) with the onnx package: the encoder layer's nodes and
initializers are copied N times under new names and chained (every copy has layer 0's weights). Peers that are not
installed, or that fail, are reported with the error instead of a number.
"""
from __future__ import annotations

import argparse
import collections
import copy
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CORPUS = Path(os.environ.get("RLX_CORPUS", ROOT.parent / "shared" / "corpus"))
RULES = ROOT / "python" / "rlx_rules" / "rules" / "onnx" / "default.rlxr"
FILES = ["bert", "bert.dynamo", "gpt2", "gpt2.dynamo", "llama", "llama.dynamo"]
CONFIG = {"bert": ("bert", 2, 128), "gpt2": ("gpt2", 4, 128), "llama": ("gpt2", 4, 128)}
OUR_FUSED = ["FusedAttentionBlock", "Attention", "FusedMatMulBiasAct", "FusedResidualLN", "FusedResidualRmsNorm",
             "RmsNorm", "Gelu", "GeluApprox", "Silu", "FusedSwiGLU", "Rope"]
PEER_FUSED = ["Attention", "MultiHeadAttention", "GroupQueryAttention", "SkipLayerNormalization",
              "SkipSimplifiedLayerNormalization", "SimplifiedLayerNormalization", "LayerNormalization",
              "EmbedLayerNormalization", "BiasGelu", "FastGelu", "Gelu", "BiasSplitGelu", "RotaryEmbedding",
              "MatMulNBits", "GemmFastGelu", "BiasAdd", "QuickGelu"]


# ---- stacked BERT ---------------------------------------------------------------------------------------------
def stack_bert(n_layers: int, out_path: str, src: Path = CORPUS / "bert.onnx") -> str:
    import onnx
    from onnx import helper

    model = onnx.load(str(src))
    g = model.graph
    layer = [nd for nd in g.node if "/encoder/layer.0/" in nd.name]
    produced = {o for nd in layer for o in nd.output}
    inits = {t.name: t for t in g.initializer}
    consumed = [i for nd in layer for i in nd.input if i and i not in produced]
    # the layer's input: the hidden state (produced outside the layer, not an initializer, used by the Q MatMul)
    hidden_in = next(i for nd in layer if nd.op_type == "MatMul" for i in nd.input if i not in produced and i not in inits)
    last_ln = [nd for nd in layer if nd.op_type == "LayerNormalization"][-1].output[0]
    all_layer_out = [nd for nd in g.node if "/encoder/layer." in nd.name and nd.op_type == "LayerNormalization"][-1].output[0]
    layer_inits = sorted({i for i in consumed if i in inits})
    new_nodes, new_inits = [], []
    cur = hidden_in
    for k in range(n_layers):
        ren = {t: f"L{k}/{t}" for t in produced}
        ren.update({t: f"L{k}/{t}" for t in layer_inits})
        ren[hidden_in] = cur
        for nd in layer:
            c = copy.deepcopy(nd)
            c.name = f"L{k}/{nd.name}"
            c.input[:] = [ren.get(i, i) for i in nd.input]
            c.output[:] = [ren.get(o, o) for o in nd.output]
            new_nodes.append(c)
        for t in layer_inits:
            c = copy.deepcopy(inits[t])
            c.name = ren[t]
            new_inits.append(c)
        cur = ren[last_ln]
    # nodes outside the layers: before the last layer node in ONNX's (topological) order, or after it
    last = max(k for k, nd in enumerate(g.node) if "/encoder/layer." in nd.name)
    head = [nd for k, nd in enumerate(g.node) if k < last and "/encoder/layer." not in nd.name]
    tail = []
    for nd in list(g.node)[last + 1:]:
        c = copy.deepcopy(nd)
        c.input[:] = [cur if i == all_layer_out else i for i in nd.input]
        tail.append(c)
    outputs = []
    for o in g.output:
        c = copy.deepcopy(o)
        if c.name == all_layer_out:
            c.name = cur
        outputs.append(c)
    used = {i for nd in head + new_nodes + tail for i in nd.input}
    keep_inits = [t for t in g.initializer if t.name in used and not t.name.startswith("L")]
    graph = helper.make_graph(head + new_nodes + tail, f"bert{n_layers}", list(g.input), outputs,
                              keep_inits + new_inits)
    m = helper.make_model(graph, opset_imports=list(model.opset_import), ir_version=model.ir_version,
                          producer_name="rlx-rules bench_onnx stack")
    onnx.save(m, out_path)
    return out_path


# ---- counting -------------------------------------------------------------------------------------------------
def ours(path: str, workdir: str) -> dict:
    import rlx_rules
    from rlx_rules.onnx.importer import import_onnx

    gpath = os.path.join(workdir, Path(path).name.replace(".onnx", ".graph.json"))
    _remove_outputs(gpath)  # a fresh import (replacing old files makes ext4 flush them on the rename)
    t0 = time.perf_counter()
    graph = import_onnx(path, gpath)
    t1 = time.perf_counter()
    rules = rlx_rules.load_rules(str(RULES))
    t2 = time.perf_counter()
    out, report = rules.apply(graph)
    t3 = time.perf_counter()
    counts = collections.Counter(n.op for n in out.nodes)
    return {"graph": out, "gpath": gpath, "counts": counts, "import_s": t1 - t0, "load_s": t2 - t1,
            "apply_s": t3 - t2}


def _remove_outputs(gpath: str) -> None:
    from rlx_rules.onnx.weights import default_weights_path

    for p in (gpath, default_weights_path(gpath)):
        if os.path.exists(p):
            os.remove(p)


def ours_in_memory(path: str) -> float:
    """Import without writing files (rlx_rules.onnx.importer.convert) plus apply: seconds."""
    import rlx_rules
    from rlx_rules.onnx.importer import convert

    rules = rlx_rules.load_rules(str(RULES))
    t0 = time.perf_counter()
    imp = convert(path)
    rules.apply(imp.graph)
    return time.perf_counter() - t0


def ort_peer(path: str, model_type: str, heads: int, hidden: int):
    from onnxruntime.transformers.optimizer import optimize_model

    t0 = time.perf_counter()
    m = optimize_model(path, model_type=model_type, num_heads=heads, hidden_size=hidden, opt_level=0)
    dt = time.perf_counter() - t0
    return m.model, collections.Counter(n.op_type for n in m.model.graph.node), dt


def onnxscript_peer(path: str):
    import onnx_ir as ir
    from onnxscript.rewriter.ort_fusions import optimize_for_ort

    t0 = time.perf_counter()
    model = ir.load(path)
    model, _ = optimize_for_ort(model)
    proto = ir.to_proto(model)
    dt = time.perf_counter() - t0
    return proto, collections.Counter(n.op_type for n in proto.graph.node), dt


def runs_in_ort(proto, inputs: dict) -> str:
    import onnxruntime as ort

    try:
        sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
        names = [i.name for i in sess.get_inputs()]
        sess.run(None, {k: inputs[k] for k in names})
        return "runs"
    except Exception as e:  # noqa: BLE001 - the peer's output is what is being judged
        return f"fails to run: {type(e).__name__}: {str(e).splitlines()[0][:120]}"


def fmt_counts(c: dict, keys) -> str:
    return ", ".join(f"{k} {c[k]}" for k in keys if c.get(k)) or "none"


def table(args) -> None:
    import onnxruntime as ort
    import rlx_rules
    import rlx_rules.onnx.ops  # noqa: F401 - interpreter semantics of ONNX-only ops

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in FILES:
            path = str(CORPUS / f"{name}.onnx")
            base = name.split(".")[0]
            inputs = dict(np.load(CORPUS / f"{base}.inputs.npz"))
            sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
            feed = {i.name: inputs[i.name] for i in sess.get_inputs()}
            ref = sess.run(None, feed)
            r = ours(path, tmp)
            got = rlx_rules.run(r["graph"], feed, rlx_rules.interpret.load_weights(rlx_rules.load_graph(r["gpath"])))
            err = max(float(np.max(np.abs(np.asarray(a) - b))) for a, b in zip(got, ref))
            n_layers = 2
            attn = r["counts"]["FusedAttentionBlock"] + r["counts"]["Attention"]
            row = {"file": f"{name}.onnx", "ours_attention": f"{attn} of {n_layers}",
                   "ours_ops": fmt_counts(r["counts"], OUR_FUSED), "ours_err": err,
                   "ours_ms": 1000 * (r["import_s"] + r["apply_s"])}
            mt, heads, hidden = CONFIG[base]
            try:
                proto, c, dt = ort_peer(path, mt, heads, hidden)
                a = c["Attention"] + c["MultiHeadAttention"] + c["GroupQueryAttention"]
                row["ort"] = f"{a} of {n_layers}; {fmt_counts(c, PEER_FUSED)}; {runs_in_ort(proto, inputs)}; {dt:.2f} s"
            except Exception as e:  # noqa: BLE001
                row["ort"] = f"failed: {type(e).__name__}: {str(e)[:100]}"
            try:
                proto, c, dt = onnxscript_peer(path)
                a = c["Attention"] + c["MultiHeadAttention"] + c["GroupQueryAttention"]
                row["onnxscript"] = (f"{a} of {n_layers}; {fmt_counts(c, PEER_FUSED)}; {runs_in_ort(proto, inputs)}; "
                                     f"{dt:.2f} s")
            except ImportError as e:
                row["onnxscript"] = f"not installed ({e})"
            except Exception as e:  # noqa: BLE001
                row["onnxscript"] = f"failed: {type(e).__name__}: {str(e)[:100]}"
            rows.append(row)
            print(json.dumps(row), flush=True)
    print()
    print("| file | rlx-rules: attention fused | rlx-rules: other fused ops | max abs err vs ORT | rlx import+apply "
          "| ORT optimizer (opt_level=0) | onnxscript optimize_for_ort |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['file']} | {r['ours_attention']} | {r['ours_ops']} | {r['ours_err']:.1e} | {r['ours_ms']:.0f} ms "
              f"| {r['ort']} | {r['onnxscript']} |")


def speed(args) -> None:
    layers = [int(x) for x in args.layers.split(",")]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in layers:
            path = stack_bert(n, os.path.join(tmp, f"bert{n}.onnx"))
            import onnx
            n_nodes = len(onnx.load(path, load_external_data=False).graph.node)
            times, applies, fused = [], [], None
            for _ in range(args.repeat):
                r = ours(path, tmp)
                times.append(r["import_s"] + r["apply_s"])
                applies.append(r["apply_s"])
                fused = r["counts"]["FusedAttentionBlock"]
            mem = statistics.median(ours_in_memory(path) for _ in range(args.repeat))
            row = {"layers": n, "onnx_nodes": n_nodes, "ours_s": statistics.median(times),
                   "ours_apply_s": statistics.median(applies), "ours_mem_s": mem, "ours_attention": fused}
            if n <= args.peers_max:
                for peer, fn in (("ort", lambda: ort_peer(path, "bert", 2, 128)), ("onnxscript", lambda: onnxscript_peer(path))):
                    try:
                        ts, att = [], None
                        for _ in range(args.peer_repeat):
                            proto, c, dt = fn()
                            ts.append(dt)
                            att = c["Attention"] + c["MultiHeadAttention"]
                        row[f"{peer}_s"] = statistics.median(ts)
                        row[f"{peer}_attention"] = att
                    except Exception as e:  # noqa: BLE001
                        row[f"{peer}_s"] = None
                        row[f"{peer}_error"] = f"{type(e).__name__}: {str(e)[:100]}"
            results.append(row)
            print(json.dumps(row), flush=True)
    print()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cpus, Python {platform.python_version()}")
    print("| layers | ONNX nodes | rlx-rules import+apply, files written (median) | per layer | in memory | apply alone "
          "| fused blocks | ORT optimizer | onnxscript | ORT / rlx | onnxscript / rlx |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        o = r["ours_s"]
        ort_s, osc = r.get("ort_s"), r.get("onnxscript_s")
        cell = lambda s: f"{s:.2f} s" if s is not None else "n/a"  # noqa: E731
        ratio = lambda s: f"{s / o:.0f}x" if s is not None else "n/a"  # noqa: E731
        print(f"| {r['layers']} | {r['onnx_nodes']} | {1000 * o:.0f} ms | {1000 * o / r['layers']:.2f} ms | "
              f"{1000 * r['ours_mem_s']:.0f} ms | {1000 * r['ours_apply_s']:.1f} ms | {r['ours_attention']} | {cell(ort_s)} | {cell(osc)} | {ratio(ort_s)} | {ratio(osc)} |")


def phases(args) -> None:
    """Median seconds of each part of import_onnx (files written) + apply on a stacked BERT, timed by wrapping the
    importer's steps (so they add a little overhead of their own)."""
    import functools

    import rlx_rules
    from rlx_rules import facts
    from rlx_rules.onnx import converter, importer, model
    from rlx_rules.graph import Graph

    import onnx

    steps = [(onnx, "load", "read and parse the model (onnx.load)"),
             (model, "_infer_shapes_light", "ONNX shape inference"),
             (converter.Converter, "run", "node conversion (value info, folding, RLX nodes, prune)"),
             (facts, "annotate", "value facts of the weights"),
             (Graph, "from_dict", "Graph.from_dict (json.dumps + validation)"),
             (importer, "save_weights", "weights .npz written"),
             (Graph, "write", "graph.json written")]
    spent: dict = {}
    originals = []
    for owner, name, label in steps:
        fn = owner.__dict__[name]
        originals.append((owner, name, fn))
        real = fn.__func__ if isinstance(fn, classmethod) else fn

        def timed(*a, _real=real, _label=label, **k):
            t0 = time.perf_counter()
            try:
                return _real(*a, **k)
            finally:
                spent[_label] = spent.get(_label, 0.0) + time.perf_counter() - t0
        timed = functools.wraps(real)(timed)
        setattr(owner, name, classmethod(timed) if isinstance(fn, classmethod) else timed)
    rows: dict = collections.defaultdict(list)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            path = args.onnx or stack_bert(args.n, os.path.join(tmp, f"bert{args.n}.onnx"))
            rules = rlx_rules.load_rules(str(RULES))
            for _ in range(args.repeat):
                spent.clear()
                _remove_outputs(os.path.join(tmp, "out.graph.json"))  # a fresh import, as in `speed`
                t0 = time.perf_counter()
                graph = importer.import_onnx(path, os.path.join(tmp, "out.graph.json"))
                t1 = time.perf_counter()
                rules.apply(graph)
                t2 = time.perf_counter()
                for _, _, label in steps:
                    rows[label].append(spent.get(label, 0.0))
                rows["other import work"].append((t1 - t0) - sum(spent.values()))
                rows["apply (rule engine)"].append(t2 - t1)
                rows["import + apply"].append(t2 - t0)
    finally:
        for owner, name, fn in originals:
            setattr(owner, name, fn)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cpus, Python {platform.python_version()}; "
          f"median of {args.repeat} runs")
    print("| part | median | min |")
    print("|---|---|---|")
    for label, ts in rows.items():
        print(f"| {label} | {1000 * statistics.median(ts):.0f} ms | {1000 * min(ts):.0f} ms |")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("table")
    sp = sub.add_parser("speed")
    sp.add_argument("--layers", default="2,4,8,16,32,64,128,192")
    sp.add_argument("--repeat", type=int, default=5)
    sp.add_argument("--peer-repeat", type=int, default=1)
    sp.add_argument("--peers-max", type=int, default=192)
    ph = sub.add_parser("phases")
    ph.add_argument("n", type=int, nargs="?", default=192)
    ph.add_argument("--repeat", type=int, default=7)
    ph.add_argument("--onnx", help="an ONNX file to use instead of a stack of n layers")
    rp = sub.add_parser("run", help="ONNX Runtime latency: original, ORT optimizer, onnxscript, rlx-rules")
    rp.add_argument("--files", help="corpus files whose name contains one of these (comma-separated)")
    rp.add_argument("--no-corpus", action="store_true")
    rp.add_argument("--realistic", metavar="DIR", help="folder of realistic-size exports (onnx_realistic_export.py)")
    rp.add_argument("--seq", type=int, default=128)
    rp.add_argument("--threads", default="1,2")
    rp.add_argument("--budget", type=float, default=1.0, help="seconds of timed runs per variant and thread count")
    rp.add_argument("--workdir", default=None)
    rp.add_argument("--json", action="store_true", help="also print each row as JSON as it is measured")
    pp = sub.add_parser("profile", help="per op type: where ONNX Runtime's time goes, in each variant")
    pp.add_argument("realistic", metavar="DIR", nargs="?", help="realistic-size exports (else corpus files)")
    pp.add_argument("--files", help="corpus files whose name contains one of these (comma-separated)")
    pp.add_argument("--peers", action="store_true", help="also ONNX Runtime's optimizer and onnxscript")
    pp.add_argument("--seq", type=int, default=128)
    pp.add_argument("--threads", default="1")
    pp.add_argument("--runs", type=int, default=5)
    pp.add_argument("--workdir", default=None)
    gp = sub.add_parser("gemm", help="this machine's single-core GEMM rate at the realistic shapes (the ceiling)")
    gp.add_argument("--seq", type=int, default=128)
    gp.add_argument("--runs", type=int, default=60)
    st = sub.add_parser("stack")
    st.add_argument("n", type=int)
    st.add_argument("-o", required=True)
    args = ap.parse_args(argv)
    if args.cmd == "table":
        table(args)
    elif args.cmd == "speed":
        speed(args)
    elif args.cmd == "phases":
        phases(args)
    elif args.cmd == "run":
        from bench_onnx_run import run
        run(args)
    elif args.cmd == "profile":
        from bench_onnx_run import profile
        profile(args)
    elif args.cmd == "gemm":
        from bench_onnx_run import gemm
        gemm(args)
    else:
        print(stack_bert(args.n, args.o))


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception:
        traceback.print_exc()
        sys.exit(1)
