"""``/panel/observations``: the observer's and reflector's timeline, with the
three dates of each observation and links to the messages it came from."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from aiohttp import web
from sqlalchemy import Select, select

from gateway.store.models import Conversation
from persona.models import ObservationRow, ObservationStatus
from web.panel.render import gateway_of, iso, query_choice, query_int, render

PRIORITIES = ("high", "medium", "low")
CATEGORIES = ("fact", "preference", "decision", "emotional", "relational")
CHANNELS = ("webchat", "telegram")


def _day(query: Any, key: str) -> date | None:
    raw = query.get(key, "")
    if not raw:
        return None
    try:
        return date.fromisoformat(raw)
    except ValueError:
        raise web.HTTPBadRequest(text=f"{key} must be a date like 2026-05-31") from None


def _midnight(day: date, days: int = 0) -> datetime:
    return datetime.combine(day + timedelta(days=days), time.min, UTC)


def _one_of(query: Any, key: str, allowed: tuple[str, ...]) -> str:
    value = str(query.get(key, ""))
    if value and value not in allowed:
        raise web.HTTPBadRequest(text=f"{key} must be one of: {', '.join(allowed)}")
    return value


def observation_query(query: Any) -> tuple[Select[ObservationRow, str | None], dict[str, Any]]:
    chosen: dict[str, Any] = {
        "priority": _one_of(query, "priority", PRIORITIES),
        "category": _one_of(query, "category", CATEGORIES),
        "channel": _one_of(query, "channel", CHANNELS),
        "status": query_choice(query, "status", ObservationStatus),
        "since": _day(query, "since"),
        "until": _day(query, "until"),
        "q": str(query.get("q", "")).strip()[:200],
        "person": query_int(query, "person", 0, lo=0, hi=2**62),
    }
    stmt = (
        select(ObservationRow, Conversation.channel)
        .outerjoin(Conversation, Conversation.id == ObservationRow.conversation_id)
        .order_by(ObservationRow.observed_at.desc(), ObservationRow.id.desc())
    )
    if chosen["priority"]:
        stmt = stmt.where(ObservationRow.priority == chosen["priority"])
    if chosen["category"]:
        stmt = stmt.where(ObservationRow.category == chosen["category"])
    if chosen["channel"]:
        stmt = stmt.where(Conversation.channel == chosen["channel"])
    if chosen["status"] is not None:
        stmt = stmt.where(ObservationRow.status == chosen["status"])
    if chosen["since"] is not None:
        stmt = stmt.where(ObservationRow.observed_at >= _midnight(chosen["since"]))
    if chosen["until"] is not None:
        # Through the end of that day.
        stmt = stmt.where(ObservationRow.observed_at < _midnight(chosen["until"], days=1))
    if chosen["q"]:
        stmt = stmt.where(ObservationRow.text.icontains(chosen["q"], autoescape=True))
    if chosen["person"]:
        stmt = stmt.where(ObservationRow.person_id == chosen["person"])
    return stmt, chosen


def observation_json(row: ObservationRow, channel: str | None) -> dict[str, Any]:
    return {
        "id": row.id,
        "person_id": row.person_id,
        "conversation_id": row.conversation_id,
        "channel": channel,
        "text": row.text,
        "priority": row.priority,
        "category": row.category,
        "observed_at": iso(row.observed_at),
        "referred_on": iso(row.referred_on),
        "relative_phrase": row.relative_phrase,
        "source_message_ids": list(row.source_message_ids or ()),
        "status": row.status.value,
        "superseded_by": row.superseded_by,
        "generation": row.generation,
        "author": row.author,
        "tokens": row.tokens,
        "memory_item_id": row.memory_item_id,
        "reflection": row.generation > 0,
    }


async def find(request: web.Request) -> tuple[list[dict[str, Any]], dict[str, Any], int]:
    stmt, chosen = observation_query(request.query)
    limit = query_int(request.query, "limit", 200, lo=1, hi=1000)
    async with gateway_of(request).store.session() as session:
        rows = (await session.execute(stmt.limit(limit))).all()
    return [observation_json(row, channel) for row, channel in rows], chosen, limit


async def observations_page(request: web.Request) -> web.Response:
    observations, chosen, _ = await find(request)
    return render(
        request,
        "observations.html",
        observations=observations,
        chosen=chosen,
        priorities=PRIORITIES,
        categories=CATEGORIES,
        channels=CHANNELS,
        statuses=[s.value for s in ObservationStatus],
    )


async def observations_api(request: web.Request) -> web.Response:
    observations, _, _ = await find(request)
    return web.json_response({"observations": observations})


def add_routes(app: web.Application) -> None:
    app.router.add_get("/panel/observations", observations_page)
    app.router.add_get("/api/observations", observations_api)
