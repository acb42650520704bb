"""/metrics counts Telegram's updates and labels its turns by channel."""

from __future__ import annotations

from gateway.brains.scripted import ScriptedBrain
from gateway.testing.fake_telegram import FakeTelegram
from tests.conftest import RunningGateway
from tests.test_metrics import scrape, value
from tests.test_telegram import (  # noqa: F401 (fixtures)
    ALICE,
    _timedelta_periods,
    fake,
    tg,
)


async def test_telegram_updates_and_turns_are_counted(
    tg: RunningGateway,  # noqa: F811
    fake: FakeTelegram,  # noqa: F811
    brain: ScriptedBrain,
) -> None:
    before = await scrape(tg.session, tg.url("/metrics"))
    assert value(before, "agentgw_telegram_updates_total") == 0
    fake.push(fake.text_update(ALICE, "hello there", first_name="Alice"))
    await fake.wait_for(lambda: fake.sent_texts(ALICE), what="a reply")
    assert await tg.gateway.router.drain(timeout=20)
    after = await scrape(tg.session, tg.url("/metrics"))
    assert value(after, "agentgw_telegram_updates_total") == 1
    assert value(after, "agentgw_turns_total", outcome="ok", channel="telegram") == 1
