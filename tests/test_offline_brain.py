"""The offline brain as a newcomer meets it (issue 27, item 1).

It renders what memory holds for the person (a dated list built from the
pack's items as data), never the model's frame; says the long "no model"
paragraph once per conversation (read from the stored turns, so a restart
keeps it said); and "what do you remember about me?" lists this very
conversation's statements too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import date
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp.test_utils import TestServer

from gateway.app import create_app
from gateway.brains.base import BrainRequest, ChatMessage, Recall, Recollection
from gateway.brains.offline import HOW_TO, SHORT_NOTE, OfflineBrain
from gateway.config import Config
from gateway.runtime import GATEWAY, Gateway
from memory.commands import asks_about_person
from tests.conftest import make_config

FRAME_WORDS = ("<memory_pack>", "</memory_pack>", "facts, not instructions", "#m")


async def say(ws: aiohttp.ClientWebSocketResponse, text: str, client_id: str) -> str:
    await ws.send_json({"type": "message", "text": text, "client_id": client_id})
    while True:
        frame: dict[str, Any] = await ws.receive_json(timeout=20)
        assert frame["type"] != "error", frame
        if frame["type"] == "reply":
            return str(frame["text"])


@asynccontextmanager
async def chat(
    config: Config, session_name: str
) -> AsyncIterator[tuple[aiohttp.ClientWebSocketResponse, Gateway]]:
    server = TestServer(create_app(config, brain=OfflineBrain()), host="127.0.0.1")
    await server.start_server()
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.ws_connect(str(server.make_url(f"/ws?session={session_name}"))) as ws,
        ):
            await ws.receive_json(timeout=5)
            await ws.receive_json(timeout=5)
            yield ws, server.app[GATEWAY]
            # The last turn's ingest (after the reply) is done before the server stops.
            assert await server.app[GATEWAY].router.drain(timeout=20)
    finally:
        await server.close()


def test_the_answer_is_built_from_data_not_from_the_prompt() -> None:
    request = BrainRequest(
        system=(),
        messages=(ChatMessage("user", "Any pets I should avoid?"),),
        recall=Recall(
            items=(
                Recollection(date(2026, 3, 4), "user", "episode", "I'm allergic to cats"),
                Recollection(date(2026, 3, 5), "assistant", "episode", "Noted, no cats."),
                Recollection(date(2026, 3, 4), "user", "fact", "Sam is allergic to cats"),
            ),
        ),
    )
    text = OfflineBrain().answer(request)
    assert text.startswith(HOW_TO)
    assert "- 4 Mar 2026, you said: I'm allergic to cats" in text
    assert "- 5 Mar 2026, I said: Noted, no cats." in text
    assert "- 4 Mar 2026 (fact): Sam is allergic to cats" in text
    later = OfflineBrain().answer(
        BrainRequest(
            system=(),
            messages=request.messages,
            recall=Recall(items=request.recall.items, offline_notice_given=True),
        )
    )
    assert "No language model is configured, so" not in later
    assert later.startswith("What I remember that bears on your message:")
    assert later.endswith(SHORT_NOTE)


def test_questions_about_the_person_are_recognised() -> None:
    for asked in (
        "What do you remember about me?",
        "what do you know about me",
        "Tell me everything you remember about me.",
        "What have I told you so far?",
    ):
        assert asks_about_person(asked), asked
    for other in ("Remember that I'm allergic to cats", "What do you know about Lisbon?"):
        assert not asks_about_person(other), other


async def test_a_remember_request_is_confirmed_without_the_models_frame(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    async with chat(config, "offline-frame-1") as (ws, _):
        first = await say(ws, "Remember that I'm allergic to cats", "f-1")
        assert first.startswith(HOW_TO)
        assert "I'll remember “I'm allergic to cats”" in first
        for word in FRAME_WORDS:
            assert word not in first, word
        # The paragraph is said once; later replies lead with what is remembered.
        second = await say(ws, "I live in Porto.", "f-2")
        assert HOW_TO not in second
        assert "No language model is configured, so" not in second
        assert second.endswith(SHORT_NOTE)


async def test_a_pack_of_earlier_messages_is_a_dated_list(tmp_path: Path) -> None:
    # No verbatim history next to the pack: earlier messages come back through it.
    config = make_config(tmp_path, memory={"embedder": "none", "history_tokens": 1})
    async with chat(config, "offline-pack-1") as (ws, _):
        await say(ws, "My sister Ines plays the cello in Porto.", "p-1")
        reply = await say(ws, "When is Ines playing the cello next?", "p-2")
    today = date.today()
    assert f"- {today.day} {today:%b %Y}, you said: My sister Ines plays the cello" in reply
    for word in FRAME_WORDS:
        assert word not in reply, word


async def test_what_do_you_remember_lists_this_conversation(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    async with chat(config, "offline-about-1") as (ws, _):
        await say(ws, "Remember that I'm allergic to cats", "a-1")
        await say(ws, "I live in Porto and I work as a nurse.", "a-2")
        reply = await say(ws, "What do you remember about me?", "a-3")
    assert "Nothing said earlier bears on this message" not in reply
    assert "What I remember about you, newest first:" in reply
    assert "you said: I live in Porto and I work as a nurse." in reply
    assert "I'm allergic to cats" in reply
    # The request itself is not listed as something the person told.
    assert "Remember that" not in reply
    assert reply.endswith(SHORT_NOTE)

    # A restart does not make it repeat the paragraph: the stored turns say it was given.
    async with chat(config, "offline-about-1") as (ws, _):
        after = await say(ws, "What do you know about me", "a-4")
    assert HOW_TO not in after
    assert "I live in Porto and I work as a nurse." in after


async def test_what_the_observer_quoted_is_not_listed_twice(tmp_path: Path) -> None:
    # The rule observer reads after a few words and stores "The person: …" items.
    config = make_config(tmp_path, observe={"observer_tokens": 5})
    async with chat(config, "offline-about-2") as (ws, gateway):
        await say(ws, "I prefer green tea to coffee.", "q-1")
        assert gateway.persona is not None
        assert await gateway.router.drain(timeout=20)
        assert await gateway.persona.idle(timeout=20)
        reply = await say(ws, "What do you know about me?", "q-2")
    assert reply.count("I prefer green tea to coffee.") == 1
    assert "The person:" not in reply
