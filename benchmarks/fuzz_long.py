"""A longer fuzzing run (issue 19): the hypothesis properties of tests/test_fuzz.py with many more examples, and
the Rust loaders' seeded random-bytes loops (rust/core/tests/graph_hostile.rs) with many more rounds.

    python benchmarks/fuzz_long.py --examples 1000 --rounds 200000 [--seed N]

Prints one line per part with its counts; record them in docs/security.md ("Fuzzing"). A failure prints the
failing input (hypothesis shows the falsifying example; the Rust loop names seed and round) and exits 1.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(command: list[str], env: dict) -> tuple[int, str, float]:
    start = time.monotonic()
    done = subprocess.run(command, cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True)
    return done.returncode, done.stdout + done.stderr, time.monotonic() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=1000, help="hypothesis examples per property")
    parser.add_argument("--rounds", type=int, default=200_000, help="random inputs for the Rust graph loader loop")
    parser.add_argument("--seed", type=int, default=int(time.time()), help="seed of the Rust loop")
    parser.add_argument("-k", default=None, help="only the hypothesis properties matching this pytest -k")
    args = parser.parse_args()
    failed = False

    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_fuzz.py"] + (
        ["-k", args.k] if args.k else [])
    code, out, secs = run(command, {"RLX_RULES_FUZZ_EXAMPLES": str(args.examples)})
    summary = out.strip().splitlines()[-1] if out.strip() else "no output"
    print(f"hypothesis: {args.examples} examples per property (random seed): {summary} [{secs:.0f} s]", flush=True)
    if code != 0:
        failed = True
        print(out[-6000:])

    command = ["cargo", "test", "-q", "-p", "rlx-rules-core", "--test", "graph_hostile", "--",
               "--nocapture", "seeded"]
    code, out, secs = run(command, {"RLX_FUZZ_ROUNDS": str(args.rounds), "RLX_FUZZ_SEED": str(args.seed)})
    for line in out.splitlines():
        if re.search(r"loader fuzz:", line):
            print(f"rust: {line.strip()} [{secs:.0f} s in all]")
    if code != 0:
        failed = True
        print(out[-6000:])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
