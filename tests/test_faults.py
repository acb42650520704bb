"""Brain faults through the whole gateway: the real anthropic SDK against the fake API.

Each fault must end in an ``error`` frame with the matching code, a failed turn
that keeps the user's message, and a connection that still answers the next
message.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from sqlalchemy import select

from gateway.brains.claude import ClaudeBrain
from gateway.pipeline import PipelineSettings
from gateway.store import Message, MessageRole, Turn, TurnStatus
from gateway.testing.fake_anthropic import FakeAnthropic
from tests.conftest import RunningGateway, start_gateway
from tests.test_e2e_claude import KEY, claude_gateway_config

RECOVERED = "Back to normal: this answer arrived whole."
MAX_RETRIES = 1


@dataclass(frozen=True)
class Case:
    code: str
    inject: Callable[[FakeAnthropic], None]
    # Model calls the fault takes: the first try and the SDK's retries, or one.
    attempts: int
    brain: dict[str, Any]
    # Text deltas the page sees before the error.
    deltas_before_error: int = 0


TIMEOUT_S = 0.5
CASES = {
    "timeout": Case(
        "brain_timeout",
        lambda fake: fake.delay(5.0),
        attempts=1,
        brain={"timeout_s": TIMEOUT_S, "max_retries": 0},
    ),
    "429": Case(
        "brain_rate_limited",
        lambda fake: fake.fail(429, times=MAX_RETRIES + 1, retry_after_s=0.01),
        attempts=MAX_RETRIES + 1,
        brain={},
    ),
    "500": Case(
        "brain_unavailable",
        lambda fake: fake.fail(500, times=MAX_RETRIES + 1, retry_after_s=0.01),
        attempts=MAX_RETRIES + 1,
        brain={},
    ),
    "529": Case(
        "brain_overloaded",
        lambda fake: fake.fail(529, times=MAX_RETRIES + 1, retry_after_s=0.01),
        attempts=MAX_RETRIES + 1,
        brain={},
    ),
    "overloaded event": Case(
        "brain_overloaded",
        lambda fake: fake.stream_error("overloaded_error", after_deltas=2),
        attempts=1,
        brain={},
        deltas_before_error=2,
    ),
    "cut mid-stream": Case(
        "brain_interrupted",
        lambda fake: fake.break_stream(after_deltas=3),
        attempts=1,
        brain={},
        deltas_before_error=3,
    ),
    "ends early": Case(
        "brain_interrupted",
        lambda fake: fake.truncate_stream(after_deltas=1),
        attempts=1,
        brain={},
        deltas_before_error=1,
    ),
}


async def until(ws: aiohttp.ClientWebSocketResponse, *kinds: str) -> list[dict[str, Any]]:
    frames: list[dict[str, Any]] = []
    while True:
        frame = await ws.receive_json(timeout=10)
        frames.append(frame)
        if frame["type"] in kinds:
            return frames


@pytest.mark.parametrize("name", list(CASES))
async def test_brain_fault_fails_the_turn_keeps_the_message_and_the_connection(
    tmp_path: Path, name: str
) -> None:
    case = CASES[name]
    async with FakeAnthropic(api_key=KEY, chunk_chars=5) as fake:
        config = claude_gateway_config(tmp_path, fake, **{"max_retries": MAX_RETRIES, **case.brain})
        server, session = await start_gateway(config, ClaudeBrain.from_config(config))
        running = RunningGateway(server, session)
        try:
            ws = await running.ws()
            await until(ws, "history")

            fake.script = ["This answer will not arrive whole, sadly.", RECOVERED]
            case.inject(fake)
            await ws.send_json({"type": "message", "text": "First try", "client_id": "c-1"})
            frames = await until(ws, "error", "reply")
            error = frames[-1]
            assert error["type"] == "error", frames
            assert error["code"] == case.code
            assert "saved" in error["message"]
            ack = next(f for f in frames if f["type"] == "ack")
            assert error["reply_to"] == ack["message_id"]
            deltas = [f for f in frames if f["type"] == "delta"]
            assert len(deltas) == case.deltas_before_error
            assert len(fake.message_requests) == case.attempts
            assert fake.pending_faults == 0

            # The same connection answers the next message normally.
            fake.script = [RECOVERED]
            await ws.send_json({"type": "message", "text": "Second try", "client_id": "c-2"})
            frames = await until(ws, "error", "reply")
            assert frames[-1]["type"] == "reply", frames
            assert frames[-1]["text"] == RECOVERED
            await ws.close()

            async with running.gateway.store.session() as db:
                turns = (await db.execute(select(Turn).order_by(Turn.id))).scalars().all()
                messages = (await db.execute(select(Message).order_by(Message.id))).scalars().all()
        finally:
            await session.close()
            await server.close()

    failed, replied = turns
    assert failed.status is TurnStatus.FAILED
    assert failed.error_code == case.code
    assert failed.reply_message_id is None
    assert failed.inbound_message_id == ack["message_id"]
    assert replied.status is TurnStatus.REPLIED
    assert [(m.role, m.text) for m in messages] == [
        (MessageRole.USER, "First try"),
        (MessageRole.USER, "Second try"),
        (MessageRole.ASSISTANT, RECOVERED),
    ]
    # The failed turn's text is not part of what the next request sent as history.
    last = fake.message_requests[-1].body["messages"]
    assert all("will not arrive" not in str(m["content"]) for m in last)


async def test_a_stalled_first_attempt_is_retried_within_the_turn_deadline(
    tmp_path: Path,
) -> None:
    """The turn's deadline covers the SDK's retry: a timeout then a good answer is a reply."""
    async with FakeAnthropic(api_key=KEY, chunk_chars=5) as fake:
        config = claude_gateway_config(tmp_path, fake, timeout_s=TIMEOUT_S, max_retries=1)
        server, session = await start_gateway(config, ClaudeBrain.from_config(config))
        running = RunningGateway(server, session)
        try:
            ws = await running.ws()
            await until(ws, "history")
            fake.script = [RECOVERED]
            # Longer than one attempt may take: the SDK gives up on it and tries again.
            fake.delay(TIMEOUT_S * 10)
            await ws.send_json({"type": "message", "text": "Are you there?", "client_id": "c-1"})
            frames = await until(ws, "error", "reply")
            # The turn's attempts; the session's end then asks for its handoff note.
            attempts = len(fake.message_requests)
            await ws.close()
        finally:
            await session.close()
            await server.close()
    assert frames[-1]["type"] == "reply", frames
    assert frames[-1]["text"] == RECOVERED
    assert attempts == 2
    assert fake.pending_faults == 0


def test_turn_deadline_covers_every_attempt_and_the_backoff_unless_set() -> None:
    def settings(**kwargs: Any) -> PipelineSettings:
        return PipelineSettings(max_tokens=100, temperature=None, history_max_messages=10, **kwargs)

    # Attempts of 0.5 s, and 0.5 s of backoff before the one retry.
    assert settings(timeout_s=0.5, max_retries=1).deadline_s == pytest.approx(1.5)
    # Backoff doubles and is capped at 8 s: 0.5 + 1 + 2 + 4 + 8 + 8.
    assert settings(timeout_s=10.0, max_retries=6).deadline_s == pytest.approx(70 + 23.5)
    assert settings(timeout_s=0.5, max_retries=0).deadline_s == pytest.approx(0.5)
    assert settings(timeout_s=0.5, max_retries=3, turn_deadline_s=7.0).deadline_s == 7.0
