"""The process an upkeep job runs its CPU-bound steps in (memory/jobs/offload.py).

``python -m memory.jobs.cpu_child``: reads frames from stdin (an 8-byte length,
then a pickled callable with its arguments), runs each, and writes one frame
back to stdout: the pickled ``(True, result)`` or ``(False, exception)`` (an
exception that does not pickle goes as its text). It
exits at the end of its input (the run is over) or when its parent is gone (a
serving process killed with -9 closes no pipe we could wait on mid-step).
It runs in Linux's idle scheduling class (``SCHED_IDLE``: it gets a core only
when no other thread wants it), at ``NICENESS`` 10 where that class is missing,
and imports nothing itself: unpickling a call imports that function's module.
The pipes are the serving process's own, so the pickles are trusted.
"""

from __future__ import annotations

import os
import pickle
import struct
import sys
import threading
import time
from typing import BinaryIO

FRAME = struct.Struct("!Q")
# Upkeep is background work: the serving process's threads (the packs) come first.
# Niceness 10 still left the child ~10 % of a contended core, and on 2 cores a pack's
# query embedding and its reader thread both want one: at 100k items pack p95 during
# a nightly was 25.3-31.9 ms (1.06-1.26x the packs before it) at nice 10 against
# 24.1-24.4 (0.99-1.00x) in the idle class (docs/DESIGN.md, "Nightly upkeep").
NICENESS = 10
# How often the child looks whether its parent is still there.
PARENT_CHECK_S = 1.0


def _exit_with_parent() -> None:
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_CHECK_S)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def lower_priority() -> str:
    """Put this process below every ordinary one: the idle class, else niceness."""
    idle = getattr(os, "SCHED_IDLE", None)
    if idle is not None:
        try:
            os.sched_setscheduler(0, idle, os.sched_param(0))
        except OSError:
            pass  # a kernel or sandbox without it: niceness is what is left
        else:
            return "idle"
    os.nice(NICENESS)
    return "nice"


def _read(source: BinaryIO, size: int) -> bytes | None:
    data = source.read(size)
    return data if len(data) == size else None


def serve(source: BinaryIO, sink: BinaryIO) -> None:
    """Answer each call frame of ``source`` on ``sink``, until ``source`` ends."""
    while (header := _read(source, FRAME.size)) is not None:
        (size,) = FRAME.unpack(header)
        body = _read(source, size)
        if body is None:
            return
        try:
            reply: tuple[bool, object] = (True, pickle.loads(body)())
        # Any error of the step is the caller's to handle: it is sent back, not lost.
        except Exception as exc:  # noqa: BLE001
            reply = (False, exc)
        try:
            data = pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL)
        except (pickle.PicklingError, TypeError, AttributeError) as exc:
            data = pickle.dumps((False, f"{reply[1]!r} (not picklable: {exc})"))
        sink.write(FRAME.pack(len(data)) + data)
        sink.flush()


def main() -> int:
    source, sink = sys.stdin.buffer, sys.stdout.buffer
    # A step that prints must not write into the replies.
    sys.stdout = sys.stderr
    lower_priority()
    _exit_with_parent()
    serve(source, sink)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
