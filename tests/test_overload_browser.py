"""The chat page (Debian Chromium through playwright) with a slow and a broken model:
"still waiting for the model…" until the first delta, and a reply that broke off
shown as a partial reply whose Retry brings the whole answer."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.async_api import Page, expect

from gateway.brains.base import BrainEvent, BrainRequest, TextDelta
from gateway.brains.scripted import ScriptedBrain
from gateway.errors import BrainInterrupted
from tests.conftest import RunningGateway, make_config, requires_chromium, start_gateway
from tests.test_webchat_protocol import HeldBrain

pytestmark = [pytest.mark.slow, requires_chromium]


@dataclass
class BreaksOnceBrain(ScriptedBrain):
    """Its first answer breaks off after one delta; later ones arrive whole."""

    broke: bool = False

    async def stream(self, request: BrainRequest) -> AsyncIterator[BrainEvent]:
        if not self.broke:
            self.broke = True
            yield TextDelta("Half an answer")
            raise BrainInterrupted("scripted: the answer broke off")
        async for event in super().stream(request):
            yield event


async def served(tmp_path: Path, brain: ScriptedBrain) -> AsyncIterator[RunningGateway]:
    config = make_config(tmp_path, brain={"waiting_notice_s": 0.1, "first_token_timeout_s": 30.0})
    server, session = await start_gateway(config, brain)
    try:
        yield RunningGateway(server, session)
    finally:
        await session.close()
        await server.close()


async def send(page: Page, running: RunningGateway, text: str) -> None:
    await page.goto(running.url("/"))
    await expect(page.locator("#conn")).to_have_attribute("data-state", "open")
    await page.get_by_label("Message to Ada").fill(text)
    await page.keyboard.press("Enter")


async def test_the_page_says_it_still_waits_for_the_model_until_the_first_delta(
    tmp_path: Path, page: Page
) -> None:
    brain = HeldBrain(script=["Here I am at last."])
    hold = brain.holds["hello?"] = asyncio.Event()
    async for running in served(tmp_path, brain):
        await send(page, running, "hello?")
        waiting = page.locator("#log .msg.assistant .waiting")
        await expect(waiting).to_contain_text("still waiting for the model…")
        hold.set()
        await expect(page.locator("#log .msg.assistant .bubble")).to_have_text("Here I am at last.")
        await expect(waiting).to_have_count(0)


async def test_a_broken_reply_shows_as_partial_and_its_retry_brings_the_answer(
    tmp_path: Path, page: Page
) -> None:
    brain = BreaksOnceBrain(script=["The whole answer, this time."])
    async for running in served(tmp_path, brain):
        await send(page, running, "tell me")
        partial = page.locator("#log .msg.assistant.partial")
        await expect(partial.locator(".bubble")).to_have_text("Half an answer")
        await expect(partial.locator(".meta")).to_contain_text("partial reply")
        await partial.get_by_role("button", name="Retry").click()
        await expect(page.locator("#log .msg.assistant .bubble")).to_have_text(
            "The whole answer, this time."
        )
        await expect(partial).to_have_count(0)
