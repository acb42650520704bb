"""The upkeep calendar's tables: one row per job, one row per run.

``upkeep_jobs`` is the calendar's memory of what ran (never assumed: a job is
due until a row says it ran since its last scheduled time) and its lease: the
holder that runs the job now and until when. ``upkeep_runs`` is the history the
panel and ``agentgw upkeep status`` show.
"""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Boolean, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from gateway.store.models import Base, _str_enum


class RunStatus(enum.StrEnum):
    RUNNING = "running"
    OK = "ok"
    FAILED = "failed"
    # Its process died (kill -9, power) or stopped while it ran: the job is due again.
    INTERRUPTED = "interrupted"


class UpkeepJob(Base):
    __tablename__ = "upkeep_jobs"

    name: Mapped[str] = mapped_column(String(32), primary_key=True)
    # The cron expression in force when it last ran or was scheduled (for the record).
    schedule: Mapped[str] = mapped_column(String(100), default="")
    # When the last complete run (ok or failed, over everyone) started.
    last_run_at: Mapped[datetime | None] = mapped_column(nullable=True)
    last_status: Mapped[str | None] = mapped_column(String(16), nullable=True)
    last_counts: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    # When the last run that ended ok started (overdue and the metrics count from it).
    last_ok_at: Mapped[datetime | None] = mapped_column(nullable=True)
    # Who runs it now ("host:pid:random") and until when; taken by one atomic UPDATE.
    lease_holder: Mapped[str | None] = mapped_column(String(120), nullable=True)
    lease_until: Mapped[datetime | None] = mapped_column(nullable=True)


class UpkeepRun(Base):
    __tablename__ = "upkeep_runs"
    __table_args__ = (Index("ix_upkeep_runs_job_started", "job", "started_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job: Mapped[str] = mapped_column(String(32))
    started_at: Mapped[datetime] = mapped_column()
    ended_at: Mapped[datetime | None] = mapped_column(nullable=True)
    status: Mapped[RunStatus] = mapped_column(_str_enum(RunStatus))
    counts: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    # The body's structured report (the monthly health report), JSON values only.
    report: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    # A run limited to one person (``upkeep run JOB --person P``); None: everyone.
    person_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    dry_run: Mapped[bool] = mapped_column(Boolean, default=False)
    # The lease holder that ran it: a running row whose holder lost the lease died.
    holder: Mapped[str] = mapped_column(String(120), default="")
