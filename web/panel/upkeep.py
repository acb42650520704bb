"""``/panel/upkeep``: the upkeep calendar (last run, next run, overdue), the run
history with counts and errors, "run now" per job, and the latest monthly run's
report as a table (and ``/api/upkeep``, the same data as JSON).

"Run now" (``POST /api/upkeep/jobs/{job}/run``) takes the job's lease at once,
so a job already running answers 409, and runs the body in the background
under the gateway's supervisor: a run can take minutes, the page reloads and
shows it ``running`` until it ends.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from memory.jobs.calendar import JobBusy, RunRecord, UnknownJob, UpkeepCalendar
from web.panel.render import gateway_of, iso, not_found, render

# Runs shown in the history.
HISTORY = 50
# The job whose report the page shows (the monthly health report).
REPORT_JOB = "monthly"


def _calendar(request: web.Request) -> UpkeepCalendar:
    calendar = gateway_of(request).upkeep
    if calendar is None:
        raise web.HTTPServiceUnavailable(
            text=json.dumps(
                {
                    "error": {
                        "code": "upkeep_unavailable",
                        "message": "the upkeep calendar starts with the memory layer "
                        "(memory.enabled, once the models loaded)",
                    }
                }
            ),
            content_type="application/json",
        )
    return calendar


def _run_json(run: RunRecord) -> dict[str, Any]:
    return {
        "id": run.id,
        "job": run.job,
        "started_at": iso(run.started_at),
        "ended_at": iso(run.ended_at),
        "duration_s": round(run.duration_s, 3) if run.duration_s is not None else None,
        "status": run.status.value,
        "counts": run.counts,
        "error": run.error,
        "person_id": run.person_id,
        "dry_run": run.dry_run,
    }


def report_rows(report: dict[str, Any]) -> list[tuple[str, str]]:
    """A report's JSON flattened to (key path, value) rows for a plain table."""
    rows: list[tuple[str, str]] = []

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict) and value:
            for key, inner in value.items():
                walk(f"{prefix}.{key}" if prefix else str(key), inner)
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            for n, inner in enumerate(value):
                walk(f"{prefix}[{n}]", inner)
        else:
            text = value if isinstance(value, str) else json.dumps(value)
            rows.append((prefix, text))

    walk("", report)
    return rows


async def upkeep_data(request: web.Request) -> dict[str, Any]:
    calendar = _calendar(request)
    zone = calendar.zone
    states = await calendar.status()
    history = await calendar.history(limit=HISTORY)
    report = await calendar.latest_report(REPORT_JOB)
    return {
        "jobs": [
            {
                **state.as_json(zone),
                "last_run_at": iso(state.last_run_at),
                "last_ok_at": iso(state.last_ok_at),
                "next_due": iso(state.next_due),
                "lease_until": iso(state.lease_until),
            }
            for state in states
        ],
        "runs": [_run_json(run) for run in history],
        "report": None
        if report is None
        else {"run": _run_json(report), "data": report.report, "rows": report_rows(report.report)},
    }


async def upkeep_page(request: web.Request) -> web.Response:
    return render(request, "upkeep.html", data=await upkeep_data(request))


async def upkeep_api(request: web.Request) -> web.Response:
    return web.json_response(await upkeep_data(request))


async def run_now(request: web.Request) -> web.Response:
    calendar = _calendar(request)
    job = request.match_info["job"]
    try:
        claim = await calendar.claim(job)
    except UnknownJob as exc:
        raise not_found(str(exc)) from None
    except JobBusy as exc:
        raise web.HTTPConflict(
            text=json.dumps({"error": {"code": exc.code, "message": str(exc)}}),
            content_type="application/json",
        ) from None
    gateway_of(request).supervisor.spawn(f"upkeep-run-{job}", calendar.execute(claim))
    return web.json_response(
        {"run_id": claim.run_id, "job": job, "message": f"{job} started (run {claim.run_id})"},
        status=202,
    )


def add_routes(app: web.Application) -> None:
    app.router.add_get("/panel/upkeep", upkeep_page)
    app.router.add_get("/api/upkeep", upkeep_api)
    app.router.add_post("/api/upkeep/jobs/{job}/run", run_now)
