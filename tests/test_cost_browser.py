"""The cost panel in Chromium: a real turn (fake Claude returning usage) pushes the
month past 80 % of its budget; the page draws spend per day and per person as inline
SVG, the month's total against the budget, and the mode change — with nothing
loaded from outside the gateway."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.async_api import Page, Request, expect

from gateway.testing.fake_anthropic import FakeAnthropic
from tests.conftest import requires_chromium, screenshot
from tests.test_budget import Running, fake, say, start, stopper

pytestmark = [pytest.mark.slow, requires_chromium]

__all__ = ["fake", "stopper"]


async def test_the_cost_page_charts_spend_and_the_mode_change(
    tmp_path: Path, fake: FakeAnthropic, stopper: list[Running], page: Page
) -> None:
    running = await start(tmp_path, fake, 0.79995)
    stopper.append(running)
    fake.script = ["Lovely."] * 10
    await say(running, "My sister Clara plays the violin in an orchestra.")
    requests: list[str] = []

    def seen(request: Request) -> None:
        requests.append(request.url)

    page.on("request", seen)
    await page.goto(str(running.server.make_url("/panel/cost")))
    await expect(page.locator("#mode")).to_have_text("tight")
    await expect(page.locator("#budget-usd")).to_have_text("1.00")
    await expect(page.locator("#month-chart")).to_be_visible()
    # Today's bar (the seeded spend and the turn, one day) and one bar per person.
    await expect(page.locator("#day-chart rect.day-bar")).to_have_count(1)
    await expect(page.locator("#person-chart rect.person-bar")).to_have_count(2)
    await expect(page.locator("#changes tr.mode-change")).to_have_count(1)
    await expect(page.locator("#changes tr.mode-change")).to_contain_text("normal")
    await expect(page.locator("#changes tr.mode-change")).to_contain_text("tight")
    total = await page.locator("#month-usd").inner_text()
    assert float(total.split()[0]) > 0.8
    await expect(page.locator("nav a[href='/panel/cost']")).to_be_visible()
    await screenshot(page, "panel-cost.png")
    origin = str(running.server.make_url("/"))
    assert requests
    assert all(url.startswith(origin) for url in requests), requests
