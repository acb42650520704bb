"""The Telegram channel end to end: the real python-telegram-bot against a fake
Bot API on loopback, inside the real gateway app with the scripted brain."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from sqlalchemy import func, select

from channels.telegram import SECRET_HEADER, TelegramChannel, TelegramState
from channels.telegram_send import split_message, utf16_len
from channels.telegram_text import REFUSAL
from gateway.brains.base import BrainEvent, BrainRequest, TextDelta
from gateway.brains.scripted import ScriptedBrain
from gateway.config import Config, load_config
from gateway.errors import BrainInterrupted
from gateway.store import Identity, Message, Person, Store, Turn
from gateway.store.models import AccessRefusal
from gateway.testing.fake_telegram import FakeTelegram
from tests.conftest import RunningGateway, start_gateway

ALICE = 4242
STRANGER = 666
SECRET = "webhook-secret_42"


@pytest.fixture(autouse=True)
def _timedelta_periods(monkeypatch: pytest.MonkeyPatch) -> None:
    # PTB 22's documented opt-in to its next major's time periods; without it
    # every RetryAfter warns, which this suite turns into errors.
    monkeypatch.setenv("PTB_TIMEDELTA", "true")


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as server:
        yield server


def tg_config(
    tmp_path: Path, fake: FakeTelegram, sections: dict[str, dict[str, Any]] | None = None
) -> Config:
    overrides: dict[str, dict[str, Any]] = {
        "store": {"data_dir": str(tmp_path / "data")},
        "telegram": {
            "enabled": True,
            "base_url": fake.base_url,
            "base_file_url": fake.base_file_url,
            "allowed_user_ids": [ALICE],
            "poll_timeout_s": 1,
        },
        # Voice notes with the real models are in test_telegram_voice.py.
        "voice": {"enabled": False},
    }
    for name, values in (sections or {}).items():
        overrides.setdefault(name, {}).update(values)
    path = tmp_path / "agentgw.toml"
    path.touch()
    env = {"TELEGRAM_BOT_TOKEN": fake.token, "TELEGRAM_WEBHOOK_SECRET": SECRET}
    return load_config(path, env=env, overrides=overrides)


@asynccontextmanager
async def gateway(config: Config, brain: ScriptedBrain) -> AsyncIterator[RunningGateway]:
    server, session = await start_gateway(config, brain)
    try:
        yield RunningGateway(server, session)
    finally:
        await session.close()
        await server.close()


def telegram_of(running: RunningGateway) -> TelegramChannel:
    channel = running.gateway.telegram
    assert channel is not None
    return channel


@pytest.fixture
async def tg(
    tmp_path: Path, fake: FakeTelegram, brain: ScriptedBrain
) -> AsyncIterator[RunningGateway]:
    async with gateway(tg_config(tmp_path, fake), brain) as running:
        assert await telegram_of(running).wait_ready(10)
        yield running


async def count_rows(store: Store, model: type[object]) -> int:
    async with store.session() as session:
        return int(await session.scalar(select(func.count()).select_from(model)) or 0)


async def webchat_turn(running: RunningGateway, session_id: str, text: str) -> dict[str, Any]:
    """Send one webchat message and return its reply frame."""
    ws = await running.ws(session_id)
    try:
        assert (await ws.receive_json(timeout=5))["type"] == "hello"
        assert (await ws.receive_json(timeout=5))["type"] == "history"
        await ws.send_json({"type": "message", "text": text, "client_id": uuid.uuid4().hex})
        return await receive_type(ws, "reply")
    finally:
        await ws.close()


async def receive_type(ws: aiohttp.ClientWebSocketResponse, kind: str) -> dict[str, Any]:
    while True:
        frame = await ws.receive_json(timeout=10)
        if frame["type"] == kind:
            return dict(frame)
        assert frame["type"] != "error", frame


async def test_text_message_becomes_a_turn(
    tg: RunningGateway, fake: FakeTelegram, brain: ScriptedBrain
) -> None:
    fake.push(fake.text_update(ALICE, "hello there", first_name="Alice"))
    await fake.wait_for(lambda: fake.sent_texts(ALICE), what="a reply")
    assert fake.sent_texts(ALICE) == ["You said: hello there"]
    sent = fake.calls_to("sendMessage", ok_only=True)[0]
    assert "parse_mode" not in sent.params  # plain text: nothing to escape or mis-parse
    typing = fake.calls_to("sendChatAction")
    assert typing
    assert typing[0].params == {"chat_id": ALICE, "action": "typing"}
    assert typing[0].at <= sent.at
    # The turn is Alice's, on her Telegram conversation.
    assert brain.requests[-1].messages[-1].text == "hello there"
    store = tg.gateway.store
    async with store.session() as session:
        identity = await session.scalar(select(Identity).where(Identity.channel == "telegram"))
        messages = (await session.scalars(select(Message).order_by(Message.id))).all()
    assert identity is not None
    assert (identity.external_id, identity.display_name) == (str(ALICE), "Alice")
    assert [(m.role.value, m.channel, m.text) for m in messages] == [
        ("user", "telegram", "hello there"),
        ("assistant", "telegram", "You said: hello there"),
    ]


async def test_typing_repeats_while_the_turn_runs(
    tg: RunningGateway, fake: FakeTelegram, brain: ScriptedBrain
) -> None:
    brain.gate = asyncio.Event()
    fake.push(fake.text_update(ALICE, "think hard"))
    # Telegram shows "typing" for 5 s: it must be sent again while the brain works.
    await fake.wait_for(lambda: len(fake.calls_to("sendChatAction")) >= 2, timeout=10)
    assert not fake.sent_texts(ALICE)
    brain.gate.set()
    await fake.wait_for(lambda: fake.sent_texts(ALICE))
    actions = len(fake.calls_to("sendChatAction"))
    await asyncio.sleep(0.3)
    assert len(fake.calls_to("sendChatAction")) == actions  # stopped with the reply


async def test_long_reply_is_split_cleanly(
    tg: RunningGateway, fake: FakeTelegram, brain: ScriptedBrain
) -> None:
    paragraphs = [
        f"Part {i} 😀: " + " ".join(f"word{j}" for j in range(120 + 7 * i)) + "." for i in range(14)
    ]
    reply = "\n\n".join(paragraphs)
    assert len(reply) > 3 * 4096
    brain.script = [reply]
    expected = split_message(reply, 4096)
    fake.push(fake.text_update(ALICE, "tell me everything"))
    await fake.wait_for(lambda: len(fake.sent_texts(ALICE)) >= len(expected), timeout=15)
    sent = fake.sent_texts(ALICE)
    assert sent == expected
    assert len(sent) >= 4
    assert all(utf16_len(part) <= 4096 for part in sent)
    # Cut only between paragraphs: the parts re-join to the reply exactly.
    assert "\n\n".join(sent) == reply


async def test_special_characters_arrive_as_written(
    tg: RunningGateway, fake: FakeTelegram, brain: ScriptedBrain
) -> None:
    reply = (
        'Tags <b>bold</b> & &amp; "quotes" *stars* _under_ [x](http://y) `code` ~s~ '
        "||spoiler|| \\back\\slash > # + - = | { } . ! 😀 👩\u200d👩\u200d👧 é\u0301"
    )
    brain.script = [reply]
    fake.push(fake.text_update(ALICE, "show me symbols"))
    await fake.wait_for(lambda: fake.sent_texts(ALICE))
    assert fake.sent_texts(ALICE) == [reply]


async def test_commands(tg: RunningGateway, fake: FakeTelegram, brain: ScriptedBrain) -> None:
    async def ask(text: str) -> str:
        before = len(fake.sent_texts(ALICE))
        fake.push(fake.text_update(ALICE, text, first_name="Alice"))
        await fake.wait_for(lambda: len(fake.sent_texts(ALICE)) > before, what=text)
        return fake.sent_texts(ALICE)[before]

    start = await ask("/start")
    assert start.startswith("Hi Alice! I'm Ada.")
    assert "/link" in start
    help_text = await ask("/help@fake_agentgw_bot")
    assert "/remember" in help_text
    assert "/persona" in help_text
    persona = await ask("/persona")
    assert persona.startswith("Ada\n\nYou are Ada, one persistent assistant")
    assert "##" not in persona

    assert await ask("/remember my sister is Ana") == "You said: remember my sister is Ana"
    assert await ask("/forget the old address") == "You said: forget the old address"
    # The memory layer gets them as "remember …" / "forget …" turns.
    assert [r.messages[-1].text for r in brain.requests] == [
        "remember my sister is Ana",
        "forget the old address",
    ]
    assert (await ask("/remember")).startswith("Say what, like this: /remember")
    assert (await ask("/link")).startswith("To link this chat with the web chat")
    assert await ask("/dance") == "I don't know /dance. /help lists what I can do."
    assert len(brain.requests) == 2


async def test_timezone_sets_the_persons_zone(
    tg: RunningGateway, fake: FakeTelegram, brain: ScriptedBrain
) -> None:
    async def ask(text: str) -> str:
        before = len(fake.sent_texts(ALICE))
        fake.push(fake.text_update(ALICE, text, first_name="Alice"))
        await fake.wait_for(lambda: len(fake.sent_texts(ALICE)) > before, what=text)
        return fake.sent_texts(ALICE)[before]

    # The gateway's zone is UTC (tests pin it) until Alice says hers.
    assert (await ask("/timezone")).startswith("Your time zone here is UTC.")
    assert (await ask("/timezone Mars/Olympus")).startswith(
        "Mars/Olympus is not a time zone I know."
    )
    assert (await ask("/timezone Asia/Tokyo")).startswith("Got it: your time zone is Asia/Tokyo.")
    assert (await ask("/timezone")).startswith("Your time zone here is Asia/Tokyo.")
    async with tg.gateway.store.reader() as session:
        assert (await session.scalars(select(Person.timezone))).all() == ["Asia/Tokyo"]
    await ask("good morning")
    clock = [b.text for b in brain.requests[-1].system if "message arrived on" in b.text]
    assert "(Asia/Tokyo, UTC+09:00)" in clock[0]


async def test_stranger_is_refused_once_and_nothing_is_stored(
    tg: RunningGateway, fake: FakeTelegram, brain: ScriptedBrain
) -> None:
    store = tg.gateway.store
    for text in ("hi", "hello?", "/start", "please"):
        fake.push(fake.text_update(STRANGER, text, first_name="Mallory"))

    async def refusals() -> int:
        async with store.session() as session:
            row = await session.get(AccessRefusal, ("telegram", str(STRANGER)))
            return row.count if row is not None else 0

    deadline = asyncio.get_running_loop().time() + 10
    while await refusals() < 4:
        assert asyncio.get_running_loop().time() < deadline, "refusals were not counted"
        await asyncio.sleep(0.05)
    await fake.wait_for(lambda: fake.sent_texts(STRANGER))
    await asyncio.sleep(0.2)  # room for a wrong second refusal to show up
    assert fake.sent_texts(STRANGER) == [REFUSAL]
    for model in (Person, Identity, Message, Turn):
        assert await count_rows(store, model) == 0, model
    assert brain.requests == []


async def test_retry_after_is_honoured(
    tg: RunningGateway, fake: FakeTelegram, brain: ScriptedBrain
) -> None:
    fake.retry_after("sendMessage", 1)
    fake.push(fake.text_update(ALICE, "are you there"))
    await fake.wait_for(lambda: fake.sent_texts(ALICE), timeout=10)
    assert fake.sent_texts(ALICE) == ["You said: are you there"]
    flooded, delivered = fake.calls_to("sendMessage")
    assert (flooded.status, delivered.status) == (429, 200)
    assert delivered.at - flooded.at >= 1.0  # waited as long as Telegram asked
    assert telegram_of(tg).limiter.retries == 1


async def test_a_duplicate_update_is_answered_once(
    tg: RunningGateway, fake: FakeTelegram, brain: ScriptedBrain
) -> None:
    update = fake.text_update(ALICE, "only once")
    fake.push(update)
    # Telegram delivering the same message again (a webhook retry, a restart).
    fake.push({**update, "update_id": update["update_id"] + 1000})
    fake.push(fake.text_update(ALICE, "and then this"))
    await fake.wait_for(lambda: len(fake.sent_texts(ALICE)) >= 2)
    await asyncio.sleep(0.2)
    assert fake.sent_texts(ALICE) == ["You said: only once", "You said: and then this"]
    assert len(brain.requests) == 2


async def test_rate_limit_and_voice_off(
    tmp_path: Path, fake: FakeTelegram, brain: ScriptedBrain
) -> None:
    # Every message counts, the voice note too: the fourth within a minute is refused.
    config = tg_config(tmp_path, fake, {"telegram": {"rate_per_minute": 3}})
    async with gateway(config, brain) as running:
        assert await telegram_of(running).wait_ready(10)
        fake.push(fake.voice_update(ALICE, b"OggS not really"))
        await fake.wait_for(lambda: fake.sent_texts(ALICE))
        assert fake.sent_texts(ALICE)[0].endswith("(voice_unavailable)")
        for text in ("one", "two", "three"):
            fake.push(fake.text_update(ALICE, text))
        await fake.wait_for(lambda: len(fake.sent_texts(ALICE)) >= 4)
        texts = fake.sent_texts(ALICE)[1:]
        assert sorted(texts) == sorted(
            [
                "You said: one",
                "You said: two",
                "Sorry — You're sending messages faster than I can answer; "
                "give me a moment. (rate_limited)",
            ]
        )
        assert [r.messages[-1].text for r in brain.requests] == ["one", "two"]


async def test_outage_blocks_neither_start_nor_webchat(
    tmp_path: Path, fake: FakeTelegram, brain: ScriptedBrain
) -> None:
    fake.outage = True
    async with gateway(tg_config(tmp_path, fake), brain) as running:
        telegram = telegram_of(running)
        # The gateway is up and serving while Telegram is down.
        assert telegram.state is TelegramState.CONNECTING
        reply = await webchat_turn(running, "browser-session-1", "webchat works")
        assert reply["text"] == "You said: webchat works"
        assert not await telegram.wait_ready(0.5)

        fake.outage = False
        assert await telegram.wait_ready(15)
        fake.push(fake.text_update(ALICE, "back online"))
        await fake.wait_for(lambda: fake.sent_texts(ALICE), timeout=10)

        # Down again while polling: getUpdates fails, PTB backs off, webchat carries on.
        failed_polls = len([c for c in fake.calls_to("getUpdates") if c.status == 500])
        fake.outage = True
        await fake.wait_for(
            lambda: len([c for c in fake.calls_to("getUpdates") if c.status == 500]) > failed_polls,
            timeout=10,
        )
        reply = await webchat_turn(running, "browser-session-1", "still fine")
        assert reply["text"] == "You said: still fine"
        fake.outage = False
        fake.push(fake.text_update(ALICE, "and again"))
        await fake.wait_for(lambda: len(fake.sent_texts(ALICE)) >= 2, timeout=15)
        assert fake.sent_texts(ALICE) == ["You said: back online", "You said: and again"]
    assert telegram.state.value == TelegramState.STOPPED.value  # closed with the app


async def test_webhook_mode_checks_the_secret(
    tmp_path: Path, fake: FakeTelegram, brain: ScriptedBrain
) -> None:
    webhook_url = "https://bot.example.test/telegram/webhook"
    config = tg_config(
        tmp_path,
        fake,
        {
            "telegram": {"mode": "webhook", "webhook_url": webhook_url},
            # Not loopback: every route needs the access token, except Telegram's.
            "server": {"host": "0.0.0.0", "access_token": "page-token-0123456789"},
        },
    )
    async with gateway(config, brain) as running:
        assert await telegram_of(running).wait_ready(10)
        assert fake.webhook["url"] == webhook_url
        assert fake.webhook["secret_token"] == SECRET
        assert fake.webhook["allowed_updates"] == ["message"]
        url = running.url("/telegram/webhook")
        update = fake.text_update(ALICE, "via webhook")

        for headers in ({SECRET_HEADER: "not-the-secret"}, {}):
            async with running.session.post(url, json=update, headers=headers) as response:
                assert response.status == 403
        async with running.session.post(
            url, json=update, headers={SECRET_HEADER: SECRET}
        ) as response:
            assert response.status == 200
        await fake.wait_for(lambda: fake.sent_texts(ALICE))
        assert fake.sent_texts(ALICE) == ["You said: via webhook"]
        assert [r.messages[-1].text for r in brain.requests] == ["via webhook"]
        assert not fake.calls_to("getUpdates")
        # The rest of the app still asks for the access token.
        async with running.session.get(running.url("/")) as response:
            assert response.status == 401


async def link_code(running: RunningGateway, session_id: str) -> dict[str, Any]:
    ws = await running.ws(session_id)
    try:
        await ws.receive_json(timeout=5)
        await ws.receive_json(timeout=5)
        await ws.send_json({"type": "link_code"})
        return await receive_type(ws, "link_code")
    finally:
        await ws.close()


async def person_of(store: Store, channel: str, external_id: str) -> int | None:
    async with store.session() as session:
        return await session.scalar(
            select(Identity.person_id).where(
                Identity.channel == channel, Identity.external_id == external_id
            )
        )


async def test_link_code_from_webchat_redeemed_on_telegram(
    tg: RunningGateway, fake: FakeTelegram
) -> None:
    store = tg.gateway.store
    fake.push(fake.text_update(ALICE, "hi before linking"))
    await fake.wait_for(lambda: fake.sent_texts(ALICE))
    issued = await link_code(tg, "browser-session-1")
    assert datetime.fromisoformat(issued["expires_at"]) > datetime.now(UTC)
    web_person = await person_of(store, "webchat", "browser-session-1")
    assert web_person is not None
    assert await person_of(store, "telegram", str(ALICE)) != web_person

    fake.push(fake.text_update(ALICE, f"/link {issued['code']}"))
    await fake.wait_for(lambda: len(fake.sent_texts(ALICE)) >= 2)
    assert fake.sent_texts(ALICE)[-1].startswith("Linked!")
    assert await person_of(store, "telegram", str(ALICE)) == web_person
    async with store.session() as session:
        people = {m.person_id for m in (await session.scalars(select(Message))).all()}
    assert people == {web_person}

    # Single use.
    fake.push(fake.text_update(ALICE, f"/link {issued['code']}"))
    await fake.wait_for(lambda: len(fake.sent_texts(ALICE)) >= 3)
    assert fake.sent_texts(ALICE)[-1].endswith("(link_code_invalid)")
    assert "already used" in fake.sent_texts(ALICE)[-1]


async def test_an_expired_link_code_is_refused(
    tmp_path: Path, fake: FakeTelegram, brain: ScriptedBrain
) -> None:
    config = tg_config(tmp_path, fake, {"links": {"code_ttl_s": 0.3}})
    async with gateway(config, brain) as running:
        assert await telegram_of(running).wait_ready(10)
        issued = await link_code(running, "browser-session-1")
        await asyncio.sleep(0.4)
        fake.push(fake.text_update(ALICE, f"/link {issued['code']}"))
        await fake.wait_for(lambda: fake.sent_texts(ALICE))
        assert "expired" in fake.sent_texts(ALICE)[0]
        assert fake.sent_texts(ALICE)[0].endswith("(link_code_invalid)")
        store = running.gateway.store
        assert await person_of(store, "telegram", str(ALICE)) != await person_of(
            store, "webchat", "browser-session-1"
        )


async def test_config_links_apply_at_start(
    tmp_path: Path, fake: FakeTelegram, brain: ScriptedBrain
) -> None:
    config = tg_config(
        tmp_path, fake, {"links": {"people": [f"telegram:{ALICE} webchat:alice-laptop"]}}
    )
    async with gateway(config, brain) as running:
        assert await telegram_of(running).wait_ready(10)
        fake.push(fake.text_update(ALICE, "hello from the phone"))
        await fake.wait_for(lambda: fake.sent_texts(ALICE))
        await webchat_turn(running, "alice-laptop", "hello from the laptop")
        store = running.gateway.store
        assert await person_of(store, "telegram", str(ALICE)) == await person_of(
            store, "webchat", "alice-laptop"
        )
        assert await count_rows(store, Person) == 1


async def test_a_failed_start_is_torn_down_and_retried(
    tmp_path: Path, fake: FakeTelegram, brain: ScriptedBrain
) -> None:
    fake.fail("setWebhook", 500)
    config = tg_config(
        tmp_path,
        fake,
        {"telegram": {"mode": "webhook", "webhook_url": "https://bot.example.test/hook"}},
    )
    async with gateway(config, brain) as running:
        telegram = telegram_of(running)
        assert await telegram.wait_ready(15)
        # Attempt one got as far as setWebhook, was torn down, and all of it ran again.
        assert [c.status for c in fake.calls_to("setWebhook")] == [500, 200]
        assert len(fake.calls_to("getMe")) == 2
        assert telegram.application.running


async def test_a_rejected_token_leaves_the_gateway_running(
    tmp_path: Path, fake: FakeTelegram, brain: ScriptedBrain
) -> None:
    path = tmp_path / "agentgw.toml"
    path.write_text(
        f'[telegram]\nenabled = true\nbase_url = "{fake.base_url}"\n'
        f'base_file_url = "{fake.base_file_url}"\n',
        encoding="utf-8",
    )
    config = load_config(
        path,
        env={"TELEGRAM_BOT_TOKEN": "111:not-the-token"},
        overrides={"store": {"data_dir": str(tmp_path / "data")}, "voice": {"enabled": False}},
    )
    async with gateway(config, brain) as running:
        telegram = telegram_of(running)
        await fake.wait_for(lambda: telegram.state is TelegramState.FAILED, timeout=10)
        assert not telegram.application.running
        assert len(fake.calls_to("getMe")) == 1  # a wrong token is not retried
        reply = await webchat_turn(running, "browser-session-1", "still here")
        assert reply["text"] == "You said: still here"


async def test_an_empty_reply_and_a_partial_reply_send_no_empty_message(
    tmp_path: Path, fake: FakeTelegram
) -> None:
    """The empty reply is an empty_reply error; a broken one sends its text, marked cut."""

    class BreaksBrain(ScriptedBrain):
        async def stream(self, request: BrainRequest) -> AsyncIterator[BrainEvent]:
            if request.messages[-1].text == "break":
                yield TextDelta("Half of it")
                raise BrainInterrupted("scripted: the answer broke off")
            async for event in super().stream(request):
                yield event

    brain = BreaksBrain(script=["  \n"])
    async with gateway(tg_config(tmp_path, fake), brain) as running:
        assert await telegram_of(running).wait_ready(10)
        fake.push(fake.text_update(ALICE, "say nothing"))
        await fake.wait_for(lambda: fake.sent_texts(ALICE), what="the empty reply's notice")
        fake.push(fake.text_update(ALICE, "break"))
        await fake.wait_for(lambda: len(fake.sent_texts(ALICE)) >= 2, what="the partial reply")
    empty, partial = fake.sent_texts(ALICE)
    assert empty.endswith("(empty_reply)")
    assert "nothing" in empty
    assert partial.startswith("Half of it […]")
    assert partial.endswith("(brain_interrupted)")
    assert all(text.strip() for text in fake.sent_texts(ALICE))
