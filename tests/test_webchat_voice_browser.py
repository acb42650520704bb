"""Speaking to the agent in a real browser, and the same person on Telegram.

Chromium gets a fake microphone that plays espeak-ng speech; the page's
push-to-talk button is held with the mouse and released. Real Whisper (tiny.en)
transcribes, the scripted brain answers, real Piper speaks the reply. Then the
page's "Link Telegram" code is redeemed with the real python-telegram-bot
against the fake Bot API, and the fact spoken in the browser is in the memory
block of the prompt of a Telegram turn."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
from playwright.async_api import Page, Response, expect

from gateway.brains.base import BlockKind
from gateway.brains.scripted import ScriptedBrain
from gateway.testing.fake_telegram import FakeTelegram
from tests.conftest import (
    espeak_wav,
    requires_chromium,
    screenshot,
)
from tests.test_telegram import ALICE, gateway, telegram_of, tg_config

pytestmark = [pytest.mark.slow, requires_chromium]

SPOKEN = "Please remember that my favourite colour is green."


@pytest.fixture(autouse=True)
def _timedelta_periods(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PTB_TIMEDELTA", "true")


@pytest.fixture
def browser_args(tmp_path: Path) -> list[str]:
    """A microphone that plays the spoken sentence once, then silence."""
    wav = espeak_wav(SPOKEN, tmp_path)
    return [
        "--use-fake-ui-for-media-stream",
        "--use-fake-device-for-media-stream",
        f"--use-file-for-fake-audio-capture={wav}%noloop",
        "--autoplay-policy=no-user-gesture-required",
    ]


async def hold_to_talk(page: Page, seconds: float) -> None:
    button = page.locator("#talk")
    await expect(button).to_be_visible()
    box = await button.bounding_box()
    assert box is not None
    await page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    await page.mouse.down()
    await expect(button).to_have_attribute("data-state", "recording")
    await expect(page.locator("#talk-text")).to_contain_text("Listening")
    await asyncio.sleep(seconds)
    await page.mouse.up()


async def test_spoken_in_the_browser_then_recalled_on_telegram(
    tmp_path: Path, brain: ScriptedBrain, page: Page
) -> None:
    brain.script = ["Noted: green it is. Anything else?"]
    audio: list[tuple[str, int]] = []

    async def on_response(response: Response) -> None:
        if "/api/voice/audio/" in response.url:
            body = await response.body()
            audio.append((response.headers.get("content-type", ""), len(body)))

    page.on("response", on_response)
    async with (
        FakeTelegram() as fake,
        gateway(tg_config(tmp_path, fake, {"voice": {"enabled": True}}), brain) as running,
    ):
        assert await telegram_of(running).wait_ready(10)
        await page.goto(running.url("/"))
        await expect(page.locator("#conn")).to_have_attribute("data-state", "open")

        # The espeak sentence lasts about three seconds; hold a little longer.
        await hold_to_talk(page, 4.0)
        user = page.locator("#log > li.msg.user .bubble")
        await expect(user).to_have_count(1, timeout=60_000)
        await expect(user.first).to_contain_text(re.compile("green", re.IGNORECASE))
        bot = page.locator("#log > li.msg.assistant .bubble")
        await expect(bot.last).to_have_text("Noted: green it is. Anything else?", timeout=60_000)
        await expect(page.locator("#talk")).to_have_attribute("data-state", "idle")
        for _ in range(100):
            if audio:
                break
            await asyncio.sleep(0.1)
        assert audio, "the page never fetched the reply audio"
        assert all(kind.startswith("audio/") and size > 1000 for kind, size in audio)
        await screenshot(page, "chat-push-to-talk.png")

        # The spoken message is stored once: a reload shows it once.
        await page.reload()
        await expect(page.locator("#conn")).to_have_attribute("data-state", "open")
        await expect(user).to_have_count(1)
        await expect(bot).to_have_count(1)

        # Link Telegram from the page, redeem the code on Telegram.
        await page.locator("#link-open").click()
        command = page.locator("#link-command")
        await expect(command).to_have_text(re.compile(r"^/link \S{6,}$"))
        await expect(page.locator("#link-expiry")).to_contain_text("works once")
        await screenshot(page, "chat-link-code.png")
        link = await command.text_content()
        assert link is not None

        async def say_on_telegram(text: str) -> str:
            before = len(fake.sent_texts(ALICE))
            fake.push(fake.text_update(ALICE, text))
            await fake.wait_for(lambda: len(fake.sent_texts(ALICE)) > before, timeout=60)
            return fake.sent_texts(ALICE)[-1]

        assert (await say_on_telegram(link)).startswith("Linked!")
        asked = len(brain.requests)
        await say_on_telegram("What is my favourite colour?")
        assert len(brain.requests) == asked + 1
        memory = [b.text for b in brain.requests[-1].system if b.kind is BlockKind.MEMORY]
        assert memory, "the Telegram turn got no memory block"
        assert "green" in memory[0].lower()


async def test_a_tap_is_not_sent_and_the_link_dialog_closes(
    tmp_path: Path, brain: ScriptedBrain, page: Page
) -> None:
    posted: list[str] = []
    page.on("request", lambda r: posted.append(r.url) if "/api/voice" in r.url else None)
    async with (
        FakeTelegram() as fake,
        gateway(tg_config(tmp_path, fake, {"voice": {"enabled": True}}), brain) as running,
    ):
        await page.goto(running.url("/"))
        await expect(page.locator("#conn")).to_have_attribute("data-state", "open")
        await page.locator("#talk").click()  # down and up at once
        await expect(page.locator("#talk-text")).to_have_text("Hold the button while you speak.")
        assert posted == []
        assert brain.requests == []

        await page.locator("#link-open").click()
        dialog = page.locator("#link-dialog")
        await expect(dialog).to_be_visible()
        await dialog.get_by_role("button", name="Done").click()
        await expect(dialog).to_be_hidden()


async def test_without_voice_there_is_no_talk_button(
    tmp_path: Path, brain: ScriptedBrain, page: Page
) -> None:
    async with FakeTelegram() as fake, gateway(tg_config(tmp_path, fake), brain) as running:
        await page.goto(running.url("/"))
        await expect(page.locator("#conn")).to_have_attribute("data-state", "open")
        await expect(page.locator("#talk")).to_be_hidden()
