"""``/panel``: how much the agent holds and how each recent conversation sounds."""

from __future__ import annotations

from typing import Any

from aiohttp import web
from sqlalchemy import func, select

from gateway.store.models import Conversation, Message, Person, Turn
from memory.models import MemoryItem
from persona.models import ObservationRow, PersonaRule, RuleStatus, SyncScoreRow
from web.panel.people import person_names
from web.panel.render import gateway_of, iso, render


async def overview_data(request: web.Request) -> dict[str, Any]:
    gateway = gateway_of(request)
    async with gateway.store.session() as session:

        async def count(column: Any, *where: Any) -> int:
            return int(await session.scalar(select(func.count(column)).where(*where)) or 0)

        counts = {
            "people": await count(Person.id),
            "conversations": await count(Conversation.id),
            "messages": await count(Message.id),
            "turns": await count(Turn.id),
            "observations": await count(ObservationRow.id),
            "pending_rules": await count(PersonaRule.id, PersonaRule.status == RuleStatus.PROPOSED),
            "memory_items": await count(MemoryItem.id),
        }
        by_type = {
            str(kind): int(n)
            for kind, n in (
                await session.execute(
                    select(MemoryItem.type, func.count(MemoryItem.id)).group_by(MemoryItem.type)
                )
            ).all()
        }
        by_tier = {
            str(tier): int(n)
            for tier, n in (
                await session.execute(
                    select(MemoryItem.tier, func.count(MemoryItem.id)).group_by(MemoryItem.tier)
                )
            ).all()
        }
        # The newest score of each of the ten most recently active conversations.
        recent = (
            await session.scalars(
                select(Conversation).order_by(Conversation.updated_at.desc()).limit(10)
            )
        ).all()
        names = await person_names(session, (c.person_id for c in recent))
        conversations = []
        for conversation in recent:
            score = await session.scalar(
                select(SyncScoreRow)
                .where(SyncScoreRow.conversation_id == conversation.id)
                .order_by(SyncScoreRow.id.desc())
                .limit(1)
            )
            conversations.append(
                {
                    "id": conversation.id,
                    "channel": conversation.channel,
                    "who": names[conversation.person_id],
                    "person_id": conversation.person_id,
                    "updated_at": iso(conversation.updated_at),
                    "ewma": None if score is None else score.ewma,
                    "tier": None if score is None else score.tier,
                    "trend": None if score is None else score.trend,
                }
            )
    return {
        "brain": gateway.brain.name,
        "counts": counts,
        "memory_by_type": by_type,
        "memory_by_tier": by_tier,
        "conversations": conversations,
    }


async def overview_page(request: web.Request) -> web.Response:
    return render(request, "overview.html", data=await overview_data(request))


async def overview_api(request: web.Request) -> web.Response:
    return web.json_response(await overview_data(request))


def add_routes(app: web.Application) -> None:
    app.router.add_get("/panel", overview_page)
    app.router.add_get("/panel/", overview_page)
    app.router.add_get("/api/overview", overview_api)
