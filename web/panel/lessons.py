"""``/panel/lessons``: the lessons learned from corrections, each with the message it
came from; edit, switch off or delete one, or add one for a person or for everyone.

The page shows, per lesson, whether it reaches the prompt: on, off (switched
off), replaced by a newer lesson on its slot, or left out by the budget
(``lessons.budget_tokens``) — left out is not deleted.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from gateway.errors import InputError
from persona.lessons.book import LessonBook, LessonInfo
from persona.lessons.stages import build_book
from persona.models import LessonOrigin
from web.panel.people import named_people, person_names
from web.panel.render import (
    bad_request,
    gateway_of,
    iso,
    json_body,
    not_found,
    path_int,
    query_int,
    render,
)


def book_of(request: web.Request) -> LessonBook:
    gateway = gateway_of(request)
    memory = gateway.memory
    return build_book(
        gateway.config.lessons, gateway.store, memory.embedder if memory is not None else None
    )


def _mapped(exc: InputError) -> web.HTTPException:
    return not_found(str(exc)) if exc.code == "not_found" else bad_request(str(exc))


def lesson_json(lesson: LessonInfo, names: dict[int, str], left_out: set[int]) -> dict[str, Any]:
    if lesson.replaced_by is not None:
        state = "replaced"
    elif not lesson.enabled:
        state = "off"
    elif lesson.lesson_id in left_out:
        state = "over_budget"
    else:
        state = "on"
    return {
        "id": lesson.lesson_id,
        "text": lesson.text,
        "person_id": lesson.person_id,
        "person": "Everyone" if lesson.person_id is None else names.get(lesson.person_id, ""),
        "slot": lesson.slot,
        "origin": lesson.origin.value,
        "author": lesson.author,
        "enabled": lesson.enabled,
        "hits": lesson.hits,
        "replaced_by": lesson.replaced_by,
        "state": state,
        "source_message_id": lesson.source_message_id,
        "source_text": lesson.source_text,
        "created_at": iso(lesson.created_at),
        "updated_at": iso(lesson.updated_at),
    }


async def lessons_data(request: web.Request) -> dict[str, Any]:
    book = book_of(request)
    person = query_int(request.query, "person", 0, lo=0, hi=2**62)
    lessons = await book.listed(person, everyone=False) if person else await book.listed()
    people = sorted({x.person_id for x in lessons if x.person_id is not None})
    # What the budget leaves out, as each person's prompt would have it.
    left_out: set[int] = set()
    for person_id in people:
        left_out.update(x.lesson_id for x in (await book.for_prompt(person_id)).left_out)
    async with gateway_of(request).store.reader() as session:
        names = await person_names(session, people)
        choices = await named_people(session)
    return {
        "lessons": [lesson_json(x, names, left_out) for x in lessons],
        "person": person,
        "people": [{"id": i, "name": n} for i, n in choices],
        "budget_tokens": book.budget_tokens,
        "max_chars": book.max_chars,
    }


async def lessons_page(request: web.Request) -> web.Response:
    return render(request, "lessons.html", data=await lessons_data(request))


async def lessons_api(request: web.Request) -> web.Response:
    return web.json_response(await lessons_data(request))


def _person(body: dict[str, Any]) -> int | None:
    raw = body.get("person_id")
    if raw is None or raw == "":
        return None
    if isinstance(raw, str) and raw.isdigit():
        raw = int(raw)
    if isinstance(raw, bool) or not isinstance(raw, int) or not 0 < raw < 2**62:
        raise bad_request("person_id must be a person's id, or empty for everyone")
    return raw


def _text(body: dict[str, Any], key: str) -> str:
    value = body.get(key)
    if not isinstance(value, str):
        raise bad_request(f"{key} must be text")
    return value


async def add_api(request: web.Request) -> web.Response:
    body = await json_body(request)
    text = _text(body, "text")
    slot = body.get("slot", "")
    if not isinstance(slot, str):
        raise bad_request("slot must be text")
    try:
        learned = await book_of(request).learn(
            text,
            person_id=_person(body),
            slot=slot,
            origin=LessonOrigin.MANUAL,
            author="panel",
        )
    except InputError as exc:
        raise _mapped(exc) from None
    return web.json_response(
        {**lesson_json(learned.lesson, {}, set()), "action": learned.action}, status=201
    )


async def patch_api(request: web.Request) -> web.Response:
    lesson_id = path_int(request, "lesson_id")
    body = await json_body(request)
    text = _text(body, "text") if "text" in body else None
    enabled = body.get("enabled")
    if enabled is not None and not isinstance(enabled, bool):
        raise bad_request("enabled must be true or false")
    if text is None and enabled is None:
        raise bad_request("give text or enabled")
    try:
        changed = await book_of(request).update(lesson_id, text=text, enabled=enabled)
    except InputError as exc:
        raise _mapped(exc) from None
    return web.json_response(lesson_json(changed, {}, set()))


async def delete_api(request: web.Request) -> web.Response:
    try:
        gone = await book_of(request).delete(path_int(request, "lesson_id"))
    except InputError as exc:
        raise _mapped(exc) from None
    return web.json_response({"deleted": gone.lesson_id})


def add_routes(app: web.Application) -> None:
    app.router.add_get("/panel/lessons", lessons_page)
    app.router.add_get("/api/lessons", lessons_api)
    app.router.add_post("/api/lessons", add_api)
    app.router.add_patch("/api/lessons/{lesson_id}", patch_api)
    app.router.add_delete("/api/lessons/{lesson_id}", delete_api)
