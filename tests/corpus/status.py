"""Measures rlx-rules on tests/corpus/: per file, `rlx-rules import` + `apply -r @onnx`, fused attention layers, values against ONNX Runtime's, and the best near miss of the attention rules (main environment only)."""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx

import rlx_rules

HERE = Path(__file__).resolve().parent
ATOL = 1e-4
FUSED_ATTENTION = ("Attention", "FusedAttentionBlock", "FusedTransformerLayer")
ATTENTION_RULES = ("attention_",)  # the lifting rules of @onnx (fuse_attention_block needs their output)


def cli(*args: str) -> subprocess.CompletedProcess:
    exe = shutil.which("rlx-rules")
    cmd = [exe, *args] if exe else [sys.executable, "-m", "rlx_rules.cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


def last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip() and "warning:" not in ln and not ln.startswith(" ")]
    return lines[-1][:300] if lines else ""


def pin(src: Path, dst: Path, feed: dict[str, np.ndarray]) -> None:
    """A copy of the model whose inputs have the feed's static shapes, and no exporter-written value_info."""
    model = onnx.load(str(src))
    for inp in model.graph.input:
        if inp.name in feed:
            for d, n in zip(inp.type.tensor_type.shape.dim, feed[inp.name].shape):
                d.Clear()
                d.dim_value = int(n)
    del model.graph.value_info[:]
    for out in model.graph.output:
        out.type.tensor_type.ClearField("shape")
    onnx.save(model, str(dst))


def near_miss(graph: Path) -> str:
    """The attention-lifting near miss that got furthest (`rlx-rules explain --all`): rule, progress, failing check."""
    r = cli("explain", str(graph), "-r", "@onnx", "--all", "--json")
    try:
        records = json.loads(r.stdout)
    except json.JSONDecodeError:
        return f"explain failed: {last_line(r.stderr)}"
    best = None
    for nm in records:
        if nm["rule"].startswith(ATTENTION_RULES) and (best is None or nm["progress"] / max(nm["total"], 1)
                                                        > best["progress"] / max(best["total"], 1)):
            best = nm
    if best is None:
        return ""
    failed = best["failed"][0] if best.get("failed") else {}
    return f"{best['rule']} {best['progress']}/{best['total']} at {best.get('root_label')}: " \
           f"{failed.get('check', '')} [{failed.get('detail', '')}]"


def measure(entry: dict, pinned: bool, work: Path, explain: str) -> dict:
    name = entry["file"][: -len(".onnx")]
    src = HERE / entry["file"]
    feed = dict(np.load(HERE / f"{name}.inputs.npz"))
    (expected,) = np.load(HERE / f"{name}.expected.npz").values()
    tag = f"{name}.{'pinned' if pinned else 'dynamic'}"
    if pinned:
        pin(src, work / f"{tag}.onnx", feed)
        src = work / f"{tag}.onnx"
    graph, fused = work / f"{tag}.graph.json", work / f"{tag}.fused.json"
    out = {"file": entry["file"], "mode": "pinned" if pinned else "dynamic", "layers": entry["attention_layers"]}
    r = cli("import", str(src), "-o", str(graph), "-q")
    if r.returncode:
        return dict(out, stage="import", error=last_line(r.stderr or r.stdout))
    r = cli("apply", str(graph), "-r", "@onnx", "-o", str(fused), "--json")
    if r.returncode:
        return dict(out, stage="apply", error=last_line(r.stderr or r.stdout))
    report = json.loads(r.stdout)
    ops = report["ops_after"]
    out.update(fused={op: ops[op] for op in FUSED_ATTENTION if ops.get(op)},
               fused_layers=sum(ops.get(op, 0) for op in FUSED_ATTENTION),
               softmax_left=ops.get("Softmax", 0))
    if out["fused_layers"] < out["layers"] and explain in ("all", out["mode"]):
        out["near_miss"] = near_miss(graph)
    try:
        got = rlx_rules.run(str(fused), feed)[0]
    except Exception as e:  # noqa: BLE001 - the interpreter's refusal is a measurement
        return dict(out, stage="values", error=f"{type(e).__name__}: {str(e).splitlines()[0][:300]}")
    rows = [None if np.isnan(a).any() or np.isnan(b).any() else float(np.max(np.abs(a - b)))
            for a, b in zip(np.asarray(got, dtype=np.float64), expected.astype(np.float64))]
    out.update(stage="done", max_abs_diff_per_row=rows,
               values_match=all(d is not None and d <= ATOL for d in rows))
    return out


