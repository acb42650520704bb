"""Packs under way, so that background work in the serving process can step around them.

A pack is a chain of short steps in the event loop and in worker threads; each step
takes the GIL again when it resumes. Background work of the same process running
Python meanwhile (an upkeep job's batch of writes, its reads turned into rows) makes
every one of those hand-offs wait, up to the switch interval (5 ms) each: a pack that
overlaps such a batch is slower by as much as the batch's Python, at the p95 of packs
served while the nightly runs (docs/DESIGN.md, "Packs while the nightly runs").

``MemoryService.build_pack`` counts itself under way; an upkeep job awaits
``quiet()`` before each batch it runs in this process, so a batch starts between
packs rather than under one. The wait is bounded (``QUIET_WAIT_S``): a gateway whose
packs come back to back must still finish its nightly, a batch late at most. A write
too large to start between two packs (the tree's rebuild: ~4,700 nodes in one
transaction) calls ``pause()`` in its thread between chunks: while a pack is under
way that thread sleeps, GIL released, for at most ``PAUSE_MAX_S`` (it holds the
store's write turn meanwhile, so the bound is short).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator

# The longest a batch waits for the packs under way to end.
QUIET_WAIT_S = 1.0
# The longest a write's thread sleeps between two chunks (a pack takes ~20 ms).
PAUSE_MAX_S = 0.1


class PackActivity:
    """How many packs are being built now, and a wait for none."""

    def __init__(self) -> None:
        self._under_way = 0
        self._quiet = asyncio.Event()
        self._quiet.set()
        # The same, for a worker thread to wait on.
        self._quiet_for_threads = threading.Event()
        self._quiet_for_threads.set()
        # Batches that found a pack under way and waited, and pauses of a write's
        # thread that did (for the benches and tests).
        self.waits = 0
        self.pauses = 0

    @property
    def under_way(self) -> int:
        return self._under_way

    @contextlib.contextmanager
    def pack(self) -> Iterator[None]:
        """Count a pack as under way while the block runs."""
        self._under_way += 1
        self._quiet.clear()
        self._quiet_for_threads.clear()
        try:
            yield
        finally:
            self._under_way -= 1
            if self._under_way == 0:
                self._quiet_for_threads.set()
                self._quiet.set()

    async def quiet(self, most_s: float = QUIET_WAIT_S) -> bool:
        """Wait until no pack is under way, at most ``most_s``; whether none was."""
        if self._quiet.is_set():
            return True
        self.waits += 1
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._quiet.wait(), most_s)
        return self._quiet.is_set()

    def pause(self, most_s: float = PAUSE_MAX_S) -> None:
        """In a worker thread: sleep while a pack is under way, at most ``most_s``."""
        if not self._quiet_for_threads.is_set():
            self.pauses += 1
            self._quiet_for_threads.wait(most_s)
