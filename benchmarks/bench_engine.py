"""Rule-engine benchmark (issues 2 and 16): the seed rules on BERT graphs of 35..34,000 layers (1k..1M nodes), against hand-written Python and Rust passes.

    python benchmarks/bench_engine.py             # full run: layers 35 100 1000 10000 34000, 3 repeats
    python benchmarks/bench_engine.py --quick     # smoke run: layers 35 100, 2 repeats
    python benchmarks/bench_engine.py --layers 1000 10000 --repeats 5 --markdown   # Markdown too (BENCHMARKS.md)

Contenders, each a process of its own on the same graph.json, alternating within every repeat (order rotated):
  cli      `python -m rlx_rules.cli apply IN -r rules/seed.rlxr -o OUT -q` (what `rlx-rules` runs), whole process
           (Python start, rule compile or cache, Rust load/apply/write); the package is byte-compiled first
  api      the Python API in a child process: Graph.load + rules.apply + write, timed inside (rules compiled before)
  py       benchmarks/seed_pass_python.py, whole process (json.load, dict passes, json.dumps)
  rs_hand  seed-pass-rust handwritten, whole process (serde load, hand-written passes, write)
  rs_eng   seed-pass-rust engine, whole process (rlx_rules_core: load + validate, apply, write)
Each process's peak RSS is read from its own rusage (os.wait4). Every output must agree with every other (same
op counts and the same nodes), or the script fails. Timings are medians (min in the JSON results); nothing here is
a pass/fail test of speed.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "out"
BIN = ROOT / "target" / "release" / "seed-pass-rust"
CONTENDERS = ["cli", "api", "py", "rs_hand", "rs_eng"]


def sh(cmd: list[str], env=None) -> tuple[float, str, float]:
    """Run a command; return (wall ms, stdout, peak RSS in MB of that process). Fails loudly on a non-zero exit."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(p.pid, 0)
        ms = (time.perf_counter() - t) * 1e3
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if p.returncode != 0:
            raise SystemExit(f"FAILED ({p.returncode}): {' '.join(cmd)}\n{err.read().decode()}")
        return ms, out.read().decode(), usage.ru_maxrss / 1024  # ru_maxrss is in KiB on Linux


def api_child(src: str, dst: str, rules_path: str) -> int:
    """The api contender, in its own process: compile the rules, then time load, apply and write."""
    import rlx_rules

    rules = rlx_rules.load_rules(rules_path)
    t0 = time.perf_counter()
    g = rlx_rules.Graph.load(src)
    t1 = time.perf_counter()
    fused, _report = rules.apply(g)
    t2 = time.perf_counter()
    fused.write(dst)
    t3 = time.perf_counter()
    print(json.dumps({"load_ms": (t1 - t0) * 1e3, "pass_ms": (t2 - t1) * 1e3, "write_ms": (t3 - t2) * 1e3}))
    return 0


def generate_child(n_layers: str, dst: str) -> int:
    """Write the BERT graph of `n_layers` layers to `dst` and print its node count."""
    from rlx_rules.examples import bert_encoder

    doc = bert_encoder(int(n_layers))
    with open(dst, "w") as f:
        json.dump(doc, f)
    print(len(doc["nodes"]))
    return 0


