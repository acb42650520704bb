"""The nightly job over the pack bench's store, timed, with pack latency while it runs.

``python -m gateway.bench.nightly_bench --store DIR [--facts N] [--json]`` takes a
store filled by ``agentgw bench pack --store DIR`` (one person, N episodes).
Episodes never merge, so a store of episodes alone gives the merge nothing to
compare: the first run adds ``--facts`` observer facts made from the store's own
sentences, a fifth of them said twice in other words ("Sam said that ..." and
"Sam mentioned that ..."), through the real write path (embedded, indexed).

Then it goes in rounds. Each round first undoes every merge the store holds
(``merge.unmerge``, untimed), so every round's nightly has the same merges to
do; then times packs of generated questions with nothing else running (the
first round as many as ``min_packs``, later ones ``BEFORE_PER_ROUND``), then
packs one after another while one nightly run goes over the whole store, until
it ends (a pack under way when it ends counts). Rounds go on
until ``min_packs`` packs were timed during nightlies (a nightly lasts about a
second, a handful of packs: one round's p95 would say little), at most
``max_rounds``. The packs before and during are pooled over the rounds, so the
two sets are interleaved in time and the machine's load weighs on both alike.
After the last round as many packs again are timed with nothing running
(``pack_p95_ms_after``): with a nightly of ~30 s there is one round, and on a
shared machine the load before it and during it may differ; before and after
bracket it.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import random
import resource
import statistics
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import func, select

from gateway.bench.pack_bench import percentile, question
from gateway.config import load_config
from gateway.store import Store
from gateway.store.repo import resolve_address
from memory import repo
from memory.jobs import merge
from memory.jobs.base import JobContext
from memory.jobs.nightly import nightly
from memory.models import MemoryItem, MemoryMerge
from memory.repo import NewItem
from memory.service import MemoryService, PackRequest, load_embedder
from memory.types import ItemType

if TYPE_CHECKING:
    from gateway.config import CpuWorkKind

FACTS_ADDED = "nightly_bench.facts"
# Packs timed with nothing else running, at the start of each round.
BEFORE_PER_ROUND = 10


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


async def undo_merges(service: MemoryService, person_id: int) -> int:
    """Undo every merge of the person not undone yet, newest first; how many."""
    async with service.store.reader() as session:
        ids = list(
            (
                await session.scalars(
                    select(MemoryMerge.id)
                    .where(MemoryMerge.person_id == person_id, MemoryMerge.undone_at.is_(None))
                    .order_by(MemoryMerge.id.desc())
                )
            ).all()
        )
    for merge_id in ids:
        await merge.unmerge(service, merge_id)
    return len(ids)


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


async def run(
    store_dir: Path,
    facts: int,
    *,
    min_packs: int = 50,
    max_rounds: int = 30,
    cpu_work: CpuWorkKind | None = None,
) -> dict[str, Any]:
    config = load_config(
        None,
        env={},
        overrides={"store": {"data_dir": str(store_dir)}, "memory": {"embedder": "minilm"}},
    )
    settings = config.upkeep_jobs
    if cpu_work is not None:
        settings = dataclasses.replace(settings, cpu_work=cpu_work)
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
        before: list[float] = []
        during: list[float] = []
        rounds: list[dict[str, Any]] = []
        first_counts: dict[str, Any] = {}
        rng_before, rng_during = random.Random(6), random.Random(7)
        serving_cpu = job_cpu = 0.0
        while len(during) < min_packs and len(rounds) < max_rounds:
            undone = await undo_merges(service, person)
            # The first round times as many packs before as the rounds must time during
            # (a p95 of 10 packs is their largest but one); later rounds 10 each.
            wanted = max(BEFORE_PER_ROUND, min_packs - len(before))
            before += await packs(service, person, rng_before, asyncio.Event(), wanted)
            stop = asyncio.Event()
            during_task = asyncio.create_task(
                packs(service, person, rng_during, stop, 10**6), name="nightly-bench-packs"
            )
            ctx = JobContext(service=service, now=datetime.now(UTC) + timedelta(days=1))
            cpu_before, children_before = time.process_time(), _children_cpu_s()
            began = time.perf_counter()
            try:
                counts = await nightly(ctx, settings)
            finally:
                stop.set()
                timed = await during_task
            nightly_s = time.perf_counter() - began
            serving_cpu += time.process_time() - cpu_before
            job_cpu += _children_cpu_s() - children_before
            during += timed
            first_counts = first_counts or dict(counts)
            rounds.append(
                {
                    "undone": undone,
                    "nightly_s": round(nightly_s, 2),
                    "merged": counts["merged"],
                    "packs": len(timed),
                }
            )
        after = await packs(service, person, rng_before, asyncio.Event(), len(before))
        await service.aclose()
    seconds = [r["nightly_s"] for r in rounds]
    return {
        "items": await _count(config.database_url),
        "facts_added": added,
        "facts_add_s": round(add_s, 1),
        "cpu_work": settings.cpu_work,
        "rounds": len(rounds),
        "nightly_s": round(statistics.median(seconds), 2) if seconds else None,
        "nightly_s_max": max(seconds, default=None),
        "merged_per_round": [r["merged"] for r in rounds],
        "counts": first_counts,
        "pack_p95_ms_before": percentile(before, 0.95) if before else None,
        "pack_p95_ms_during": percentile(during, 0.95) if during else None,
        "pack_p50_ms_before": percentile(before, 0.5) if before else None,
        "pack_p50_ms_during": percentile(during, 0.5) if during else None,
        "pack_p95_ms_after": percentile(after, 0.95) if after else None,
        "pack_p50_ms_after": percentile(after, 0.5) if after else None,
        "packs_before": len(before),
        "packs_during": len(during),
        # CPU seconds over the rounds' nightlies: this process's (the nightly's share
        # and the packs'), and the job's spawned process's (cpu_work "process").
        "cpu_s_serving_process": round(serving_cpu, 2),
        "cpu_s_job_process": round(job_cpu, 2),
    }


async def _count(url: str) -> int:
    async with Store(url) as store, store.reader() as session:
        return int(await session.scalar(select(func.count()).select_from(MemoryItem)) or 0)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m gateway.bench.nightly_bench")
    parser.add_argument("--store", type=Path, required=True, help="a store of `bench pack --store`")
    parser.add_argument("--facts", type=int, default=10000, help="facts added on the first run")
    parser.add_argument(
        "--min-packs", type=int, default=50, help="packs to time during nightlies (default: 50)"
    )
    parser.add_argument(
        "--cpu-work",
        choices=["process", "thread"],
        help="where the nightly's CPU-bound steps run (default: the config's, process)",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = asyncio.run(
        run(args.store, args.facts, min_packs=args.min_packs, cpu_work=args.cpu_work)
    )
    print(json.dumps(result, indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
