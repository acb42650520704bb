"""``/panel/observations``: the observer's and reflector's timeline, with the
three dates of each observation and links to the messages it came from; when
the observer runs, each conversation's messages it has not read yet, and an
"observe now" for them (``POST /api/observations/observe``)."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from aiohttp import web
from sqlalchemy import Select, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.errors import AgentGWError
from gateway.store.models import Conversation, Message
from persona.models import ObservationRow, ObservationStatus, ObserveCursor
from persona.observation.run import PassResult
from web.panel.people import person_names
from web.panel.render import (
    bad_request,
    gateway_of,
    iso,
    json_body,
    not_found,
    query_choice,
    query_int,
    render,
)

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


def observation_json(row: ObservationRow, channel: str | None, who: str) -> dict[str, Any]:
    return {
        "id": row.id,
        "person_id": row.person_id,
        "who": who,
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
        names = await person_names(session, (row.person_id for row, _ in rows))
    return (
        [observation_json(row, channel, names[row.person_id]) for row, channel in rows],
        chosen,
        limit,
    )


async def unread(session: AsyncSession, limit: int = 20) -> list[dict[str, Any]]:
    """The most recently active conversations with messages the observer has not read:
    how many, and their tokens (a pass runs at ``observe.observer_tokens``)."""
    through = func.coalesce(ObserveCursor.observed_through_message_id, 0)
    rows = (
        await session.execute(
            select(
                Conversation.id,
                Conversation.channel,
                Conversation.person_id,
                func.count(Message.id),
                func.coalesce(func.sum(Message.tokens), 0),
            )
            .join(Message, Message.conversation_id == Conversation.id)
            .outerjoin(ObserveCursor, ObserveCursor.conversation_id == Conversation.id)
            .where(Message.id > through)
            .group_by(Conversation.id, Conversation.channel, Conversation.person_id)
            .order_by(func.max(Message.id).desc())
            .limit(limit)
        )
    ).all()
    names = await person_names(session, (person for _, _, person, _, _ in rows))
    return [
        {
            "conversation_id": cid,
            "channel": channel,
            "person_id": person,
            "who": names[person],
            "messages": int(count),
            "tokens": int(tokens),
        }
        for cid, channel, person, count, tokens in rows
    ]


def observer_facts(request: web.Request) -> dict[str, Any]:
    """What the page says about when the observer runs."""
    config = gateway_of(request).config
    loop = gateway_of(request).persona
    return {
        "enabled": config.observe.enabled and loop is not None and loop.observe_enabled,
        "observer": loop.observe_pass.observer.name if loop is not None else "",
        "observer_tokens": config.observe.observer_tokens,
        "reflector_tokens": config.observe.reflector_tokens,
    }


async def observations_page(request: web.Request) -> web.Response:
    observations, chosen, _ = await find(request)
    async with gateway_of(request).store.reader() as session:
        pending = await unread(session)
    return render(
        request,
        "observations.html",
        observations=observations,
        chosen=chosen,
        priorities=PRIORITIES,
        categories=CATEGORIES,
        channels=CHANNELS,
        statuses=[s.value for s in ObservationStatus],
        observer=observer_facts(request),
        pending=pending,
    )


def _error(code: str, message: str) -> str:
    return json.dumps({"error": {"code": code, "message": message}})


def pass_summary(who: str, result: PassResult | None) -> str:
    """One line for the page after "observe now"."""
    if result is None:
        return f"Nothing to observe for {who}: the observer has read every message."
    noun = "observation" if result.observations == 1 else "observations"
    line = (
        f"Observed {result.observed_messages} messages of {who} ({result.author}): "
        f"{result.observations} new {noun}"
    )
    if result.unextracted:
        line += f", {result.unextracted} messages held nothing it could extract"
    if result.proposed_rules:
        line += f", {result.proposed_rules} rules proposed"
    if result.reflected:
        line += ", and a reflection"
    return line + "."


async def observe_api(request: web.Request) -> web.Response:
    """Run the observer now over one conversation's unread messages (however few)."""
    body = await json_body(request)
    conversation_id = body.get("conversation_id")
    if not isinstance(conversation_id, int) or isinstance(conversation_id, bool):
        raise bad_request("conversation_id must be an integer")
    gateway = gateway_of(request)
    loop = gateway.persona
    if loop is None or not loop.observe_enabled or not gateway.config.observe.enabled:
        raise web.HTTPConflict(
            text=_error("observe_off", "the observer is off (observe.enabled = false)"),
            content_type="application/json",
        )
    async with gateway.store.reader() as session:
        conversation = await session.get(Conversation, conversation_id)
        if conversation is None:
            raise not_found(f"conversation {conversation_id} does not exist")
        person_id = conversation.person_id
        who = (await person_names(session, [person_id]))[person_id]
    try:
        result = await loop.observe_now(conversation_id, person_id)
    except AgentGWError as exc:  # logged by the supervisor that ran the pass
        raise web.HTTPServiceUnavailable(
            text=_error(exc.code, f"the observer failed: {exc}"),
            content_type="application/json",
        ) from exc
    return web.json_response(
        {
            "conversation_id": conversation_id,
            "ran": result is not None,
            "observed_messages": 0 if result is None else result.observed_messages,
            "observations": 0 if result is None else result.observations,
            "author": None if result is None else result.author,
            "notes": [] if result is None else list(result.notes),
            "summary": pass_summary(who, result),
        }
    )


async def observations_api(request: web.Request) -> web.Response:
    observations, _, _ = await find(request)
    return web.json_response({"observations": observations})


def add_routes(app: web.Application) -> None:
    app.router.add_get("/panel/observations", observations_page)
    app.router.add_get("/api/observations", observations_api)
    app.router.add_post("/api/observations/observe", observe_api)
