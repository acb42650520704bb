"""A forward trigger's message on its day reaches Telegram after a restart, once.

The real gateway with the real python-telegram-bot against the fake Bot API:
Alice names a day, the gateway stops; a new one on the same data directory,
with ``triggers.proactive_channels = ["telegram"]``, sends the day's message to
her chat (she has not written since the start) and never again, on a fake clock.
"""

from __future__ import annotations

from datetime import UTC, datetime, time
from pathlib import Path

import pytest
from sqlalchemy import select

from gateway.brains.scripted import ScriptedBrain
from gateway.testing.fake_telegram import FakeTelegram
from memory.triggers.models import Trigger
from memory.triggers.proactive import ProactiveNotifier
from tests.test_telegram import (
    ALICE,
    _timedelta_periods,  # noqa: F401  (autouse fixture)
    fake,  # noqa: F401  (fixture)
    gateway,
    telegram_of,
    tg_config,
)

pytestmark = pytest.mark.slow


async def test_the_days_message_reaches_telegram_after_a_restart_and_only_once(
    tmp_path: Path,
    fake: FakeTelegram,  # noqa: F811
    brain: ScriptedBrain,
) -> None:
    config = tg_config(tmp_path, fake)
    async with gateway(config, brain) as running:
        assert await telegram_of(running).wait_ready(10)
        fake.push(fake.text_update(ALICE, "My driving test is in 3 days", first_name="Alice"))
        await fake.wait_for(lambda: fake.sent_texts(ALICE), what="a reply")
        assert await running.gateway.router.drain(10)
        async with running.gateway.store.reader() as session:
            [trigger] = list(await session.scalars(select(Trigger)))
    day_at_ten = datetime.combine(trigger.trigger_date, time(10), tzinfo=UTC)

    config = tg_config(tmp_path, fake, {"triggers": {"proactive_channels": ["telegram"]}})
    async with gateway(config, brain) as running:
        channel = telegram_of(running)
        assert await channel.wait_ready(10)
        g = running.gateway
        assert g.zones is not None

        def notifier() -> ProactiveNotifier:
            return ProactiveNotifier(
                g.store,
                g.hub,
                g.zones,  # type: ignore[arg-type]
                config.triggers,
                now=lambda: day_at_ten,
                reach={"telegram": channel.reach},
            )

        assert await notifier().send_due() == 1
        await fake.wait_for(
            lambda: any("Today's the day" in t for t in fake.sent_texts(ALICE)),
            what="the day's message",
        )
        assert await notifier().send_due() == 0
    day_texts = [t for t in fake.sent_texts(ALICE) if "Today's the day" in t]
    assert day_texts == [
        "Today's the day you mentioned: “My driving test is in 3 days” Good luck, "
        "and tell me how it goes!"
    ]
