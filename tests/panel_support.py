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
    running: RunningGateway, texts: Sequence[str], session: str = "panel-session-1"
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


# Observe after a few words, anchors from the second turn: every panel table fills fast.
PANEL_SECTIONS: dict[str, dict[str, Any]] = {
    "observe": {"observer_tokens": 10},
    "persona": {"warmup_turns": 1, "anchor_min_messages": 4},
    # Little verbatim history, so older messages come back through the Memory Pack.
    "memory": {"history_tokens": 40},
}

# Replies that break the persona: long, formal, bullet-heavy, with an emoji (a hard rule).
OFF_VOICE = (
    "Certainly! I would be delighted to provide a comprehensive overview. Furthermore, "
    "it is important to note that each factor shall be examined in accordance with best "
    "practices.\n\n## Overview\n- **Point one**\n- **Point two**\n\nDo not hesitate to ask! 🚀"
)

SEED_MESSAGES = (
    "Please remember that my sister is called Anastasia.",
    "I prefer short answers, and I am planning a trip to Lisbon next week.",
    "Can you help me plan the week?",
    "What should I pack for Lisbon?",
    "Which museums in Lisbon would my sister Anastasia like?",
)


async def seed(running: RunningGateway, brain: Any, session: str = "panel-session-1") -> None:
    """Real turns: a remembered fact, preferences, a confirmed and a pending rule, and
    replies that drift (so SyncScores, anchors and observations are stored)."""
    loop = running.gateway.persona
    assert loop is not None
    confirmed = await loop.book.propose_rule("Never use emojis")
    await loop.book.confirm_rule(confirmed.rule_id)
    await loop.book.propose_rule("Always answer in English")
    brain.script = [
        "Noted, Anastasia.",
        "Short it is. Lisbon sounds lovely.",
        OFF_VOICE,
        OFF_VOICE,
        OFF_VOICE,
    ]
    await chat(running, SEED_MESSAGES, session)
