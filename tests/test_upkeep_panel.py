"""The Upkeep page and API inside a running gateway, and the calendar's numbers in
/metrics and /readyz: the start's catch-up, "run now" (202, 409 while running,
404 for no such job), and an overdue job making the gateway degraded."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from sqlalchemy import Connection, update

from memory.jobs.calendar import RunRecord, UpkeepCalendar
from memory.jobs.models import UpkeepJob
from tests.conftest import RunningGateway


async def calendar_of(running: RunningGateway) -> UpkeepCalendar:
    """The gateway's calendar, its hourly job run once by a catch-up.

    A new store's first start runs no job (each counts as run when the calendar first
    met it), so the hourly job is made two hours late first, as after a downtime."""
    await running.gateway.ready.wait()
    calendar = running.gateway.upkeep
    assert calendar is not None
    for _ in range(500):
        if any(s.name == "hourly" and s.last_run_at for s in await calendar.status()):
            break
        await asyncio.sleep(0.02)
    else:
        raise AssertionError("the calendar never met its jobs")
    assert await calendar.history() == [], "a new store's first start ran a job"
    late = datetime.now(UTC) - timedelta(hours=2)

    def two_hours_late(connection: Connection) -> None:
        connection.execute(
            update(UpkeepJob).where(UpkeepJob.name == "hourly").values(last_run_at=late)
        )

    await calendar.store.write(two_hours_late)
    if not await calendar.catch_up():
        # The calendar's own wake-up, a second past the hour, ran the same catch-up
        # first (seen in a full run that reached this test at 06:00): wait for its run.
        for _ in range(500):
            if any(r.status.value != "running" for r in await calendar.history()):
                break
            await asyncio.sleep(0.02)
    # Either way the overdue job ran once, and nothing else did.
    assert [(r.job, r.status.value) for r in await calendar.history()] == [("hourly", "ok")]
    return calendar


async def finished(calendar: UpkeepCalendar, run_id: int) -> RunRecord:
    for _ in range(500):
        (run,) = [r for r in await calendar.history() if r.id == run_id]
        if run.status.value != "running":
            return run
        await asyncio.sleep(0.02)
    raise AssertionError(f"run {run_id} did not end")


async def test_run_now_and_the_api(running: RunningGateway) -> None:
    calendar = await calendar_of(running)
    async with running.session.get(running.url("/api/upkeep")) as response:
        assert response.status == 200
        data = await response.json()
    jobs = {j["name"]: j for j in data["jobs"]}
    assert jobs["hourly"]["last_status"] == "ok"
    assert jobs["hourly"]["registered"] is True
    assert [r["job"] for r in data["runs"]] == ["hourly"]
    assert data["report"] is None

    async with running.session.post(running.url("/api/upkeep/jobs/hourly/run")) as response:
        assert response.status == 202
        started = await response.json()
    run = await finished(calendar, started["run_id"])
    assert run.status.value == "ok"
    assert set(run.counts) == {"items_seen", "archived", "traces_deleted"}

    async with running.session.post(running.url("/api/upkeep/jobs/fortnightly/run")) as response:
        assert response.status == 404
        assert "'fortnightly' is not a job" in (await response.json())["error"]["message"]
    # While a run holds the lease, "run now" is refused, not run twice.
    claim = await calendar.claim("hourly")
    async with running.session.post(running.url("/api/upkeep/jobs/hourly/run")) as response:
        assert response.status == 409
        assert "running elsewhere" in (await response.json())["error"]["message"]
    await calendar.execute(claim)

    async with running.session.get(running.url("/metrics")) as response:
        text = await response.text()
    assert 'agentgw_upkeep_job_runs_total{job="hourly",status="ok"} 3.0' in text
    assert 'agentgw_upkeep_job_duration_seconds_count{job="hourly"} 3.0' in text
    assert 'agentgw_upkeep_job_last_success_timestamp_seconds{job="hourly"}' in text


async def test_a_job_overdue_by_more_than_a_period_makes_the_gateway_degraded(
    running: RunningGateway,
) -> None:
    calendar = await calendar_of(running)
    async with running.session.get(running.url("/readyz")) as response:
        body = await response.json()
    assert body["status"] == "ok", body
    assert body["checks"]["upkeep"] == {"ok": True}
    hours_ago = datetime.now(UTC) - timedelta(hours=5)

    def five_hours_late(connection: Connection) -> None:
        connection.execute(
            update(UpkeepJob)
            .where(UpkeepJob.name == "hourly")
            .values(last_run_at=hours_ago, last_ok_at=hours_ago)
        )

    await calendar.store.write(five_hours_late)
    async with running.session.get(running.url("/readyz")) as response:
        assert response.status == 200
        body = await response.json()
    assert body["status"] == "degraded"
    late = body["degraded"]["upkeep_overdue"]["hourly"]
    assert late["missed_periods"] >= 4
    assert late["last_status"] == "ok"
