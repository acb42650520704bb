"""The nightly job body (issue 21) on a real store with the real MiniLM model: merges of
near-duplicates (provenance kept, reversible), the number/date/name guard, episodes
untouched, a run stopped between batches and resumed, the dry run, promotion of what
packs used, and extraction catch-up through the registered extractors."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import select, update

from gateway.config import Config, UpkeepJobsConfig
from gateway.store import Store
from gateway.store.repo import Address, resolve_address
from memory import repo
from memory.embed import SentenceEmbedder
from memory.jobs import merge, merge_plan
from memory.jobs.base import JobContext
from memory.jobs.guard import conflict, specifics
from memory.jobs.nightly import nightly
from memory.jobs.offload import CpuWork
from memory.models import MemoryItem, MemoryMerge, MemoryTrace
from memory.repo import NewItem
from memory.service import MemoryService
from memory.types import ItemStatus, ItemType
from tests.conftest import make_config

pytestmark = pytest.mark.slow

NOW = datetime(2024, 6, 14, 2, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def embedder() -> SentenceEmbedder:
    return SentenceEmbedder.load()


@pytest.fixture
def memory_config(tmp_path: Path) -> Config:
    return make_config(tmp_path, memory={"embedder": "minilm"})


@pytest.fixture
async def store(memory_config: Config) -> AsyncIterator[Store]:
    async with Store(memory_config.database_url) as opened:
        yield opened


@pytest.fixture
async def address(store: Store) -> Address:
    return await resolve_address(store, "webchat", "session-a", display_name="Sam")


@pytest.fixture
async def service(
    store: Store, memory_config: Config, embedder: SentenceEmbedder
) -> AsyncIterator[MemoryService]:
    started = MemoryService(
        store, memory_config.memory, memory_config.data_dir / "memory-index", embedder
    )
    yield started
    await started.aclose()


async def add(
    service: MemoryService,
    address: Address,
    text: str,
    *,
    kind: ItemType = ItemType.FACT,
    sources: tuple[int, ...] = (),
    confidence: float = 0.8,
    accesses: int = 0,
    author: str = "observer",
) -> int:
    (item_id,) = await service.add_items(
        [
            NewItem(
                person_id=address.person_id,
                type=kind,
                content=text,
                occurred_at=NOW - timedelta(days=3),
                author=author,
                role="user" if kind is ItemType.EPISODE else "",
                speaker="Sam" if kind is ItemType.EPISODE else "",
                conversation_id=address.conversation_id,
                source_message_ids=sources,
                confidence=confidence,
            )
        ]
    )
    if accesses:
        async with service.store.session() as session:
            await session.execute(
                update(MemoryItem)
                .where(MemoryItem.id == item_id)
                .values(access_count=accesses, strength=0.5 * accesses)
            )
    return item_id


async def rows(store: Store) -> dict[int, tuple[Any, ...]]:
    async with store.reader() as session:
        found = (await session.scalars(select(MemoryItem))).all()
        return {
            i.id: (
                i.status,
                i.superseded_by_id,
                tuple(i.source_message_ids),
                i.access_count,
                round(i.strength, 6),
                round(i.priority, 6),
                i.pinned,
            )
            for i in found
        }


def ctx(service: MemoryService, **changes: Any) -> JobContext:
    return JobContext(**({"service": service, "now": NOW} | changes))


def test_the_guard_reads_numbers_dates_and_names() -> None:
    assert conflict(specifics("Miso is 3"), specifics("Miso is 4")) == "number"
    assert conflict(specifics("Miso is 3 years old"), specifics("Miso is three years old")) is None
    assert conflict(specifics("Sam moved in March"), specifics("Sam moved in April")) == "date"
    assert conflict(specifics("Ana lives in Lisbon"), specifics("Ana lives in Porto")) == "name"
    assert conflict(specifics("I may go"), specifics("I might go")) is None  # may, the verb


def test_the_ann_neighbours_find_every_pair_all_pairs_finds() -> None:
    """The merge's candidates come from an hnswlib k-NN of the items, not all pairs:
    on 4,000 vectors with 300 planted near-duplicates (some in triples) it finds
    exactly the pairs above the threshold that the full matrix product finds, each
    listed from both sides."""
    rng = np.random.default_rng(7)
    base = rng.standard_normal((4000, 384)).astype(np.float32)
    base /= np.linalg.norm(base, axis=1, keepdims=True)
    copies = []
    for source in range(300):
        for _ in range(1 if source % 3 else 2):
            near = base[source] + 0.02 * rng.standard_normal(384).astype(np.float32)
            copies.append(near / np.linalg.norm(near))
    matrix = np.vstack([base, np.stack(copies)]).astype(np.float32)
    exact = matrix @ matrix.T
    np.fill_diagonal(exact, 0.0)
    rows, cols = np.nonzero(exact > 0.85)
    expected = {(int(i), int(j)) for i, j in zip(rows, cols, strict=True)}
    # 500 planted pairs (two copies of one source may fall just under), both ways.
    assert 900 < len(expected) <= 2 * 500

    found = merge_plan.neighbours(matrix, 0.85, k=20)
    got = {(i, j) for i, near in enumerate(found) for j, _ in near}
    assert got == expected
    for i, near in enumerate(found):
        for j, cosine in near:
            assert cosine == pytest.approx(float(exact[i, j]), abs=1e-4)


async def test_true_paraphrases_merge_keeping_provenance_and_the_merge_undoes(
    service: MemoryService, address: Address, store: Store
) -> None:
    best = await add(
        service,
        address,
        "Sam has a grey cat called Miso",
        sources=(11,),
        confidence=0.9,
        accesses=2,
    )
    other = await add(
        service, address, "Sam has a gray cat named Miso", sources=(12, 13), accesses=3
    )
    third = await add(service, address, "Sam's cat Miso is grey", sources=(14,), accesses=1)
    unrelated = await add(service, address, "Sam works as a nurse in the city hospital")
    before = await rows(store)

    counts = await nightly(ctx(service))

    after = await rows(store)
    assert after[best][0] is ItemStatus.ACTIVE
    merged = [i for i in (other, third) if after[i][0] is ItemStatus.SUPERSEDED]
    assert merged, "a paraphrase was not merged"
    assert counts["merged"] == len(merged)
    for i in merged:
        assert after[i][1] == best
    # The survivor holds every source and every access of what it took.
    assert set(after[best][2]) == {11, *(s for i in merged for s in before[i][2])}
    assert after[best][3] == 2 + sum(before[i][3] for i in merged)
    assert after[unrelated][0] is ItemStatus.ACTIVE
    index = await service.index(address.person_id)
    assert index is not None
    assert not set(merged) & set(await _live(index))

    records = await merge.merges_of(service, [best])
    assert [set(r.merged_ids) for r in records[best]] == [set(merged)]
    await merge.unmerge(service, records[best][0].id)
    assert await rows(store) == before
    assert set(merged) <= set(await _live(index))
    with pytest.raises(merge.MergeError, match="already undone"):
        await merge.unmerge(service, records[best][0].id)


async def test_the_child_process_finds_the_groups_the_thread_finds(
    service: MemoryService, address: Address
) -> None:
    for a, b in [
        ("Sam loves hiking in the Alps", "Sam really enjoys hiking in the Alps"),
        ("Miso is 3", "Miso is 4"),
    ]:
        await add(service, address, a, confidence=0.9)
        await add(service, address, b)

    def shape(found: merge_plan.Found) -> tuple[Any, ...]:
        groups = [
            (g.survivor.id, [(m.id, round(c, 4)) for m, c in g.members]) for g in found.groups
        ]
        return groups, found.conflicts, found.new_conflicts

    async with CpuWork("process") as cpu:
        # A handful of items: below PROCESS_FROM the thread does it, child or not.
        small = await merge.find(service, address.person_id, 0.85, cpu=cpu)
        assert cpu.calls == 0
        forced = await merge.find(service, address.person_id, 0.85, cpu=cpu, process_from=0)
        assert cpu.calls == 1
    threaded = await merge.find(service, address.person_id, 0.85)
    assert shape(forced) == shape(threaded) == shape(small)
    assert len(forced.groups) == 1
    assert forced.conflicts == {"number": 1}


async def _live(index: Any) -> list[int]:
    return sorted(index._live)


async def test_conflicts_stay_apart_and_episodes_never_merge(
    service: MemoryService, address: Address, store: Store
) -> None:
    pairs = [
        ("Miso is 3", "Miso is 4"),
        ("Sam's sister Ana lives in Lisbon", "Sam's sister Ana lives in Porto"),
        ("Sam moved to Berlin in March", "Sam moved to Berlin in April"),
    ]
    ids = [await add(service, address, text) for pair in pairs for text in pair]
    episodes = [
        await add(service, address, "I adopted a grey cat called Miso", kind=ItemType.EPISODE),
        await add(service, address, "I adopted a grey cat called Miso", kind=ItemType.EPISODE),
    ]

    counts = await nightly(ctx(service))

    after = await rows(store)
    assert all(after[i][0] is ItemStatus.ACTIVE for i in ids + episodes)
    assert counts["merged"] == 0
    assert counts["conflicts"] >= 3
    assert counts["conflicts_known"] == counts["conflicts"]

    # The next night the same pairs are known, not new; a pair with a new item is new.
    again = await nightly(ctx(service))
    assert again["conflicts"] == 0
    assert again["conflicts_known"] == counts["conflicts_known"]
    await add(service, address, "Miso is 5")
    third = await nightly(ctx(service))
    assert third["conflicts"] >= 1
    assert third["conflicts_known"] == counts["conflicts_known"] + third["conflicts"]


async def test_a_run_stopped_between_batches_is_finished_by_the_next(
    service: MemoryService, address: Address, store: Store
) -> None:
    groups = [
        ("Sam loves hiking in the Alps", "Sam really enjoys hiking in the Alps"),
        ("Sam prefers tea over coffee", "Sam likes tea more than coffee"),
        ("Sam is allergic to peanuts", "Sam has a peanut allergy"),
        ("Sam works as a nurse", "Sam is a nurse by profession"),
    ]
    for n, (a, b) in enumerate(groups):
        await add(service, address, a, confidence=0.9, accesses=1, sources=(100 + n,))
        await add(service, address, b, accesses=2, sources=(200 + n,))

    class Killed(Exception):
        pass

    def stop_after_first_batch(done: int, total: int | None) -> None:
        if total is None:  # called between batches, after a commit
            raise Killed

    with pytest.raises(Killed):
        await nightly(ctx(service, batch=1, progress=stop_after_first_batch))
    async with store.reader() as session:
        assert len((await session.scalars(select(MemoryMerge))).all()) == 1

    counts = await nightly(ctx(service, batch=1))

    after = await rows(store)
    assert counts["merged"] == len(groups) - 1
    async with store.reader() as session:
        merges = (await session.scalars(select(MemoryMerge))).all()
    merged_ids = [i for m in merges for i in m.merged_ids]
    assert len(merges) == len(groups)
    assert len(merged_ids) == len(set(merged_ids))
    active = [v for v in after.values() if v[0] is ItemStatus.ACTIVE]
    assert len(active) == len(groups)
    # Nothing counted twice: every survivor holds 1 + 2 accesses and its two sources.
    assert sorted(v[3] for v in active) == [3] * len(groups)
    assert all(len(v[2]) == 2 for v in active)


async def test_a_dry_run_changes_nothing_and_lists_each_change(
    service: MemoryService, address: Address, store: Store
) -> None:
    await add(service, address, "Sam prefers tea over coffee", confidence=0.9)
    await add(service, address, "Sam likes tea more than coffee")
    used = await add(service, address, "Sam works as a nurse")
    await _trace(store, address, [used])
    before = await rows(store)
    seen: list[int | None] = []

    async def extractor(person_id: int | None) -> int:
        seen.append(person_id)
        return 5

    plan = ctx(service, dry_run=True, extractors=[extractor])
    counts = await nightly(plan)

    assert await rows(store) == before
    assert seen == []
    assert counts["merged"] == 1
    assert counts["promoted"] == 1
    assert any(line.startswith("merge #") for line in plan.plan)
    assert any(line.startswith(f"promote #{used}") for line in plan.plan)
    assert await repo.store_fact(store, "nightly.promoted_through_trace") is None


async def _trace(store: Store, address: Address, kept: list[int]) -> None:
    async with store.session() as session:
        session.add(MemoryTrace(person_id=address.person_id, kept_ids=kept, created_at=NOW))


async def test_items_used_in_a_pack_gain_priority_once_a_day_up_to_the_cap(
    service: MemoryService, address: Address, store: Store
) -> None:
    used = await add(service, address, "Sam works as a nurse")
    near_cap = await add(service, address, "Sam lives in Leeds")
    async with store.session() as session:
        await session.execute(
            update(MemoryItem).where(MemoryItem.id == near_cap).values(priority=0.85)
        )
    await _trace(store, address, [used, near_cap])
    await _trace(store, address, [used])

    counts = await nightly(ctx(service))
    assert counts["promoted"] == 2
    after = await rows(store)
    assert after[used][5] == pytest.approx(0.1)
    assert after[near_cap][5] == pytest.approx(UpkeepJobsConfig().promote_max)

    # Used again the same day, and the nightly run again: once a day per item.
    await _trace(store, address, [used])
    assert (await nightly(ctx(service)))["promoted"] == 0
    assert (await rows(store))[used][5] == pytest.approx(0.1)
    # The next day, what was used since the last run gains again.
    await _trace(store, address, [used])
    assert (await nightly(ctx(service, now=NOW + timedelta(days=1))))["promoted"] == 1
    assert (await rows(store))[used][5] == pytest.approx(0.2)


async def test_extraction_catch_up_runs_every_extractor_for_the_run_s_person(
    service: MemoryService, address: Address
) -> None:
    seen: list[int | None] = []

    async def extractor(person_id: int | None) -> int:
        seen.append(person_id)
        return 4

    counts = await nightly(ctx(service, person_id=address.person_id, extractors=[extractor]))
    assert seen == [address.person_id]
    assert counts["extracted"] == 4


KILLED_RUN = """
import asyncio, sys, time
from datetime import UTC, datetime
from gateway.config import load_config
from gateway.store import Store
from memory.embed import SentenceEmbedder
from memory.jobs.base import JobContext
from memory.jobs.nightly import nightly
from memory.service import MemoryService

