"""``/panel/drift``: SyncScore over turns — the EWMA against the tier lines, the five
dimensions on demand, anchors and rebases where they fired, each reply on hover —
and the judge's last calibration."""

from __future__ import annotations

from typing import Any

from aiohttp import web
from sqlalchemy import select

from gateway.store.models import Conversation, Message
from persona.calibrate import load_calibration
from persona.judge import DIMENSIONS
from persona.models import PersonaAction, SyncScoreRow
from web.panel.people import person_names
from web.panel.render import gateway_of, iso, query_int, render

MAX_POINTS = 1000


async def drift_data(request: web.Request, conversation_id: int | None) -> dict[str, Any]:
    gateway = gateway_of(request)
    persona = gateway.config.persona
    async with gateway.store.session() as session:
        stmt = (
            select(SyncScoreRow, Message.text)
            .outerjoin(Message, Message.id == SyncScoreRow.reply_message_id)
            .order_by(SyncScoreRow.id.desc())
            .limit(MAX_POINTS)
        )
        actions_stmt = select(PersonaAction).order_by(PersonaAction.id)
        if conversation_id is not None:
            stmt = stmt.where(SyncScoreRow.conversation_id == conversation_id)
            actions_stmt = actions_stmt.where(PersonaAction.conversation_id == conversation_id)
        rows = list(reversed((await session.execute(stmt)).all()))
        actions = (await session.scalars(actions_stmt)).all()
        conversations = (
            await session.execute(
                select(Conversation.id, Conversation.channel, Conversation.person_id)
                .where(Conversation.id.in_(select(SyncScoreRow.conversation_id).distinct()))
                .order_by(Conversation.updated_at.desc())
            )
        ).all()
        names = await person_names(session, (person for _, _, person in conversations))
    points = [
        {
            "turn_id": row.turn_id,
            "conversation_id": row.conversation_id,
            "status": row.status.value,
            "judge": row.judge,
            "composite": row.composite,
            "ewma": row.ewma,
            "trend": row.trend,
            "tier": row.tier,
            "samples": row.samples,
            "latency_ms": row.latency_ms,
            "cost_usd": row.cost_usd,
            "created_at": iso(row.created_at),
            "reply": text,
            **{dim: getattr(row, dim) for dim in DIMENSIONS},
        }
        for row, text in rows
    ]
    return {
        "conversation_id": conversation_id,
        "conversations": [
            {"id": cid, "channel": channel, "who": names[person]}
            for cid, channel, person in conversations
        ],
        "dimensions": list(DIMENSIONS),
        "thresholds": [
            [persona.tier_ok, "ok"],
            [persona.tier_mild, "mild"],
            [persona.tier_moderate, "moderate"],
        ],
        "points": points,
        "actions": [
            {
                "turn_id": a.turn_id,
                "conversation_id": a.conversation_id,
                "kind": a.kind.value,
                "tier": a.tier,
                "ewma": a.ewma,
                "tokens": a.tokens,
                "created_at": iso(a.created_at),
            }
            for a in actions
        ],
        "judges": sorted({p["judge"] for p in points}),
        "calibration": load_calibration(gateway.config.store.data_dir),
    }


def conversation_of(request: web.Request) -> int | None:
    if not request.query.get("conversation"):
        return None
    return query_int(request.query, "conversation", 0, lo=1, hi=2**62)


async def drift_page(request: web.Request) -> web.Response:
    data = await drift_data(request, conversation_of(request))
    gateway = gateway_of(request)
    return render(
        request,
        "drift.html",
        data=data,
        brain=gateway.brain.name,
        judging=gateway.persona is not None,
    )


async def drift_api(request: web.Request) -> web.Response:
    return web.json_response(await drift_data(request, conversation_of(request)))


def add_routes(app: web.Application) -> None:
    app.router.add_get("/panel/drift", drift_page)
    app.router.add_get("/api/drift", drift_api)
