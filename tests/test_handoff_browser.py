"""The Handoff page in Chromium: a note written in the page is the next turn's
handoff block; the profile ("What I know about you") is rebuilt from a weekly
summary with its sources shown."""

from __future__ import annotations

import pytest
from playwright.async_api import Page, expect
from sqlalchemy import select

from gateway.brains.scripted import ScriptedBrain
from gateway.store.models import Person
from memory.continuity.handoff import HANDOFF_HEADER
from memory.continuity.profile import PROFILE_HEADER
from memory.models import MemorySummary
from tests.conftest import RunningGateway, csp_reports, requires_chromium
from tests.test_lessons_turns import persona_block, session
from tests.test_newcomer_browser import page_overflow
from tests.test_persona_loop import say

pytestmark = [pytest.mark.slow, requires_chromium]


async def test_handoff_page_writes_the_note_and_rebuilds_the_profile(
    running: RunningGateway, brain: ScriptedBrain, page: Page
) -> None:
    reports = csp_reports(page)
    ws = await session(running, "handoff-page-one")
    brain.script = ["Hi."]
    await say(ws, "Hello there.", "p1")
    assert await running.gateway.router.drain(30)
    await page.goto(running.url("/panel/handoff"))
    assert await page_overflow(page) <= 0
    await expect(page.locator("#no-handoff")).to_be_visible()
    await expect(page.locator("#no-profile")).to_be_visible()

    await page.fill("#handoff-text", "Open: which hotel in Porto\nNext: book the train")
    await page.click("#write-handoff button[type=submit]")
    await expect(page.locator("#handoff .handoff-text")).to_contain_text("which hotel in Porto")
    brain.script = ["OK."]
    await say(ws, "Where were we?", "p2")
    block = persona_block(brain.requests[-1])
    assert HANDOFF_HEADER in block
    assert "Open: which hotel in Porto" in block

    async with running.gateway.store.session() as s:
        person_id = await s.scalar(select(Person.id))
        assert person_id is not None
        s.add(
            MemorySummary(
                person_id=person_id,
                category="work",
                version=1,
                text="Work: 1 active item.\n- “Runs the invoice export at Acme” (2026-11-20)",
                item_ids=[42],
                method="extractive",
                items=1,
            )
        )
    await page.click("#rebuild-profile")
    await expect(page.locator("#profile .profile-lines li")).to_have_count(1)
    await expect(page.locator("#profile .profile-lines li")).to_contain_text(
        "work: Runs the invoice export at Acme"
    )
    await expect(page.locator("#profile .profile-lines li")).to_contain_text("item:42")
    brain.script = ["OK."]
    await say(ws, "And now?", "p3")
    block = persona_block(brain.requests[-1])
    assert block.index(PROFILE_HEADER) < block.index(HANDOFF_HEADER)
    assert reports == []
    await ws.close()
