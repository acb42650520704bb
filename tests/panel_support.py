"""Seeding for the panel tests: real webchat turns through the running app (the
scripted brain answers), then a wait until judge and observer have finished, so
every table the panel reads holds data written by the real pipeline."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import aiohttp

from tests.conftest import RunningGateway


async def receive_until(ws: aiohttp.ClientWebSocketResponse, kind: str) -> list[dict[str, Any]]:
    """Frames up to and including the first of ``kind``; an ``error`` frame fails."""
    frames: list[dict[str, Any]] = []
    while True:
        frame = await ws.receive_json(timeout=30)
        frames.append(frame)
        if frame["type"] == kind:
            return frames
        if frame["type"] == "error" and kind != "error":
            raise AssertionError(f"turn failed: {frame}")


async def chat(
    running: RunningGateway, texts: Sequence[str], session: str = "panel-1"
) -> list[str]:
    """Send each text as a webchat turn, in order; the reply texts."""
    replies: list[str] = []
    ws = await running.ws(session)
    try:
        for text in texts:
            await ws.send_json({"type": "message", "text": text, "client_id": str(uuid.uuid4())})
            frames = await receive_until(ws, "reply")
            replies.append(str(frames[-1]["text"]))
    finally:
        await ws.close()
    await settle(running)
    return replies


async def settle(running: RunningGateway) -> None:
    """Wait for every lane, then for the judge and observer tasks the turns started."""
    assert await running.gateway.router.drain(30)
    loop = running.gateway.persona
    if loop is not None:
        assert await loop.idle(30)
