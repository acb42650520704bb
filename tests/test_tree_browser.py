"""The Tree page in Chromium: a person's tree (root, topics, clusters, leaves) is
shown collapsible; a summary corrected in the page becomes a new version, listed
under the node, and the page shows the correction."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from playwright.async_api import Page, expect

from gateway.config import Config
from gateway.store.repo import resolve_address
from memory.service import Episode
from tests.conftest import RunningGateway, make_config, requires_chromium
from tests.test_memory_tree import DAYS

pytestmark = [pytest.mark.slow, requires_chromium]


@pytest.fixture
def config(tmp_path: Path) -> Config:
    return make_config(
        tmp_path,
        memory={
            "embedder": "minilm",
            "tree": True,
            "tree_cluster_max": 4,
            "tree_topic_max": 2,
        },
    )


async def test_tree_page_shows_the_tree_and_keeps_a_correction(
    running: RunningGateway, page: Page
) -> None:
    memory = running.gateway.memory
    assert memory is not None
    address = await resolve_address(running.gateway.store, "webchat", "tree-a", display_name="Sam")
    start = datetime(2024, 3, 1, 18, 0, tzinfo=UTC)
    await memory.ingest(
        [
            Episode(
                person_id=address.person_id,
                text=text,
                at=start + timedelta(days=n),
                role="user",
                speaker="Sam",
                conversation_id=address.conversation_id,
            )
            for n, text in enumerate(DAYS)
        ]
    )
    await memory.tree.idle()
    await page.goto(running.url(f"/panel/tree?person={address.person_id}"))
    root = page.locator('#tree details[data-key="root"]')
    await expect(root).to_have_attribute("open", "")
    await expect(page.locator("#tree details.level-2").first).to_be_visible()
    # Clusters start closed; opening one shows its leaves.
    cluster = page.locator("#tree details.level-1").first
    leaf = cluster.locator("details.level-0").first
    await expect(leaf).to_be_hidden()
    await cluster.locator("> summary").click()
    await expect(leaf).to_be_visible()
    # A correction of the root: a new version, shown, and listed with the old one.
    form = root.locator("> form.correct")
    await form.locator("input[name=summary]").fill("Sam cooks, runs, plays guitar and plans.")
    await form.locator("button[type=submit]").click()
    await expect(root.locator("> pre.summary")).to_have_text(
        "Sam cooks, runs, plays guitar and plans."
    )
    versions = root.locator("> details.versions li.version")
    assert await versions.count() >= 2
    await expect(versions.last).to_contain_text("correction")
