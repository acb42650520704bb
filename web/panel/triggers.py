"""``/panel/triggers``: forward triggers (issue 22), upcoming, fired and cancelled.

Each row: the person, the day (theirs), the words that named it, the sentence,
the memories the pack held then, and a Cancel button for the ones not cancelled
(``POST /api/triggers/{id}/cancel``). ``GET /api/triggers`` serves the same rows.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from aiohttp import web
from sqlalchemy import select

from gateway.store.models import Person
from memory.triggers import repo
from memory.triggers.models import Trigger, TriggerStatus
from web.panel.render import gateway_of, iso, not_found, path_int, render


def trigger_json(trigger: Trigger, names: dict[int, str]) -> dict[str, Any]:
    return {
        "id": trigger.id,
        "person_id": trigger.person_id,
        "person": names.get(trigger.person_id, ""),
        "channel": trigger.channel,
        "conversation_id": trigger.conversation_id,
        "message_id": trigger.message_id,
        "trigger_date": trigger.trigger_date.isoformat(),
        "phrase": trigger.phrase,
        "context": trigger.context,
        "memory_ids": list(trigger.memory_ids),
        "status": trigger.status.value,
        "created_at": iso(trigger.created_at),
        "fired_at": iso(trigger.fired_at),
        "proactive_at": iso(trigger.proactive_at),
        "cancelled_at": iso(trigger.cancelled_at),
        "cancelled_by": trigger.cancelled_by,
    }


async def triggers_data(request: web.Request) -> dict[str, Any]:
    store = gateway_of(request).store
    rows = await repo.listed(store)
    async with store.reader() as session:
        people = await session.execute(
            select(Person.id, Person.display_name).where(Person.id.in_({t.person_id for t in rows}))
        )
        names = {row.id: row.display_name or f"person {row.id}" for row in people}
    listed = [trigger_json(t, names) for t in rows]
    return {
        "upcoming": [t for t in listed if t["status"] == TriggerStatus.UPCOMING.value],
        "fired": [t for t in listed if t["status"] == TriggerStatus.FIRED.value],
        "cancelled": [t for t in listed if t["status"] == TriggerStatus.CANCELLED.value],
    }


async def triggers_page(request: web.Request) -> web.Response:
    return render(request, "triggers.html", data=await triggers_data(request))


async def triggers_api(request: web.Request) -> web.Response:
    return web.json_response(await triggers_data(request))


async def cancel_trigger(request: web.Request) -> web.Response:
    trigger_id = path_int(request, "trigger_id")
    store = gateway_of(request).store
    async with store.reader() as session:
        trigger = await session.get(Trigger, trigger_id)
    if trigger is None:
        raise not_found(f"no trigger {trigger_id}")
    await repo.cancel(store, [trigger_id], datetime.now(UTC))
    return web.json_response({"cancelled": trigger_id})


def add_routes(app: web.Application) -> None:
    app.router.add_get("/panel/triggers", triggers_page)
    app.router.add_get("/api/triggers", triggers_api)
    app.router.add_post("/api/triggers/{trigger_id}/cancel", cancel_trigger)
