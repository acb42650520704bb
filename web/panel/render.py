"""Shared rendering for the panel: one jinja2 environment (autoescaping on), the
navigation, and small helpers for query parameters and JSON bodies."""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, tzinfo
from typing import Any, TypeVar

import jinja2
from aiohttp import web

from gateway.clock import local, zone_name
from gateway.errors import MalformedFrame
from gateway.runtime import GATEWAY, Gateway
from gateway.untrusted import MAX_ID, loads, store_id

TEMPLATES = web.AppKey("panel_templates", jinja2.Environment)
E = TypeVar("E", bound=enum.StrEnum)


@dataclass(frozen=True)
class NavItem:
    path: str
    label: str


NAV = (
    NavItem("/panel", "Overview"),
    NavItem("/panel/observations", "Observations"),
    NavItem("/panel/drift", "Drift"),
    NavItem("/panel/memory", "Memory"),
    NavItem("/panel/persona", "Persona"),
    NavItem("/panel/lessons", "Lessons"),
    NavItem("/panel/conversations", "Conversations"),
    NavItem("/panel/system", "System"),
    NavItem("/panel/triggers", "Triggers"),
    NavItem("/panel/upkeep", "Upkeep"),
    NavItem("/panel/cost", "Cost"),
    NavItem("/panel/focus", "Focus"),
    NavItem("/panel/handoff", "Handoff"),
    NavItem("/panel/tree", "Tree"),
)


def setup_templates(app: web.Application, zone: tzinfo = UTC) -> None:
    """The panel's templates, and the chat page's (``chat.html``); times shown in
    ``zone`` (the people's, ``agent.timezone``)."""
    env = jinja2.Environment(
        # The panel's pages by their own names, then the chat page beside them.
        loader=jinja2.ChoiceLoader(
            [
                jinja2.PackageLoader("web", "templates/panel"),
                jinja2.PackageLoader("web", "templates"),
            ]
        ),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )

    @jinja2.pass_context
    def dt(context: jinja2.runtime.Context, value: datetime | date | str | None) -> str:
        # A page about one person (a conversation, a memory) shows their zone.
        return format_time(value, context.get("page_zone") or zone)

    env.filters["dt"] = dt
    env.globals["zone_name"] = zone_name(zone)
    env.filters["score"] = format_score
    app[TEMPLATES] = env


def format_time(value: datetime | date | str | None, zone: tzinfo = UTC) -> str:
    """In ``zone``, to the minute: the panel is read by people, not parsed. Takes
    the JSON API's ISO times as well (the pages render the same rows)."""
    if value is None or value == "":
        return "—"
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            return value
        return local(parsed, zone).strftime("%Y-%m-%d %H:%M")
    if isinstance(value, datetime):
        return local(value, zone).strftime("%Y-%m-%d %H:%M")
    return value.isoformat()


def format_score(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def iso(value: datetime | date | None) -> str | None:
    """Times in the JSON API: ISO 8601, UTC."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat()
    return value.isoformat()


def gateway_of(request: web.Request) -> Gateway:
    return request.app[GATEWAY]


async def person_zone(request: web.Request, person_id: int) -> dict[str, Any]:
    """The context for a page about one person: times in their zone, named in the header."""
    zones = gateway_of(request).zones
    if zones is None:
        return {}
    zone = await zones.of(person_id)
    return {"page_zone": zone, "page_zone_name": zone_name(zone)}


def render(request: web.Request, template: str, **context: Any) -> web.Response:
    """Render a panel page; every template extends ``base.html``."""
    env = request.app[TEMPLATES]
    gateway = gateway_of(request)
    html = env.get_template(template).render(
        nav=NAV,
        current=request.path.rstrip("/") or "/panel",
        agent_name=gateway.config.agent.name,
        **context,
    )
    return web.Response(text=html, content_type="text/html")


def query_int(query: Mapping[str, str], key: str, default: int, *, lo: int, hi: int) -> int:
    """An integer query parameter clamped to [lo, hi]; a non-number is a 400."""
    raw = query.get(key, "")
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise web.HTTPBadRequest(text=f"{key} must be an integer") from None
    return max(lo, min(hi, value))


async def json_body(request: web.Request) -> dict[str, Any]:
    """The JSON object of a request; anything else is a 400 with a reason."""
    try:
        # Depth-bounded: a deeply nested body would otherwise recurse json.loads to death.
        body = loads(await request.read())
    except MalformedFrame as exc:
        raise web.HTTPBadRequest(text=f"the body must be JSON ({exc})") from None
    if not isinstance(body, dict):
        raise web.HTTPBadRequest(text="the body must be a JSON object")
    return body


def query_choice(query: Mapping[str, str], key: str, choices: type[E]) -> E | None:
    """An enum query parameter; empty is None, anything not a member is a 400."""
    raw = query.get(key, "")
    if not raw:
        return None
    try:
        return choices(raw)
    except ValueError:
        allowed = ", ".join(m.value for m in choices)
        raise web.HTTPBadRequest(text=f"{key} must be one of: {allowed}") from None


def path_int(request: web.Request, key: str) -> int:
    """An id in the path; one the store cannot hold (it would overflow the driver) is a 400."""
    try:
        value = store_id(int(request.match_info[key]))
    except ValueError:
        value = None
    if value is None:
        raise web.HTTPBadRequest(text=f"{key} must be an integer from 1 to {MAX_ID}")
    return value


def not_found(what: str) -> web.HTTPNotFound:
    return web.HTTPNotFound(
        text=json.dumps({"error": {"code": "not_found", "message": what}}),
        content_type="application/json",
    )


def bad_request(message: str) -> web.HTTPBadRequest:
    return web.HTTPBadRequest(
        text=json.dumps({"error": {"code": "bad_request", "message": message}}),
        content_type="application/json",
    )
