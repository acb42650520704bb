"""Issue 24's handoff across channels, over Telegram: a note written when the person's
webchat session ends reaches them on Telegram (a linked identity, so another
conversation), and a Telegram chat's idle end writes the note their next webchat
session starts with. Real python-telegram-bot against the fake Bot API
(gateway/testing/fake_telegram.py), the real store and session flush, the
scripted brain as the reply and utility model."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from sqlalchemy import select

from gateway.brains.base import BrainRequest
from gateway.brains.scripted import ScriptedBrain
from gateway.store import Store
from gateway.testing.fake_telegram import FakeTelegram
from memory.continuity.handoff import HANDOFF_HEADER, HANDOFF_INSTRUCTIONS
from memory.continuity.handoff_models import Handoff
from tests.test_lessons_turns import in_cached_prefix, persona_block, session, settle
from tests.test_persona_loop import say
from tests.test_telegram import ALICE, gateway, telegram_of, tg_config, webchat_turn

pytestmark = pytest.mark.slow

OPEN_LINE = "Open: night train or fly?"


@pytest.fixture(autouse=True)
def _timedelta_periods(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PTB_TIMEDELTA", "true")


def sections(idle_s: float) -> dict[str, dict[str, object]]:
    return {
        "upkeep_jobs": {"session_idle_s": idle_s, "session_close_s": 0.0},
        "observe": {"observer": "rules"},
        "links": {"people": [f"webchat:alice-laptop telegram:{ALICE}"]},
    }


async def handoffs(store: Store) -> list[Handoff]:
    async with store.reader() as s:
        return list((await s.scalars(select(Handoff).order_by(Handoff.id))).all())


async def wait_for_handoff(store: Store) -> Handoff:
    # Polled up to 60 s: a loaded machine is slow; a session that never ends never writes.
    for _ in range(1200):
        found = await handoffs(store)
        if found:
            return found[-1]
        await asyncio.sleep(0.05)
    raise AssertionError("no handoff was written at the session's end")


def note_from(said: str) -> object:
    """The utility model's handoff note, checked to be asked with the session's words."""

    def answer(request: BrainRequest) -> str:
        assert HANDOFF_INSTRUCTIONS in request.system_text()
        assert f"user: {said}" in request.messages[-1].text
        return f"Discussed: the Lisbon trip in May\n{OPEN_LINE}\nNext: check train prices"

    return answer


def where_we_left_off(request: BrainRequest) -> str:
    """A model that opens with the note's open question when its prompt has one."""
    block = persona_block(request)
    found = next((line for line in block.splitlines() if line.startswith("Open:")), None)
    return f"Welcome back! Last time we left this open: {found}" if found else "Hello!"


async def test_a_note_written_on_webchat_reaches_the_person_on_telegram(
    tmp_path: Path, brain: ScriptedBrain
) -> None:
    async with (
        FakeTelegram() as fake,
        gateway(tg_config(tmp_path, fake, sections(0.0)), brain) as running,
    ):
        assert await telegram_of(running).wait_ready(10)
        store = running.gateway.store
        ws = await session(running, "alice-laptop")
        brain.script = ["Happy to help."]
        await say(ws, "We're planning the Lisbon trip in May.", "a1")
        brain.script = ["Both work."]
        await say(ws, "Should we take the night train or fly?", "a2")
        await settle(running)
        assert await handoffs(store) == []
        brain.script = [note_from("Should we take the night train or fly?")]
        await ws.close()
        note = await wait_for_handoff(store)
        assert OPEN_LINE in note.text

        # The same person writes on Telegram: that conversation's first prompt starts
        # with the note in its cached prefix, and the reply that uses it reaches them.
        brain.script = [where_we_left_off]
        fake.push(fake.text_update(ALICE, "Hi, where were we?"))
        await fake.wait_for(lambda: fake.sent_texts(ALICE), timeout=60)
        request = brain.requests[-1]
        assert request.messages[-1].text == "Hi, where were we?"
        assert HANDOFF_HEADER in persona_block(request)
        assert in_cached_prefix(request, OPEN_LINE)
        assert fake.sent_texts(ALICE)[-1] == (
            f"Welcome back! Last time we left this open: {OPEN_LINE}"
        )
        # One note: the person's, not one per channel.
        assert {h.person_id for h in await handoffs(store)} == {note.person_id}


async def test_a_telegram_chat_gone_idle_writes_the_note_the_webchat_session_starts_with(
    tmp_path: Path, brain: ScriptedBrain
) -> None:
    async with (
        FakeTelegram() as fake,
        gateway(tg_config(tmp_path, fake, sections(0.5)), brain) as running,
    ):
        assert await telegram_of(running).wait_ready(10)
        store = running.gateway.store
        brain.script = ["Both work.", note_from("Should we take the night train or fly?")]
        fake.push(fake.text_update(ALICE, "Should we take the night train or fly?"))
        await fake.wait_for(lambda: fake.sent_texts(ALICE), timeout=60)
        # No page to close: the chat's quiet spell (0.5 s here) ends the session.
        note = await wait_for_handoff(store)
        assert OPEN_LINE in note.text

        brain.script = [where_we_left_off]
        frames = await webchat_turn(running, "alice-laptop", "Hi, where were we?")
        request = brain.requests[-1]
        assert in_cached_prefix(request, OPEN_LINE)
        assert frames["text"] == f"Welcome back! Last time we left this open: {OPEN_LINE}"
