"""The upkeep calendar's lease on a real PostgreSQL server: two runners, each with
its own Store (engine and connections), race for one job; one runs it, the other
sees the lease. The server is the throwaway one of test_memory_postgres.py."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from gateway.config import Config
from gateway.store import Store
from memory.jobs.base import Counts, JobContext
from memory.jobs.calendar import JobBusy, SimulatedClock, UpkeepCalendar
from memory.jobs.models import RunStatus
from memory.service import MemoryService
from tests.test_memory_postgres import PG_BINARIES, postgres

pytestmark = pytest.mark.skipif(not PG_BINARIES, reason="Debian postgresql is not installed")
__all__ = ["postgres"]

T0 = datetime(2026, 3, 4, 10, 30, tzinfo=UTC)


@pytest.fixture
async def two_stores(postgres: str) -> AsyncIterator[tuple[Store, Store]]:
    """One new database, opened twice: two engines, as two processes would."""
    name = f"agentgw_{uuid.uuid4().hex[:12]}"
    async with Store(f"{postgres}/postgres") as admin:
        engine = admin.engine.execution_options(isolation_level="AUTOCOMMIT")
        async with engine.connect() as connection:
            await connection.execute(text(f"CREATE DATABASE {name}"))
    async with Store(f"{postgres}/{name}") as one, Store(f"{postgres}/{name}") as other:
        yield one, other


class Slow:
    def __init__(self) -> None:
        self.runs = 0

    async def __call__(self, ctx: JobContext) -> Counts:
        self.runs += 1
        # Long enough for the rival's claim to meet the lease, not the end of the run.
        await asyncio.sleep(0.3)
        return {"done": 1}


async def test_two_runners_race_for_one_job_and_one_runs_it(
    two_stores: tuple[Store, Store], config: Config
) -> None:
    clock = SimulatedClock(T0)
    bodies = [Slow(), Slow()]
    calendars = [
        UpkeepCalendar(
            store,
            MemoryService(store, config.memory, config.data_dir / f"idx{n}", None),
            config.upkeep,
            config.zone,
            {"nightly": body},
            clock=clock,
        )
        for n, (store, body) in enumerate(zip(two_stores, bodies, strict=True))
    ]
    await asyncio.gather(*(c.prepare() for c in calendars))
    for round_ in range(3):
        results = await asyncio.gather(
            *(c.run("nightly") for c in calendars), return_exceptions=True
        )
        ran = [r for r in results if not isinstance(r, BaseException)]
        busy = [r for r in results if isinstance(r, JobBusy)]
        assert len(ran) == 1, (round_, results)
        assert len(busy) == 1, (round_, results)
        assert ran[0].status is RunStatus.OK
    assert sum(b.runs for b in bodies) == 3
    # Catch-ups racing: the job, due once, runs once.
    clock.advance(timedelta(days=2))
    caught = await asyncio.gather(*(c.catch_up() for c in calendars))
    assert sum(len(records) for records in caught) == 1
    assert sum(b.runs for b in bodies) == 4
    history = await calendars[0].history("nightly")
    assert [r.status for r in history] == [RunStatus.OK] * 4
    for calendar in calendars:
        assert calendar.service is not None
        await calendar.service.aclose()
