"""`bench_onnx.py run`: ONNX Runtime latency (medians, all session optimizations on, 1 and 2 threads) of each model
as exported, after ONNX Runtime's transformers optimizer, after onnxscript's optimize_for_ort, and after
`rlx-rules optimize`; every variant is pinned to the benchmark's input shapes and checked against the original."""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "corpus"
TORCH_PYTHON = Path(os.environ.get("RLX_TORCH_PYTHON", "/work/corpus-venv/bin/python"))
REALISTIC = {  # file stem -> (ORT optimizer model type, heads, hidden)
    "bert_base": ("bert", 12, 768),
    "llama_768": ("gpt2", 12, 768),
}
VARIANTS = ("original", "ort_optimizer", "onnxscript", "rlx_rules")
ONNXSCRIPT = """
import sys, traceback
import onnx_ir as ir
from onnxscript.rewriter.ort_fusions import optimize_for_ort
for src, dst in zip(sys.argv[1::2], sys.argv[2::2]):
    try:
        model, _ = optimize_for_ort(ir.load(src))
        ir.save(model, dst)
        print("ok", dst, flush=True)
    except Exception as e:
        print("error", dst, type(e).__name__, str(e).splitlines()[0][:200] if str(e) else "", flush=True)
"""


def pin(src: Path, dst: Path, shapes: dict) -> None:
    """A copy of the model whose inputs have static shapes, without the exporter's value_info."""
    import onnx

    model = onnx.load(str(src))
    for inp in model.graph.input:
        if inp.name in shapes:
            dims = inp.type.tensor_type.shape.dim
            for d, n in zip(dims, shapes[inp.name]):
                d.Clear()
                d.dim_value = int(n)
    del model.graph.value_info[:]
    for out in model.graph.output:
        out.type.tensor_type.ClearField("shape")
    onnx.save(model, str(dst), save_as_external_data=model.ByteSize() > 1.8e9)


def ort_optimizer(src: Path, dst: Path, model_type: str, heads: int, hidden: int) -> str:
    from onnxruntime.transformers.optimizer import optimize_model

    m = optimize_model(str(src), model_type=model_type, num_heads=heads, hidden_size=hidden, opt_level=0)
    m.save_model_to_file(str(dst))
    return "ok"


def onnxscript_all(pairs: list[tuple[Path, Path]]) -> dict[Path, str]:
    """onnxscript's optimize_for_ort on every (src, dst) pair, in the torch environment (one process)."""
    if not TORCH_PYTHON.exists():
        return {dst: f"not run: no {TORCH_PYTHON}" for _, dst in pairs}
    args = [str(p) for pair in pairs for p in pair]
    r = subprocess.run([str(TORCH_PYTHON), "-c", ONNXSCRIPT, *args], capture_output=True, text=True, timeout=3600)
    status = {dst: f"error: {r.stderr.strip().splitlines()[-1][:200] if r.stderr.strip() else 'no output'}"
              for _, dst in pairs}
    for line in r.stdout.splitlines():
        word, dst, *rest = line.split(" ", 2)
        status[Path(dst)] = "ok" if word == "ok" else "error: " + " ".join(rest)
    return status


def ours(src: Path, dst: Path, shapes: dict) -> str:
    from rlx_rules.onnx.export import optimize_onnx

    optimize_onnx(str(src), str(dst), input_shapes=shapes)
    return "ok"


def session(path: Path, threads: int):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def latencies_ms(sessions: dict, feed: dict, budget_s: float, max_runs: int) -> dict:
    """Per session: the median and min wall time of a run, and the median CPU time of the calling thread (with one
    intra-op thread ONNX Runtime computes on the caller, so that is the run's own work, whatever else the machine
    runs). Sessions are measured round-robin (one run of each in turn): a shared machine's load falls on all alike."""
    feeds = {v: {i.name: feed[i.name] for i in s.get_inputs()} for v, s in sessions.items()}
    for v, s in sessions.items():
        for _ in range(2):
            s.run(None, feeds[v])
    wall: dict = {v: [] for v in sessions}
    cpu: dict = {v: [] for v in sessions}
    t_end = time.perf_counter() + budget_s * len(sessions)
    for k in range(max_runs):
        if k >= 5 and time.perf_counter() > t_end:
            break
        for v, s in sessions.items():
            c0, t0 = time.thread_time(), time.perf_counter()
            s.run(None, feeds[v])
            wall[v].append(time.perf_counter() - t0)
            cpu[v].append(time.thread_time() - c0)
    return {v: (statistics.median(wall[v]) * 1e3, min(wall[v]) * 1e3, statistics.median(cpu[v]) * 1e3, len(wall[v]))
            for v in sessions}


