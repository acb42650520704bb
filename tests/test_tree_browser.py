"""The Tree page in Chromium: a person's tree (root, topics, clusters, leaves) is
shown collapsible; a summary corrected in the page becomes a new version, listed
under the node, and the page shows the correction."""

from __future__ import annotations

import re
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


async def test_tree_page_diffs_two_versions_and_searches_a_path(
    running: RunningGateway, page: Page
) -> None:
    memory = running.gateway.memory
    assert memory is not None
    address = await resolve_address(running.gateway.store, "webchat", "tree-b", display_name="Sam")
    start = datetime(2024, 3, 1, 18, 0, tzinfo=UTC)
    for n, text in enumerate(DAYS):
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
            ]
        )
        await memory.tree.idle()
    history = await memory.tree.versions(address.person_id, "root")
    assert len(history) >= 3
    first, last = history[0], history[-1]
    await page.goto(running.url(f"/panel/tree?person={address.person_id}"))
    root = page.locator('#tree details[data-key="root"]')
    await root.locator("> details.versions > summary").click()
    form = root.locator("> details.versions form.diff-form")
    await form.locator("select[name=a]").select_option(str(first["version"]))
    await form.locator("select[name=b]").select_option(str(last["version"]))
    await form.locator("button[type=submit]").click()
    diff = page.locator('#tree details[data-key="root"] > pre.diff')
    await expect(diff).to_have_attribute("data-a", str(first["version"]))
    await expect(diff).to_have_attribute("data-b", str(last["version"]))
    # A line the last version has and the first had not is marked as added.
    added = [s for s in last["summary"].splitlines() if s not in first["summary"].splitlines()]
    assert added
    await expect(diff.locator("span.add").filter(has_text=added[0])).to_have_count(1)
    # Search: the leaf that holds the words is marked, and its path is open.
    await page.locator("form.filters input[name=q]").fill("sourdough loaf")
    await page.locator("form.filters button[type=submit]").click()
    await expect(page.locator("#search-result")).to_contain_text("sourdough loaf")
    hit = page.locator("#tree details.level-0.hit")
    await expect(hit.first).to_be_visible()
    nodes = await memory.tree.nodes(address.person_id)
    leaf = await hit.first.get_attribute("data-key")
    assert leaf is not None
    assert "sourdough loaf" in nodes[leaf].summary
    for parent in nodes[leaf].parent_keys:
        await expect(page.locator(f'#tree details[data-key="{parent}"]').first).to_have_class(
            re.compile(r"\bon-path\b")
        )
    # A node off the path stays closed.
    closed = [k for k, n in nodes.items() if n.level == 1 and k not in nodes[leaf].parent_keys]
    assert closed
    await expect(page.locator(f'#tree details[data-key="{closed[0]}"]')).not_to_have_attribute(
        "open", ""
    )
