"""A turn's stages in the panel, in a real browser (Debian Chromium via playwright):
after real turns the turn page lists every stage with its start, end and duration,
and a failing after-turn stage with its code; the pack trace links the same."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.async_api import Page, expect
from sqlalchemy import select

from gateway.brains.scripted import ScriptedBrain
from gateway.config import Config
from gateway.prompt import TurnContext, TurnOutcome
from gateway.store import Turn
from tests.conftest import RunningGateway, make_config, requires_chromium, screenshot
from tests.panel_support import chat

pytestmark = [pytest.mark.slow, requires_chromium]


@pytest.fixture
def config(tmp_path: Path) -> Config:
    return make_config(tmp_path, voice={"enabled": False})


class Broken:
    name = "broken_stage"

    async def after_turn(self, turn: TurnContext, outcome: TurnOutcome) -> None:
        raise RuntimeError("disk on fire")


async def test_the_turn_page_shows_each_stage_and_a_failed_stages_code(
    running: RunningGateway, brain: ScriptedBrain, page: Page
) -> None:
    pipeline = running.gateway.pipeline
    assert pipeline is not None
    pipeline.after_stages = (*pipeline.after_stages, Broken())
    brain.script = ["Hello there.", "Again, hello."]
    await chat(running, ["hello", "and again"], "turn-view-1")

    # Stored with the turn once its after-turn stages ended (the router's idle flush).
    async with running.gateway.store.session() as db:
        turns = (await db.scalars(select(Turn).order_by(Turn.id))).all()
    assert len(turns) == 2
    first = turns[0]
    assert first.stages, "no stage timeline stored"
    async with running.session.get(running.url(f"/api/turns/{first.id}")) as response:
        assert response.status == 200
        data = await response.json()
    named = {(s["phase"], s["stage"]): s for s in data["stages"]}
    for stage in pipeline.stages:
        assert ("context", stage.name) in named, stage.name
    for phase in ("prepare", "brain_first_token", "brain", "deliver"):
        assert (phase, phase) in named, phase
    assert named[("after_turn", "broken_stage")]["code"] == "after_turn_failed"
    assert named[("turn", "turn")]["code"] == "ok"
    for s in data["stages"]:
        assert s["duration_ms"] >= 0
        assert s["start_ms"] >= 0
    # The brain starts after the context stages end.
    last_context = max(named[("context", st.name)]["start_ms"] for st in pipeline.stages)
    assert named[("brain", "brain")]["start_ms"] >= last_context
    async with running.session.get(running.url("/api/turns/999999")) as response:
        assert response.status == 404

    # The conversation's turn status links to the turn's page.
    await page.goto(running.url(f"/panel/conversations/{first.conversation_id}"))
    await page.locator(f'#m{first.inbound_message_id} a[href="/panel/turns/{first.id}"]').click()
    await expect(page).to_have_url(running.url(f"/panel/turns/{first.id}"))
    rows = page.locator("#stages tbody tr")
    await expect(rows).to_have_count(len(data["stages"]))
    broken = page.locator('#stages tr[data-stage="broken_stage"]')
    await expect(broken).to_have_attribute("data-code", "after_turn_failed")
    await expect(broken).to_contain_text("after_turn_failed")
    await expect(page.locator("#stage-summary")).to_contain_text("broken_stage (after_turn_failed)")
    await expect(page.locator('#stages tr[data-stage="brain"] meter')).to_have_count(1)
    await screenshot(page, "panel-turn-stages.png")

    # The pack's trace page carries the same timeline.
    await page.goto(running.url(f"/panel/memory/turns/{first.id}"))
    await expect(page.locator(f'a[href="/panel/turns/{first.id}"]')).to_be_visible()
    await page.locator("#trace-stages summary").click()
    await expect(page.locator('#trace-stages tr[data-stage="broken_stage"]')).to_be_visible()