def measure(name: str, src: Path, feed: dict, model_type: str, heads: int, hidden: int, work: Path,
            threads: list[int], budget_s: float, max_runs: int, onnxscript_status: dict) -> dict:
    shapes = {k: list(v.shape) for k, v in feed.items()}
    paths = {v: work / f"{name}.{v}.onnx" for v in VARIANTS}
    status = {"original": "ok", "onnxscript": onnxscript_status.get(paths["onnxscript"], "not run")}
    for variant, make in (("ort_optimizer", lambda: ort_optimizer(paths["original"], paths["ort_optimizer"],
                                                                  model_type, heads, hidden)),
                          ("rlx_rules", lambda: ours(paths["original"], paths["rlx_rules"], shapes))):
        try:
            status[variant] = make()
        except Exception as e:  # noqa: BLE001 - a variant that fails is reported, not fatal
            status[variant] = f"error: {type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
    row = {"file": name, "status": status, "ms": {}, "max_abs_diff": {}}
    ref, runnable = None, []
    for variant in VARIANTS:
        if status[variant] != "ok":
            continue
        try:
            sess = session(paths[variant], threads[0])
            out = sess.run(None, {i.name: feed[i.name] for i in sess.get_inputs()})[0]
        except Exception as e:  # noqa: BLE001
            status[variant] = f"fails to run: {type(e).__name__}: {str(e).splitlines()[0][:160]}"
            continue
        if ref is None:
            ref = out
        diff = float(np.nanmax(np.abs(out.astype(np.float64) - ref))) if out.shape == ref.shape else float("inf")
        row["max_abs_diff"][variant] = diff
        runnable.append(variant)
        del sess
    for t in threads:
        sessions = {v: session(paths[v], t) for v in runnable}
        for v, (median, best, cpu, runs) in latencies_ms(sessions, feed, budget_s, max_runs).items():
            row["ms"].setdefault(v, {})[t] = median
            row.setdefault("min_ms", {}).setdefault(v, {})[t] = best
            if t == 1:
                row.setdefault("cpu_ms", {})[v] = cpu
            row.setdefault("runs", {})[t] = runs
        del sessions
    return row


def corpus_cases(files: list[str]) -> list[tuple]:
    manifest = json.loads((CORPUS / "manifest.json").read_text())
    cases = []
    for e in manifest["files"]:
        if not e.get("exported") or not e.get("file"):
            continue
        stem = e["file"][: -len(".onnx")]
        if files and not any(f in stem for f in files):
            continue
        feed = dict(np.load(CORPUS / f"{stem}.inputs.npz"))
        cases.append((stem, CORPUS / e["file"], feed, e["ort_optimizer"]["model_type"], e["heads"], e["hidden"]))
    return cases


def realistic_cases(folder: Path, seq: int) -> list[tuple]:
    cases = []
    rng = np.random.default_rng(0)
    for path in sorted(folder.glob("*.onnx")):
        key = path.name.split(".")[0]
        if key not in REALISTIC:
            continue
        model_type, heads, hidden = REALISTIC[key]
        feed = {"input_ids": rng.integers(0, 1000, (1, seq)).astype(np.int64),
                "attention_mask": np.ones((1, seq), np.int64)}
        cases.append((path.name[: -len(".onnx")], path, feed, model_type, heads, hidden))
    return cases


def cell(row: dict, variant: str, t: int) -> str:
    ms = row["ms"].get(variant, {}).get(t)
    if ms is None:
        return row["status"][variant].split(":")[0]
    bad = row["max_abs_diff"].get(variant, 0) > 1e-3
    return f"{ms:.3f}" + (" (differs)" if bad else "")


