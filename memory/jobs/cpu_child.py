"""The process an upkeep job runs its CPU-bound steps in (memory/jobs/offload.py).

``python -m memory.jobs.cpu_child``: reads frames from stdin (an 8-byte length,
then a pickled callable with its arguments), runs each, and writes one frame
back to stdout: the pickled ``(True, result)`` or ``(False, exception)`` (an
exception that does not pickle goes as its text). It
exits at the end of its input (the run is over) or when its parent is gone (a
serving process killed with -9 closes no pipe we could wait on mid-step).
It runs at ``NICENESS`` 10, below the serving process, and imports nothing
itself: unpickling a call imports that function's module.
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
# Upkeep is background work: on a busy machine the scheduler runs the serving
# process's threads (the packs) first.
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
    os.nice(NICENESS)
    _exit_with_parent()
    serve(source, sink)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
