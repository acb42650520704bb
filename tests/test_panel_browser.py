"""The panel in a real browser (Debian Chromium via playwright) on a store seeded
through real turns: every page shows its data, and a memory edit, a rule
confirmation and a persona rollback made in the UI change the next turn's prompt.
Screenshots of every page go to test-artifacts/."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.async_api import Browser, Dialog, Page, expect

from gateway.brains.base import BlockKind
from gateway.brains.scripted import ScriptedBrain
from gateway.config import Config
from tests.conftest import (
    RunningGateway,
    csp_reports,
    make_config,
    requires_chromium,
    screenshot,
)
from tests.panel_support import PANEL_SECTIONS, SEED_MESSAGES, chat, seed

pytestmark = [pytest.mark.slow, requires_chromium]


@pytest.fixture
def config(tmp_path: Path) -> Config:
    return make_config(tmp_path, **PANEL_SECTIONS)


@pytest.fixture
async def seeded(running: RunningGateway, brain: ScriptedBrain) -> RunningGateway:
    await seed(running, brain)
    return running


def block(brain: ScriptedBrain, kind: BlockKind) -> str:
    return "\n".join(b.text for b in brain.requests[-1].system if b.kind is kind)


def accept_dialogs(page: Page, seen: list[str]) -> None:
    async def on_dialog(dialog: Dialog) -> None:
        seen.append(dialog.message)
        await dialog.accept()

    page.on("dialog", on_dialog)


async def test_every_page_shows_its_data(seeded: RunningGateway, page: Page) -> None:
    await page.goto(seeded.url("/panel"))
    await expect(page.locator('[data-count="turns"] strong')).to_have_text(str(len(SEED_MESSAGES)))
    await expect(page.locator('[data-count="pending_rules"] strong')).to_have_text("1")
    await screenshot(page, "panel-overview.png")

    await page.goto(seeded.url("/panel/observations"))
    observations = page.locator("#timeline li.observation")
    await expect(observations.first).to_be_visible()
    await expect(page.locator("#timeline")).to_contain_text("Anastasia")
    await screenshot(page, "panel-observations.png")
    await page.select_option("select[name=priority]", "low")
    await page.click("form.filters button[type=submit]")
    await expect(page).to_have_url(re.compile(r"priority=low"))
    for priority in await observations.evaluate_all("els => els.map(e => e.dataset.priority)"):
        assert priority == "low"

    await page.goto(seeded.url("/panel/drift"))
    chart = page.locator("#drift-chart svg")
    await expect(chart).to_be_visible()
    await expect(chart.locator("circle.point")).to_have_count(len(SEED_MESSAGES))
    await expect(chart.locator("line.threshold")).to_have_count(3)
    assert await chart.locator("line.action").count() >= 1, "no anchor marked"
    await chart.locator("circle.point").last.hover()
    tip = page.locator("#drift-chart .tip")
    await expect(tip).to_be_visible()
    await expect(tip).to_contain_text("delighted")  # the drifting reply
    await expect(tip).to_contain_text("judge local")
    dimension = chart.locator(".dim-voice")
    await expect(dimension).to_have_attribute("visibility", "hidden")
    await page.check('input[data-dimension="voice"]')
    await expect(dimension).to_have_attribute("visibility", "visible")
    await screenshot(page, "panel-drift.png")

    await page.goto(seeded.url("/panel/memory"))
    await expect(page.locator("#items tbody tr")).not_to_have_count(0)
    await page.fill("input[name=q]", "Anastasia")
    await page.select_option("select[name=type]", "fact")
    await page.click("form.filters button[type=submit]")
    rows = page.locator("#items tbody tr[data-item]")
    await expect(rows.first).to_contain_text("Anastasia")
    for text in await rows.all_inner_texts():
        assert "fact" in text
    await screenshot(page, "panel-memory.png")

    await page.goto(seeded.url("/panel/conversations"))
    turns = page.locator("#turns tbody tr[data-turn]")
    await expect(turns).to_have_count(len(SEED_MESSAGES))
    await expect(page.locator("#turns")).to_contain_text("replied")
    await expect(page.locator("#turns [data-action-kind]").first).to_be_visible()
    await screenshot(page, "panel-conversations.png")
    # The newest turn recalled the sister from the Memory Pack: its trace says why.
    await turns.first.locator("a[title='why these memories']").click()
    await expect(page.locator("#trace tbody tr[data-decision=kept]").first).to_be_visible()
    await expect(page.locator("#trace")).to_contain_text("Anastasia")
    await screenshot(page, "panel-memory-pack.png")

    await page.goto(seeded.url("/panel/persona"))
    await expect(page.locator("#traits svg rect.bar")).to_have_count(6)
    await expect(page.locator("#hard-rules")).to_contain_text("Never use emojis")
    await expect(page.locator("#pending")).to_contain_text("Always answer in English")
    await expect(page.locator("#identity")).to_contain_text("Ada")
    await screenshot(page, "panel-persona.png")


async def test_memory_edit_archive_and_delete_in_the_ui(
    seeded: RunningGateway, brain: ScriptedBrain, page: Page
) -> None:
    dialogs: list[str] = []
    accept_dialogs(page, dialogs)
    await page.goto(seeded.url("/panel/memory?q=sister+is+called&type=fact&status=active"))
    await page.locator("#items tbody tr[data-item] a").first.click()
    await page.fill("#content", "My sister is called Natasha and she loves tiles.")
    await page.click("#edit button[type=submit]")
    await expect(page.locator("h1")).to_have_text(re.compile(r"Memory item \d+"))
    await expect(page.locator("#content")).to_have_value(
        "My sister is called Natasha and she loves tiles."
    )
    await expect(page.locator("#chain li")).to_have_count(2)
    await screenshot(page, "panel-memory-item.png")

    await chat(seeded, ["What does my sister love?"])
    assert "Natasha and she loves tiles" in block(brain, BlockKind.MEMORY)

    await page.get_by_role("button", name="Archive").click()
    await expect(page.locator("dl.facts")).to_contain_text("archived")
    await page.get_by_role("button", name="Restore").click()
    await expect(page.locator("dl.facts")).not_to_contain_text("archived")

    await page.locator("#delete").click()
    await expect(page).to_have_url(re.compile(r"/panel/memory$"))
    assert dialogs
    assert dialogs[-1].startswith("Delete memory item")
    await chat(seeded, ["Remind me what my sister loves."])
    assert "Natasha" not in block(brain, BlockKind.MEMORY)


async def test_confirm_a_rule_and_roll_back_in_the_ui(
    seeded: RunningGateway, brain: ScriptedBrain, page: Page
) -> None:
    dialogs: list[str] = []
    accept_dialogs(page, dialogs)
    await page.goto(seeded.url("/panel/persona"))
    await page.locator("#pending").get_by_role("button", name="Confirm").click()
    await expect(page.locator("#hard-rules")).to_contain_text("Always answer in English")
    await expect(page.locator("#pending")).to_have_count(0)
    await chat(seeded, ["Good morning."])
    assert "Always answer in English" in block(brain, BlockKind.PERSONA)

    # Version 1 is the seed state, from before any rule was confirmed.
    await (
        page.locator('#versions tr[data-version="1"]')
        .get_by_role("button", name="Roll back")
        .click()
    )
    await expect(page.locator("h1 .badge")).to_have_text(re.compile(r"v\d+"))
    await expect(page.locator("#hard-rules")).to_have_count(0)
    assert any("Roll the persona back to v1" in d for d in dialogs)
    await page.select_option("select[name=a]", "1")
    await page.click("#diff-form button[type=submit]")
    await expect(page.locator("#diff")).to_be_visible()
    await chat(seeded, ["Good evening."])
    persona = block(brain, BlockKind.PERSONA)
    assert "Always answer in English" not in persona
    assert "Never use emojis" not in persona


async def test_the_content_security_policy_refuses_inline_script(
    running: RunningGateway, browser: Browser
) -> None:
    """What the page fixture's CSP check listens for, seen once: an inline script a
    stored XSS would need does not run, and the console says the policy refused it."""
    context = await browser.new_context()
    try:
        page = await context.new_page()
        refused = csp_reports(page)
        await page.goto(running.url("/panel"))
        ran = await page.evaluate(
            """() => {
                const script = document.createElement("script");
                script.textContent = "window.injected = true";
                document.body.append(script);
                return window.injected === true;
            }"""
        )
        assert not ran
        for _ in range(50):
            if refused:
                break
            await page.wait_for_timeout(100)
        assert refused
        assert "script-src" in refused[0]
    finally:
        await context.close()