def canonical(path: Path) -> tuple[dict, list]:
    doc = json.loads(path.read_text())
    counts = collections.Counter(n["op"] for n in doc["nodes"])
    return dict(sorted(counts.items())), sorted((json.dumps(n, sort_keys=True) for n in doc["nodes"]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke run: 35 and 100 layers, 2 repeats")
    ap.add_argument("--layers", type=int, nargs="+", default=None)
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--markdown", action="store_true", help="also print Markdown tables")
    ap.add_argument("--no-build", action="store_true", help="skip cargo build --release -p seed-pass-rust")
    ap.add_argument("--api-child", nargs=3, metavar=("IN", "OUT", "RULES"), help=argparse.SUPPRESS)
    ap.add_argument("--generate-child", nargs=2, metavar=("LAYERS", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.api_child:
        return api_child(*args.api_child)
    if args.generate_child:
        return generate_child(*args.generate_child)
    layers = args.layers or ([35, 100] if args.quick else [35, 100, 1000, 10000, 34000])
    repeats = args.repeats or (2 if args.quick else 3)

    import rlx_rules

    OUT.mkdir(parents=True, exist_ok=True)
    # The seed pipeline (FuseMatMulBiasAct + FuseAttentionBlock), the work the hand-written passes do.
    seed_rules = rlx_rules.bundled_rules_dir() / "seed.rlxr"
    rules = rlx_rules.load_rules(seed_rules)
    program = OUT / "program.json"
    program.write_text(json.dumps(rules.program))
    if not args.no_build:
        print("building: cargo build --release -p seed-pass-rust", file=sys.stderr)
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "seed-pass-rust"], cwd=ROOT, check=True)
    # `python -m rlx_rules.cli` is what the `rlx-rules` script runs; the script found on PATH may be a version
    # manager's shim (pyenv's is a bash script that adds ~70 ms), which is not the product's time.
    cli_cmd = [sys.executable, "-m", "rlx_rules.cli"]
    package = Path(rlx_rules.__file__).parent  # byte-compiled first, as pip leaves an installed package
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(package)], check=True, stdout=subprocess.DEVNULL,
                   env=dict(os.environ, PYTHONDONTWRITEBYTECODE=""))
    env = dict(os.environ)
    env.pop("RLX_FUSE_ATTN_THRESHOLD", None)  # the default (64) for every contender

    results = []
    for n_layers in layers:
        src = OUT / f"bert_{n_layers}.json"
        # Generated in a child process: a child's peak RSS (ru_maxrss) starts from its parent's RSS at the fork, so
        # this process must stay small or it would set a floor under every contender's peak.
        gen = subprocess.run(
            [sys.executable, __file__, "--generate-child", str(n_layers), str(src)],
            check=True, capture_output=True, text=True,
        )
        nodes = int(gen.stdout)
        input_mb = src.stat().st_size / 2**20
        outs = {c: OUT / f"bert_{n_layers}.{c}.json" for c in CONTENDERS}
        cmds = {
            "cli": cli_cmd + ["apply", str(src), "-r", str(seed_rules), "-o", str(outs["cli"]), "-q"],
            "api": [sys.executable, __file__, "--api-child", str(src), str(outs["api"]), str(seed_rules)],
            "py": [sys.executable, str(ROOT / "benchmarks" / "seed_pass_python.py"), str(src), str(outs["py"])],
            "rs_hand": [str(BIN), "handwritten", str(src), str(outs["rs_hand"])],
            "rs_eng": [str(BIN), "engine", str(program), str(src), str(outs["rs_eng"])],
        }
        wall: dict[str, list[float]] = {c: [] for c in CONTENDERS}
        rss: dict[str, list[float]] = {c: [] for c in CONTENDERS}
        inner: dict[str, list[dict]] = {c: [] for c in CONTENDERS}
        # One warm-up round (page cache, lazy imports), then `repeats` rounds, rotating who goes first.
        for r in range(repeats + 1):
            order = CONTENDERS[r % len(CONTENDERS):] + CONTENDERS[: r % len(CONTENDERS)]
            for c in order:
                ms, stdout, peak_mb = sh(cmds[c], env)
                phases = json.loads(stdout) if c != "cli" else {}
                if r > 0:
                    wall[c].append(ms)
                    rss[c].append(peak_mb)
                    inner[c].append(phases)
        # Every contender must produce the same graph.
        ref_counts, ref_nodes = canonical(outs["rs_eng"])
        for c in CONTENDERS:
            counts, node_list = canonical(outs[c])
            if counts != ref_counts:
                raise SystemExit(f"MISMATCH at {n_layers} layers: {c} op counts {counts} != rs_eng {ref_counts}")
            if node_list != ref_nodes:
                raise SystemExit(f"MISMATCH at {n_layers} layers: {c} nodes differ from rs_eng's (same op counts)")

        def med(c, key=None):
            xs = wall[c] if key is None else [p[key] for p in inner[c]]
            return statistics.median(xs)

        row = {
            "layers": n_layers, "nodes": nodes, "nodes_after": sum(ref_counts.values()), "ops_after": ref_counts,
            "input_mb": input_mb,
            "peak_rss_mb": {c: statistics.median(rss[c]) for c in CONTENDERS},
            "wall_ms": {c: med(c) for c in CONTENDERS},
            "wall_min_ms": {c: min(wall[c]) for c in CONTENDERS},
            "inner_ms": {c: {k: med(c, k) for k in ("load_ms", "pass_ms", "write_ms")}
                         for c in ("api", "py", "rs_hand", "rs_eng")},
        }
        row["ratio_pass_eng_vs_hand"] = row["inner_ms"]["rs_eng"]["pass_ms"] / row["inner_ms"]["rs_hand"]["pass_ms"]
        row["ratio_e2e_eng_vs_hand"] = row["wall_ms"]["rs_eng"] / row["wall_ms"]["rs_hand"]
        row["ratio_cli_vs_py"] = row["wall_ms"]["cli"] / row["wall_ms"]["py"]
        row["ratio_pass_eng_vs_py"] = row["inner_ms"]["rs_eng"]["pass_ms"] / row["inner_ms"]["py"]["pass_ms"]
        # what the engine's process holds beyond the input text, per node (its load, apply and write included)
        row["eng_bytes_per_node"] = (row["peak_rss_mb"]["rs_eng"] - input_mb) * 2**20 / nodes
        results.append(row)
        print(f"{n_layers:5d} layers {nodes:6d} nodes: " + "  ".join(f"{c} {row['wall_ms'][c]:7.1f}" for c in CONTENDERS)
              + " ms", file=sys.stderr)

    (OUT / "results.json").write_text(json.dumps({"repeats": repeats, "results": results}, indent=1))
    print_tables(results, repeats, markdown=args.markdown)
    return 0


