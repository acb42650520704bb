"""The nightly job over the pack bench's store, timed, with pack latency while it runs.

``python -m gateway.bench.nightly_bench --store DIR [--facts N] [--json]`` takes a
store filled by ``agentgw bench pack --store DIR`` (one person, N episodes).
Episodes never merge, so a store of episodes alone gives the merge nothing to
compare: the first run adds ``--facts`` observer facts made from the store's own
sentences, a fifth of them said twice in other words ("Sam said that ..." and
"Sam mentioned that ..."), through the real write path (embedded, indexed). Then
packs of generated questions are timed before (``pack_p95_ms_before``) and while
(``pack_p95_ms_during``) one nightly run goes over the whole store
(``nightly_s``, and its counts). A second run finds the merges done: it times a
nightly with nothing left to merge.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from gateway.bench.pack_bench import percentile, question
from gateway.config import load_config
from gateway.store import Store
from gateway.store.repo import resolve_address
from memory import repo
from memory.jobs.base import JobContext
from memory.jobs.nightly import nightly
from memory.models import MemoryItem
from memory.repo import NewItem
from memory.service import MemoryService, PackRequest, load_embedder
from memory.types import ItemType

FACTS_ADDED = "nightly_bench.facts"


async def add_facts(service: MemoryService, person_id: int, count: int) -> int:
    """Observer facts from the store's own sentences, a fifth said twice; how many added."""
    if await repo.store_fact(service.store, FACTS_ADDED) is not None:
        return 0
    async with service.store.reader() as session:
        said = list(
            (
                await session.scalars(
                    select(MemoryItem.content)
                    .where(MemoryItem.person_id == person_id, MemoryItem.type == ItemType.EPISODE)
                    .order_by(MemoryItem.id)
                    .limit(count)
                )
            ).all()
        )
    at = datetime(2024, 1, 1, tzinfo=UTC)
    items: list[NewItem] = []
    for n, text in enumerate(said):
        items.append(
            NewItem(person_id, ItemType.FACT, f"Sam said that {text}", at, author="observer")
        )
        if n % 5 == 0:
            items.append(
                NewItem(
                    person_id, ItemType.FACT, f"Sam mentioned that {text}", at, author="observer"
                )
            )
    # A first run stopped part way: its items are the first of the same list.
    async with service.store.reader() as session:
        held = int(
            await session.scalar(
                select(func.count())
                .select_from(MemoryItem)
                .where(MemoryItem.person_id == person_id, MemoryItem.type == ItemType.FACT)
            )
            or 0
        )
    items = items[held:]
    for start in range(0, len(items), 500):
        await service.add_items(items[start : start + 500])
    await repo.set_store_fact(service.store, FACTS_ADDED, str(len(items)))
    return len(items)


async def packs(
    service: MemoryService, person_id: int, rng: random.Random, stop: asyncio.Event, most: int
) -> list[float]:
    asked = datetime(2024, 1, 2, tzinfo=UTC)
    timings: list[float] = []
    while not stop.is_set() and len(timings) < most:
        began = time.perf_counter()
        await service.build_pack(PackRequest(person_id, question(rng), asked))
        timings.append((time.perf_counter() - began) * 1000)
        await service.traces_saved()
        # One message every ~200 ms: a busy person, not a load test.
        await asyncio.sleep(0.2)
    return timings


async def run(store_dir: Path, facts: int) -> dict[str, Any]:
    config = load_config(
        None,
        env={},
        overrides={"store": {"data_dir": str(store_dir)}, "memory": {"embedder": "minilm"}},
    )
    embedder = await asyncio.to_thread(load_embedder, config.memory)
    async with Store(config.database_url) as store:
        service = MemoryService(store, config.memory, config.data_dir / "memory-index", embedder)
        address = await resolve_address(store, "bench", "pack-bench", display_name="Sam")
        person = address.person_id
        began = time.perf_counter()
        added = await add_facts(service, person, facts)
        add_s = time.perf_counter() - began
        await service.lexical(person, wait=True)
        warm = random.Random(5)
        for _ in range(20):
            await service.build_pack(PackRequest(person, question(warm), datetime.now(UTC)))
        before = await packs(service, person, random.Random(6), asyncio.Event(), 100)
        stop = asyncio.Event()
        during_task = asyncio.create_task(packs(service, person, random.Random(7), stop, 10**6))
        ctx = JobContext(service=service, now=datetime.now(UTC) + timedelta(days=1))
        began = time.perf_counter()
        counts = await nightly(ctx)
        nightly_s = time.perf_counter() - began
        stop.set()
        during = await during_task
        await service.aclose()
    return {
        "items": await _count(config.database_url),
        "facts_added": added,
        "facts_add_s": round(add_s, 1),
        "nightly_s": round(nightly_s, 1),
        "counts": counts,
        "pack_p95_ms_before": percentile(before, 0.95),
        "pack_p95_ms_during": percentile(during, 0.95) if during else None,
        "packs_during": len(during),
    }


async def _count(url: str) -> int:
    async with Store(url) as store, store.reader() as session:
        return int(await session.scalar(select(func.count()).select_from(MemoryItem)) or 0)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m gateway.bench.nightly_bench")
    parser.add_argument("--store", type=Path, required=True, help="a store of `bench pack --store`")
    parser.add_argument("--facts", type=int, default=10000, help="facts added on the first run")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = asyncio.run(run(args.store, args.facts))
    print(json.dumps(result, indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
