"""The drift page of the panel and its JSON API."""

from __future__ import annotations

from aiohttp import web


def add_routes(app: web.Application) -> None:
    """Registered by the owner of this page (being built)."""
