"""``agentgw upkeep status`` and ``agentgw upkeep run JOB``: the calendar from the shell.

``gateway/cli.py`` calls ``add_commands``; heavy imports wait inside the handlers.
``status`` only reads, beside a running gateway too. ``run`` changes memory and
writes the index files of the data directory, which a running gateway also
writes: so it takes the gateway's locks, and beside a running gateway it stops
with a clear message (the panel's Upkeep page runs a job inside the gateway).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import tzinfo
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway.config import Config, load_config

if TYPE_CHECKING:
    from gateway.store import Store
    from memory.jobs.base import Extractor
    from memory.jobs.calendar import JobState, RunRecord
    from memory.service import MemoryService

# What the layer above adds to a run (gateway/upkeep_cli.py): the extractors (the
# observer) and the service's models, which memory/ cannot import; held while it runs.
JobParts = Callable[
    ["Config", "Store", "MemoryService"], AbstractAsyncContextManager["list[Extractor]"]
]

# A dry run's plan prints this many lines at most (--json carries them all).
PLAN_LINES = 50


def add_commands(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    with_config: Callable[[argparse.ArgumentParser], None],
    parts: JobParts | None = None,
) -> None:
    """``parts``: what a run gets from the layers above (none: no extractor)."""
    upkeep = sub.add_parser("upkeep", help="the upkeep calendar: job status, run a job now")
    upkeep_sub = upkeep.add_subparsers(dest="upkeep_command", required=True)
    status = upkeep_sub.add_parser(
        "status", help="each job: last run, next due (agent.timezone), overdue"
    )
    run = upkeep_sub.add_parser(
        "run", help="run one job now, with a progress bar (stop the gateway first)"
    )
    run.add_argument("job", help="the job: hourly, nightly, weekly or monthly")
    run.add_argument(
        "--person", type=int, default=None, help="only this person's memory (default: everyone)"
    )
    run.add_argument(
        "--dry-run",
        action="store_true",
        help="list what the job would change, changing nothing (default: run it)",
    )
    for parser in (status, run):
        with_config(parser)
        parser.add_argument(
            "--json", action="store_true", help="print JSON instead of text (default: text)"
        )
    status.set_defaults(func=cmd_status)
    run.set_defaults(func=cmd_run, job_parts=parts)


def _say(text: str, *, err: bool = False) -> None:
    (sys.stderr if err else sys.stdout).write(text + "\n")


def _config(args: argparse.Namespace) -> Config:
    path: Path | None = getattr(args, "config", None)
    return load_config(path)


def cmd_status(args: argparse.Namespace) -> int:
    config = _config(args)
    states = asyncio.run(_status(config))
    if args.json:
        _say(json.dumps({"jobs": [s.as_json(config.zone) for s in states]}, indent=2))
    else:
        _say(status_table(states, config.zone))
    return 0


async def _status(config: Config) -> list[JobState]:
    from gateway.store import Store
    from memory.jobs.calendar import UpkeepCalendar
    from memory.jobs.registry import job_bodies

    async with Store(config.database_url, echo=config.store.echo) as store:
        calendar = UpkeepCalendar(store, None, config.upkeep, config.zone, job_bodies(config))
        return await calendar.status()


def _when(value: Any, zone: tzinfo) -> str:
    return "never" if value is None else value.astimezone(zone).strftime("%Y-%m-%d %H:%M")


def status_table(states: list[JobState], zone: tzinfo) -> str:
    rows = [("job", "schedule", "last run", "status", "next due", "state")]
    for s in states:
        if not s.registered:
            state = "no body"
        elif s.running:
            state = "running"
        elif s.overdue:
            state = f"OVERDUE ({s.missed_periods} missed)"
        elif s.due:
            state = "due"
        else:
            state = "ok"
        rows.append(
            (
                s.name,
                s.schedule or "off",
                _when(s.last_run_at, zone),
                s.last_status or "-",
                _when(s.next_due, zone) if s.next_due else "-",
                state,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows)
    return "\n".join(line.rstrip() for line in lines)


def cmd_run(args: argparse.Namespace) -> int:
    config = _config(args)
    record = asyncio.run(
        _run(
            config,
            args.job,
            args.person,
            args.dry_run,
            quiet=args.json,
            parts=getattr(args, "job_parts", None),
        )
    )
    if args.json:
        _say(json.dumps(record.as_json(), indent=2))
    else:
        for line in record.plan[:PLAN_LINES]:
            _say(f"would: {line}")
        if len(record.plan) > PLAN_LINES:
            _say(f"would: ... and {len(record.plan) - PLAN_LINES} more (--json lists all)")
        counts = ", ".join(f"{k} {v}" for k, v in record.counts.items()) or "no counts"
        took = f"{record.duration_s:.1f} s" if record.duration_s is not None else "?"
        _say(f"upkeep {record.job}: {record.status.value} in {took}: {counts}")
        if record.error:
            _say(f"error: {record.error}", err=True)
    return 0 if record.status.value == "ok" else 1


async def _run(
    config: Config,
    job: str,
    person_id: int | None,
    dry_run: bool,
    *,
    quiet: bool,
    parts: JobParts | None = None,
) -> RunRecord:
    from tqdm import tqdm

    from gateway.errors import DataDirInUse
    from gateway.store import Store
    from gateway.store.datalock import DataDirLock, claim_database
    from memory.jobs.calendar import UpkeepCalendar, body_of
    from memory.jobs.registry import job_bodies
    from memory.service import MemoryService

    bodies = job_bodies(config)
    # Before the locks and the model: a wrong name is told at once.
    body_of(bodies, job)
    lock = DataDirLock(config.data_dir)
    try:
        lock.acquire()
    except DataDirInUse as exc:
        raise DataDirInUse(
            f"{exc.args[0].removesuffix('; stop it first')}: a job run from here would write "
            "the memory indexes it holds. Run it in the gateway: the panel's Upkeep page, "
            f"'Run now' (POST /api/upkeep/jobs/{job}/run), or stop the gateway first"
        ) from None
    try:
        async with (
            claim_database(config.database_url, config.store.lock_check_s),
            Store(config.database_url, echo=config.store.echo) as store,
        ):
            service = await MemoryService.start(store, config)
            bar = tqdm(desc=job, unit="item", disable=quiet or not sys.stderr.isatty())

            def progress(done: int, total: int | None) -> None:
                bar.total = total
                bar.update(done - bar.n)

            try:
                async with (
                    parts(config, store, service) if parts is not None else _no_parts()
                ) as extractors:
                    calendar = UpkeepCalendar(
                        store, service, config.upkeep, config.zone, bodies, extractors=extractors
                    )
                    await calendar.prepare()
                    return await calendar.run(
                        job, person_id=person_id, dry_run=dry_run, progress=progress
                    )
            finally:
                bar.close()
                await service.aclose()
    finally:
        lock.release()


@asynccontextmanager
async def _no_parts() -> AsyncIterator[list[Extractor]]:
    yield []
