"""A webchat turn end to end over a real WebSocket, with the scripted brain."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
from sqlalchemy import select

from gateway.brains.scripted import ScriptedBrain
from gateway.store import Turn, TurnStatus
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


async def test_a_queued_message_sees_the_reply_to_the_one_before(
    running: RunningGateway, brain: ScriptedBrain
) -> None:
    """The second message arrives while the first is answered: its prompt has that answer."""
    brain.gate = asyncio.Event()
    brain.script = ["The first answer.", "The second answer."]
    ws = await running.ws()
    await receive_until(ws, "history")
    await ws.send_json({"type": "message", "text": "first question", "client_id": "q-1"})
    # The first turn is held at the brain's gate until both messages are stored.
    while True:
        frame = await ws.receive_json(timeout=10)
        if frame["type"] == "ack":
            break
    # Stored before the first reply exists, so its id is lower than the reply's.
    await ws.send_json({"type": "message", "text": "second question", "client_id": "q-2"})
    while True:
        frame = await ws.receive_json(timeout=10)
        if frame["type"] == "ack" and frame["client_id"] == "q-2":
            break
    brain.gate.set()
    replies = 0
    while replies < 2:
        frame = await ws.receive_json(timeout=10)
        assert frame["type"] != "error", frame
        replies += frame["type"] == "reply"
    await ws.close()

    first, second = brain.requests
    # The first turn does not see the message queued behind it.
    assert [(m.role, m.text) for m in first.messages] == [("user", "first question")]
    assert [(m.role, m.text) for m in second.messages] == [
        ("user", "first question"),
        ("assistant", "The first answer."),
        ("user", "second question"),
    ]


async def test_turn_timings_reach_the_store_once_the_gateway_is_idle(
    running: RunningGateway, brain: ScriptedBrain
) -> None:
    """deliver_ms is measured after the reply's write; it is written when no turn runs."""
    ws = await running.ws()
    await receive_until(ws, "history")
    await ws.send_json({"type": "message", "text": "time me", "client_id": "t-1"})
    await receive_until(ws, "reply")
    await ws.close()
    gateway = running.gateway
    assert await gateway.router.drain(10)
    async with gateway.store.reader() as db:
        turn = (await db.execute(select(Turn))).scalar_one()
    assert turn.status is TurnStatus.REPLIED
    assert turn.prepare_ms is not None
    assert turn.deliver_ms is not None
    assert turn.deliver_ms >= 0
    assert gateway.pipeline.pending_values == 0
