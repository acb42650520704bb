"""What the upkeep calendar tells its callers: runs, job states, claims, its errors
and clocks (split from memory/jobs/calendar.py, which uses them).

Errors::

    AgentGWError
    ├── InputError
    │   └── UnknownJob        no such job, or no body registered for it
    └── MemoryLayerError
        └── JobBusy           another runner holds the job's lease now
"""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

from gateway.errors import InputError
from memory.errors import MemoryLayerError
from memory.jobs.base import JobBody
from memory.jobs.models import RunStatus

Clock = Callable[[], datetime]
# Errors are kept in the history this long at most (a traceback's last line is enough).
MAX_ERROR_CHARS = 2000


class UnknownJob(InputError):
    code = "unknown_job"


class JobBusy(MemoryLayerError):
    code = "job_busy"


def body_of(bodies: Mapping[str, JobBody], name: str) -> JobBody:
    """The body of job ``name``; ``UnknownJob`` names the jobs that run."""
    body = bodies.get(name)
    if body is None:
        from memory.jobs.registry import JOB_NAMES

        known = ", ".join(bodies) or "none"
        why = "has no body in this version" if name in JOB_NAMES else "is not a job"
        raise UnknownJob(f"upkeep job {name!r} {why}; the jobs that run are: {known}")
    return body


def wall_clock() -> datetime:
    return datetime.now(UTC)


@dataclass
class SimulatedClock:
    """A clock that moves only when told (tests, and the simulated calendar of a bench)."""

    now: datetime

    def __call__(self) -> datetime:
        return self.now

    def advance(self, by: timedelta) -> None:
        self.now += by


def new_holder() -> str:
    """This runner's name in a lease: host, pid and a random part (pids are reused)."""
    return f"{socket.gethostname()[:60]}:{os.getpid()}:{secrets.token_hex(4)}"


@dataclass(frozen=True)
class RunRecord:
    """One run, as ``upkeep_runs`` keeps it (``plan``: a dry run's lines, not stored)."""

    id: int
    job: str
    started_at: datetime
    ended_at: datetime | None
    status: RunStatus
    counts: dict[str, Any]
    report: dict[str, Any]
    error: str | None
    person_id: int | None
    dry_run: bool
    holder: str
    plan: tuple[str, ...] = ()

    @property
    def duration_s(self) -> float | None:
        if self.ended_at is None:
            return None
        return (self.ended_at - self.started_at).total_seconds()

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "job": self.job,
            "started_at": self.started_at.isoformat(),
            "ended_at": self.ended_at.isoformat() if self.ended_at else None,
            "status": self.status.value,
            "counts": self.counts,
            "report": self.report,
            "error": self.error,
            "person_id": self.person_id,
            "dry_run": self.dry_run,
            "plan": list(self.plan),
        }


@dataclass(frozen=True)
class JobState:
    """One job on the calendar now: what it last did and when it is due."""

    name: str
    schedule: str
    registered: bool
    last_run_at: datetime | None
    last_status: str | None
    last_counts: dict[str, Any]
    last_ok_at: datetime | None
    # The last scheduled time at or before now, and the next one after it.
    previous_due: datetime | None
    next_due: datetime | None
    # Its last scheduled time passed since it last ran: the next catch-up runs it.
    due: bool
    # Scheduled times passed since its last successful run (or, never ok, its last run).
    missed_periods: int
    lease_holder: str | None
    lease_until: datetime | None
    running: bool

    @property
    def overdue(self) -> bool:
        """Overdue by more than one period: two scheduled times passed without a success."""
        return self.missed_periods >= 2

    def as_json(self, zone: tzinfo) -> dict[str, Any]:
        def at(value: datetime | None) -> str | None:
            return value.astimezone(zone).isoformat() if value is not None else None

        return {
            "name": self.name,
            "schedule": self.schedule,
            "registered": self.registered,
            "last_run_at": at(self.last_run_at),
            "last_status": self.last_status,
            "last_counts": self.last_counts,
            "last_ok_at": at(self.last_ok_at),
            "next_due": at(self.next_due),
            "due": self.due,
            "missed_periods": self.missed_periods,
            "overdue": self.overdue,
            "running": self.running,
            "lease_holder": self.lease_holder,
            "lease_until": at(self.lease_until),
        }


@dataclass(frozen=True)
class Claim:
    """A job's lease, taken, and the run row it opened."""

    run_id: int
    job: str
    started_at: datetime
    person_id: int | None
    dry_run: bool
    missed_periods: int


def record_of(run: Any) -> RunRecord:
    """A row of ``upkeep_runs`` (its columns, read by Core) as a record."""
    return RunRecord(
        id=run.id,
        job=run.job,
        started_at=run.started_at,
        ended_at=run.ended_at,
        status=RunStatus(run.status),
        counts=dict(run.counts or {}),
        report=dict(run.report or {}),
        error=run.error,
        person_id=run.person_id,
        dry_run=bool(run.dry_run),
        holder=run.holder,
    )
