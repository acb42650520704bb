"""A nightly merge is reversible from the panel (issue 21): the survivor's page lists
the duplicates it took, and its "Unmerge" button in Chromium gives them back."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from playwright.async_api import Page, expect

from gateway.store.repo import resolve_address
from memory import repo
from memory.jobs import merge, merge_plan
from memory.repo import NewItem
from memory.types import ItemStatus, ItemType
from tests.conftest import RunningGateway, requires_chromium, screenshot

pytestmark = [pytest.mark.slow, requires_chromium]


async def test_unmerge_from_the_memory_item_page(running: RunningGateway, page: Page) -> None:
    memory = running.gateway.memory
    assert memory is not None
    who = await resolve_address(memory.store, "webchat", "merge-ui-1", display_name="Sam")
    now = datetime.now(UTC)
    texts = ["Sam has a grey cat called Miso", "Sam has a gray cat named Miso"]
    survivor, other = await memory.add_items(
        [
            NewItem(
                person_id=who.person_id,
                type=ItemType.FACT,
                content=t,
                occurred_at=now,
                author="observer",
                source_message_ids=(n + 1,),
                confidence=0.9 - n / 10,
            )
            for n, t in enumerate(texts)
        ]
    )
    # The merge the nightly job writes for this pair (its finding needs the model).
    found = [
        merge.Candidate(i, ItemType.FACT, t, 0.9, 0.0, 0, (None, None))
        for i, t in zip((survivor, other), texts, strict=True)
    ]
    assert (
        await merge.apply(
            memory, who.person_id, [merge_plan.Group(found[0], [(found[1], 0.98)])], now
        )
        == 1
    )

    await page.goto(running.url(f"/panel/memory/items/{survivor}"))
    row = page.locator("#merges li")
    await expect(row).to_have_count(1)
    await expect(row).to_contain_text(f"#{other}")
    await expect(page.locator("dl.facts")).to_contain_text("#2")  # provenance taken over
    await screenshot(page, "panel-memory-merged.png")

    # The merged item's own page offers the same undo.
    await page.goto(running.url(f"/panel/memory/items/{other}"))
    await expect(page.locator("#merges li")).to_contain_text(f"kept #{survivor}")
    await page.goto(running.url(f"/panel/memory/items/{survivor}"))
    await page.get_by_role("button", name="Unmerge").click()
    await expect(page.locator("#merges")).to_have_count(0)
    await expect(page.locator("dl.facts")).not_to_contain_text("#2")
    (back,) = await repo.get_items(memory.store, [other])
    assert back.status is ItemStatus.ACTIVE
    assert back.superseded_by_id is None