def cell(m: dict) -> str:
    if m["stage"] in ("import", "apply"):
        return f"{m['stage']} error"
    vals = "values ok" if m.get("values_match") else ("no values" if m["stage"] == "values" else "VALUES DIFFER")
    return f"{m['fused_layers']}/{m['layers']} {vals}"


def peer(p: dict) -> str:
    if "error" in p:
        return "error"
    if not p.get("attention_fused"):
        return "0"
    return f"{p['attention_fused']}" + ("" if p.get("runs") and p.get("matches") else
                                         " runs, rows differ" if p.get("runs") else " fails to run")


def print_table(entries: list[dict], results: list[dict]) -> None:
    """One row per file: the peers' fused attention layers (from the manifest), then rlx-rules' own, then why."""
    by_file = {}
    for m in results:
        by_file.setdefault(m["file"], {})[m["mode"]] = m
    print(f"{'file':<34} {'layers':>6} {'onnxscript':<22} {'ORT optimizer':<22} {'rlx dynamic':<20} {'rlx pinned':<20}")
    total = {"dynamic": [0, 0, 0], "pinned": [0, 0, 0]}
    whys = []
    for e in entries:
        modes = by_file.get(e["file"], {})
        row = []
        for mode in ("dynamic", "pinned"):
            m = modes.get(mode)
            row.append(cell(m) if m else "")
            if m:
                t = total[mode]
                full = m.get("fused_layers") == m["layers"]
                t[0] += 1
                t[1] += full
                t[2] += bool(full and m.get("values_match"))
                why = " ".join(filter(None, [m.get("near_miss") if not full else "", m.get("error")]))
                if why:
                    whys.append(f"{e['file']} ({mode}): {why}")
        print(f"{e['file']:<34} {e['attention_layers']:>6} {peer(e['onnxscript']):<22} {peer(e['ort_optimizer']):<22} "
              f"{row[0]:<20} {row[1]:<20}")
    for mode, (n, full, ok) in total.items():
        if n:
            print(f"{mode}: every attention layer fused in {full} of {n} files; fused and values within {ATOL}: {ok}")
    print()
    print("\n".join(whys))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("only", nargs="*", help="only files whose name contains one of these")
    ap.add_argument("--no-pinned", action="store_true", help="skip the copies with static input shapes")
    ap.add_argument("--json", metavar="PATH", help="write every measurement as JSON")
    ap.add_argument("--keep", metavar="DIR", help="keep the imported and fused graphs in DIR")
    ap.add_argument("-j", "--jobs", type=int, default=2)
    ap.add_argument("--explain", choices=("all", "pinned", "dynamic", "none"), default="pinned",
                    help="which measurements name the near miss of an unfused layer (explain reruns apply)")
    ap.add_argument("--table", metavar="PATH", help="print the table of an earlier --json run; measure nothing")
    args = ap.parse_args(argv)
    manifest = json.loads((HERE / "manifest.json").read_text())
    entries = [e for e in manifest["files"] if e.get("exported")
               and (not args.only or any(s in e["file"] for s in args.only))]
    if args.table:
        results = json.loads(Path(args.table).read_text())
        done = {m["file"] for m in results}
        print_table([e for e in entries if e["file"] in done], results)
        return 0
    work = Path(args.keep or tempfile.mkdtemp(prefix="rlx-corpus-"))
    work.mkdir(parents=True, exist_ok=True)
    jobs = [(e, pinned) for e in entries for pinned in ((False,) if args.no_pinned else (False, True))]
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(lambda job: measure(job[0], job[1], work, args.explain), jobs))
    if args.json:
        tmp = Path(f"{args.json}.tmp")
        tmp.write_text(json.dumps(results, indent=1) + "\n")
        os.replace(tmp, args.json)
    print_table(entries, results)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
