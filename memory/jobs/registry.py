"""The job bodies, by name: a plain table (no discovery).

The calendar runs a scheduled job only when its body is here; the schedule's
names are the fields of ``gateway.config.UpkeepSchedule``.
"""

from __future__ import annotations

import dataclasses
import functools

from gateway.config import Config, UpkeepSchedule
from memory.jobs.base import JobBody
from memory.jobs.hourly import hourly
from memory.jobs.monthly import monthly
from memory.jobs.nightly import nightly
from memory.jobs.weekly import weekly

# Every name the schedule knows, in the order the calendar checks them.
JOB_NAMES: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(UpkeepSchedule))


def job_bodies(config: Config | None = None) -> dict[str, JobBody]:
    """The bodies the calendar can run, with the configured knobs (defaults without)."""
    settings = config.upkeep_jobs if config is not None else None
    return {
        "hourly": hourly,
        "nightly": functools.partial(nightly, settings=settings),
        "weekly": functools.partial(
            weekly, continuity=config.continuity if config is not None else None
        ),
        "monthly": monthly,
    }
