"""``/panel/persona``: the core identity, the current PersonaState, rules waiting for
confirmation, and the versions — diff any two, roll back to one."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from gateway.errors import InputError
from persona.models import RuleStatus
from persona.state import PersonaBook, RuleInfo, VersionInfo
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


def book_of(request: web.Request) -> PersonaBook:
    loop = gateway_of(request).persona
    if loop is None:
        raise web.HTTPServiceUnavailable(text="the persona loop is not running")
    return loop.book


def version_json(v: VersionInfo) -> dict[str, Any]:
    return {
        "version": v.version,
        "source": v.source,
        "reason": v.reason,
        "created_at": iso(v.created_at),
        "state": v.state.to_json(),
    }


def rule_json(r: RuleInfo) -> dict[str, Any]:
    return {
        "id": r.rule_id,
        "text": r.text,
        "status": r.status.value,
        "person_id": r.person_id,
        "source_message_id": r.source_message_id,
        "proposed_at": iso(r.proposed_at),
        "decided_at": iso(r.decided_at),
    }


def _mapped(exc: InputError) -> web.HTTPException:
    """The persona layer's refusals as API answers: unknown → 404, the rest → 400."""
    if exc.code == "not_found":
        return not_found(str(exc))
    return bad_request(str(exc))


async def persona_data(request: web.Request) -> dict[str, Any]:
    gateway = gateway_of(request)
    book = book_of(request)
    # The text the prompt uses: read once at start, as the running gateway has it.
    identity = gateway.persona_text
    current = await book.current()
    versions = await book.versions()
    rules = await book.rules()
    return {
        "identity": identity,
        "current": version_json(current),
        "versions": [
            {k: v for k, v in version_json(v).items() if k != "state"} for v in reversed(versions)
        ],
        "pending_rules": [rule_json(r) for r in rules if r.status is RuleStatus.PROPOSED],
        "rules": [rule_json(r) for r in rules],
    }


async def persona_page(request: web.Request) -> web.Response:
    data = await persona_data(request)
    newest = data["current"]["version"]
    a = query_int(request.query, "a", max(1, newest - 1), lo=1, hi=newest)
    b = query_int(request.query, "b", newest, lo=1, hi=newest)
    try:
        diff = await book_of(request).diff(a, b)
    except InputError:
        diff = []
    return render(request, "persona.html", data=data, a=a, b=b, diff=diff)


async def persona_api(request: web.Request) -> web.Response:
    return web.json_response(await persona_data(request))


async def versions_api(request: web.Request) -> web.Response:
    versions = await book_of(request).versions()
    return web.json_response({"versions": [version_json(v) for v in versions]})


async def diff_api(request: web.Request) -> web.Response:
    if "a" not in request.query or "b" not in request.query:
        raise bad_request("give two versions: ?a=1&b=2")
    a = query_int(request.query, "a", 1, lo=1, hi=2**31)
    b = query_int(request.query, "b", 1, lo=1, hi=2**31)
    try:
        changes = await book_of(request).diff(a, b)
    except InputError as exc:
        raise _mapped(exc) from None
    return web.json_response({"a": a, "b": b, "changes": changes})


async def rollback_api(request: web.Request) -> web.Response:
    body = await json_body(request)
    version = body.get("version")
    if isinstance(version, bool) or not isinstance(version, int):
        raise bad_request("version must be an integer")
    try:
        made = await book_of(request).rollback(version)
    except InputError as exc:
        raise _mapped(exc) from None
    return web.json_response(version_json(made))


async def rule_api(request: web.Request) -> web.Response:
    rule_id = path_int(request, "rule_id")
    decision = request.match_info["decision"]
    book = book_of(request)
    try:
        if decision == "confirm":
            return web.json_response(version_json(await book.confirm_rule(rule_id)))
        if decision == "reject":
            return web.json_response(rule_json(await book.reject_rule(rule_id)))
    except InputError as exc:
        raise _mapped(exc) from None
    raise not_found(f"no decision {decision!r}: confirm or reject")


def add_routes(app: web.Application) -> None:
    app.router.add_get("/panel/persona", persona_page)
    app.router.add_get("/api/persona", persona_api)
    app.router.add_get("/api/persona/versions", versions_api)
    app.router.add_get("/api/persona/diff", diff_api)
    app.router.add_post("/api/persona/rollback", rollback_api)
    app.router.add_post("/api/persona/rules/{rule_id}/{decision}", rule_api)
