"""The panel's System page in a real browser (Debian Chromium via playwright)."""

from __future__ import annotations

import pytest
from playwright.async_api import Page, expect

from gateway.brains.scripted import ScriptedBrain
from tests.conftest import RunningGateway, csp_reports, requires_chromium, screenshot
from tests.test_metrics import talk

pytestmark = [pytest.mark.slow, requires_chromium]


async def test_the_system_page_shows_turns_stages_and_readiness(
    running: RunningGateway, brain: ScriptedBrain, page: Page
) -> None:
    reports = csp_reports(page)
    await talk(running, brain, ["hello", "again", "once more"])
    await page.goto(running.url("/panel/system"))
    await expect(page.locator("#readiness")).to_contain_text("ok")
    await expect(page.locator("#turns")).to_contain_text("ok (webchat): 3")
    brain_row = page.locator("#stages tbody tr", has_text="brain_first_token")
    await expect(brain_row.locator("td.num").first).to_have_text("3")
    await expect(page.locator('[data-gauge="ready"] strong')).to_have_text("1")
    await expect(page.locator('nav a[aria-current="page"]')).to_have_text("System")
    await screenshot(page, "panel-system.png")
    assert reports == []
