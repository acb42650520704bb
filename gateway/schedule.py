"""When each upkeep job is due: cron expressions read by cronsim, in the agent's zone.

cronsim (Healthchecks.io's parser, maintained, no dependencies, typed) rather
than croniter (archived by its author in 2024, then handed on) or APScheduler's
CronTrigger (a whole scheduler pulled in for one class): it evaluates an
expression forwards and backwards over aware datetimes and handles the hours
that summer time skips or repeats the way cron does.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo

from cronsim import CronSim, CronSimError

from gateway.errors import ConfigError

# A catch-up counts missed periods up to this many (an hourly job down for years).
MAX_COUNTED = 100_000


@dataclass(frozen=True)
class CronSchedule:
    """One job's cron expression in one zone; times in and out are aware (UTC out)."""

    key: str
    expression: str
    zone: tzinfo

    @classmethod
    def parse(cls, key: str, expression: str, zone: tzinfo) -> CronSchedule:
        """Raise ``ConfigError`` naming ``key`` when ``expression`` is not a cron expression."""
        try:
            CronSim(expression, datetime(2000, 1, 1, tzinfo=zone))
        except CronSimError as exc:
            raise ConfigError(
                f"{key}: {expression!r} is not a cron expression ({exc}); five fields: "
                "minute hour day-of-month month day-of-week, e.g. '0 2 * * *'"
            ) from exc
        return cls(key, expression, zone)

    def _from(self, at: datetime, *, reverse: bool) -> Iterator[datetime]:
        # cronsim's steps exclude their start; from the next whole minute backwards
        # the first step is the last scheduled time at or before ``at``.
        start = at.astimezone(self.zone)
        if reverse:
            start = start.replace(second=0, microsecond=0) + timedelta(minutes=1)
        return CronSim(self.expression, start, reverse=reverse)

    def previous(self, at: datetime) -> datetime:
        """The last scheduled time at or before ``at``."""
        return next(self._from(at, reverse=True)).astimezone(UTC)

    def next(self, at: datetime) -> datetime:
        """The first scheduled time after ``at``."""
        return next(self._from(at, reverse=False)).astimezone(UTC)

    def missed(self, since: datetime, until: datetime) -> int:
        """How many scheduled times fell in (since, until] (at most ``MAX_COUNTED``)."""
        count = 0
        for when in self._from(since, reverse=False):
            if when > until or count >= MAX_COUNTED:
                break
            count += 1
        return count

    def period_at(self, at: datetime) -> timedelta:
        """The length of the period that holds ``at`` (from its last time to its next)."""
        return self.next(at) - self.previous(at)