def ratio_cells(row: dict, values: dict) -> tuple[str, str]:
    """rlx-rules against the best faithful alternative, and against the original (times in `values`)."""
    ours_ms, orig = values.get("rlx_rules"), values.get("original")
    others = [values[v] for v in VARIANTS[:3] if v in values and row["max_abs_diff"].get(v, 0) <= 1e-3]
    return (f"{min(others) / ours_ms:.2f}x" if ours_ms and others else "-",
            f"{orig / ours_ms:.2f}x" if ours_ms and orig else "-")


def print_table(rows: list[dict], threads: list[int]) -> None:
    print("CPU time of a run, 1 intra-op thread (ms, median; robust to other load on the machine):\n")
    print("| file | original | ORT optimizer | onnxscript | rlx-rules | vs best other | vs original | max diff |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        cpu = row.get("cpu_ms", {})
        cells = [f"{cpu[v]:.3f}" + (" (differs)" if row["max_abs_diff"].get(v, 0) > 1e-3 else "")
                 if v in cpu else row["status"][v].split(":")[0] for v in VARIANTS]
        diff = row["max_abs_diff"].get("rlx_rules")
        print(f"| {row['file']} | " + " | ".join(cells) + " | " + " | ".join(ratio_cells(row, cpu)) +
              f" | {'-' if diff is None else f'{diff:.1e}'} |")
    print("\nWall time of a run (ms, median), by intra-op threads:\n")
    print("| file | threads | original | ORT optimizer | onnxscript | rlx-rules | vs best other | vs original |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        for t in threads:
            values = {v: ms[t] for v, ms in row["ms"].items() if t in ms}
            print(f"| {row['file']} | {t} | " + " | ".join(cell(row, v, t) for v in VARIANTS) + " | " +
                  " | ".join(ratio_cells(row, values)) + " |", flush=True)


def run(args) -> None:
    threads = [int(t) for t in args.threads.split(",")]
    cases = []
    if not args.no_corpus:
        cases += corpus_cases([f for f in (args.files or "").split(",") if f])
    if args.realistic:
        cases += realistic_cases(Path(args.realistic), args.seq)
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        work = Path(tmp)
        for name, src, feed, *_ in cases:
            pin(src, work / f"{name}.original.onnx", {k: v.shape for k, v in feed.items()})
        onnxscript_status = onnxscript_all([(work / f"{c[0]}.original.onnx", work / f"{c[0]}.onnxscript.onnx")
                                            for c in cases])
        rows = []
        for name, src, feed, model_type, heads, hidden in cases:
            big = (work / f"{name}.original.onnx").stat().st_size > 50e6
            rows.append(measure(name, src, feed, model_type, heads, hidden, work, threads,
                                args.budget * (4 if big else 1), 40 if big else 300, onnxscript_status))
            for v in VARIANTS:
                if v != "original":
                    (work / f"{name}.{v}.onnx").unlink(missing_ok=True)
            if args.json:
                print(json.dumps(rows[-1]), flush=True)
    print_table(rows, threads)


def op_times_ms(path: Path, feed: dict, threads: int, runs: int) -> tuple[float, dict, dict]:
    """Milliseconds per run, per op type (ONNX Runtime's profiler, averaged over `runs` runs), and the node count
    per op type of the graph ONNX Runtime runs (after its own optimizations)."""
    import onnx
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    so.enable_profiling = True
    so.profile_file_prefix = str(path.with_suffix(""))
    so.optimized_model_filepath = str(path.with_suffix(".ort.onnx"))
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    for _ in range(2):
        sess.run(None, {k: feed[k] for k in names})
    t0 = time.perf_counter()
    for _ in range(runs):
        sess.run(None, {k: feed[k] for k in names})
    total = (time.perf_counter() - t0) / runs * 1e3
    trace = Path(sess.end_profiling())
    by_op: dict = {}
    for e in json.loads(trace.read_text()):
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            by_op[e["args"]["op_name"]] = by_op.get(e["args"]["op_name"], 0.0) + e["dur"] / 1e3 / (runs + 2)
    trace.unlink()
    optimized = Path(so.optimized_model_filepath)
    counts: dict = {}
    for node in onnx.load(str(optimized), load_external_data=False).graph.node:
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    optimized.unlink()
    for extra in optimized.parent.glob(optimized.name + "*.data"):
        extra.unlink()
    return total, by_op, counts


def profile(args) -> None:
    """Where the time goes: per op type (kernel ms per run) and node counts of the graph ONNX Runtime runs, for the
    original and rlx-rules' output (and, with --peers, ONNX Runtime's optimizer and onnxscript) of each model."""
    threads = int(args.threads.split(",")[0])
    cases = realistic_cases(Path(args.realistic), args.seq) if args.realistic else \
        corpus_cases([f for f in (args.files or "").split(",") if f])
    variants = list(VARIANTS) if args.peers else ["original", "rlx_rules"]
    print("| model | variant | ms / run | GEMM (MatMul, Gemm, FusedMatMul) | everything else | nodes | "
          "largest op types (ms; nodes) |\n|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        work = Path(tmp)
        for name, src, feed, model_type, heads, hidden in cases:
            paths = {v: work / f"{name}.{v}.onnx" for v in VARIANTS}
            pin(src, paths["original"], {k: v.shape for k, v in feed.items()})
            ours(paths["original"], paths["rlx_rules"], {k: list(v.shape) for k, v in feed.items()})
            if args.peers:
                ort_optimizer(paths["original"], paths["ort_optimizer"], model_type, heads, hidden)
                onnxscript_all([(paths["original"], paths["onnxscript"])])
            for variant in variants:
                if not paths[variant].exists():
                    continue
                total, by_op, counts = op_times_ms(paths[variant], feed, threads, args.runs)
                gemm = sum(v for k, v in by_op.items() if k in ("Gemm", "MatMul", "FusedMatMul", "FusedGemm"))
                top = ", ".join(f"{k} {v:.2f}; {counts.get(k, 0)}"
                                for k, v in sorted(by_op.items(), key=lambda kv: -kv[1])[:8])
                print(f"| {name} | {variant} | {total:.2f} | {gemm:.2f} ({gemm / max(sum(by_op.values()), 1e-9):.0%}) "
                      f"| {sum(by_op.values()) - gemm:.2f} | {sum(counts.values())} | {top} |", flush=True)
            for path in paths.values():
                path.unlink(missing_ok=True)


def gemm(args) -> None:
    """The machine's single-core GEMM rate at the realistic models' shapes (ONNX Runtime MatMul, CPU time, 1
    thread, round-robin), packed projections with and without the Split after them: the ceiling for `run`."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)

    def sess(widths, split=False):
        nodes, inits = [], []
        for j, n in enumerate(widths):
            inits.append(numpy_helper.from_array(rng.standard_normal((768, n)).astype(np.float32), f"w{j}"))
            nodes.append(helper.make_node("MatMul", ["x", f"w{j}"], [f"y{j}"]))
        outs = [f"y{j}" for j in range(len(widths))]
        if split:
            inits.append(numpy_helper.from_array(np.array([768] * 3 if widths[0] == 2304 else [2048] * 2), "sp"))
            outs = [f"s{j}" for j in range(3 if widths[0] == 2304 else 2)]
            nodes.append(helper.make_node("Split", ["y0", "sp"], outs, axis=2))
        g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, args.seq, 768])],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs], inits)
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.log_severity_level = 3
        model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]), sum(widths)

    cases = {"768": sess([768]), "3072": sess([3072]), "qkv 2304": sess([2304]), "qkv 2304 + Split": sess([2304], True),
             "q, k, v 3 x 768": sess([768] * 3), "gate|up 4096": sess([4096]),
             "gate|up 4096 + Split": sess([4096], True), "gate, up 2 x 2048": sess([2048] * 2)}
    x = rng.standard_normal((1, args.seq, 768)).astype(np.float32)
    times: dict = {k: [] for k in cases}
    for _ in range(args.runs):
        for k, (s, _) in cases.items():
            c0 = time.thread_time()
            s.run(None, {"x": x})
            times[k].append(time.thread_time() - c0)
    print(f"| [{args.seq}, 768] x [768, N] | ms (median) | GFLOP/s (median) | GFLOP/s (best) |\n|---|---|---|---|")
    for k, (_, width) in cases.items():
        med, best, flop = statistics.median(times[k]), min(times[k]), 2 * args.seq * 768 * width
        print(f"| {k} | {med * 1e3:.3f} | {flop / med / 1e9:.1f} | {flop / best / 1e9:.1f} |")
    print(f"\nload average {os.getloadavg()}")
