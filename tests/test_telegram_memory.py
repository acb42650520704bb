"""Issue 5's end to end: a fact told on Telegram is recalled in the browser's
webchat for the linked person — checked in the memory block of the prompt the
brain got on the webchat turn. Real python-telegram-bot, real memory layer."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from gateway.brains.base import BlockKind
from gateway.brains.scripted import ScriptedBrain
from gateway.testing.fake_telegram import FakeTelegram
from tests.test_telegram import (
    ALICE,
    gateway,
    link_code,
    telegram_of,
    tg_config,
    webchat_turn,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("memory.pack") is None,
        reason="the memory layer (memory/pack.py) is not in this tree yet",
    ),
]


@pytest.fixture(autouse=True)
def _timedelta_periods(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PTB_TIMEDELTA", "true")


async def test_fact_told_on_telegram_is_recalled_in_webchat(
    tmp_path: Path, brain: ScriptedBrain
) -> None:
    async with FakeTelegram() as fake, gateway(tg_config(tmp_path, fake), brain) as running:
        assert await telegram_of(running).wait_ready(10)

        async def say_on_telegram(text: str) -> None:
            before = len(fake.sent_texts(ALICE))
            fake.push(fake.text_update(ALICE, text))
            await fake.wait_for(lambda: len(fake.sent_texts(ALICE)) > before, timeout=60)
            # The reply goes out before the after-turn stages (memory ingest) end.
            router = running.gateway.router
            await fake.wait_for(lambda: router.turns_in_flight == 0, timeout=60)

        # One fact before linking (it must move with the person), one after.
        await say_on_telegram("/remember my sister is called Anastasia")
        issued = await link_code(running, "alice-browser-1")
        await say_on_telegram(f"/link {issued['code']}")
        assert fake.sent_texts(ALICE)[-1].startswith("Linked!")
        await say_on_telegram("/remember my dog is a beagle named Biscuit")

        await webchat_turn(running, "alice-browser-1", "What is my sister called?")
        memory = [b.text for b in brain.requests[-1].system if b.kind is BlockKind.MEMORY]
        assert memory, "the webchat turn got no memory block"
        assert "Anastasia" in memory[0]

        await webchat_turn(running, "alice-browser-1", "What kind of dog do I have?")
        memory = [b.text for b in brain.requests[-1].system if b.kind is BlockKind.MEMORY]
        assert memory
        assert "Biscuit" in memory[0]
