"""The memory tree's update queue: coalesced per person, off the reply's path.

Every write queues its new item ids (``schedule``); one background task runs each
person's update ``memory.tree_update_window_s`` after the first id queued since
their last one, so a burst of turns costs one update, not one per turn. A queue
that reaches ``tree_update_max_pending`` ids runs at once (it stays bounded), and
``idle`` runs every queue now (tests, benches). Ids still queued at shutdown are
dropped: the items are stored, and the nightly rebuild places them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Iterable, Mapping

from gateway.config import MemoryConfig

log = logging.getLogger(__name__)


class UpdateQueue(ABC):
    """The queue and its worker; ``MemoryTree`` supplies ``config`` and ``update``."""

    config: MemoryConfig

    def __init__(self) -> None:
        self._dirty: set[int] = set()
        # The items written since each person's last update (what the update reads).
        self._pending: dict[int, set[int]] = {}
        # Seconds of the last updates (the tree bench's per-item figure).
        self.update_seconds: deque[float] = deque(maxlen=10_000)
        # The process's CPU seconds over each update (its threads included): on a shared
        # machine the wall time above is mostly waiting.
        self.update_cpu_seconds: deque[float] = deque(maxlen=10_000)
        # Ids placed per update (the bench's turns per update).
        self.update_items: deque[int] = deque(maxlen=10_000)
        self._task: asyncio.Task[None] | None = None
        # When each person's oldest queued id came (loop time), the event that wakes the
        # worker early (a full queue, ``idle``), and how many callers wait in ``idle``
        # (they want the queue run now).
        self._since: dict[int, float] = {}
        self._wake: asyncio.Event | None = None
        self._flushing = 0

    @abstractmethod
    async def update(self, person_id: int) -> int:
        """Place the person's queued items in their tree; how many were placed."""

    def schedule(self, written: Mapping[int, Iterable[int]]) -> None:
        """Queue the incremental updates for these items, by person (one worker in the
        background; the reply never waits for it). Coalesced: a person's update runs
        ``tree_update_window_s`` after the first id queued since their last one, so a
        burst of turns costs one update, or at once when ``tree_update_max_pending``
        ids are queued."""
        now = asyncio.get_running_loop().time()
        for person_id, ids in written.items():
            queue = self._pending.setdefault(person_id, set())
            queue.update(ids)
            self._since.setdefault(person_id, now)
            self._dirty.add(person_id)
            if len(queue) >= self.config.tree_update_max_pending and self._wake is not None:
                self._wake.set()
        if self._task is None or self._task.done():
            # A fresh event per worker: an asyncio.Event belongs to the loop it waits on.
            self._wake = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._drain())

    def _due(self, person_id: int) -> float:
        """When the person's update runs (loop time)."""
        if self._flushing or (
            len(self._pending.get(person_id, ())) >= self.config.tree_update_max_pending
        ):
            return float("-inf")
        return self._since.get(person_id, 0.0) + self.config.tree_update_window_s

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        wake = self._wake
        assert wake is not None
        while self._dirty:
            wake.clear()
            person_id = min(self._dirty, key=lambda p: (self._due(p), p))
            wait = self._due(person_id) - loop.time()
            if wait > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), wait)
                continue
            self._dirty.discard(person_id)
            self._since.pop(person_id, None)
            queued = len(self._pending.get(person_id, ()))
            started, cpu = time.perf_counter(), time.process_time()
            try:
                await self.update(person_id)
                self.update_seconds.append(time.perf_counter() - started)
                self.update_cpu_seconds.append(time.process_time() - cpu)
                self.update_items.append(queued)
            except Exception:  # the next write schedules it again; the reply never waits
                log.exception("tree: update of person %d failed", person_id)
            log.debug("tree: person %d updated in %.3fs", person_id, time.perf_counter() - started)

    async def idle(self) -> None:
        """Run the queued updates now, without their window, and wait for them (tests,
        benches, shutdown)."""
        self._flushing += 1
        try:
            while self._task is not None and not self._task.done():
                if self._wake is not None:
                    self._wake.set()
                with contextlib.suppress(Exception):
                    await asyncio.shield(self._task)
        finally:
            self._flushing -= 1

    async def aclose(self) -> None:
        self._dirty.clear()
        self._pending.clear()
        self._since.clear()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
