"""``/panel/handoff``: a person's last handoff note (the next session starts with it),
editable — an edit is a new note, the old ones stay listed — and their curated
profile ("What I know about you"), each line with its sources, rebuilt on demand.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from gateway.errors import InputError
from memory.continuity.book import ContinuityBook
from memory.continuity.handoff import HandoffBook
from memory.continuity.handoff_cli import note_json, profile_json
from memory.continuity.profile import ProfileBook
from web.panel.focus import _mapped, _person, _text
from web.panel.people import named_people
from web.panel.render import gateway_of, json_body, query_int, render


async def handoff_data(request: web.Request) -> dict[str, Any]:
    gateway = gateway_of(request)
    config = gateway.config.continuity
    async with gateway.store.reader() as session:
        choices = await named_people(session)
    person = query_int(request.query, "person", 0, lo=0, hi=2**62)
    if not person and choices:
        person = choices[0][0]
    data: dict[str, Any] = {
        "person": person,
        "people": [{"id": i, "name": n} for i, n in choices],
        "handoff_budget_tokens": config.handoff_budget_tokens,
        "profile_budget_tokens": config.profile_budget_tokens,
        "handoff": None,
        "history": [],
        "profile": None,
    }
    if person:
        try:
            person = await ContinuityBook(gateway.store, config).person(person)
        except InputError as exc:
            raise _mapped(exc) from None
        handoffs = HandoffBook(gateway.store, config)
        notes = await handoffs.history(person)
        data["handoff"] = note_json(notes[0] if notes else None, person)
        data["history"] = [note_json(n, person) for n in notes[1:]]
        data["profile"] = profile_json(
            await ProfileBook(gateway.store, config).latest(person), person
        )
    return data


async def handoff_page(request: web.Request) -> web.Response:
    return render(request, "handoff.html", data=await handoff_data(request))


async def handoff_api(request: web.Request) -> web.Response:
    return web.json_response(await handoff_data(request))


async def write_api(request: web.Request) -> web.Response:
    body = await json_body(request)
    gateway = gateway_of(request)
    config = gateway.config.continuity
    try:
        person = await ContinuityBook(gateway.store, config).person(_person(body))
        note = await HandoffBook(gateway.store, config).write(person, _text(body), method="panel")
    except InputError as exc:
        raise _mapped(exc) from None
    return web.json_response(note_json(note, person), status=201)


async def rebuild_api(request: web.Request) -> web.Response:
    body = await json_body(request)
    gateway = gateway_of(request)
    config = gateway.config.continuity
    try:
        person = await ContinuityBook(gateway.store, config).person(_person(body))
    except InputError as exc:
        raise _mapped(exc) from None
    profiles = ProfileBook(gateway.store, config)
    changed = await profiles.rebuild(person)
    return web.json_response(
        {"changed": changed, **profile_json(await profiles.latest(person), person)}
    )


def add_routes(app: web.Application) -> None:
    app.router.add_get("/panel/handoff", handoff_page)
    app.router.add_get("/api/handoff", handoff_api)
    app.router.add_post("/api/handoff", write_api)
    app.router.add_post("/api/profile/rebuild", rebuild_api)
