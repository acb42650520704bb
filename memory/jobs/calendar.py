"""The upkeep calendar: which job is due, who runs it, and what each run did.

The rule it keeps: **never assume a scheduled job ran.** ``upkeep_jobs`` says
when each job last ran; a job whose last scheduled time (its cron expression in
``agent.timezone``) passed since then is due, and a catch-up runs it **once**,
however many periods were missed (the run's counts say how many:
``missed_periods``). Catch-ups run at start and on every heartbeat, in the
background.

One runner at a time per job, also across processes sharing one PostgreSQL
database: a run starts only after one atomic ``UPDATE upkeep_jobs SET
lease_holder = me, lease_until = now + lease_s WHERE name = job AND
(lease_until IS NULL OR lease_until < now)`` changed its row; it renews the
lease every third of ``lease_s`` and gives it back at the end. A holder that
died (kill -9) stops renewing: once its lease has expired the next claim takes
it, marks the dead run ``interrupted``, and the job, which never recorded the
run, is still due.

Its records, errors (``UnknownJob``, ``JobBusy``) and clocks are in
memory/jobs/runs.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, tzinfo
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, and_, delete, func, insert, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite

from gateway.errors import AgentGWError
from gateway.schedule import CronSchedule
from gateway.store.models import Message
from memory.jobs.base import Counts, Extractor, JobBody, JobContext
from memory.jobs.models import RunStatus, UpkeepJob, UpkeepRun
from memory.jobs.runs import (
    MAX_ERROR_CHARS,
    Claim,
    Clock,
    JobBusy,
    JobState,
    RunRecord,
    SimulatedClock,
    UnknownJob,
    body_of,
    new_holder,
    record_of,
    wall_clock,
)

if TYPE_CHECKING:
    from gateway.config import UpkeepConfig
    from gateway.store import Store
    from memory.service import MemoryService

__all__ = [
    "Claim",
    "JobBusy",
    "JobState",
    "RunRecord",
    "SimulatedClock",
    "UnknownJob",
    "UpkeepCalendar",
    "body_of",
]

log = logging.getLogger(__name__)


@dataclass
class UpkeepCalendar:
    """Runs the registered job bodies on their schedules; see the module's docstring.

    ``clock`` is the calendar's time (schedule, leases, run times): the wall clock,
    or a fake one in tests and the simulated one of ``bench upkeep``.
    """

    store: Store
    service: MemoryService | None
    config: UpkeepConfig
    zone: tzinfo
    bodies: Mapping[str, JobBody]
    clock: Clock = wall_clock
    holder: str = field(default_factory=new_holder)
    extractors: Sequence[Extractor] = ()
    # The gateway's calendar (not a test's or a bench's): a job it meets for the first
    # time counts as run at the store's first message (see ``prepare``).
    seed_new_jobs: bool = False
    # Told of every run that ended (metrics); must not raise.
    on_run: Callable[[RunRecord], None] | None = None
    # A stop lets the run under way finish this long before it is cut (its batches
    # are committed: a cut run loses nothing, it is only marked interrupted).
    stop_grace_s: float = 10.0
    schedules: dict[str, CronSchedule] = field(init=False)
    _unregistered_logged: set[str] = field(init=False, default_factory=set)

    def __post_init__(self) -> None:
        from memory.jobs.registry import JOB_NAMES

        self.schedules = {}
        for name in JOB_NAMES:
            expression = getattr(self.config.schedule, name).strip()
            if expression:
                self.schedules[name] = CronSchedule.parse(
                    f"upkeep.schedule.{name}", expression, self.zone
                )

    # ------------------------------------------------------------------ reading

    async def prepare(self) -> None:
        """A row for every scheduled job; runs left ``running`` by a dead holder marked."""
        now = self.clock()
        schedules = {name: s.expression for name, s in self.schedules.items()}

        seeded = self.seed_new_jobs

        def work(connection: Connection) -> None:
            dialect = postgresql if connection.dialect.name == "postgresql" else sqlite
            seed: datetime | None = None
            if seeded:
                # A job met for the first time is due for what the store held before
                # it: from the first message on (an upgraded store catches up at once),
                # or from now in a new one (a first start runs no job: no burst of
                # utility-model calls, no catch-up reading a first turn half-way).
                first = connection.execute(select(func.min(Message.created_at))).scalar()
                seed = min(first, now) if first is not None else now
            for name, expression in schedules.items():
                connection.execute(
                    dialect.insert(UpkeepJob)
                    .values(name=name, schedule=expression, last_run_at=seed)
                    .on_conflict_do_nothing(index_elements=["name"])
                )
                connection.execute(
                    update(UpkeepJob).where(UpkeepJob.name == name).values(schedule=expression)
                )
            _mark_dead_runs(connection, now, None)

        await self.store.write(work)

    async def status(self) -> list[JobState]:
        """Every scheduled job (and any other the table knows), in schedule order."""
        now = self.clock()

        def read(connection: Connection) -> tuple[list[Any], set[str]]:
            jobs = list(connection.execute(select(*UpkeepJob.__table__.columns)))
            running = set(
                connection.execute(
                    select(UpkeepRun.job).where(UpkeepRun.status == RunStatus.RUNNING)
                ).scalars()
            )
            return jobs, running

        rows, running = await self.store.read(read)
        by_name = {row.name: row for row in rows}
        names = [*self.schedules, *sorted(set(by_name) - set(self.schedules))]
        return [self._state(name, by_name.get(name), now, name in running) for name in names]

    def _state(self, name: str, row: Any, now: datetime, running: bool) -> JobState:
        schedule = self.schedules.get(name)
        last_run_at = row.last_run_at if row else None
        last_ok_at = row.last_ok_at if row else None
        previous_due = schedule.previous(now) if schedule else None
        next_due = schedule.next(now) if schedule else None
        due = previous_due is not None and (last_run_at is None or last_run_at < previous_due)
        since = last_ok_at or last_run_at
        missed = schedule.missed(since, now) if schedule and since else 0
        lease_until = row.lease_until if row else None
        return JobState(
            name=name,
            schedule=schedule.expression if schedule else "",
            registered=name in self.bodies,
            last_run_at=last_run_at,
            last_status=row.last_status if row else None,
            last_counts=dict(row.last_counts or {}) if row else {},
            last_ok_at=last_ok_at,
            previous_due=previous_due,
            next_due=next_due,
            due=due,
            missed_periods=missed,
            lease_holder=row.lease_holder if row and lease_until and lease_until > now else None,
            lease_until=lease_until if lease_until and lease_until > now else None,
            running=running,
        )

    async def history(self, job: str | None = None, limit: int = 50) -> list[RunRecord]:
        """The newest runs first (of one job, or of all)."""
        query = select(*UpkeepRun.__table__.columns).order_by(UpkeepRun.id.desc()).limit(limit)
        if job is not None:
            query = query.where(UpkeepRun.job == job)

        def read(connection: Connection) -> list[RunRecord]:
            return [record_of(row) for row in connection.execute(query)]

        return await self.store.read(read)

    async def latest_report(self, job: str) -> RunRecord | None:
        """The newest successful run of ``job`` over everyone that left a report."""
        query = (
            select(*UpkeepRun.__table__.columns)
            .where(
                UpkeepRun.job == job,
                UpkeepRun.status == RunStatus.OK,
                UpkeepRun.report.is_not(None),
                UpkeepRun.person_id.is_(None),
                UpkeepRun.dry_run.is_(False),
            )
            .order_by(UpkeepRun.id.desc())
            .limit(1)
        )

        def read(connection: Connection) -> RunRecord | None:
            row = connection.execute(query).first()
            return record_of(row) if row is not None else None

        return await self.store.read(read)

    # ------------------------------------------------------------------ running

    def check_job(self, name: str) -> JobBody:
        """The body of ``name``; ``UnknownJob`` names the jobs there are."""
        return body_of(self.bodies, name)

    async def catch_up(self) -> list[RunRecord]:
        """Run, once each, the jobs whose last scheduled time passed since they ran."""
        records: list[RunRecord] = []
        for state in await self.status():
            if not state.due:
                continue
            if not state.registered:
                if state.name not in self._unregistered_logged:
                    self._unregistered_logged.add(state.name)
                    log.debug("upkeep: %s is scheduled but has no job body; skipped", state.name)
                continue
            since = state.last_run_at
            schedule = self.schedules[state.name]
            # Never ran: nothing is known to be missed (the first run is not a catch-up).
            missed = schedule.missed(since, self.clock()) if since else 0
            try:
                records.append(await self.run(state.name, missed_periods=missed))
            except JobBusy:
                # Another runner has it now: it records the run, not us.
                log.debug("upkeep: %s is being run by another runner", state.name)
        return records

    async def forever(self) -> None:
        """Catch up now, then at every heartbeat (a supervised task)."""
        await self.prepare()
        while True:
            try:
                await self.catch_up()
            except AgentGWError as exc:
                # The store is away (a PostgreSQL restart): the next heartbeat tries again.
                log.warning("upkeep: catch-up stopped: %s", exc)
            await asyncio.sleep(self._sleep_s())

    def _sleep_s(self) -> float:
        # Until the next scheduled time (a minute past it), or the heartbeat if sooner:
        # an hourly job runs on the hour, not up to a heartbeat later.
        now = self.clock()
        nearest = min(
            (s.next(now) for s in self.schedules.values()), default=now + timedelta(days=1)
        )
        return max(1.0, min(self.config.heartbeat_s, (nearest - now).total_seconds() + 1.0))

    async def run(
        self,
        name: str,
        *,
        person_id: int | None = None,
        dry_run: bool = False,
        missed_periods: int = 0,
        progress: Callable[[int, int | None], None] | None = None,
    ) -> RunRecord:
        """Take the lease, run the body, record the run; ``JobBusy`` when it is held.

        A body's failure is recorded (status failed, the error), not raised.
        """
        claim = await self.claim(
            name, person_id=person_id, dry_run=dry_run, missed_periods=missed_periods
        )
        return await self.execute(claim, progress=progress)

    async def claim(
        self,
        name: str,
        *,
        person_id: int | None = None,
        dry_run: bool = False,
        missed_periods: int = 0,
    ) -> Claim:
        """Take ``name``'s lease and open its run row (then ``execute`` runs it)."""
        self.check_job(name)
        now = self.clock()
        until = now + timedelta(seconds=self.config.lease_s)
        expression = self.schedules[name].expression if name in self.schedules else ""
        holder = self.holder

        def work(connection: Connection) -> int | str:
            dialect = postgresql if connection.dialect.name == "postgresql" else sqlite
            connection.execute(
                dialect.insert(UpkeepJob)
                .values(name=name, schedule=expression)
                .on_conflict_do_nothing(index_elements=["name"])
            )
            taken = connection.execute(
                update(UpkeepJob)
                .where(
                    UpkeepJob.name == name,
                    or_(UpkeepJob.lease_until.is_(None), UpkeepJob.lease_until < now),
                )
                .values(lease_holder=holder, lease_until=until)
            )
            if taken.rowcount != 1:
                held = connection.execute(
                    select(UpkeepJob.lease_holder, UpkeepJob.lease_until).where(
                        UpkeepJob.name == name
                    )
                ).one()
                return f"{held.lease_holder} until {held.lease_until:%Y-%m-%d %H:%M:%S} UTC"
            # Whoever held it before is gone (its lease ran out): its run did not end.
            _mark_dead_runs(connection, now, name)
            return int(
                connection.execute(
                    insert(UpkeepRun)
                    .values(
                        job=name,
                        started_at=now,
                        status=RunStatus.RUNNING,
                        person_id=person_id,
                        dry_run=dry_run,
                        holder=holder,
                    )
                    .returning(UpkeepRun.id)
                ).scalar_one()
            )

        taken = await self.store.write(work)
        if isinstance(taken, str):
            raise JobBusy(f"upkeep job {name!r} is running elsewhere (lease held by {taken})")
        return Claim(taken, name, now, person_id, dry_run, missed_periods)

    async def execute(
        self, claim: Claim, *, progress: Callable[[int, int | None], None] | None = None
    ) -> RunRecord:
        """Run a claimed job's body, renewing the lease, and record how it ended."""
        body = self.check_job(claim.job)
        if self.service is None:
            raise UnknownJob("upkeep jobs need the memory layer (memory.enabled = false)")
        ctx = JobContext(
            service=self.service,
            now=claim.started_at,
            person_id=claim.person_id,
            dry_run=claim.dry_run,
            batch=self.config.batch,
            extractors=self.extractors,
        )
        if progress is not None:
            ctx.progress = progress
        renewing = asyncio.create_task(self._renew(claim.job), name=f"upkeep-lease-{claim.job}")
        started = time.monotonic()
        task = asyncio.ensure_future(body(ctx))
        try:
            try:
                counts: Counts = await asyncio.shield(task)
            except asyncio.CancelledError:
                # A stop: the run under way may finish within the grace, else it is cut.
                done, _ = await asyncio.wait({task}, timeout=self.stop_grace_s)
                if not done:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task
                    await self._finish(
                        claim, ctx, RunStatus.INTERRUPTED, {}, "stopped with the gateway"
                    )
                    raise
                counts = task.result()
                await self._finish(claim, ctx, RunStatus.OK, counts, None)
                raise
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a body's failure is recorded; the calendar goes on
            log.exception("upkeep job %s failed", claim.job)
            error = f"{exc.__class__.__name__}: {exc}"[:MAX_ERROR_CHARS]
            return await self._finish(claim, ctx, RunStatus.FAILED, {}, error)
        finally:
            renewing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewing
            log.debug("upkeep job %s took %.1f s", claim.job, time.monotonic() - started)
        return await self._finish(claim, ctx, RunStatus.OK, counts, None)

    async def _renew(self, name: str) -> None:
        every = self.config.lease_s / 3
        while True:
            await asyncio.sleep(every)
            try:
                renewed = await self.store.write(self._renewal(name))
            except AgentGWError as exc:
                # Tried again at the next third; the lease has two more before it runs out.
                log.warning("upkeep: the lease of %s was not renewed: %s", name, exc)
                continue
            if not renewed:
                log.warning("upkeep: the lease of %s was lost (this runner stalled)", name)

    def _renewal(self, name: str) -> Callable[[Connection], int]:
        until = self.clock() + timedelta(seconds=self.config.lease_s)
        holder = self.holder

        def work(connection: Connection) -> int:
            return int(
                connection.execute(
                    update(UpkeepJob)
                    .where(UpkeepJob.name == name, UpkeepJob.lease_holder == holder)
                    .values(lease_until=until)
                ).rowcount
            )

        return work

    async def _finish(
        self,
        claim: Claim,
        ctx: JobContext,
        status: RunStatus,
        counts: Counts,
        error: str | None,
    ) -> RunRecord:
        ended = self.clock()
        counts = dict(counts)
        if claim.missed_periods:
            counts["missed_periods"] = claim.missed_periods
        report = dict(ctx.report)
        holder, keep = self.holder, self.config.runs_kept
        # Only a whole run over everyone says the job ran: a dry run changed nothing,
        # a run for one person left the others.
        complete = claim.person_id is None and not claim.dry_run
        finished = status in (RunStatus.OK, RunStatus.FAILED)

        def work(connection: Connection) -> None:
            connection.execute(
                update(UpkeepRun)
                .where(UpkeepRun.id == claim.run_id)
                .values(
                    status=status,
                    ended_at=ended,
                    counts=counts,
                    report=report or None,
                    error=error,
                )
            )
            job: dict[str, Any] = {"lease_holder": None, "lease_until": None}
            if complete and finished:
                job.update(last_run_at=claim.started_at, last_status=status.value)
                job["last_counts"] = counts
                if status is RunStatus.OK:
                    job["last_ok_at"] = claim.started_at
            connection.execute(
                update(UpkeepJob)
                .where(UpkeepJob.name == claim.job, UpkeepJob.lease_holder == holder)
                .values(**job)
            )
            newest = (
                select(UpkeepRun.id)
                .where(UpkeepRun.job == claim.job)
                .order_by(UpkeepRun.id.desc())
                .limit(keep)
            )
            connection.execute(
                delete(UpkeepRun).where(
                    and_(UpkeepRun.job == claim.job, UpkeepRun.id.not_in(newest.scalar_subquery()))
                )
            )

        await self.store.write(work)
        record = RunRecord(
            id=claim.run_id,
            job=claim.job,
            started_at=claim.started_at,
            ended_at=ended,
            status=status,
            counts=counts,
            report=report,
            error=error,
            person_id=claim.person_id,
            dry_run=claim.dry_run,
            holder=holder,
            plan=tuple(ctx.plan),
        )
        if self.on_run is not None:
            self.on_run(record)
        log.log(
            logging.WARNING if status is not RunStatus.OK else logging.DEBUG,
            "upkeep job %s %s: %s",
            claim.job,
            status.value,
            error or counts,
        )
        return record


def _mark_dead_runs(connection: Connection, now: datetime, job: str | None) -> None:
    """Runs still ``running`` whose job's lease ran out (or is held by someone else):
    their runner died; mark them interrupted."""
    expired = select(UpkeepJob.name).where(
        or_(UpkeepJob.lease_until.is_(None), UpkeepJob.lease_until < now)
    )
    query = update(UpkeepRun).where(UpkeepRun.status == RunStatus.RUNNING)
    if job is not None:
        # Called right after this runner took the lease: every running row is a dead one.
        query = query.where(UpkeepRun.job == job)
    else:
        query = query.where(UpkeepRun.job.in_(expired))
    connection.execute(
        query.values(
            status=RunStatus.INTERRUPTED,
            ended_at=now,
            error="its runner stopped before the end (the lease expired)",
        )
    )
