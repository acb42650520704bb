"""A cluster's gateways keep their own indexes, caught up from each other's changes
(memory/feed.py): two memory services, each with its own store connections, index
folder and LISTEN connection, on one throwaway PostgreSQL database — as two
processes would be."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gateway.config import Config
from gateway.store import Store
from gateway.store.notify import PgListener
from gateway.store.repo import Address, resolve_address
from gateway.testing.postgres import PG_BINARIES, create_database
from memory.embed import SentenceEmbedder
from memory.feed import IndexFeed
from memory.service import Episode, MemoryService, PackRequest
from tests.test_memory_postgres import postgres

pytestmark = pytest.mark.skipif(not PG_BINARIES, reason="Debian postgresql is not installed")
__all__ = ["postgres"]

T0 = datetime(2026, 2, 1, 9, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def embedder() -> SentenceEmbedder:
    return SentenceEmbedder.load()


@dataclass
class Member:
    store: Store
    memory: MemoryService
    listener: PgListener
    feed: IndexFeed


@pytest.fixture
async def two(
    postgres: str, config: Config, embedder: SentenceEmbedder, tmp_path: Path
) -> AsyncIterator[tuple[Member, Member]]:
    url = await create_database(postgres)
    members: list[Member] = []
    memory_config = config.replace(
        memory=config.memory.__class__(**{**config.memory.__dict__, "embedder": "minilm"})
    ).memory
    try:
        for name in ("a", "b"):
            store = Store(url)
            await store.open()
            memory = MemoryService(store, memory_config, tmp_path / f"index-{name}", embedder)
            listener = PgListener(url, name=f"member {name}")
            feed = IndexFeed(memory, listener)
            await feed.start()
            await listener.start()
            members.append(Member(store, memory, listener, feed))
        yield members[0], members[1]
    finally:
        for member in members:
            await member.feed.aclose()
            await member.listener.aclose()
            await member.memory.aclose()
            await member.store.close()


async def packed(member: Member, person_id: int, question: str) -> str:
    pack = await member.memory.build_pack(PackRequest(person_id, question, T0 + timedelta(days=10)))
    return pack.text


async def found_within(member: Member, person_id: int, question: str, words: str) -> bool:
    for _ in range(100):
        if words in await packed(member, person_id, question):
            return True
        await asyncio.sleep(0.05)
    return False


async def sam_with_indexes_open_on(b: Member, a: Member) -> Address:
    """Sam, with one item stored by A; B opens Sam's indexes now (its first pack
    reads the store): what A stores from here on reaches them only through the feed."""
    sam = await resolve_address(a.store, "webchat", "session-sam", display_name="Sam")
    await a.memory.ingest([Episode(sam.person_id, "My cat Miso sleeps all day", T0, "user", "Sam")])
    assert "Miso" in await packed(b, sam.person_id, "how is my cat?")
    return sam


async def test_an_item_stored_by_one_gateway_is_found_by_the_others_pack(
    two: tuple[Member, Member],
) -> None:
    a, b = two
    sam = await sam_with_indexes_open_on(b, a)
    await a.memory.ingest(
        [
            Episode(
                sam.person_id,
                "I started learning the cello with a teacher in Porto",
                T0 + timedelta(days=1),
                "user",
                "Sam",
            )
        ]
    )
    assert await found_within(b, sam.person_id, "what instrument am I learning?", "cello")
    assert b.feed.applied >= 1

    # Forgotten on A: it leaves B's indexes too.
    await a.memory.forget(sam.person_id, "the cello", at=T0 + timedelta(days=2))
    for _ in range(100):
        if "cello" not in await packed(b, sam.person_id, "what instrument am I learning?"):
            break
        await asyncio.sleep(0.05)
    index = b.memory._indexes[sam.person_id]
    lexical = b.memory._lexical[sam.person_id]
    live = await asyncio.to_thread(lexical.live_ids)
    assert index.count == 1
    assert len(live) == 1


async def test_missed_notifications_are_made_good_by_reconciling(
    two: tuple[Member, Member],
) -> None:
    a, b = two
    sam = await sam_with_indexes_open_on(b, a)
    # B hears nothing meanwhile (its LISTEN connection is closed).
    await b.listener.aclose()
    await a.memory.ingest(
        [Episode(sam.person_id, "Ana runs a pottery studio in Kyoto", T0, "user", "Sam")]
    )
    await asyncio.sleep(0.5)
    assert "pottery" not in await packed(b, sam.person_id, "who runs a pottery studio?")
    await b.feed.reconcile()
    assert "pottery" in await packed(b, sam.person_id, "who runs a pottery studio?")


async def test_the_bench_finds_items_across_two_real_processes(
    postgres: str, tmp_path: Path
) -> None:
    from gateway.bench.cluster_find import cross_process_find

    result = await cross_process_find(await create_database(postgres), tmp_path, runs=2)
    assert result["cross_process_find_missed"] == 0
    assert result["cross_process_find_ms"] >= 0
