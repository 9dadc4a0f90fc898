"""Does the matcher pay for `explain` when it is off? Times the engine pass of two builds of the
seed-pass-rust binary, alternating, on the same graphs: one built just before explain landed, one
just after (explain off in both). Prints medians and their ratio.

    git worktree add /tmp/pre-explain 5c3875e~1 && git worktree add /tmp/with-explain 5c3875e
    (cd /tmp/pre-explain && CARGO_TARGET_DIR=/tmp/t-pre cargo build --release -p seed-pass-rust)
    (cd /tmp/with-explain && CARGO_TARGET_DIR=/tmp/t-with cargo build --release -p seed-pass-rust)
    python benchmarks/bench_explain_cost.py /tmp/t-pre/release/seed-pass-rust /tmp/t-with/release/seed-pass-rust
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("before", help="seed-pass-rust built before explain")
    ap.add_argument("after", help="seed-pass-rust built with explain (off)")
    ap.add_argument("--layers", type=int, nargs="+", default=[300, 1000])
    ap.add_argument("--repeats", type=int, default=15)
    args = ap.parse_args()

    import rlx_rules
    from rlx_rules.examples import bert_encoder

    work = Path(tempfile.mkdtemp(prefix="rlx-explain-cost-"))
    program = work / "program.json"
    program.write_text(json.dumps(rlx_rules.load_rules(rlx_rules.bundled_rules_dir() / "seed.rlxr").program))
    print(f"{'layers':>6} {'before ms':>10} {'after ms':>10} {'after/before':>13}")
    for layers in args.layers:
        graph = work / f"bert_{layers}.json"
        graph.write_text(json.dumps(bert_encoder(layers)))
        times = {"before": [], "after": []}
        for r in range(args.repeats + 1):
            for which in (("before", "after") if r % 2 else ("after", "before")):
                binary = getattr(args, which)
                out = subprocess.run([binary, "engine", str(program), str(graph), str(work / "out.json")],
                                     check=True, capture_output=True, text=True).stdout
                if r:  # the first round warms the page cache
                    times[which].append(json.loads(out.strip().splitlines()[-1])["pass_ms"])
        b, a = statistics.median(times["before"]), statistics.median(times["after"])
        print(f"{layers:>6} {b:>10.2f} {a:>10.2f} {a / b:>13.3f}")


if __name__ == "__main__":
    main()
