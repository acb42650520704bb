"""The chat page in a real browser (Debian Chromium driven by playwright) against
the real app on a loopback port: streaming, history on reload, and delivery
exactly once across dropped connections and lost acks."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from playwright.async_api import Browser, Page, expect
from sqlalchemy import select

from gateway.brains.offline import OfflineBrain
from gateway.config import Config
from gateway.errors import BrainOverloaded
from gateway.messages import TurnEvent, TurnEventKind
from gateway.store import Store
from gateway.store.models import Person
from gateway.store.repo import Address, StoredInbound, conversation_history, store_inbound
from tests.conftest import RunningGateway, make_config, requires_chromium, screenshot, start_gateway
from tests.test_webchat_protocol import HeldBrain

pytestmark = [
    pytest.mark.slow,
    requires_chromium,
]


@pytest.fixture
def brain() -> HeldBrain:
    return HeldBrain()


async def open_chat(page: Page, running: RunningGateway) -> None:
    await page.goto(running.url("/"))
    await expect(page.locator("#conn")).to_have_attribute("data-state", "open")


async def bubbles(page: Page) -> list[tuple[str, str]]:
    """(role, text) of every message on the page, top to bottom."""
    rows: list[Any] = await page.eval_on_selector_all(
        "#log > li.msg",
        "els => els.map(el => [el.classList.contains('user') ? 'user' : 'assistant',"
        " el.querySelector('.bubble').textContent])",
    )
    return [(role, text) for role, text in rows]


async def outbox(page: Page) -> dict[str, Any]:
    box: dict[str, Any] = await page.evaluate(
        "() => JSON.parse(localStorage.getItem("
        "'agentgw.outbox.' + localStorage.getItem('agentgw.session')) || '{}')"
    )
    return box


class FrameLog:
    """Every JSON frame a page receives over its WebSockets, in order."""

    def __init__(self, page: Page) -> None:
        self.frames: list[dict[str, Any]] = []
        self._arrived = asyncio.Event()
        page.on("websocket", lambda ws: ws.on("framereceived", self._on_frame))

    def _on_frame(self, payload: str | bytes) -> None:
        if isinstance(payload, str):
            self.frames.append(json.loads(payload))
            self._arrived.set()

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [f for f in self.frames if f["type"] == kind]

    async def wait_for(self, kind: str, count: int = 1, timeout: float = 10) -> None:
        async with asyncio.timeout(timeout):
            while len(self.of_type(kind)) < count:
                self._arrived.clear()
                await self._arrived.wait()


def drop_after_store(
    running: RunningGateway, monkeypatch: pytest.MonkeyPatch, *, refuse_after: bool = False
) -> list[StoredInbound]:
    """The first message is stored, then every socket closes before the page
    hears of it (no ack, no echo); with ``refuse_after`` reconnects are refused
    until the test undoes the monkeypatch."""
    dropped: list[StoredInbound] = []
    webchat = running.gateway.webchat

    async def refuse(request: web.Request) -> web.WebSocketResponse:
        raise web.HTTPServiceUnavailable(text="down for the test")

    async def store_then_drop(
        store: Store, address: Address, text: str, received_at: datetime, client_id: str | None
    ) -> StoredInbound:
        stored = await store_inbound(store, address, text, received_at, client_id)
        if not dropped:
            dropped.append(stored)
            if refuse_after:
                monkeypatch.setattr(webchat, "handle", refuse)
            await webchat.close_all()
        return stored

    # Replace the name the router calls, so the drop falls between store and echo.
    monkeypatch.setattr("gateway.router.store_inbound", store_then_drop)
    return dropped


async def stored_texts(running: RunningGateway, page: Page) -> list[tuple[str, str]]:
    session: str = await page.evaluate("() => localStorage.getItem('agentgw.session')")
    address = await running.gateway.router.address("webchat", session)
    entries = await conversation_history(running.gateway.store, address.conversation_id)
    return [(e.role.value, e.text) for e in entries]


async def test_streams_a_reply_and_shows_history_after_reload(
    running: RunningGateway, brain: HeldBrain, page: Page
) -> None:
    release = asyncio.Event()
    reply = "Hello! This reply arrives in pieces, streamed as it is written."
    brain.script = [reply, "Two lines, noted."]
    brain.holds = {"Hello Ada": release}
    brain.hold_after_first_delta = True
    brain.chunk_chars = 14

    await open_chat(page, running)
    await expect(page.locator("h1")).to_have_text("Ada")
    await expect(page.locator("#brain-name")).to_have_text("brain: scripted")
    await expect(page.locator("#offline-banner")).to_be_hidden()
    await expect(page.get_by_label("Message to Ada")).to_be_focused()

    await page.get_by_label("Message to Ada").fill("Hello Ada")
    await page.keyboard.press("Enter")
    await asyncio.wait_for(brain.streamed.wait(), 10)

    streaming = page.locator("#log li.assistant.streaming")
    await expect(streaming.locator(".bubble")).to_have_text(reply[:14])
    await expect(streaming).to_have_attribute("aria-busy", "true")
    await expect(page.locator("#log")).to_have_attribute("aria-live", "polite")
    await screenshot(page, "webchat-streaming.png")

    release.set()
    done = page.locator("#log li.assistant:not(.streaming) .bubble")
    await expect(done).to_have_text(reply)
    await expect(page.locator("#log li.assistant.streaming")).to_have_count(0)

    # Shift+Enter is a new line, Enter sends.
    box = page.get_by_label("Message to Ada")
    await box.type("line one")
    await page.keyboard.press("Shift+Enter")
    await box.type("line two")
    await expect(box).to_have_value("line one\nline two")
    await page.keyboard.press("Enter")
    await expect(done).to_have_count(2)
    await expect(box).to_have_value("")

    expected = [
        ("user", "Hello Ada"),
        ("assistant", reply),
        ("user", "line one\nline two"),
        ("assistant", "Two lines, noted."),
    ]
    assert await bubbles(page) == expected
    await screenshot(page, "webchat-conversation.png")
    await page.emulate_media(color_scheme="dark")
    await page.set_viewport_size({"width": 1100, "height": 700})
    await screenshot(page, "webchat-desktop-dark.png")

    await page.reload()
    await expect(page.locator("#conn")).to_have_attribute("data-state", "open")
    await expect(page.locator("#log li.assistant .bubble")).to_have_count(2)
    assert await bubbles(page) == expected
    assert await outbox(page) == {}
    assert await stored_texts(running, page) == expected
    assert len(brain.requests) == 2


async def test_message_typed_while_disconnected_arrives_once_even_across_a_reload(
    running: RunningGateway,
    brain: HeldBrain,
    page: Page,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    webchat = running.gateway.webchat
    await open_chat(page, running)

    async def refuse(request: web.Request) -> web.WebSocketResponse:
        raise web.HTTPServiceUnavailable(text="down for the test")

    monkeypatch.setattr(webchat, "handle", refuse)
    await webchat.close_all()
    await expect(page.locator("#conn")).to_have_attribute("data-state", "waiting")
    await expect(page.locator("#reconnect")).to_be_visible()

    await page.get_by_label("Message to Ada").fill("sent while offline")
    await page.keyboard.press("Enter")
    pending = page.locator("#log li.user.pending")
    await expect(pending).to_have_count(1)
    await expect(pending.locator(".meta")).to_contain_text("not sent yet")
    box = await outbox(page)
    assert [entry["text"] for entry in box.values()] == ["sent while offline"]
    await screenshot(page, "webchat-disconnected.png")

    # A reload keeps the unsent message: it lives in localStorage.
    await page.reload()
    await expect(page.locator("#log li.user.pending .bubble")).to_have_text("sent while offline")
    assert len(brain.requests) == 0

    monkeypatch.undo()
    # The page comes back on its own (capped backoff) and sends the outbox.
    reply = page.locator("#log li.assistant:not(.streaming) .bubble")
    await expect(reply).to_have_text("You said: sent while offline", timeout=20_000)
    await expect(page.locator("#conn")).to_have_attribute("data-state", "open")
    await expect(page.locator("#log li.user.pending")).to_have_count(0)
    expected = [("user", "sent while offline"), ("assistant", "You said: sent while offline")]
    assert await bubbles(page) == expected
    assert await outbox(page) == {}
    assert await stored_texts(running, page) == expected
    assert [r.messages[-1].text for r in brain.requests] == ["sent while offline"]


async def test_lost_ack_is_resent_and_shown_once(
    running: RunningGateway,
    brain: HeldBrain,
    page: Page,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    received = FrameLog(page)
    dropped = drop_after_store(running, monkeypatch)
    await open_chat(page, running)
    await page.get_by_label("Message to Ada").fill("is this stored?")
    await page.keyboard.press("Enter")

    reply = page.locator("#log li.assistant:not(.streaming) .bubble")
    await expect(reply).to_have_text("You said: is this stored?", timeout=20_000)
    assert len(dropped) == 1
    # The socket died before the ack or the echo: the page learned from the
    # history of its next connection that the message is stored.
    assert received.of_type("ack") == []
    assert received.of_type("message") == []
    expected = [("user", "is this stored?"), ("assistant", "You said: is this stored?")]
    assert await bubbles(page) == expected
    user = page.locator("#log li.user")
    await expect(user).to_have_attribute("data-message-id", str(dropped[0].message_id))
    assert await outbox(page) == {}
    assert await stored_texts(running, page) == expected
    assert len(brain.requests) == 1


async def test_reply_ahead_of_history_stays_below_its_message(
    running: RunningGateway,
    brain: HeldBrain,
    page: Page,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The lost-ack case with the race CI once hit, made certain: the reconnected
    # socket is subscribed before it reads the history, so the turn's deltas and
    # its reply reach the page while the message is still unsent on it.
    received = FrameLog(page)
    dropped = drop_after_store(running, monkeypatch)
    reconnected = asyncio.Event()
    brain.holds = {"in which order?": reconnected}
    real_history = conversation_history

    async def history_after_reply(*args: Any, **kwargs: Any) -> list[Any]:
        if dropped:
            reconnected.set()
            await received.wait_for("reply", timeout=20)
        return await real_history(*args, **kwargs)

    monkeypatch.setattr("channels.webchat.conversation_history", history_after_reply)
    await open_chat(page, running)
    await page.get_by_label("Message to Ada").fill("in which order?")
    await page.keyboard.press("Enter")

    await received.wait_for("history", count=2, timeout=20)
    expected = [("user", "in which order?"), ("assistant", "You said: in which order?")]
    user = page.locator("#log li.user")
    await expect(user).to_have_attribute("data-message-id", str(dropped[0].message_id))
    await expect(user).not_to_have_class("msg user pending")
    await expect(user).to_have_attribute("data-status", "replied")
    assert await bubbles(page) == expected
    assert await outbox(page) == {}
    assert await stored_texts(running, page) == expected
    assert len(brain.requests) == 1


async def test_failed_turn_shows_its_code_and_retry_answers_it(
    running: RunningGateway, brain: HeldBrain, page: Page
) -> None:
    brain.script = [BrainOverloaded("overloaded"), "Here I am after all."]
    await open_chat(page, running)
    await page.get_by_label("Message to Ada").fill("are you there?")
    await page.keyboard.press("Enter")

    note = page.locator("#log li.user .note")
    await expect(note.locator("code")).to_have_text("brain_overloaded")
    await expect(page.locator("#log li.assistant")).to_have_count(0)
    await screenshot(page, "webchat-failed.png")

    # The failure survives a reload (it comes from the stored turn).
    await page.reload()
    await expect(note.locator("code")).to_have_text("brain_overloaded")

    await note.get_by_role("button", name="Retry").click()
    reply = page.locator("#log li.assistant:not(.streaming) .bubble")
    await expect(reply).to_have_text("Here I am after all.")
    await expect(note).to_have_count(0)
    assert await bubbles(page) == [
        ("user", "are you there?"),
        ("assistant", "Here I am after all."),
    ]
    assert len(brain.requests) == 2


async def test_offline_brain_shows_a_banner(config: Config, page: Page) -> None:
    server, session = await start_gateway(config, OfflineBrain())
    running = RunningGateway(server, session)
    try:
        await open_chat(page, running)
        await expect(page.locator("#brain-name")).to_have_text("brain: offline")
        banner = page.locator("#offline-banner")
        await expect(banner).to_be_visible()
        await expect(banner).to_contain_text("No language model is configured")
        await page.get_by_label("Message to Ada").fill("What can you do?")
        await page.keyboard.press("Enter")
        reply = page.locator("#log li.assistant:not(.streaming) .bubble")
        await expect(reply).to_contain_text("No language model is configured")
        await screenshot(page, "webchat-offline-brain.png")
    finally:
        await session.close()
        await server.close()


async def test_resent_outbox_message_is_deduplicated_by_the_server(
    tmp_path: Path, browser: Browser, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With history this short, the reconnecting page sees only the reply, not
    # the stored message it never heard about: it must resend it.
    config = make_config(tmp_path, webchat={"history_on_connect": 1})
    brain = HeldBrain()
    server, session = await start_gateway(config, brain)
    running = RunningGateway(server, session)
    context = await browser.new_context(viewport={"width": 420, "height": 760})
    page = await context.new_page()
    received = FrameLog(page)
    replied = asyncio.Event()

    async def on_event(event: TurnEvent) -> None:
        if event.kind is TurnEventKind.REPLY:
            replied.set()

    try:
        await open_chat(page, running)
        session_id: str = await page.evaluate("() => localStorage.getItem('agentgw.session')")
        address = await running.gateway.router.address("webchat", session_id)
        unsubscribe = running.gateway.hub.subscribe(address.conversation_id, on_event)
        dropped = drop_after_store(running, monkeypatch, refuse_after=True)
        await page.get_by_label("Message to Ada").fill("resend me")
        await page.keyboard.press("Enter")
        # Let the turn finish while the page is away, then let it back in.
        await asyncio.wait_for(replied.wait(), 10)
        unsubscribe()
        monkeypatch.undo()
        # Back now, not after the backoff: what the Reconnect button does, without
        # racing the page's own retry (which may already be on its way, and then
        # hides the button).
        await page.evaluate("() => window.dispatchEvent(new Event('online'))")

        reply = page.locator("#log li.assistant:not(.streaming) .bubble")
        await expect(reply).to_have_text("You said: resend me")
        await expect(page.locator("#log li.user.pending")).to_have_count(0)
        await received.wait_for("reply")
        acks = received.of_type("ack")
        assert acks == [
            {
                "type": "ack",
                "client_id": acks[0]["client_id"],
                "message_id": dropped[0].message_id,
                "duplicate": True,
            }
        ]
        # The replayed reply and the one in history are the same message, shown once.
        (replayed,) = received.of_type("reply")
        assert replayed["reply_to"] == dropped[0].message_id
        (history,) = [f for f in received.of_type("history") if f["messages"]]
        assert [m["message_id"] for m in history["messages"]] == [replayed["message_id"]]
        expected = [("user", "resend me"), ("assistant", "You said: resend me")]
        assert await bubbles(page) == expected
        assert await outbox(page) == {}
        assert await stored_texts(running, page) == expected
        assert len(brain.requests) == 1
    finally:
        await context.close()
        await session.close()
        await server.close()


async def test_reconnect_mid_stream_continues_the_same_bubble(
    running: RunningGateway, brain: HeldBrain, page: Page
) -> None:
    release = asyncio.Event()
    reply = "A long answer that is cut off by a dropped connection, then finished."
    brain.script = [reply]
    brain.holds = {"go on": release}
    brain.hold_after_first_delta = True
    brain.chunk_chars = 16
    received = FrameLog(page)
    await open_chat(page, running)
    await page.get_by_label("Message to Ada").fill("go on")
    await page.keyboard.press("Enter")
    await asyncio.wait_for(brain.streamed.wait(), 10)
    bubble = page.locator("#log li.assistant.streaming .bubble")
    await expect(bubble).to_have_text(reply[:16])

    await running.gateway.webchat.close_all()
    await received.wait_for("hello", count=2)
    await expect(page.locator("#conn")).to_have_attribute("data-state", "open")
    await received.wait_for("history", count=2)
    in_flight = received.of_type("history")[-1]["in_flight"]
    assert in_flight is not None
    assert in_flight["text"] == reply[:16]
    # The catch-up replaced the text: it is not doubled.
    await expect(bubble).to_have_text(reply[:16])

    release.set()
    await expect(page.locator("#log li.assistant .bubble")).to_have_text([reply])
    assert await bubbles(page) == [("user", "go on"), ("assistant", reply)]
    assert len(brain.requests) == 1


async def test_two_tabs_of_one_session_show_each_message_once(
    running: RunningGateway, browser: Browser
) -> None:
    context = await browser.new_context(viewport={"width": 420, "height": 760})
    try:
        first = await context.new_page()
        await open_chat(first, running)
        second = await context.new_page()
        await open_chat(second, running)
        await first.get_by_label("Message to Ada").fill("seen by both")
        await first.keyboard.press("Enter")
        expected = [("user", "seen by both"), ("assistant", "You said: seen by both")]
        for tab in (first, second):
            done = tab.locator("#log li.assistant:not(.streaming) .bubble")
            await expect(done).to_have_text(["You said: seen by both"])
            assert await bubbles(tab) == expected
    finally:
        await context.close()


async def test_rate_limited_message_is_held_with_its_code(tmp_path: Path, browser: Browser) -> None:
    config = make_config(tmp_path, webchat={"rate_per_minute": 1})
    server, session = await start_gateway(config, HeldBrain())
    running = RunningGateway(server, session)
    context = await browser.new_context(viewport={"width": 420, "height": 760})
    try:
        page = await context.new_page()
        await open_chat(page, running)
        box = page.get_by_label("Message to Ada")
        await box.fill("first")
        await page.keyboard.press("Enter")
        await expect(page.locator("#log li.assistant:not(.streaming)")).to_have_count(1)
        await box.fill("second")
        await page.keyboard.press("Enter")

        held = page.locator("#log li.user[data-status='held']")
        await expect(held.locator(".note code")).to_have_text("rate_limited")
        await expect(held.get_by_role("button", name="Retry")).to_be_visible()
        assert [entry["text"] for entry in (await outbox(page)).values()] == ["second"]
        await screenshot(page, "webchat-rate-limited.png")

        # Still held after a reload (the outbox keeps it), until discarded.
        await page.reload()
        await expect(held.locator(".note code")).to_have_text("rate_limited")
        await held.get_by_role("button", name="Discard").click()
        await expect(held).to_have_count(0)
        assert await outbox(page) == {}
        assert await stored_texts(running, page) == [
            ("user", "first"),
            ("assistant", "You said: first"),
        ]
    finally:
        await context.close()
        await session.close()
        await server.close()


async def test_the_page_tells_the_gateway_its_time_zone(
    running: RunningGateway, browser: Browser
) -> None:
    # The gateway's own zone is UTC (tests pin it); the browser is in Tokyo.
    context = await browser.new_context(
        viewport={"width": 420, "height": 760}, timezone_id="Asia/Tokyo"
    )
    try:
        page = await context.new_page()
        await open_chat(page, running)
        await page.get_by_label("Message to Ada").fill("what time is it for me?")
        await page.keyboard.press("Enter")
        await expect(page.locator("#log li.assistant:not(.streaming)")).to_have_count(1)
        async with running.gateway.store.reader() as session:
            zones = (await session.scalars(select(Person.timezone))).all()
        assert zones == ["Asia/Tokyo"]
    finally:
        await context.close()
