"""The job bodies, by name: a plain table (no discovery).

The calendar runs a scheduled job only when its body is here; the schedule's
names are the fields of ``gateway.config.UpkeepSchedule``.
"""

from __future__ import annotations

import dataclasses

from gateway.config import UpkeepSchedule
from memory.jobs.base import JobBody
from memory.jobs.hourly import hourly

# Every name the schedule knows, in the order the calendar checks them.
JOB_NAMES: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(UpkeepSchedule))


def job_bodies() -> dict[str, JobBody]:
    """The bodies the calendar can run (nightly, weekly and monthly join here)."""
    return {"hourly": hourly}
