"""The Lessons page in Chromium: a correction made in chat is listed with its message;
editing, disabling and deleting it in the page change the next turn's prompt; a lesson
that is far too long is refused with a message and changes nothing.
(The 10 MB lesson through the API: tests/test_lessons_turns.py.)"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, Dialog, Page, expect

from gateway.brains.scripted import ScriptedBrain
from gateway.config import Config
from tests.conftest import RunningGateway, csp_reports, make_config, requires_chromium, screenshot
from tests.test_lessons_turns import LINKED, persona_block, session, settle
from tests.test_persona_loop import say

pytestmark = [pytest.mark.slow, requires_chromium]


@pytest.fixture
def config(tmp_path: Path) -> Config:
    return make_config(tmp_path, links=LINKED)


@pytest.fixture
async def page(browser: Browser) -> AsyncIterator[Page]:
    """conftest's page, except that the one 400 this test provokes is expected."""
    context = await browser.new_context(viewport={"width": 420, "height": 760})
    page = await context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    try:
        yield page
        unexpected = [e for e in errors if "WebSocket" not in e]
        assert unexpected == [
            "Failed to load resource: the server responded with a status of 400 (Bad Request)"
        ]
    finally:
        await context.close()


async def test_lessons_page_lists_edits_disables_and_deletes(
    running: RunningGateway, brain: ScriptedBrain, page: Page
) -> None:
    reports = csp_reports(page)
    ws = await session(running, "lessons-one")
    brain.script = ["Sure 😀"]
    await say(ws, "Please stop adding emojis.", "p1")
    await settle(running)

    async def next_prompt() -> str:
        brain.script = ["OK."]
        await say(ws, "Next?", f"n{len(brain.requests)}")
        return persona_block(brain.requests[-1])

    await page.goto(running.url("/panel/lessons"))
    row = page.locator("#lessons tbody tr").first
    await expect(row).to_have_attribute("data-state", "on")
    await expect(row.locator("input[name=text]")).to_have_value("Do not add emojis.")
    await expect(row.locator(".source")).to_contain_text("Please stop adding emojis.")
    await screenshot(page, "panel-lessons.png")

    # Edit in the page: the next prompt carries the new words.
    await row.locator("input[name=text]").fill("Never use emojis or emoticons.")
    await row.locator("button[type=submit]").click()
    await expect(page.locator("#lessons input[name=text]").first).to_have_value(
        "Never use emojis or emoticons."
    )
    block = await next_prompt()
    assert "- Never use emojis or emoticons." in block
    assert "Do not add emojis." not in block

    # Disable: kept in the list, out of the prompt.
    await page.locator("#lessons [data-action=disable]").first.click()
    await expect(page.locator("#lessons tbody tr").first).to_have_attribute("data-state", "off")
    assert "emoticons" not in await next_prompt()

    # Far too long: refused with its reason, nothing changed.
    await page.fill("#lesson-text", "x" * 5000)
    await page.click("#add-lesson button[type=submit]")
    await expect(page.locator("#flash")).to_contain_text("at most 400 characters")
    await expect(page.locator("#lessons tbody tr")).to_have_count(1)

    # A global lesson added in the page reaches the prompt.
    await page.fill("#lesson-text", "Sign off as Ada.")
    await page.click("#add-lesson button[type=submit]")
    await expect(page.locator("#lessons tbody tr")).to_have_count(2)
    assert "- Sign off as Ada." in await next_prompt()

    # Delete (confirmed in the dialog): gone from the page and the prompt.
    seen: list[str] = []

    async def accept(dialog: Dialog) -> None:
        seen.append(dialog.message)
        await dialog.accept()

    page.on("dialog", accept)
    await page.locator(
        '#lessons tr:has(input[value="Sign off as Ada."]) [data-action=delete]'
    ).click()
    await expect(page.locator("#lessons tbody tr")).to_have_count(1)
    assert seen
    assert "Delete lesson" in seen[0]
    assert "Sign off as Ada." not in await next_prompt()
    assert reports == []
    await ws.close()
