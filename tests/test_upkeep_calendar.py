"""The upkeep calendar on a real store (SQLite here; PostgreSQL in
test_upkeep_postgres.py) with a simulated clock: due jobs run once however long
the gateway was down, one runner at a time (the lease), a dead runner's run is
marked interrupted and run again, bad cron strings and unknown jobs are clear
errors."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gateway.config import Config, load_config
from gateway.errors import ConfigError
from gateway.store import Store
from memory.jobs.base import Counts, JobContext
from memory.jobs.calendar import JobBusy, SimulatedClock, UnknownJob, UpkeepCalendar
from memory.jobs.models import RunStatus
from memory.jobs.registry import job_bodies
from memory.service import MemoryService
from tests.conftest import make_config

# A Wednesday, 10:30 UTC.
T0 = datetime(2026, 3, 4, 10, 30, tzinfo=UTC)


class Body:
    """A job body that counts its runs and can be made to fail or to wait."""

    def __init__(self) -> None:
        self.runs: list[JobContext] = []
        self.fail: Exception | None = None
        self.gate: asyncio.Event | None = None
        self.started = asyncio.Event()

    async def __call__(self, ctx: JobContext) -> Counts:
        self.runs.append(ctx)
        self.started.set()
        if self.gate is not None:
            await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        ctx.report["people"] = 2
        return {"touched": len(self.runs)}


@pytest.fixture
async def service(store: Store, config: Config) -> AsyncIterator[MemoryService]:
    service = MemoryService(store, config.memory, config.data_dir / "memory-index", None)
    yield service
    await service.aclose()


def calendar(
    store: Store,
    service: MemoryService,
    config: Config,
    clock: SimulatedClock,
    **bodies: Body,
) -> UpkeepCalendar:
    return UpkeepCalendar(store, service, config.upkeep, config.zone, bodies, clock=clock)


async def test_a_job_due_during_five_weeks_of_downtime_runs_once(
    store: Store, service: MemoryService, config: Config
) -> None:
    clock = SimulatedClock(T0)
    weekly, nightly = Body(), Body()
    cal = calendar(store, service, config, clock, weekly=weekly, nightly=nightly)
    await cal.prepare()
    # Never ran: due at once (the calendar never assumes a job ran).
    first = await cal.catch_up()
    assert sorted(r.job for r in first) == ["nightly", "weekly"]
    assert (len(weekly.runs), len(nightly.runs)) == (1, 1)
    # Nothing more is due the same day.
    clock.advance(timedelta(hours=1))
    assert await cal.catch_up() == []
    # Down for five weeks: each job runs once, and says how many times it was missed.
    clock.advance(timedelta(weeks=5))
    records = {r.job: r for r in await cal.catch_up()}
    assert set(records) == {"nightly", "weekly"}
    assert (len(weekly.runs), len(nightly.runs)) == (2, 2)
    assert records["weekly"].counts["missed_periods"] == 5
    assert records["nightly"].counts["missed_periods"] == 35
    assert records["weekly"].status is RunStatus.OK
    assert records["weekly"].report == {"people": 2}
    assert weekly.runs[-1].now == clock.now
    # And not again until the next Sunday 01:00 passes.
    assert await cal.catch_up() == []
    states = {s.name: s for s in await cal.status()}
    sunday = states["weekly"].next_due
    assert sunday is not None
    assert sunday.weekday() == 6
    assert sunday.hour == 1
    clock.now = sunday - timedelta(minutes=1)
    assert [r.job for r in await cal.catch_up()] == ["nightly"]
    clock.now = sunday
    assert [r.job for r in await cal.catch_up()] == ["weekly"]
    history = await cal.history("weekly")
    assert [r.status for r in history] == [RunStatus.OK] * 3


async def test_overdue_counts_from_the_last_success_and_failures_are_recorded(
    store: Store, service: MemoryService, config: Config
) -> None:
    clock = SimulatedClock(T0)
    nightly = Body()
    cal = calendar(store, service, config, clock, nightly=nightly)
    await cal.prepare()
    await cal.catch_up()
    nightly.fail = RuntimeError("the disk is full")
    clock.advance(timedelta(days=1))
    (failed,) = await cal.catch_up()
    assert failed.status is RunStatus.FAILED
    assert failed.error == "RuntimeError: the disk is full"
    # A failed run counts as run (no retry every heartbeat), but not as a success.
    assert await cal.catch_up() == []
    clock.advance(timedelta(days=1))
    (_failed_again,) = await cal.catch_up()
    state = {s.name: s for s in await cal.status()}["nightly"]
    assert state.last_status == "failed"
    assert state.missed_periods == 2
    assert state.overdue
    nightly.fail = None
    clock.advance(timedelta(days=1))
    (ok,) = await cal.catch_up()
    state = {s.name: s for s in await cal.status()}["nightly"]
    assert ok.status is RunStatus.OK
    assert not state.overdue
    assert state.last_ok_at == ok.started_at


async def test_dry_runs_and_runs_for_one_person_do_not_count_as_the_job_run(
    store: Store, service: MemoryService, config: Config
) -> None:
    clock = SimulatedClock(T0)
    monthly = Body()
    cal = calendar(store, service, config, clock, monthly=monthly)
    await cal.prepare()
    dry = await cal.run("monthly", dry_run=True)
    for_one = await cal.run("monthly", person_id=7)
    assert monthly.runs[0].dry_run
    assert monthly.runs[1].person_id == 7
    assert (dry.dry_run, for_one.person_id) == (True, 7)
    state = {s.name: s for s in await cal.status()}["monthly"]
    assert state.last_run_at is None
    assert state.due
    assert len(await cal.catch_up()) == 1
    assert await cal.latest_report("monthly") is not None


async def test_one_runner_at_a_time_and_a_dead_runners_run_is_interrupted(
    store: Store, service: MemoryService, config: Config
) -> None:
    clock = SimulatedClock(T0)
    nightly = Body()
    nightly.gate = asyncio.Event()
    one = calendar(store, service, config, clock, nightly=nightly)
    other = calendar(store, service, config, clock, nightly=Body())
    assert one.holder != other.holder
    await one.prepare()
    running = asyncio.create_task(one.run("nightly"))
    await nightly.started.wait()
    with pytest.raises(JobBusy, match="running elsewhere"):
        await other.run("nightly")
    # The other runner's catch-up sees the lease and leaves the job to its holder.
    assert await other.catch_up() == []
    nightly.gate.set()
    assert (await running).status is RunStatus.OK
    # The lease was given back: the job may run again at once.
    assert (await other.run("nightly")).status is RunStatus.OK

    # A runner that stops renewing (it died): past its lease the job is taken over.
    stuck = Body()
    stuck.gate = asyncio.Event()
    dead = calendar(store, service, config, clock, weekly=stuck)
    abandoned = asyncio.create_task(dead.run("weekly"))
    await stuck.started.wait()
    taker = calendar(store, service, config, clock, weekly=Body())
    with pytest.raises(JobBusy):
        await taker.run("weekly")
    clock.advance(timedelta(seconds=config.upkeep.lease_s + 1))
    await taker.prepare()
    records = await taker.catch_up()
    assert "weekly" in [r.job for r in records]
    weekly_runs = await taker.history("weekly")
    assert [r.status for r in weekly_runs] == [RunStatus.OK, RunStatus.INTERRUPTED]
    abandoned.cancel()
    with pytest.raises(asyncio.CancelledError):
        await abandoned


def test_bad_cron_strings_and_unknown_jobs_name_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^upkeep\.schedule\.nightly: '0 25 \* \* \*' is not"):
        make_config(tmp_path, upkeep={"schedule": {"nightly": "0 25 * * *"}})
    with pytest.raises(ConfigError, match=r"unknown key upkeep\.schedule\.fortnightly"):
        make_config(tmp_path, upkeep={"schedule": {"fortnightly": "0 1 */14 * *"}})
    with pytest.raises(ConfigError, match=r"^upkeep\.schedule: expected a table"):
        load_config(tmp_path / "agentgw.toml", env={"AGENTGW_UPKEEP__SCHEDULE": "0 2 * * *"})
    # From the file, as written in [upkeep.schedule]; "" turns a job off.
    path = tmp_path / "agentgw.toml"
    path.write_text('[upkeep.schedule]\nweekly = "30 4 * * 1"\nmonthly = ""\n', encoding="utf-8")
    config = load_config(path, env={})
    assert config.upkeep.schedule.weekly == "30 4 * * 1"
    assert config.upkeep.schedule.monthly == ""


async def test_unknown_job_names_and_jobs_without_a_body(
    store: Store, service: MemoryService, config: Config, caplog: pytest.LogCaptureFixture
) -> None:
    clock = SimulatedClock(T0)
    cal = UpkeepCalendar(store, service, config.upkeep, config.zone, job_bodies(), clock=clock)
    with pytest.raises(UnknownJob, match=r"'fortnightly' is not a job; the jobs that run are: "):
        await cal.run("fortnightly")
    if "nightly" not in cal.bodies:
        with pytest.raises(UnknownJob, match="'nightly' has no body in this version"):
            await cal.run("nightly")
    await cal.prepare()
    with caplog.at_level(logging.DEBUG, logger="memory.jobs.calendar"):
        ran = await cal.catch_up()
        clock.advance(timedelta(days=40))
        ran += await cal.catch_up()
    assert {r.job for r in ran} == set(cal.bodies)
    skipped = [r.message for r in caplog.records if "has no job body" in r.message]
    # One line per job without a body, however many catch-ups skipped it.
    assert len(skipped) == len(set(cal.schedules) - set(cal.bodies))


async def test_the_hourly_job_is_the_old_upkeep_pass(
    store: Store, service: MemoryService, config: Config
) -> None:
    clock = SimulatedClock(T0)
    cal = UpkeepCalendar(store, service, config.upkeep, config.zone, job_bodies(), clock=clock)
    await cal.prepare()
    plan = await cal.run("hourly", dry_run=True)
    assert plan.status is RunStatus.OK
    record = await cal.run("hourly")
    assert record.status is RunStatus.OK
    assert set(record.counts) == {"items_seen", "archived", "traces_deleted"}


KILLED_RUNNER = textwrap.dedent(
    """
    import asyncio, sys
    from gateway.config import load_config
    from gateway.store import Store
    from memory.jobs.calendar import UpkeepCalendar
    from memory.service import MemoryService

    async def forever(ctx):
        print("started", flush=True)
        await asyncio.Event().wait()

    async def main():
        config = load_config(None, env={}, overrides={
            "store": {"data_dir": sys.argv[1]}, "memory": {"embedder": "none"},
            "agent": {"timezone": "UTC"}})
        async with Store(config.database_url) as store:
            service = MemoryService(store, config.memory, config.data_dir / "idx", None)
            cal = UpkeepCalendar(store, service, config.upkeep, config.zone,
                                 {"nightly": forever})
            await cal.prepare()
            await cal.run("nightly")

    asyncio.run(main())
    """
)


async def test_kill_9_mid_run_then_the_next_start_marks_it_interrupted_and_runs_it(
    store: Store, service: MemoryService, config: Config, tmp_path: Path
) -> None:
    runner = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        KILLED_RUNNER,
        str(config.data_dir),
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", os.getcwd())},
        cwd=tmp_path,
    )
    try:
        assert runner.stdout is not None
        line = await runner.stdout.readline()
        assert line.strip() == b"started"
    finally:
        os.kill(runner.pid, signal.SIGKILL)
        await runner.wait()
    nightly = Body()
    clock = SimulatedClock(datetime.now(UTC))
    cal = calendar(store, service, config, clock, nightly=nightly)
    # Within its lease the dead runner still holds the job: nothing runs twice.
    await cal.prepare()
    assert await cal.catch_up() == []
    (dead,) = await cal.history("nightly")
    assert dead.status is RunStatus.RUNNING
    # The next start, once the lease ran out: interrupted, and run again.
    clock.advance(timedelta(seconds=config.upkeep.lease_s + 1))
    await cal.prepare()
    (dead,) = await cal.history("nightly")
    assert dead.status is RunStatus.INTERRUPTED
    assert dead.error is not None
    assert "lease expired" in dead.error
    (again,) = await cal.catch_up()
    assert again.status is RunStatus.OK
    assert len(nightly.runs) == 1


async def test_a_running_job_renews_its_lease(
    store: Store, service: MemoryService, tmp_path: Path
) -> None:
    config = make_config(tmp_path, upkeep={"lease_s": 6.0})
    clock = SimulatedClock(T0)
    slow = Body()
    slow.gate = asyncio.Event()
    runner = calendar(store, service, config, clock, nightly=slow)
    rival = calendar(store, service, config, clock, nightly=Body())
    running = asyncio.create_task(runner.run("nightly"))
    await slow.started.wait()
    (first,) = [s for s in await runner.status() if s.name == "nightly"]
    assert first.lease_until == T0 + timedelta(seconds=6)
    # Renewed every third of the lease (2 s of real time), from the calendar's clock.
    clock.advance(timedelta(seconds=5))
    for _ in range(100):
        (state,) = [s for s in await runner.status() if s.name == "nightly"]
        if state.lease_until != first.lease_until:
            break
        await asyncio.sleep(0.05)
    assert state.lease_until == clock.now + timedelta(seconds=6)
    # Past the first lease, within the renewed one: still held.
    clock.advance(timedelta(seconds=3))
    with pytest.raises(JobBusy):
        await rival.run("nightly")
    slow.gate.set()
    assert (await running).status is RunStatus.OK
