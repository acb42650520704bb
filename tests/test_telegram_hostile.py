"""Telegram input the gateway cannot read: getUpdates items python-telegram-bot
cannot parse, webhook bodies that are not updates, and text the store cannot
encode. The real PTB against the fake Bot API, inside the real gateway."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from channels.telegram import SECRET_HEADER
from gateway.brains.scripted import ScriptedBrain
from gateway.store import Identity, Message
from gateway.testing.fake_telegram import FakeTelegram
from tests.conftest import RunningGateway
from tests.test_telegram import ALICE, SECRET, gateway, telegram_of, tg_config

SKIPPED = "skipped an update that cannot be read"


@pytest.fixture(autouse=True)
def _timedelta_periods(monkeypatch: pytest.MonkeyPatch) -> None:
    # As in test_telegram.py: PTB 22's opt-in, or its RetryAfter warns.
    monkeypatch.setenv("PTB_TIMEDELTA", "true")


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as server:
        yield server


@pytest.fixture
async def tg(
    tmp_path: Path, fake: FakeTelegram, brain: ScriptedBrain
) -> AsyncIterator[RunningGateway]:
    async with gateway(tg_config(tmp_path, fake), brain) as running:
        assert await telegram_of(running).wait_ready(10)
        yield running


def no_errors_logged(caplog: pytest.LogCaptureFixture) -> None:
    bad = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not bad, [r.getMessage()[:300] for r in bad]


def skip_notes(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if SKIPPED in r.getMessage()]


def undated(fake: FakeTelegram, text: str) -> dict[str, Any]:
    update = fake.text_update(ALICE, text)
    update["message"]["date"] = "yesterday"
    return update


async def polls_during(fake: FakeTelegram, seconds: float) -> int:
    """getUpdates calls made over the next ``seconds``."""
    before = len(fake.calls_to("getUpdates"))
    await asyncio.sleep(seconds)
    return len(fake.calls_to("getUpdates")) - before


async def test_unreadable_updates_are_skipped_and_the_good_one_answered(
    tg: RunningGateway,
    fake: FakeTelegram,
    brain: ScriptedBrain,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # One batch: four items PTB cannot parse, then Alice's real message.
    for item in ("garbage", None, [1, 2, 3]):
        fake.push_raw(item)
    bad = fake.push(undated(fake, "from yesterday"))
    fake.push(fake.text_update(ALICE, "hello after the junk"))
    await fake.wait_for(lambda: fake.sent_texts(ALICE), what="a reply")
    assert fake.sent_texts(ALICE) == ["You said: hello after the junk"]
    assert [r.messages[-1].text for r in brain.requests] == ["hello after the junk"]

    # Everything was confirmed: polling is back to long polls (0.5 s each at
    # the fake), not asking again and again for the same batch.
    assert await polls_during(fake, 1.5) < 10
    notes = skip_notes(caplog)
    assert len(notes) == 4, notes
    assert any(f"update_id {bad['update_id']}" in n for n in notes)
    no_errors_logged(caplog)


async def test_an_unreadable_update_alone_backs_polling_off(
    tg: RunningGateway, fake: FakeTelegram, caplog: pytest.LogCaptureFixture
) -> None:
    """Nothing in the answer can be confirmed: polling backs off instead of spinning."""
    fake.push_raw("garbage")
    # PTB's back-off: 1 s, 1.5 s, 2.25 s... A hot loop would make hundreds.
    assert await polls_during(fake, 3.0) < 10
    # A real update behind it confirms it, and is answered.
    fake.push(fake.text_update(ALICE, "anyone there?"))
    await fake.wait_for(lambda: fake.sent_texts(ALICE), timeout=15, what="a reply")
    assert fake.sent_texts(ALICE) == ["You said: anyone there?"]
    assert await polls_during(fake, 1.5) < 10
    # Logged once, though seen on every poll until it was confirmed.
    assert len(skip_notes(caplog)) == 1, skip_notes(caplog)
    no_errors_logged(caplog)


async def test_a_lone_surrogate_from_telegram_is_stored_replaced(
    tg: RunningGateway, fake: FakeTelegram, caplog: pytest.LogCaptureFixture
) -> None:
    fake.push(fake.text_update(ALICE, "hi \ud800 there", first_name="Al\udc00ice"))
    await fake.wait_for(lambda: fake.sent_texts(ALICE), what="a reply")
    assert fake.sent_texts(ALICE) == ["You said: hi \ufffd there"]
    async with tg.gateway.store.session() as session:
        identity = await session.scalar(select(Identity).where(Identity.channel == "telegram"))
        texts = (await session.scalars(select(Message.text).order_by(Message.id))).all()
    assert identity is not None
    assert identity.display_name == "Al\ufffdice"
    assert texts == ["hi \ufffd there", "You said: hi \ufffd there"]
    no_errors_logged(caplog)


async def test_the_webhook_answers_400_to_what_is_not_an_update(
    tmp_path: Path,
    fake: FakeTelegram,
    brain: ScriptedBrain,
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = tg_config(
        tmp_path,
        fake,
        {"telegram": {"mode": "webhook", "webhook_url": "https://bot.example.test/tg"}},
    )
    async with gateway(config, brain) as running:
        assert await telegram_of(running).wait_ready(10)
        url = running.url("/telegram/webhook")
        headers = {SECRET_HEADER: SECRET, "Content-Type": "application/json"}
        bodies = [
            b"[]",
            b"null",
            b'"garbage"',
            b"[" * 5000 + b"]" * 5000,
            b"{not json",
            b'{"update_id": "x"}',
            b"\xff\xfe",
            json.dumps(undated(fake, "from yesterday")).encode(),
        ]
        for body in bodies:
            async with running.session.post(url, data=body, headers=headers) as response:
                assert response.status == 400, body[:40]
                answer = await response.json()
                assert answer["ok"] is False
                assert answer["error"]["code"] in ("malformed_frame", "unreadable_update")
                assert answer["error"]["message"].startswith("not a Telegram update")
        async with running.session.post(
            url, json=fake.text_update(ALICE, "a real one"), headers={SECRET_HEADER: SECRET}
        ) as response:
            assert response.status == 200
        await fake.wait_for(lambda: fake.sent_texts(ALICE), what="a reply")
        assert fake.sent_texts(ALICE) == ["You said: a real one"]
    no_errors_logged(caplog)
