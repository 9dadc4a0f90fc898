"""Progress on stderr while a long call runs (the native apply releases the GIL, so a timer thread can print).

    with progress("rlx-rules apply: model.graph.json", quiet=args.quiet):
        fused, report = rules.apply(graph)

Nothing is printed for a call shorter than `delay` (0.5 s), with `quiet`, or when the stream is not a
terminal. `RLX_RULES_PROGRESS=1` forces it on (and `=0` off), for tests and for logs that want it.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from contextlib import contextmanager
from typing import Iterator, Optional, TextIO

_SPIN = "|/-\\"


def enabled_for(stream: TextIO, quiet: bool = False) -> bool:
    """Whether progress goes to `stream`: never when quiet; else RLX_RULES_PROGRESS, else whether it is a tty."""
    if quiet:
        return False
    forced = os.environ.get("RLX_RULES_PROGRESS")
    if forced is not None and forced.strip() != "":
        return forced.strip().lower() not in ("0", "false", "no", "off")
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


@contextmanager
def progress(label: str, *, quiet: bool = False, stream: Optional[TextIO] = None, delay: float = 0.5,
             interval: float = 0.2, enabled: Optional[bool] = None) -> Iterator[None]:
    """Show `label`, a spinner and the elapsed time on `stream` (stderr) once the block has run `delay` seconds.

    The line is rewritten in place (carriage return) and, if it was shown, finished with the total time.
    """
    stream = sys.stderr if stream is None else stream
    on = enabled_for(stream, quiet) if enabled is None else enabled
    if not on:
        yield
        return
    done = threading.Event()
    shown = []
    start = time.monotonic()

    def tick() -> None:
        if done.wait(delay):
            return
        k = 0
        while True:
            elapsed = time.monotonic() - start
            try:
                stream.write(f"\r{label} {_SPIN[k % len(_SPIN)]} {elapsed:.1f}s")
                stream.flush()
            except (OSError, ValueError):  # a closed or broken stream: stop showing progress, never fail the work
                return
            shown.append(True)
            k += 1
            if done.wait(interval):
                return

    thread = threading.Thread(target=tick, name="rlx-rules-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        if shown:
            try:
                stream.write(f"\r{label}: done in {time.monotonic() - start:.1f}s\n")
                stream.flush()
            except (OSError, ValueError):
                pass
