"""A webchat turn end to end over a real WebSocket, with the scripted brain."""

from __future__ import annotations

from typing import Any

import aiohttp

from gateway.brains.scripted import ScriptedBrain
from tests.conftest import RunningGateway


async def receive_until(ws: aiohttp.ClientWebSocketResponse, kind: str) -> list[dict[str, Any]]:
    frames = []
    while True:
        frame = await ws.receive_json(timeout=10)
        frames.append(frame)
        if frame["type"] == kind:
            return frames


async def test_turn_streams_and_stores(running: RunningGateway, brain: ScriptedBrain) -> None:
    brain.script = ["Hello there, I am Ada and this is a streamed reply."]
    ws = await running.ws()
    hello = await ws.receive_json(timeout=5)
    assert hello["type"] == "hello"
    history = await ws.receive_json(timeout=5)
    assert history == {"type": "history", "messages": [], "in_flight": None}
    await ws.send_json({"type": "message", "text": "hi", "client_id": "c-1"})
    frames = await receive_until(ws, "reply")
    kinds = [f["type"] for f in frames]
    assert kinds[0] in ("ack", "message")
    assert "ack" in kinds
    deltas = "".join(f["text"] for f in frames if f["type"] == "delta")
    reply = frames[-1]
    assert deltas == reply["text"] == "Hello there, I am Ada and this is a streamed reply."
    ack = next(f for f in frames if f["type"] == "ack")
    assert reply["reply_to"] == ack["message_id"]
    await ws.close()

    # Reload: the history holds both messages, in order.
    ws2 = await running.ws()
    await ws2.receive_json(timeout=5)
    history = await ws2.receive_json(timeout=5)
    texts = [(m["role"], m["text"]) for m in history["messages"]]
    assert texts == [("user", "hi"), ("assistant", reply["text"])]
    await ws2.close()
