"""The Upkeep page in a real browser (Debian Chromium via playwright), at a
phone's width: the calendar, the history, the monthly report as a table, and
"run now" adding a run that ends ok. Screenshots go to test-artifacts/."""

from __future__ import annotations

import pytest
from playwright.async_api import Browser, expect

from memory.jobs.base import Counts, JobContext
from memory.jobs.calendar import UpkeepCalendar
from tests.conftest import RunningGateway, csp_reports, requires_chromium, screenshot
from tests.test_newcomer_browser import PHONE, page_overflow, sized_page
from tests.test_upkeep_panel import calendar_of

pytestmark = [pytest.mark.slow, requires_chromium]


async def health_report(ctx: JobContext) -> Counts:
    ctx.report.update({"items": {"active": 12, "archived": 3, "cold": 1}, "index_bytes": 40960})
    return {"cold": 1}


async def test_the_upkeep_page_on_a_phone_and_run_now(
    running: RunningGateway, browser: Browser
) -> None:
    calendar = await calendar_of(running)
    # A monthly run leaves its report (the monthly body comes with another change:
    # here a body of the test's, run on the gateway's store and calendar settings).
    monthly = UpkeepCalendar(
        calendar.store,
        calendar.service,
        calendar.config,
        calendar.zone,
        {"monthly": health_report},
    )
    assert (await monthly.run("monthly")).status.value == "ok"

    page = await sized_page(browser, PHONE)
    reports = csp_reports(page)
    try:
        await page.goto(running.url("/panel/upkeep"))
        await expect(page.locator('nav a[aria-current="page"]')).to_have_text("Upkeep")
        hourly = page.locator('#jobs tr[data-job="hourly"]')
        await expect(hourly.locator("td.state")).to_contain_text("on time")
        # Every job has a body now, and a new store's jobs are not due at its start.
        await expect(page.locator('#jobs tr[data-job="monthly"] td.state')).to_contain_text(
            "on time"
        )
        runs = page.locator("#runs tbody tr")
        await expect(runs).to_have_count(2)
        await expect(page.locator("#report-table")).to_contain_text("items.active")
        await expect(page.locator("#report-table")).to_contain_text("40960")
        assert await page_overflow(page) <= 0
        await screenshot(page, "panel-upkeep-phone.png")

        await hourly.get_by_role("button", name="Run now").click()
        await expect(page.locator("#flash")).to_contain_text("hourly started")
        await expect(runs).to_have_count(3)
        newest = runs.first
        await expect(newest).to_contain_text("hourly")
        # The run may still be under way at the reload: look again until it ended.
        for _ in range(50):
            if await newest.get_attribute("data-status") == "ok":
                break
            await page.wait_for_timeout(100)
            await page.reload()
        await expect(newest).to_have_attribute("data-status", "ok")
        await expect(newest).to_contain_text("items seen")
        assert reports == []
    finally:
        await page.context.close()
