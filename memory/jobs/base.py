"""What a job body receives from the calendar, and what it gives back.

A job body is ``async def body(ctx: JobContext) -> Counts``. It must be
idempotent and resumable: it reads what still needs doing from the store
(never from a checkpoint in memory), works in batches of ``ctx.batch`` and
commits each batch, so a process killed mid-run loses nothing and the next
run finishes the work without doing any of it twice. With ``ctx.dry_run`` it
changes nothing and instead calls ``ctx.would(line)`` once per change it
would make.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from memory.service import MemoryService

# A run's counts, by name ("merged", "archived", "insights", ...): what the
# calendar stores with the run, what `agentgw upkeep` prints and the panel shows.
Counts = dict[str, int | float]

# Processes the turns an extractor (the observer, for one) has not processed yet,
# for one person or everyone (None); returns how many turns it processed. The app
# registers these: memory/ may not import persona/ (the layer rule).
Extractor = Callable[[int | None], Awaitable[int]]


def _no_progress(done: int, total: int | None) -> None:
    return None


@dataclass
class JobContext:
    service: MemoryService
    # The calendar's clock: the real time, or the simulated one of `bench upkeep`.
    now: datetime
    # Limit the run to one person (``agentgw upkeep run JOB --person P``); None: everyone.
    person_id: int | None = None
    dry_run: bool = False
    batch: int = 500
    extractors: Sequence[Extractor] = ()
    # Called as work advances (a progress bar on the command line); total None: unknown.
    progress: Callable[[int, int | None], None] = _no_progress
    plan: list[str] = field(default_factory=list)
    # A structured report a body may leave (the monthly health report); stored with
    # the run as JSON, so it holds only JSON values.
    report: dict[str, object] = field(default_factory=dict)

    def would(self, line: str) -> None:
        """A dry run's record of one change it would have made."""
        self.plan.append(line)


class JobBody(Protocol):
    async def __call__(self, ctx: JobContext) -> Counts: ...
