"""``agentgw bench pack --store``: a fill that stops part way goes on at the next run."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from gateway.bench import pack_bench
from gateway.config import Config
from gateway.store import Store
from memory.models import MemoryItem
from memory.service import Episode, MemoryService
from tests.conftest import make_config


def bench_config(tmp_path: Path, name: str) -> Config:
    (tmp_path / name).mkdir()
    return make_config(tmp_path / name, memory={"embedder": "minilm"})


async def contents(config: Config) -> list[str]:
    async with Store(config.database_url) as store, store.session() as session:
        return list(await session.scalars(select(MemoryItem.content).order_by(MemoryItem.id)))


def test_a_stopped_fill_goes_on_where_it_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pack_bench, "FILL_BATCH", 100)
    stopped = bench_config(tmp_path, "stopped")
    ingest = MemoryService.ingest
    calls = 0

    async def dies_at_the_third_batch(self: MemoryService, episodes: list[Episode]) -> Any:
        nonlocal calls
        calls += 1
        if calls == 3:
            raise KeyboardInterrupt  # as a stopped run stops
        return await ingest(self, episodes)

    monkeypatch.setattr(MemoryService, "ingest", dies_at_the_third_batch)
    with pytest.raises(KeyboardInterrupt):
        asyncio.run(pack_bench.run(stopped, 300, 2))
    assert pack_bench.filling_items(stopped.data_dir) == 300
    assert pack_bench.stored_items(stopped.data_dir) == 0
    assert len(asyncio.run(contents(stopped))) == 200

    monkeypatch.setattr(MemoryService, "ingest", ingest)
    resumed = asyncio.run(pack_bench.run(stopped, 300, 2))
    assert resumed["fill_resumed_from"] == 200
    assert resumed["store_reused"] is False
    assert pack_bench.stored_items(stopped.data_dir) == 300

    # The same store as a fill that never stopped, item for item.
    whole = bench_config(tmp_path, "whole")
    figures = asyncio.run(pack_bench.run(whole, 300, 2))
    assert figures["fill_resumed_from"] == 0
    assert asyncio.run(contents(stopped)) == asyncio.run(contents(whole))
    # And it is reused, not filled again, by the next run.
    assert asyncio.run(pack_bench.run(stopped, 300, 2))["store_reused"] is True
