"""The triggers panel in Chromium: real webchat turns set two triggers; the page lists
them as upcoming, and its Cancel button cancels one (the other stays upcoming)."""

from __future__ import annotations

import pytest
from playwright.async_api import Page, expect

from tests.conftest import RunningGateway, requires_chromium, screenshot
from tests.panel_support import chat

pytestmark = [pytest.mark.slow, requires_chromium]


async def test_triggers_are_listed_and_one_is_cancelled_with_its_button(
    running: RunningGateway, page: Page
) -> None:
    await chat(
        running,
        ["My job interview is the day after tomorrow, wish me luck", "I swim in 3 weeks"],
    )
    await page.goto(running.url("/panel/triggers"))
    upcoming = page.locator("#upcoming tbody tr")
    await expect(upcoming).to_have_count(2)
    await expect(page.locator("#upcoming")).to_contain_text("the day after tomorrow")
    await expect(page.locator("#cancelled")).to_contain_text("None.")
    await screenshot(page, "panel-triggers.png")

    page.on("dialog", lambda dialog: dialog.accept())
    interview = upcoming.filter(has_text="job interview")
    await interview.locator("button[data-action=cancel]").click()
    await expect(page.locator("#cancelled tbody tr")).to_have_count(1)
    await expect(page.locator("#cancelled")).to_contain_text("job interview")
    await expect(page.locator("#upcoming tbody tr")).to_have_count(1)
    await expect(page.locator("#upcoming")).to_contain_text("I swim in 3 weeks")

    api = await running.session.get(running.url("/api/triggers"))
    data = await api.json()
    assert [t["context"] for t in data["cancelled"]] == [
        "My job interview is the day after tomorrow, wish me luck"
    ]
    assert data["cancelled"][0]["cancelled_by"] is None  # by the panel, not a message
