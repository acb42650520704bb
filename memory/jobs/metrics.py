"""The upkeep calendar's Prometheus instruments (on the app's registry) and its
readiness check: a job overdue by more than one period makes /readyz degraded."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

if TYPE_CHECKING:
    from memory.jobs.calendar import JobState, RunRecord, UpkeepCalendar

# From an hourly pass on a small store (~10 ms) to a monthly re-index (~an hour).
JOB_BUCKETS = (0.01, 0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 7200.0)


class UpkeepMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.runs = Counter(
            "agentgw_upkeep_job_runs",
            "Upkeep job runs by job and how they ended (ok, failed, interrupted).",
            ["job", "status"],
            registry=registry,
        )
        self.duration = Histogram(
            "agentgw_upkeep_job_duration_seconds",
            "How long each upkeep job run took.",
            ["job"],
            buckets=JOB_BUCKETS,
            registry=registry,
        )
        self.last_success = Gauge(
            "agentgw_upkeep_job_last_success_timestamp_seconds",
            "When the last successful run of each upkeep job (over everyone) started.",
            ["job"],
            registry=registry,
        )

    def observe(self, run: RunRecord) -> None:
        """A run that ended (the calendar's ``on_run``)."""
        self.runs.labels(run.job, run.status.value).inc()
        if run.duration_s is not None:
            self.duration.labels(run.job).observe(run.duration_s)
        if run.status.value == "ok" and run.person_id is None and not run.dry_run:
            self.last_success.labels(run.job).set(run.started_at.timestamp())

    def known(self, states: list[JobState]) -> None:
        """The last successes the store remembers (at start, before any run here)."""
        for state in states:
            if state.last_ok_at is not None:
                self.last_success.labels(state.name).set(state.last_ok_at.timestamp())


def overdue(states: list[JobState]) -> dict[str, Any]:
    """The jobs overdue by more than one period, with their numbers (for /readyz)."""
    return {
        state.name: {
            "missed_periods": state.missed_periods,
            "last_ok_at": state.last_ok_at.isoformat() if state.last_ok_at else None,
            "last_status": state.last_status,
        }
        for state in states
        if state.registered and state.overdue
    }


async def run_calendar(calendar: UpkeepCalendar, metrics: UpkeepMetrics) -> None:
    """The calendar's task: the last successes it remembers shown, then its heartbeat."""
    await calendar.prepare()
    metrics.known(await calendar.status())
    await calendar.forever()
