"""What a newcomer sees, in a real browser (Debian Chromium through playwright), at
a desktop (1280x800) and a phone (390x844) size (issue 27, items 5 and 6).

The chat's offline banner is one compact line that never covers a message and
can be dismissed; the header links to the panel. The panel's tables scroll
sideways inside their own frame with a visible cue, the page itself never does;
people are named ("Web visitor 3" or the name they gave), never a session id.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from playwright.async_api import Browser, Page, expect

from gateway.brains.offline import OfflineBrain
from gateway.config import Config
from tests.conftest import RunningGateway, requires_chromium, screenshot, start_gateway

pytestmark = [pytest.mark.slow, requires_chromium]

DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
SIZES = [pytest.param(DESKTOP, id="desktop"), pytest.param(PHONE, id="phone")]


@pytest.fixture
async def offline(config: Config) -> AsyncIterator[RunningGateway]:
    server, session = await start_gateway(config, OfflineBrain())
    try:
        yield RunningGateway(server, session)
    finally:
        await session.close()
        await server.close()


async def sized_page(browser: Browser, size: dict[str, int]) -> Page:
    context = await browser.new_context(viewport=size)  # type: ignore[arg-type]
    page = await context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.set_default_timeout(10_000)
    return page


async def page_overflow(page: Page) -> int:
    """How many pixels the page is wider than the window (0: no sideways scroll)."""
    extra: int = await page.evaluate(
        "() => Math.max(document.documentElement.scrollWidth, document.body.scrollWidth)"
        " - window.innerWidth"
    )
    return extra


def overlap(a: dict[str, float], b: dict[str, float]) -> bool:
    return not (
        a["x"] + a["width"] <= b["x"]
        or b["x"] + b["width"] <= a["x"]
        or a["y"] + a["height"] <= b["y"]
        or b["y"] + b["height"] <= a["y"]
    )


async def box(page: Page, selector: str) -> dict[str, float]:
    found: Any = await page.locator(selector).bounding_box()
    assert found is not None, selector
    return dict(found)


@pytest.mark.parametrize("size", SIZES)
async def test_the_offline_banner_is_compact_dismissible_and_links_the_panel(
    browser: Browser, offline: RunningGateway, size: dict[str, int]
) -> None:
    page = await sized_page(browser, size)
    try:
        await page.goto(offline.url("/"))
        await expect(page.locator("#conn")).to_have_attribute("data-state", "open")
        banner = page.locator("#offline-banner")
        await expect(banner).to_be_visible()
        await expect(banner).to_contain_text("No language model is configured")
        # One short line: a small share of a phone's screen, the details one tap away.
        assert (await box(page, "#offline-banner"))["height"] <= 0.08 * size["height"]
        await expect(page.locator("#offline-banner details")).not_to_have_attribute("open", "")
        panel = page.get_by_role("link", name="Panel")
        await expect(panel).to_have_attribute("href", "/panel")

        field = page.get_by_label("Message to Ada")
        for n in range(4):
            await field.fill(f"Message number {n}: what can you do?")
            await page.keyboard.press("Enter")
            await expect(page.locator("#log li.assistant:not(.streaming)")).to_have_count(n + 1)
        await page.locator("#log li.msg").last.scroll_into_view_if_needed()
        newest = await box(page, "#log li.msg >> nth=-1")
        assert not overlap(newest, await box(page, "#offline-banner"))
        assert await page_overflow(page) <= 0
        await screenshot(page, f"newcomer-chat-offline-{size['width']}.png")

        await page.get_by_role("button", name="Dismiss the offline notice").click()
        await expect(banner).to_be_hidden()
        await page.reload()
        await expect(page.locator("#conn")).to_have_attribute("data-state", "open")
        await expect(page.locator("#brain-name")).to_have_text("brain: offline")
        await expect(banner).to_be_hidden()
    finally:
        await page.context.close()
