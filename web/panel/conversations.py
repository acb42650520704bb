"""``/panel/conversations``: recent turns across channels — pack, anchors, SyncScore,
token usage with cache hits — and one conversation's messages."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aiohttp import web
from sqlalchemy import select

from gateway.store.models import Conversation, Message, Turn
from memory.models import MemoryTrace
from persona.models import PersonaAction, SyncScoreRow
from web.panel.people import person_names
from web.panel.render import (
    gateway_of,
    iso,
    not_found,
    path_int,
    person_zone,
    query_int,
    render,
)

CHANNELS = ("webchat", "telegram")


def turn_json(
    turn: Turn,
    conversation: Conversation,
    who: str,
    trace: MemoryTrace | None,
    score: SyncScoreRow | None,
    actions: Sequence[PersonaAction],
) -> dict[str, Any]:
    return {
        "id": turn.id,
        "conversation_id": turn.conversation_id,
        "channel": conversation.channel,
        "person_id": conversation.person_id,
        "who": who,
        "status": turn.status.value,
        "error_code": turn.error_code,
        "brain": turn.brain,
        "model": turn.model,
        "inbound_message_id": turn.inbound_message_id,
        "reply_message_id": turn.reply_message_id,
        "received_at": iso(turn.received_at),
        "finished_at": iso(turn.finished_at),
        "usage": {
            "input_tokens": turn.input_tokens,
            "output_tokens": turn.output_tokens,
            "cache_read_tokens": turn.cache_read_tokens,
            "cache_write_tokens": turn.cache_write_tokens,
        },
        "context_tokens": turn.context_tokens,
        # Each stage's offset, duration and (failed) code, from the stage events.
        "stages": turn.stages or [],
        # The model's memory tool calls (issue 24): name, arguments, result, line, error.
        "tool_calls": turn.tool_calls or [],
        # Which stages' blocks went into the prompt, and their sizes (tokens).
        "prompt_blocks": [
            {"stage": k.removeprefix("stage:"), "tokens": v}
            for k, v in (turn.context_tokens or {}).items()
            if k.startswith("stage:")
        ],
        "pack": None
        if trace is None
        else {"items": len(trace.kept_ids), "tokens": trace.used_tokens},
        "syncscore": None
        if score is None
        else {
            "composite": score.composite,
            "ewma": score.ewma,
            "tier": score.tier,
            "judge": score.judge,
            "status": score.status.value,
        },
        "actions": [{"kind": a.kind.value, "tier": a.tier, "tokens": a.tokens} for a in actions],
    }


async def recent_turns(
    request: web.Request,
    *,
    limit: int,
    channel: str = "",
    conversation_id: int | None = None,
    turn_id: int | None = None,
) -> list[dict[str, Any]]:
    """Newest first, each with its pack size, score and persona actions."""
    store = gateway_of(request).store
    async with store.session() as session:
        query = (
            select(Turn, Conversation)
            .join(Conversation, Conversation.id == Turn.conversation_id)
            .order_by(Turn.id.desc())
            .limit(limit)
        )
        if channel:
            query = query.where(Conversation.channel == channel)
        if conversation_id is not None:
            query = query.where(Turn.conversation_id == conversation_id)
        if turn_id is not None:
            query = query.where(Turn.id == turn_id)
        rows = (await session.execute(query)).all()
        ids = [turn.id for turn, _ in rows]
        names = await person_names(session, (c.person_id for _, c in rows))
        traces = {
            t.turn_id: t
            for t in (
                await session.scalars(select(MemoryTrace).where(MemoryTrace.turn_id.in_(ids)))
            ).all()
        }
        scores = {
            s.turn_id: s
            for s in (
                await session.scalars(select(SyncScoreRow).where(SyncScoreRow.turn_id.in_(ids)))
            ).all()
        }
        actions: dict[int, list[PersonaAction]] = {}
        for a in (
            await session.scalars(select(PersonaAction).where(PersonaAction.turn_id.in_(ids)))
        ).all():
            actions.setdefault(a.turn_id, []).append(a)
    return [
        turn_json(
            t,
            conv,
            names[conv.person_id],
            traces.get(t.id),
            scores.get(t.id),
            actions.get(t.id, []),
        )
        for t, conv in rows
    ]


def channel_of(request: web.Request) -> str:
    channel = request.query.get("channel", "")
    if channel and channel not in CHANNELS:
        raise web.HTTPBadRequest(text=f"channel must be one of: {', '.join(CHANNELS)}")
    return channel


async def conversations_page(request: web.Request) -> web.Response:
    channel = channel_of(request)
    limit = query_int(request.query, "limit", 50, lo=1, hi=500)
    turns = await recent_turns(request, limit=limit, channel=channel)
    return render(request, "conversations.html", turns=turns, channel=channel, channels=CHANNELS)


async def conversation_messages(request: web.Request, conversation_id: int) -> dict[str, Any]:
    store = gateway_of(request).store
    async with store.session() as session:
        conversation = await session.get(Conversation, conversation_id)
        if conversation is None:
            raise not_found(f"conversation {conversation_id} does not exist")
        who = (await person_names(session, [conversation.person_id]))[conversation.person_id]
        messages = (
            await session.scalars(
                select(Message)
                .where(Message.conversation_id == conversation_id)
                .order_by(Message.id.desc())
                .limit(200)
            )
        ).all()
    turns = await recent_turns(request, limit=200, conversation_id=conversation_id)
    by_inbound = {t["inbound_message_id"]: t for t in turns}
    return {
        "id": conversation.id,
        "channel": conversation.channel,
        "person_id": conversation.person_id,
        "who": who,
        "messages": [
            {
                "id": m.id,
                "role": m.role.value,
                "text": m.text,
                "tokens": m.tokens,
                "created_at": iso(m.created_at),
                "turn": by_inbound.get(m.id),
            }
            for m in reversed(messages)
        ],
    }


async def conversation_page(request: web.Request) -> web.Response:
    data = await conversation_messages(request, path_int(request, "conversation_id"))
    zone = await person_zone(request, data["person_id"])
    return render(request, "conversation.html", c=data, **zone)


async def turns_api(request: web.Request) -> web.Response:
    limit = query_int(request.query, "limit", 50, lo=1, hi=500)
    turns = await recent_turns(request, limit=limit, channel=channel_of(request))
    return web.json_response({"turns": turns})


async def conversation_api(request: web.Request) -> web.Response:
    data = await conversation_messages(request, path_int(request, "conversation_id"))
    return web.json_response(data)


def add_routes(app: web.Application) -> None:
    app.router.add_get("/panel/conversations", conversations_page)
    app.router.add_get("/panel/conversations/{conversation_id}", conversation_page)
    app.router.add_get("/api/turns", turns_api)
    app.router.add_get("/api/conversations/{conversation_id}", conversation_api)
