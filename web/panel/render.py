"""Shared rendering for the panel: one jinja2 environment (autoescaping on), the
navigation, and small helpers for query parameters and JSON bodies."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jinja2
from aiohttp import web

from gateway.app import GATEWAY, Gateway

TEMPLATES = web.AppKey("panel_templates", jinja2.Environment)


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
    NavItem("/panel/conversations", "Conversations"),
)


def setup_templates(app: web.Application) -> None:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("web", "templates/panel"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    app[TEMPLATES] = env


def gateway_of(request: web.Request) -> Gateway:
    return request.app[GATEWAY]


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
        body = await request.json()
    except ValueError:
        raise web.HTTPBadRequest(text="the body must be JSON") from None
    if not isinstance(body, dict):
        raise web.HTTPBadRequest(text="the body must be a JSON object")
    return body
