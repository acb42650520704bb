"""The panel's JSON API against bodies json.loads cannot survive and text the
store cannot encode: a 400, or the text stored with U+FFFD in place."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from gateway.brains.scripted import ScriptedBrain
from gateway.config import Config
from tests.conftest import RunningGateway, make_config
from tests.panel_support import PANEL_SECTIONS, seed


@pytest.fixture
def config(tmp_path: Path) -> Config:
    return make_config(tmp_path, **PANEL_SECTIONS)


@pytest.fixture
async def seeded(running: RunningGateway, brain: ScriptedBrain) -> RunningGateway:
    await seed(running, brain)
    return running


async def test_memory_edits_survive_hostile_bodies(
    seeded: RunningGateway, caplog: pytest.LogCaptureFixture
) -> None:
    async with seeded.session.get(seeded.url("/api/memory/items?limit=1")) as response:
        item = (await response.json())["items"][0]
    url = seeded.url(f"/api/memory/items/{item['id']}")
    headers = {"Content-Type": "application/json"}

    async with seeded.session.patch(url, data="[" * 5000 + "]" * 5000, headers=headers) as deep:
        assert deep.status == 400
        assert "nested deeper" in await deep.text()

    body = json.dumps({"content": "My sister is Nat\ud800asha.\u0000"})
    async with seeded.session.patch(url, data=body, headers=headers) as edited:
        assert edited.status == 200, await edited.text()
        assert (await edited.json())["content"] == "My sister is Nat\ufffdasha.\ufffd"
    for path in ("/api/memory/items/99999999999999999999999999", "/api/turns/0/pack"):
        async with seeded.session.get(seeded.url(path)) as response:
            assert response.status == 400, path
            assert "must be an integer from 1" in await response.text()
    bad = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert not bad, bad
