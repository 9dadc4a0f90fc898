"""Run one CLI command over many inputs on every core: a process pool (the engine holds the GIL while it
applies), each input's output and errors captured, one failure never stopping the others."""

from __future__ import annotations

import contextlib
import io
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

# A command: run(args) -> exit code; an error that escapes it becomes an exit code through `on_error`
# (which prints its message on stderr, as `rlx-rules` does).
Command = Callable[..., int]
OnError = Callable[[Exception], int]


@dataclass(frozen=True)
class Outcome:
    """What one input's run printed, and its exit code (0: done)."""

    code: int
    stdout: str
    stderr: str


def default_jobs() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def run_one(command: Command, on_error: OnError, args: object) -> Outcome:
    """Run `command(args)` with stdout and stderr captured; an exception becomes `on_error`'s exit code."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = int(command(args))
        except Exception as e:  # noqa: BLE001 - every failure is this input's, reported, never the batch's
            code = int(on_error(e))
    return Outcome(code, out.getvalue(), err.getvalue())


def _context():
    # fork: workers start at once with the parent's imports (the parent holds no threads here); else spawn
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else "spawn")


def run_many(command: Command, on_error: OnError, jobs: Sequence[object], workers: int) -> Iterator[Outcome]:
    """`run_one` over `jobs` on up to `workers` processes; the outcomes in the order of `jobs`, each as soon as
    it and those before it are done. One worker (or one job) runs here, without a pool."""
    workers = max(1, min(workers, len(jobs)))
    if workers == 1:
        for args in jobs:
            yield run_one(command, on_error, args)
        return
    with ProcessPoolExecutor(max_workers=workers, mp_context=_context()) as pool:
        futures = [pool.submit(run_one, command, on_error, args) for args in jobs]
        for future in futures:
            try:
                yield future.result()
            except Exception as e:  # noqa: BLE001 - a worker that died (killed, out of memory): this job failed
                yield run_one(_raise, on_error, e)


def _raise(e: Exception) -> int:
    raise e
