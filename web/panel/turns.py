"""``/panel/turns/{id}``: one turn — its facts and each stage's start, end and
duration (``turns.stages``, written from the pipeline's stage events), with the
code of a stage that failed."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from gateway.store.models import Turn
from web.panel.conversations import recent_turns
from web.panel.render import gateway_of, not_found, path_int, render

# The phases in the order a turn runs them (for the table's grouping).
PHASE_ORDER = (
    "prepare",
    "context",
    "brain_first_token",
    "tool",
    "brain",
    "deliver",
    "after_turn",
    "turn",
)


def timeline(stages: list[dict[str, Any]]) -> dict[str, Any]:
    """The rows of the stage table, in the order they started, and the turn's span."""
    rows = sorted(
        stages,
        key=lambda s: (
            s.get("start_ms", 0.0),
            PHASE_ORDER.index(s["phase"]) if s.get("phase") in PHASE_ORDER else len(PHASE_ORDER),
        ),
    )
    span = max((s.get("start_ms", 0.0) + s.get("duration_ms", 0.0) for s in rows), default=0.0)
    for row in rows:
        row.setdefault("code", None)
        row["end_ms"] = round(row.get("start_ms", 0.0) + row.get("duration_ms", 0.0), 2)
    return {
        "rows": rows,
        "span_ms": round(span, 2),
        "failed": [s for s in rows if s.get("code") not in (None, "ok")],
    }


async def turn_stages(request: web.Request, turn_id: int) -> list[dict[str, Any]]:
    """A turn's stored stages ([] for a turn without them, or no such turn)."""
    async with gateway_of(request).store.reader() as session:
        turn = await session.get(Turn, turn_id)
    return [] if turn is None or not turn.stages else list(turn.stages)


async def one_turn(request: web.Request) -> dict[str, Any]:
    turn_id = path_int(request, "turn_id")
    found = await recent_turns(request, limit=1, turn_id=turn_id)
    if not found:
        raise not_found(f"no turn {turn_id}")
    return found[0]


async def turn_page(request: web.Request) -> web.Response:
    turn = await one_turn(request)
    return render(request, "turn.html", t=turn, timeline=timeline(turn["stages"]))


async def turn_api(request: web.Request) -> web.Response:
    turn = await one_turn(request)
    return web.json_response({**turn, "timeline": timeline(turn["stages"])})


def add_routes(app: web.Application) -> None:
    app.router.add_get("/panel/turns/{turn_id}", turn_page)
    app.router.add_get("/api/turns/{turn_id}", turn_api)