config = load_config(None, env={}, overrides={
    "store": {"data_dir": sys.argv[1]}, "memory": {"embedder": "minilm"}})

def after_batch(done, total):
    if total is None:  # a batch was committed: now the kill comes
        print("committed", flush=True)
        time.sleep(120)

async def main():
    async with Store(config.database_url) as store:
        service = MemoryService(
            store, config.memory, config.data_dir / "memory-index", SentenceEmbedder.load())
        await nightly(JobContext(
            service=service, now=datetime.now(UTC), batch=1, progress=after_batch))

asyncio.run(main())
"""


async def test_a_process_killed_mid_merge_loses_and_doubles_nothing(
    service: MemoryService, address: Address, store: Store, memory_config: Config
) -> None:
    import signal
    import sys

    groups = [
        ("Sam loves hiking in the Alps", "Sam really enjoys hiking in the Alps"),
        ("Sam prefers tea over coffee", "Sam likes tea more than coffee"),
        ("Sam is allergic to peanuts", "Sam has a peanut allergy"),
    ]
    for n, (a, b) in enumerate(groups):
        await add(service, address, a, confidence=0.9, accesses=1, sources=(100 + n,))
        await add(service, address, b, accesses=2, sources=(200 + n,))
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        KILLED_RUN,
        str(memory_config.data_dir),
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert child.stdout is not None
        line = await asyncio.wait_for(child.stdout.readline(), 120)
        assert line.decode().strip() == "committed"
        child.send_signal(signal.SIGKILL)
        await asyncio.wait_for(child.wait(), 30)
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()
    assert child.returncode == -signal.SIGKILL
    async with store.reader() as session:
        assert len((await session.scalars(select(MemoryMerge))).all()) == 1

    counts = await nightly(ctx(service))

    assert counts["merged"] == len(groups) - 1
    after = await rows(store)
    active = [v for v in after.values() if v[0] is ItemStatus.ACTIVE]
    assert sorted(v[3] for v in active) == [3] * len(groups)
    assert all(len(v[2]) == 2 for v in active)


async def test_a_merge_batch_starts_between_packs(
    service: MemoryService, address: Address, store: Store
) -> None:
    await add(service, address, "Sam has a grey cat called Miso", confidence=0.9)
    other = await add(service, address, "Sam has a gray cat named Miso")
    found = await merge.find(service, address.person_id, 0.85)
    assert found.groups
    commits = store.commits
    with service.packs.pack():
        batch = asyncio.create_task(
            merge.apply(service, address.person_id, found.groups, NOW), name="merge-batch"
        )
        await asyncio.sleep(0.3)
        # The batch waits for the pack under way: nothing written yet.
        assert not batch.done()
        assert store.commits == commits
    assert await batch == 1
    assert (await rows(store))[other][0] is ItemStatus.SUPERSEDED
    assert service.packs.waits == 1
