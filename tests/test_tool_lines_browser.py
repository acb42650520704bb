"""The memory tools' "looked up …" lines in a real browser (Debian Chromium driven
by playwright): shown while the turn runs, and shown again on the reply after a
reload, from the history, once each."""

from __future__ import annotations

import pytest
from playwright.async_api import Page, expect

from gateway.testing.fake_anthropic import FakeAnthropic
from tests.conftest import RunningGateway, requires_chromium
from tests.test_memory_tools import claude, fake
from tests.test_tool_lines_replay import searching
from tests.test_webchat_browser import open_chat

__all__ = ["claude", "fake"]  # the fixtures, imported for this module's tests

pytestmark = [pytest.mark.slow, requires_chromium]


async def test_tool_lines_are_shown_live_and_again_after_a_reload(
    claude: RunningGateway, fake: FakeAnthropic, page: Page
) -> None:
    fake.reply = searching("Nothing about Lena yet.")
    await open_chat(page, claude)
    await page.get_by_label("Message to Ada").fill("Where does my sister Lena live?")
    await page.keyboard.press("Enter")
    reply = page.locator("#log li.assistant").last
    # Two model rounds and a memory search: on a loaded 2-core machine that can
    # take longer than playwright's default 5 s, which is not what this asserts.
    await expect(reply.locator(".bubble")).to_have_text(
        "Let me check. \n\nNothing about Lena yet.", timeout=30_000
    )
    lines = reply.locator(".tool")
    await expect(lines).to_have_count(2)
    live = await lines.all_text_contents()
    assert live[0].startswith("looked up “Lena”")
    await expect(reply.locator(".tool.failed")).to_have_count(1)

    await page.reload()
    await expect(page.locator("#conn")).to_have_attribute("data-state", "open")
    again = page.locator("#log li.assistant").last
    await expect(again.locator(".bubble")).to_have_text("Let me check. \n\nNothing about Lena yet.")
    await expect(again.locator(".tool")).to_have_count(2)
    assert await again.locator(".tool").all_text_contents() == live
    await expect(again.locator(".tool.failed")).to_have_count(1)
    # Above the reply's text, as the live page drew them.
    order = await again.evaluate(
        "el => [...el.children].map(c => c.classList.contains('tool') ? 'tool' : c.className)"
    )
    assert order[:3] == ["tool", "tool", "bubble"]
