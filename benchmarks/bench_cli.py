"""CLI latency on a small graph, as whole processes: `rlx-rules apply` with @seed, @default and @onnx, and `check`
of the bundled sets, each without the compiled-rule cache, with a cold one and with a warm one (medians); and
a batch of small graphs, one process per graph against one `rlx-rules apply FOLDER`.

    python3 benchmarks/bench_cli.py [--runs 9] [--variant before=/path/to/old/python ...] [--no-batch]

Each cell is the median of --runs runs of `python -m rlx_rules.cli ...` (wall time, and the CPU time the process
used, user + system, which a busy machine disturbs less). "no cache" compiles the rules in every run (what every
run did before the cache); "cold" starts each run with an empty cache folder; "warm" reuses one that the first run
filled. Lark's own parse-table cache (~/.cache/rlx-rules/grammar-*.cache) stays warm throughout.

`--variant NAME=DIR` adds a package tree to compare (DIR on PYTHONPATH, holding rlx_rules with its own
_native module, e.g. `git archive OLD python | tar -x -C /tmp/old` plus that commit's built module): the runs
of every cell alternate between the variants, so that a shared machine's load falls on all of them alike, and
each variant gets its own table and cache folders. The floors show what the interpreter costs before any
rlx_rules code runs: `python -I` leaves out the user's site folder and environment, `python -S` the site hooks
(.pth files) of the installed environment.

Before timing, each variant's package is byte-compiled (compileall), as pip does when it installs a wheel: with
PYTHONDONTWRITEBYTECODE=1 (set on the development machines) an editable tree without __pycache__ would compile
every module from source on every start (~80 million instructions of a warm `apply`). --source-only skips it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import rlx_rules

CASES = [
    ("apply -r @seed", ["apply", "{graph}", "-o", "{out}", "-q", "-r", "@seed"]),
    ("apply (@default)", ["apply", "{graph}", "-o", "{out}", "-q"]),
    ("apply -r @onnx", ["apply", "{graph}", "-o", "{out}", "-q", "-r", "@onnx"]),
    ("check @default", ["check", "@default", "-q"]),
    ("check @onnx", ["check", "@onnx", "-q"]),
]
FLOORS = [("python -c pass", ["-c", "pass"]), ("python -I -c pass", ["-I", "-c", "pass"]),
          ("python -S -c pass", ["-S", "-c", "pass"]), ("python -c 'import rlx_rules'", ["-c", "import rlx_rules"]),
          ("python -c 'import rlx_rules.cli.app'", ["-c", "import rlx_rules.cli.app"])]


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, *argv], env=env, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def median_ms(samples: list[tuple[float, float]]) -> str:
    wall = statistics.median(s[0] for s in samples) * 1000
    cpu = statistics.median(s[1] for s in samples) * 1000
    return f"{wall:.0f} / {cpu:.0f}"


def variant_envs(specs: list[str], base: dict[str, str]) -> dict[str, dict[str, str]]:
    """Each variant's environment: "this" (the rlx_rules this script imports) and every --variant NAME=DIR."""
    envs = {"this": dict(base)}
    for spec in specs:
        name, sep, folder = spec.partition("=")
        if not sep or not name or not os.path.isdir(os.path.join(folder, "rlx_rules")):
            raise SystemExit(f"--variant expects NAME=DIR with DIR/rlx_rules, got {spec!r}")
        envs[name] = dict(base, PYTHONPATH=os.path.abspath(folder))
    return envs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--batch", type=int, default=16, help="graphs in the batch comparison")
    parser.add_argument("--no-batch", action="store_true", help="leave out the batch comparison")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=DIR",
                        help="another package tree to time, alternating with this one")
    parser.add_argument("--source-only", action="store_true",
                        help="do not byte-compile the packages first (time compiling them from source too)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        graph = os.path.join(tmp, "small.graph.json")
        with open(graph, "w") as fh:
            json.dump(rlx_rules.examples.bert_encoder(layers=2, hidden=64, heads=4), fh)
        out = os.path.join(tmp, "out.json")
        base = {k: v for k, v in os.environ.items() if not k.startswith("RLX_RULES_")}
        envs = variant_envs(args.variant, base)
        if not args.source_only:
            for venv in envs.values():
                folder = venv.get("PYTHONPATH") or os.path.dirname(os.path.dirname(rlx_rules.__file__))
                subprocess.run([sys.executable, "-m", "compileall", "-q", os.path.join(folder, "rlx_rules")],
                               env=dict(venv, PYTHONDONTWRITEBYTECODE=""), check=True, stdout=subprocess.DEVNULL)
        rows: dict[str, list[str]] = {name: [] for name in envs}
        for name, template in CASES:
            argv = ["-m", "rlx_rules.cli"] + [a.format(graph=graph, out=out) for a in template]
            cells: dict[str, list[str]] = {v: [] for v in envs}
            for mode in ("none", "cold", "warm"):
                samples: dict[str, list] = {v: [] for v in envs}
                for i in range(args.runs + (mode == "warm")):
                    for v, venv in envs.items():  # alternate: the load falls on every variant alike
                        env = dict(venv)
                        if mode == "none":
                            env["RLX_RULES_NO_CACHE"] = "1"
                        else:
                            warm_dir = os.path.join(tmp, f"warm-{v}-{name}")
                            env["RLX_RULES_CACHE_DIR"] = warm_dir if mode == "warm" else tempfile.mkdtemp(dir=tmp)
                        sample = timed(argv, env)
                        if not (mode == "warm" and i == 0):  # the first warm run fills the cache
                            samples[v].append(sample)
                for v in envs:
                    cells[v].append(median_ms(samples[v]))
            shown = " ".join(template).replace("{graph}", "small.graph.json").replace("{out}", "out.json")
            for v in envs:
                rows[v].append(f"| `rlx-rules {shown}` | {' | '.join(cells[v])} |")
        floors: dict[str, list] = {v: [[] for _ in FLOORS] for v in envs}
        for _ in range(args.runs):
            for v, venv in envs.items():
                for i, (_, argv) in enumerate(FLOORS):
                    floors[v][i].append(timed(argv, dict(venv)))
        load = os.getloadavg()
        print(f"{args.runs} runs per cell, median wall ms / CPU ms; small graph: bert_encoder(layers=2), "
              f"{len(json.load(open(graph))['nodes'])} nodes; python {sys.version.split()[0]}; load average at the "
              f"end {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; packages "
              + ("compiled from source in every run" if args.source_only else "byte-compiled first"))
        for v in envs:
            print(f"\n{v}" + ("" if v == "this" else f" ({envs[v]['PYTHONPATH']})") + ":\n")
            print("| command | no cache | cold cache | warm cache |")
            print("|---|---:|---:|---:|")
            print("\n".join(rows[v]))
            for (floor, _), samples in zip(FLOORS, floors[v]):
                print(f"| `{floor}` (floor) | {median_ms(samples)} | | |")
        if not args.no_batch:
            batch(tmp, base, args)


def batch(tmp: str, base: dict[str, str], args: argparse.Namespace) -> None:
    """--batch graphs (bert_encoder, 1-4 layers) with a warm cache: one process each, then one batch command."""
    folder = os.path.join(tmp, "batch")
    os.makedirs(folder)
    for i in range(args.batch):
        with open(os.path.join(folder, f"g{i}.json"), "w") as fh:
            json.dump(rlx_rules.examples.bert_encoder(layers=1 + i % 4, hidden=64, heads=4), fh)
    env = dict(base, RLX_RULES_CACHE_DIR=os.path.join(tmp, "batch-cache"))
    graphs = sorted(os.path.join(folder, name) for name in os.listdir(folder))
    cli = ["-m", "rlx_rules.cli", "apply"]
    timed(cli + [graphs[0], "-o", os.path.join(tmp, "warmup.json"), "-q"], env)
    one_by_one = [sum(timed(cli + [g, "-o", os.path.join(tmp, "one.json"), "-q"], env)[0] for g in graphs)
                  for _ in range(3)]
    pooled = [timed(cli + [folder, "-o", os.path.join(tmp, "out"), "-q"], env)[0] for _ in range(3)]
    print(f"\n{args.batch} small graphs, warm cache, median of 3: one `rlx-rules apply` per graph "
          f"{statistics.median(one_by_one) * 1000:.0f} ms; `rlx-rules apply FOLDER` (one process per core, "
          f"{os.cpu_count()} cores) {statistics.median(pooled) * 1000:.0f} ms")


if __name__ == "__main__":
    main()
