"""Which people's indexes stay in memory: the least recently used leave first.

Every person who writes gets an ANN index (memory/index.py) and a full-text
index (memory/lexical.py), held in memory while they are used. Held until
shutdown, they grew the gateway by 2.7 MB per person who ever wrote, never
given back. ``IndexCache`` keeps the measured size of each person's pair
(``PersonIndex.nbytes`` + ``LexicalIndex.nbytes``) in order of use; when a
use takes the total past ``memory.index_cache_mb``, the people used longest
ago are evicted until it fits (the one just used always stays, however big).

Eviction takes the pair out of the service's tables at once, so the next use
opens them again, and saves them in a worker thread (``EvictionSaves``); that
open waits for the save, so it loads what was just written. Nothing an
eviction races with is lost, as the store is written first and each index is
a cache of it: an item stored before the save is in the file; a change that
reaches an evicted index after its save (a pack or ingest that held it
across the eviction) was stored before it, so the reopened index reads it
from the store when it is brought up to date (``PersonIndex.open``, the
service's ``_catch_up_lexical``). A person whose index is being opened or
built is not evicted: their build holds the queued retirements (see
docs/DESIGN.md), which would otherwise land in an index no longer used.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

from memory.errors import IndexUnavailable
from memory.index import PersonIndex
from memory.lexical import LexicalIndex

log = logging.getLogger(__name__)


class IndexCache:
    """People's index sizes in order of use, oldest first; within ``budget_bytes``."""

    def __init__(self, budget_bytes: int) -> None:
        self.budget_bytes = budget_bytes
        self._sizes: OrderedDict[int, int] = OrderedDict()
        self._total = 0
        self.evicted = 0

    @property
    def total_bytes(self) -> int:
        return self._total

    def __len__(self) -> int:
        return len(self._sizes)

    def __contains__(self, person_id: object) -> bool:
        return person_id in self._sizes

    def use(self, person_id: int, nbytes: int, busy: Callable[[int], bool]) -> list[int]:
        """``person_id``'s indexes were used and hold ``nbytes`` now: the people to
        evict to fit the budget, least recently used first. Never ``person_id``,
        nor anyone ``busy`` (being opened or built)."""
        self._total += nbytes - self._sizes.pop(person_id, 0)
        self._sizes[person_id] = nbytes
        victims: list[int] = []
        for other in list(self._sizes):
            if self._total <= self.budget_bytes:
                break
            if other == person_id or busy(other):
                continue
            self._total -= self._sizes.pop(other)
            victims.append(other)
        self.evicted += len(victims)
        return victims

    def forget(self, person_id: int) -> None:
        """The person's indexes left memory another way (shutdown, a failed build)."""
        self._total -= self._sizes.pop(person_id, 0)


class EvictionSaves:
    """The saves of evicted indexes, each a tracked task; a reopen waits for its own."""

    def __init__(self, store_identity: str) -> None:
        self._store_identity = store_identity
        self._tasks: dict[int, asyncio.Task[None]] = {}

    def __len__(self) -> int:
        return len(self._tasks)

    def start(
        self,
        person_id: int,
        ann: PersonIndex | None,
        lexical: LexicalIndex | None,
        lexical_path: Path,
    ) -> None:
        previous = self._tasks.get(person_id)
        task = asyncio.create_task(
            self._save(person_id, previous, ann, lexical, lexical_path),
            name=f"memory-evict-{person_id}",
        )
        self._tasks[person_id] = task
        task.add_done_callback(lambda done: self._done(person_id, done))

    def _done(self, person_id: int, task: asyncio.Task[None]) -> None:
        if self._tasks.get(person_id) is task:
            del self._tasks[person_id]
        if not task.cancelled() and task.exception() is not None:
            # The reopen reads what the files lack from the store.
            log.error(
                "memory: saving the evicted indexes of person %d: %s", person_id, task.exception()
            )

    async def _save(
        self,
        person_id: int,
        previous: asyncio.Task[None] | None,
        ann: PersonIndex | None,
        lexical: LexicalIndex | None,
        lexical_path: Path,
    ) -> None:
        if previous is not None:
            # Two saves of one person's files never overlap: the later one wins.
            await asyncio.wait([previous])
        await asyncio.to_thread(self._write, person_id, ann, lexical, lexical_path)

    def _write(
        self,
        person_id: int,
        ann: PersonIndex | None,
        lexical: LexicalIndex | None,
        lexical_path: Path,
    ) -> None:
        # A lost save costs the reopen a catch-up from the store, never an item.
        if ann is not None and ann.dirty:
            try:
                ann.save()
            except IndexUnavailable:
                log.exception("memory: could not save the evicted index of person %d", person_id)
        if lexical is not None and lexical.dirty:
            try:
                lexical.save(lexical_path, self._store_identity)
            except OSError:
                log.exception(
                    "memory: could not save the evicted full-text index of person %d", person_id
                )

    async def wait(self, person_id: int) -> None:
        """Until the person's evicted indexes are saved (at once if none are being)."""
        task = self._tasks.get(person_id)
        if task is not None:
            # Not its outcome: a failed save only means the reopen catches up more.
            await asyncio.wait([task])

    async def aclose(self) -> None:
        """Wait for every save under way (shutdown: they are what the files will hold)."""
        while self._tasks:
            await asyncio.wait(list(self._tasks.values()))
