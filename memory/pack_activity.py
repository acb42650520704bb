"""Packs under way, so that background work in the serving process can step around them.

A pack is a chain of short steps in the event loop and in worker threads; each step
takes the GIL again when it resumes. Background work of the same process running
Python meanwhile (an upkeep job's batch of writes, its reads turned into rows) makes
every one of those hand-offs wait, up to the switch interval (5 ms) each: a pack that
overlaps such a batch is slower by as much as the batch's Python, at the p95 of packs
served while the nightly runs (docs/DESIGN.md, "Packs while the nightly runs").

``MemoryService.build_pack`` counts itself ``under_way``; an upkeep job awaits
``quiet()`` before each batch it runs in this process, so a batch starts between
packs rather than under one. The wait is bounded (``QUIET_WAIT_S``): a gateway whose
packs come back to back must still finish its nightly, a batch late at most.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

# The longest a batch waits for the packs under way to end.
QUIET_WAIT_S = 1.0


class PackActivity:
    """How many packs are being built now, and a wait for none."""

    def __init__(self) -> None:
        self._under_way = 0
        self._quiet = asyncio.Event()
        self._quiet.set()
        # Batches that found a pack under way and waited (for the benches and tests).
        self.waits = 0

    @property
    def under_way(self) -> int:
        return self._under_way

    @contextlib.contextmanager
    def pack(self) -> Iterator[None]:
        """Count a pack as under way while the block runs."""
        self._under_way += 1
        self._quiet.clear()
        try:
            yield
        finally:
            self._under_way -= 1
            if self._under_way == 0:
                self._quiet.set()

    async def quiet(self, most_s: float = QUIET_WAIT_S) -> bool:
        """Wait until no pack is under way, at most ``most_s``; whether none was."""
        if self._quiet.is_set():
            return True
        self.waits += 1
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._quiet.wait(), most_s)
        return self._quiet.is_set()
