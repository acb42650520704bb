"""The web panel under ``/panel`` and its JSON API under ``/api/``.

One module per page; each exposes ``add_routes(app)`` registering its HTML page
and the JSON endpoints that serve the same data. The table below is the only
registration: no discovery.
"""

from __future__ import annotations

from datetime import UTC, tzinfo

from aiohttp import web

from web.panel import (
    conversations,
    cost,
    drift,
    focus,
    handoff,
    lessons,
    memory,
    observations,
    overview,
    persona,
    system,
    tree,
    triggers,
    turns,
    upkeep,
)
from web.panel.render import setup_templates

PAGES = (
    overview,
    observations,
    drift,
    memory,
    persona,
    lessons,
    conversations,
    system,
    triggers,
    upkeep,
    turns,
    cost,
    focus,
    handoff,
    tree,
)


def add_panel_routes(app: web.Application, zone: tzinfo = UTC) -> None:
    setup_templates(app, zone)
    for page in PAGES:
        page.add_routes(app)
