"""A bench's webchat page: open a session, say a line and wait for its turn's end."""

from __future__ import annotations

import aiohttp


async def say(
    ws: aiohttp.ClientWebSocketResponse, text: str, client_id: str, *, timeout: float = 30
) -> None:
    """Send a message and wait for its reply (or its error)."""
    await ws.send_json({"type": "message", "text": text, "client_id": client_id})
    while True:
        frame = await ws.receive_json(timeout=timeout)
        if frame["type"] in ("reply", "error"):
            return


async def open_session(
    client: aiohttp.ClientSession, base: str, name: str
) -> aiohttp.ClientWebSocketResponse:
    """A page of session ``name``, past its hello and history frames."""
    ws = await client.ws_connect(f"{base}/ws?session={name}&after=0")
    await ws.receive_json(timeout=10)  # hello
    await ws.receive_json(timeout=10)  # history
    return ws
