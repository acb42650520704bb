"""What a newcomer sees, in a real browser (Debian Chromium through playwright), at
a desktop (1280x800) and a phone (390x844) size (issue 27, items 5 and 6).

The chat's offline banner is one compact line that never covers a message and
can be dismissed; the header links to the panel. The panel's tables scroll
sideways inside their own frame with a visible cue, the page itself never does;
people are named ("Web visitor 3" or the name they gave), never a session id.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, Page, expect

from gateway.brains.offline import OfflineBrain
from gateway.brains.scripted import ScriptedBrain
from gateway.config import Config
from tests.conftest import (
    RunningGateway,
    make_config,
    requires_chromium,
    screenshot,
    start_gateway,
)
from tests.panel_support import PANEL_SECTIONS, chat, seed

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


# -- the panel ------------------------------------------------------------------------

PANEL_PAGES = (
    "/panel",
    "/panel/observations",
    "/panel/drift",
    "/panel/memory",
    "/panel/persona",
    "/panel/conversations",
)

# For every table: the nearest ancestor that scrolls sideways, its widths and whether
# its cue is shown.
TABLE_FRAMES = """() => [...document.querySelectorAll('table')].map(table => {
  let el = table.parentElement;
  while (el && el !== document.body) {
    const style = getComputedStyle(el);
    if (style.overflowX === 'auto' || style.overflowX === 'scroll') break;
    el = el.parentElement;
  }
  if (!el || el === document.body) return {id: table.id, frame: false};
  const cue = el.parentElement.querySelector(':scope > .scroll-cue');
  return {
    id: table.id,
    frame: true,
    overflows: el.scrollWidth > el.clientWidth + 1,
    cue: Boolean(cue) && getComputedStyle(cue).display !== 'none'
      && cue.getBoundingClientRect().height > 0,
    marked: el.dataset.overflow === 'true',
  };
})"""


@pytest.fixture
def panel_config(tmp_path: Path) -> Config:
    return make_config(tmp_path, **PANEL_SECTIONS)


@pytest.fixture
async def panel(panel_config: Config) -> AsyncIterator[tuple[RunningGateway, ScriptedBrain]]:
    brain = ScriptedBrain()
    server, session = await start_gateway(panel_config, brain)
    running = RunningGateway(server, session)
    try:
        await seed(running, brain)
        yield running, brain
    finally:
        await session.close()
        await server.close()


@pytest.mark.parametrize("size", SIZES)
async def test_panel_tables_scroll_in_a_frame_with_a_cue(
    browser: Browser, panel: tuple[RunningGateway, ScriptedBrain], size: dict[str, int]
) -> None:
    running, _ = panel
    page = await sized_page(browser, size)
    try:
        for path in (*PANEL_PAGES, "/panel/conversations/1"):
            await page.goto(running.url(path))
            await page.wait_for_load_state("load")
            assert await page_overflow(page) <= 0, path
            frames: list[dict[str, Any]] = await page.evaluate(TABLE_FRAMES)
            for frame in frames:
                assert frame["frame"], (path, frame)
                # A table wider than its frame says so; one that fits shows no cue.
                assert frame["cue"] == frame["overflows"] == frame["marked"], (path, frame)
            if size is PHONE and path in ("/panel/memory", "/panel/conversations"):
                assert any(f["overflows"] and f["cue"] for f in frames), path
            await screenshot(page, f"newcomer-panel{path.replace('/', '-')}-{size['width']}.png")
    finally:
        await page.context.close()


async def test_observe_now_from_the_phone(
    browser: Browser, panel: tuple[RunningGateway, ScriptedBrain]
) -> None:
    running, brain = panel
    brain.script = ["Tea, then."]
    await chat(running, ["I prefer tea."], session="panel-session-2")
    page = await sized_page(browser, PHONE)
    try:
        await page.goto(running.url("/panel/observations"))
        await expect(page.locator("#observer-runs")).to_contain_text("When the observer runs")
        row = page.locator("#unread tr", has_text="Web visitor 2")
        await expect(row).to_have_count(1)
        await row.get_by_role("button", name="Observe now").click()
        await expect(page.locator("#flash")).to_be_visible()
        await expect(page.locator("#flash")).to_contain_text(
            "Observed 2 messages of Web visitor 2 (rules)"
        )
        await expect(page.locator("#timeline")).to_contain_text("tea")
        await expect(page.locator("#unread tr", has_text="Web visitor 2")).to_have_count(0)
        assert await page_overflow(page) <= 0
        await screenshot(page, "newcomer-panel-observe-now-390.png")
    finally:
        await page.context.close()
