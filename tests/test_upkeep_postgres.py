"""The upkeep calendar's lease on a real PostgreSQL server: two runners — two
Stores (engines and connections) in one process, then two processes — race for
one job; one runs it, the other sees the lease. The server is the throwaway one
of test_memory_postgres.py."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

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


TWO_PROCESSES = """
import asyncio, sys
from gateway.config import load_config
from gateway.store import Store
from memory.jobs.calendar import JobBusy, UpkeepCalendar
from memory.service import MemoryService

async def slow(ctx):
    await asyncio.sleep(1.0)
    return {"done": 1}

async def main():
    config = load_config(None, env={}, overrides={
        "store": {"data_dir": sys.argv[2], "url": sys.argv[1]},
        "memory": {"embedder": "none"}, "agent": {"timezone": "UTC"}})
    async with Store(config.database_url) as store:
        service = MemoryService(store, config.memory, config.data_dir / "idx", None)
        cal = UpkeepCalendar(store, service, config.upkeep, config.zone, {"nightly": slow})
        print("ready", flush=True)
        sys.stdin.readline()
        try:
            record = await cal.run("nightly")
            print("ran", record.status.value, flush=True)
        except JobBusy as exc:
            print("busy", exc, flush=True)
        await service.aclose()

asyncio.run(main())
"""


async def test_two_processes_race_for_one_job_and_one_runs_it(
    two_stores: tuple[Store, Store], config: Config, tmp_path: Path
) -> None:
    url = two_stores[0].url
    await UpkeepCalendar(
        two_stores[0], None, config.upkeep, config.zone, {"nightly": Slow()}
    ).prepare()
    runners = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            TWO_PROCESSES,
            url,
            str(tmp_path / f"data{n}"),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", os.getcwd())},
        )
        for n in range(2)
    ]
    try:
        for runner in runners:
            assert runner.stdout is not None
            assert (await runner.stdout.readline()).strip() == b"ready"
        # Both go at once: each was waiting on its stdin.
        outputs = await asyncio.gather(*(runner.communicate(b"go\n") for runner in runners))
    finally:
        for runner in runners:
            if runner.returncode is None:
                runner.kill()
                await runner.wait()
    said = sorted(out.decode().strip() for out, _ in outputs)
    assert said[0].startswith("busy upkeep job 'nightly' is running elsewhere"), said
    assert said[1] == "ran ok", said
    history = await UpkeepCalendar(two_stores[1], None, config.upkeep, config.zone, {}).history(
        "nightly"
    )
    assert [r.status for r in history] == [RunStatus.OK]