def print_tables(results: list[dict], repeats: int, markdown: bool) -> None:
    head1 = ["layers", "nodes", "cli ms", "api ms", "py ms", "rs_hand ms", "rs_eng ms",
             "eng/hand pass", "eng/py pass", "eng/hand e2e", "cli/py"]
    rows1 = [[r["layers"], r["nodes"]] + [f"{r['wall_ms'][c]:.1f}" for c in CONTENDERS]
             + [f"{r['ratio_pass_eng_vs_hand']:.2f}x", f"{r['ratio_pass_eng_vs_py']:.3f}x",
                f"{r['ratio_e2e_eng_vs_hand']:.2f}x", f"{r['ratio_cli_vs_py']:.2f}x"]
             for r in results]
    head2 = ["layers", "nodes"] + [f"{c} µs/node" for c in CONTENDERS] + [
        "py pass µs/node", "rs_hand pass µs/node", "rs_eng pass µs/node", "api pass µs/node"]
    rows2 = [[r["layers"], r["nodes"]] + [f"{r['wall_ms'][c] * 1e3 / r['nodes']:.2f}" for c in CONTENDERS]
             + [f"{r['inner_ms'][c]['pass_ms'] * 1e3 / r['nodes']:.3f}" for c in ("py", "rs_hand", "rs_eng", "api")]
             for r in results]
    head3 = ["layers", "nodes", "input MB"] + [f"{c} peak MB" for c in CONTENDERS] + ["rs_eng B/node beyond input"]
    rows3 = [[r["layers"], r["nodes"], f"{r['input_mb']:.1f}"] + [f"{r['peak_rss_mb'][c]:.0f}" for c in CONTENDERS]
             + [f"{r['eng_bytes_per_node']:.0f}"] for r in results]
    head4 = ["layers", "contender", "load ms", "pass ms", "write ms"]
    rows4 = [[r["layers"], c] + [f"{r['inner_ms'][c][k]:.1f}" for k in ("load_ms", "pass_ms", "write_ms")]
             for r in results for c in ("api", "py", "rs_hand", "rs_eng")]
    print(f"\nWall time per contender, median of {repeats} (whole process; api's rule compile included):")
    table(head1, rows1, markdown)
    print("\nPer node (wall, and the pass alone):")
    table(head2, rows2, markdown)
    print("\nPeak RSS per process (median), and the engine's bytes per node beyond the input text:")
    table(head3, rows3, markdown)
    print("\nInternal phases (medians, ms):")
    table(head4, rows4, markdown)


def table(head: list[str], rows: list[list], markdown: bool) -> None:
    cells = [head] + [[str(x) for x in r] for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(head))]
    for k, c in enumerate(cells):
        print("  ".join(x.rjust(w) for x, w in zip(c, widths)))
        if k == 0:
            print("  ".join("-" * w for w in widths))
    if markdown:
        print()
        print("| " + " | ".join(head) + " |")
        print("|" + "|".join("---:" for _ in head) + "|")
        for r in rows:
            print("| " + " | ".join(str(x) for x in r) + " |")


if __name__ == "__main__":
    sys.exit(main())
