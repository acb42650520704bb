"""``/panel/focus``: a person's working memory (the current focus, its dated updates,
whether it faded) and their decision log; set, update or clear the focus, log a
decision (optionally reversing an earlier one). Decisions are never edited.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from gateway.errors import InputError
from memory.continuity.book import ContinuityBook
from memory.continuity.cli import decision_json, note_json, state_json
from memory.continuity.models import Origin
from web.panel.people import named_people
from web.panel.render import bad_request, gateway_of, json_body, not_found, query_int, render


def book_of(request: web.Request) -> ContinuityBook:
    gateway = gateway_of(request)
    memory = gateway.memory
    return ContinuityBook(
        gateway.store, gateway.config.continuity, memory.embedder if memory is not None else None
    )


def _mapped(exc: InputError) -> web.HTTPException:
    return not_found(str(exc)) if exc.code == "not_found" else bad_request(str(exc))


async def focus_data(request: web.Request) -> dict[str, Any]:
    book = book_of(request)
    async with gateway_of(request).store.reader() as session:
        choices = await named_people(session)
    person = query_int(request.query, "person", 0, lo=0, hi=2**62)
    if not person and choices:
        person = choices[0][0]
    data: dict[str, Any] = {
        "person": person,
        "people": [{"id": i, "name": n} for i, n in choices],
        "max_chars": book.config.max_chars,
        "fade_days": book.config.focus_fade_days,
        "decisions_in_prompt": book.config.decisions_in_prompt,
        "focus": None,
        "history": [],
        "decisions": [],
    }
    if person:
        try:
            person = await book.person(person)
        except InputError as exc:
            raise _mapped(exc) from None
        data["focus"] = state_json(await book.focus(person), person)
        data["history"] = [note_json(n) for n in await book.history(person)]
        data["decisions"] = [decision_json(d) for d in reversed(await book.decisions(person))]
    return data


async def focus_page(request: web.Request) -> web.Response:
    return render(request, "focus.html", data=await focus_data(request))


async def focus_api(request: web.Request) -> web.Response:
    return web.json_response(await focus_data(request))


def _person(body: dict[str, Any]) -> int:
    raw = body.get("person_id")
    if isinstance(raw, str) and raw.isdigit():
        raw = int(raw)
    if isinstance(raw, bool) or not isinstance(raw, int) or not 0 < raw < 2**62:
        raise bad_request("person_id must be a person's id")
    return raw


def _text(body: dict[str, Any]) -> str:
    value = body.get("text")
    if not isinstance(value, str):
        raise bad_request("text must be text")
    return value


async def set_api(request: web.Request) -> web.Response:
    body = await json_body(request)
    book = book_of(request)
    person = _person(body)
    action = body.get("action", "set")
    try:
        if action == "set":
            state = await book.set_focus(person, _text(body), origin=Origin.PANEL)
        elif action == "update":
            state = await book.update_focus(person, _text(body), origin=Origin.PANEL)
        elif action == "clear":
            ended = await book.clear_focus(person, origin=Origin.PANEL)
            return web.json_response({"cleared": ended.text if ended else None})
        else:
            raise bad_request("action must be set, update or clear")
    except InputError as exc:
        raise _mapped(exc) from None
    return web.json_response(state_json(state, person), status=201)


async def log_api(request: web.Request) -> web.Response:
    body = await json_body(request)
    raw_tags = body.get("tags", [])
    if isinstance(raw_tags, str):
        raw_tags = [t for t in raw_tags.replace(",", " ").split() if t]
    if not isinstance(raw_tags, list) or not all(isinstance(t, str) for t in raw_tags):
        raise bad_request("tags must be a list of words")
    reverses = body.get("reverses")
    if reverses in (None, ""):
        reverses = None
    elif isinstance(reverses, str) and reverses.isdigit():
        reverses = int(reverses)
    if reverses is not None and (isinstance(reverses, bool) or not isinstance(reverses, int)):
        raise bad_request("reverses must be a decision's id")
    try:
        logged = await book_of(request).log_decision(
            _person(body), _text(body), tags=raw_tags, origin=Origin.PANEL, reverses_id=reverses
        )
    except InputError as exc:
        raise _mapped(exc) from None
    return web.json_response(decision_json(logged), status=201)


def add_routes(app: web.Application) -> None:
    app.router.add_get("/panel/focus", focus_page)
    app.router.add_get("/api/focus", focus_api)
    app.router.add_post("/api/focus", set_api)
    app.router.add_post("/api/decisions", log_api)
