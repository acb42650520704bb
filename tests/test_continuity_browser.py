"""The Focus page in Chromium: a focus and a decision said in chat are shown; an
update, a reversing decision and clearing the focus made in the page change the
next turn's prompt; a focus far too long is refused with a message, nothing changed.
(The 10 MB texts through the book: tests/test_continuity_turns.py.)"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from playwright.async_api import Browser, Dialog, Page, expect

from gateway.brains.scripted import ScriptedBrain
from memory.continuity.book import FOCUS_HEADER
from tests.conftest import RunningGateway, csp_reports, requires_chromium, screenshot
from tests.test_lessons_turns import persona_block, session
from tests.test_newcomer_browser import page_overflow
from tests.test_persona_loop import say

pytestmark = [pytest.mark.slow, requires_chromium]


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


async def test_focus_page_shows_updates_logs_and_clears(
    running: RunningGateway, brain: ScriptedBrain, page: Page
) -> None:
    reports = csp_reports(page)
    ws = await session(running, "focus-page-one")
    brain.script = ["Sure."]
    await say(ws, "Let's focus on the invoice export. We decided to use Postgres.", "p1")
    assert await running.gateway.router.drain(30)

    async def next_prompt() -> str:
        brain.script = ["OK."]
        await say(ws, "Next?", f"n{len(brain.requests)}")
        return persona_block(brain.requests[-1])

    await page.goto(running.url("/panel/focus"))
    await expect(page.locator("#focus")).to_have_attribute("data-state", "on")
    assert await page_overflow(page) <= 0
    await expect(page.locator("#focus .focus-text")).to_have_text("The invoice export")
    await expect(page.locator("#decisions tbody tr")).to_have_count(1)
    first = page.locator("#decisions tbody tr").first
    await expect(first.locator(".text")).to_have_text("Use Postgres")
    decision_id = await first.get_attribute("data-decision")
    assert decision_id is not None

    # An update: listed, and in the next prompt under the focus.
    await page.fill("#focus-update", "CSV encoding fixed")
    await page.click("#update-focus button[type=submit]")
    await expect(page.locator("#focus .updates")).to_contain_text("CSV encoding fixed")

    # A decision reversing the first: the old row says so, and is never edited.
    await page.fill("#decision-text", "Use SQLite")
    await page.fill("#decision-tags", "db")
    await page.fill("#decision-reverses", decision_id)
    await page.click("#log-decision button[type=submit]")
    await expect(page.locator("#decisions tbody tr")).to_have_count(2)
    old = page.locator(f'#decisions tr[data-decision="{decision_id}"]')
    await expect(old).to_have_attribute("data-state", "reversed")
    await expect(old.locator(".text")).to_have_text("Use Postgres")
    await expect(page.locator("#decisions tbody tr").first.locator(".links")).to_have_text(
        f"reverses #{decision_id}"
    )
    await screenshot(page, "panel-focus.png")
    block = await next_prompt()
    assert "The invoice export" in block
    assert "CSV encoding fixed" in block
    assert f"Use SQLite [db] (reverses #{decision_id})" in block

    # Far too long: refused with its reason, nothing changed.
    await page.fill("#focus-text", "x" * 5000)
    await page.click("#set-focus button[type=submit]")
    await expect(page.locator("#flash")).to_contain_text("at most 400 characters")
    await expect(page.locator("#focus .focus-text")).to_have_text("The invoice export")

    # Clear (confirmed): out of the page and the prompt.
    seen: list[str] = []

    async def accept(dialog: Dialog) -> None:
        seen.append(dialog.message)
        await dialog.accept()

    page.on("dialog", accept)
    await page.click("#clear-focus")
    await expect(page.locator("#focus")).to_have_attribute("data-state", "none")
    assert seen == ["Clear the focus?"]
    block = await next_prompt()
    assert FOCUS_HEADER not in block
    assert "Use SQLite" in block
    assert reports == []
    await ws.close()
