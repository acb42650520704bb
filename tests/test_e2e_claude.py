"""A webchat conversation end to end: real WebSocket, real gateway, real anthropic SDK,
the fake Messages API on loopback, usage stored per turn."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from sqlalchemy import select

from gateway.brains.base import TURN_CLOSE, TURN_OPEN
from gateway.brains.claude import ClaudeBrain
from gateway.config import Config
from gateway.context import load_persona
from gateway.store import Message, MessageRole, Turn, TurnStatus
from gateway.testing.fake_anthropic import FakeAnthropic
from gateway.tokens import estimate_tokens
from tests.conftest import RunningGateway, make_config, start_gateway

KEY = "sk-ant-e2e-key"
REPLY_MODEL = "claude-sonnet-5-5"
UTILITY_MODEL = "claude-haiku-5-5"
FIRST = "Hello! I'm Ada. Nice to meet you; what shall we talk about today?"
SECOND = "You told me your name is Sam, and you asked me to remember it."


def claude_gateway_config(tmp_path: Path, fake: FakeAnthropic, **brain: Any) -> Config:
    """Claude against the fake; the persona loop judges and observes locally, so every
    request the fake sees is a reply of the conversation."""
    config = make_config(
        tmp_path,
        brain={"timeout_s": 5.0, "max_retries": 1, **brain},
        claude={"reply_model": REPLY_MODEL, "utility_model": UTILITY_MODEL},
        persona={"judge": "local"},
        observe={"observer": "rules"},
    )
    return config.replace(anthropic_api_key=KEY, anthropic_base_url=fake.base_url)


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic(api_key=KEY, chunk_chars=6) as server:
        yield server


@pytest.fixture
async def claude_gateway(tmp_path: Path, fake: FakeAnthropic) -> AsyncIterator[RunningGateway]:
    config = claude_gateway_config(tmp_path, fake)
    server, session = await start_gateway(config, ClaudeBrain.from_config(config))
    try:
        yield RunningGateway(server, session)
    finally:
        await session.close()
        await server.close()


async def until(ws: aiohttp.ClientWebSocketResponse, kind: str) -> list[dict[str, Any]]:
    frames: list[dict[str, Any]] = []
    while True:
        frame = await ws.receive_json(timeout=10)
        frames.append(frame)
        if frame["type"] == kind:
            return frames


async def test_a_conversation_streams_through_the_sdk_and_stores_usage(
    claude_gateway: RunningGateway, fake: FakeAnthropic
) -> None:
    fake.script = [FIRST, SECOND]
    ws = await claude_gateway.ws()
    hello = await ws.receive_json(timeout=5)
    assert hello["type"] == "hello"
    assert hello["brain"] == "claude"
    assert (await ws.receive_json(timeout=5))["type"] == "history"

    await ws.send_json({"type": "message", "text": "Hi, I'm Sam.", "client_id": "c-1"})
    frames = await until(ws, "reply")
    deltas = [f["text"] for f in frames if f["type"] == "delta"]
    assert len(deltas) > 1
    assert "".join(deltas) == frames[-1]["text"] == FIRST
    first_ack = next(f for f in frames if f["type"] == "ack")
    assert frames[-1]["reply_to"] == first_ack["message_id"]

    await ws.send_json({"type": "message", "text": "What's my name?", "client_id": "c-2"})
    frames = await until(ws, "reply")
    assert "".join(f["text"] for f in frames if f["type"] == "delta") == SECOND
    assert frames[-1]["text"] == SECOND
    await ws.close()

    # The second request carries the first turn, cache-marked at its last message, then
    # this turn's context framed ahead of the person's words; the persona block carries
    # the system prompt's cache mark.
    assert len(fake.message_requests) == 2
    first_body, second_body = (r.body for r in fake.message_requests)
    assert second_body["model"] == REPLY_MODEL
    assert second_body["stream"] is True
    history, final = second_body["messages"][:2], second_body["messages"][2]
    assert history == [
        {"role": "user", "content": "Hi, I'm Sam."},
        {
            "role": "assistant",
            "content": [{"type": "text", "text": FIRST, "cache_control": {"type": "ephemeral"}}],
        },
    ]
    assert final["role"] == "user"
    frame, said = final["content"]
    assert said == {"type": "text", "text": "What's my name?"}
    assert frame["text"].startswith(TURN_OPEN)
    assert frame["text"].endswith(TURN_CLOSE)
    assert "cache_control" not in frame
    assert "cache_control" not in said
    persona = load_persona("", "Ada").strip()
    system = second_body["system"]
    assert system[0]["text"].startswith(persona[:200])
    assert system[0] == first_body["system"][0]
    marked = [block for block in system if "cache_control" in block]
    assert len(marked) == 1
    assert marked[0]["cache_control"] == {"type": "ephemeral"}
    # The per-turn guidance (time, channel) is in the frame, never in the system prompt.
    assert not any("arrived on" in block["text"] for block in system)
    assert "arrived on" in frame["text"]

    store = claude_gateway.gateway.store
    async with store.session() as session:
        turns = (await session.execute(select(Turn).order_by(Turn.id))).scalars().all()
        messages = (await session.execute(select(Message).order_by(Message.id))).scalars().all()
    assert [t.status for t in turns] == [TurnStatus.REPLIED, TurnStatus.REPLIED]
    assert [(m.role, m.text) for m in messages] == [
        (MessageRole.USER, "Hi, I'm Sam."),
        (MessageRole.ASSISTANT, FIRST),
        (MessageRole.USER, "What's my name?"),
        (MessageRole.ASSISTANT, SECOND),
    ]
    first, second = turns
    for turn in turns:
        assert turn.brain == "claude"
        assert turn.model == REPLY_MODEL
        assert turn.input_tokens > 0
        assert turn.output_tokens > 0
        assert turn.error_code is None
    # Turn one wrote the persona prefix to the cache; turn two read exactly that back and
    # wrote only the history it added (the two messages of turn one).
    assert first.cache_write_tokens > 0
    assert first.cache_read_tokens == 0
    assert second.cache_read_tokens == first.cache_write_tokens
    assert second.cache_write_tokens == estimate_tokens("user:Hi, I'm Sam.") + estimate_tokens(
        f"assistant:{FIRST}"
    )
