"""The store and the memory layer on a real PostgreSQL server (Debian's, started
for this module on a loopback port and thrown away after).

SQLite is the default and has FTS5; PostgreSQL has neither FTS5 nor SQLite's
driver shortcuts, so the pack reads through SQLAlchemy and full text comes
from each person's in-memory index. The same items must give the same packs
on both, and "forget ..." and "before the trip" must work there too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import select, text

from gateway.bench.gateway_bench import GatewayProcess, free_port
from gateway.config import Config
from gateway.errors import DatabaseInUse
from gateway.store import Store
from gateway.store.datalock import ADVISORY_KEY, PostgresLock, claim_database
from gateway.store.repo import Address, resolve_address, store_inbound
from gateway.testing.postgres import PG_BINARIES, throwaway_postgres
from memory import repo
from memory.curate import MemoryCurator
from memory.models import MemoryItem, MemoryTrace
from memory.repo import NewItem
from memory.service import Episode, MemoryService, PackRequest
from memory.types import ItemType, Tier

pytestmark = pytest.mark.skipif(not PG_BINARIES, reason="Debian postgresql is not installed")

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
SAID = [
    ("I went hiking near Lisbon with Ana", "Sam"),
    ("Ana runs a pottery studio in Kyoto", "Ada"),
    ("My cat Miso sleeps all day on the sofa", "Sam"),
    ("We were late for the pottery class again", "Sam"),
    ("Back from the trip to Japan, so tired", "Sam"),
    ("The hills near Lisbon are steep, my legs hurt", "Sam"),
]
MESSAGES = ("where did I go hiking?", "tell me about pottery", "how is Miso?", "Ana")


@pytest.fixture(scope="module")
def postgres() -> Iterator[str]:
    """A throwaway PostgreSQL server; the URL of its server, without a database."""
    with throwaway_postgres() as server:
        yield server


@pytest.fixture
async def pg_store(postgres: str) -> AsyncIterator[Store]:
    """A new database on the server, migrated and open."""
    name = f"agentgw_{uuid.uuid4().hex[:12]}"
    async with Store(f"{postgres}/postgres") as admin:
        engine = admin.engine.execution_options(isolation_level="AUTOCOMMIT")
        async with engine.connect() as connection:
            await connection.execute(text(f"CREATE DATABASE {name}"))
    async with Store(f"{postgres}/{name}") as store:
        yield store


async def sam_says(store: Store, config: Config) -> tuple[MemoryService, Address, list[int]]:
    service = MemoryService(store, config.memory, config.data_dir / f"index-{store.url[:8]}", None)
    sam = await resolve_address(store, "webchat", "session-sam", display_name="Sam")
    ids = await service.ingest(
        [
            Episode(
                sam.person_id, line, T0 + timedelta(days=3 * n), "user", who, sam.conversation_id
            )
            for n, (line, who) in enumerate(SAID)
        ]
    )
    await service.lexical(sam.person_id, wait=True)
    return service, sam, ids


async def test_postgresql_packs_what_sqlite_packs(
    pg_store: Store, store: Store, config: Config
) -> None:
    on_pg, sam_pg, ids_pg = await sam_says(pg_store, config)
    on_sqlite, sam, ids = await sam_says(store, config)
    assert ids_pg == ids
    at = T0 + timedelta(days=30)
    for message in MESSAGES:
        expected = await on_sqlite.build_pack(PackRequest(sam.person_id, message, at))
        inbound = await store_inbound(pg_store, sam_pg, message, at, None)
        pack = await on_pg.build_pack(
            PackRequest(sam_pg.person_id, message, at, turn_id=inbound.turn_id)
        )
        assert pack.kept, message
        assert pack.text == expected.text, message
        assert [c["score"] for c in pack.result.trace] == [
            c["score"] for c in expected.result.trace
        ], message
        # Its trace is stored, compressed (BYTEA), and reads back whole.
        await on_pg.traces_saved()
        trace = await repo.trace_for_turn(pg_store, inbound.turn_id)
        assert trace is not None
        assert trace.kept_ids == list(pack.kept)
        assert trace.candidates == list(pack.result.trace)
    await on_pg.aclose()
    await on_sqlite.aclose()


async def test_forget_and_before_the_trip_work_without_fts5(
    pg_store: Store, config: Config
) -> None:
    service, sam, ids = await sam_says(pg_store, config)
    at = T0 + timedelta(days=30)
    # Every word must be held: nothing says both "cat" and "Ana".
    assert (await service.forget(sam.person_id, "cat Ana", at=at)).items == ()
    forgotten = await service.forget(sam.person_id, "my cat Miso", at=at)
    assert [i for i, _ in forgotten.items] == [ids[2]]
    pack = await service.build_pack(PackRequest(sam.person_id, "how is Miso?", at))
    assert ids[2] not in pack.kept
    # "before the trip": the window ends when the trip was talked about.
    pack = await service.build_pack(
        PackRequest(sam.person_id, "what did I do before the trip to Japan?", at)
    )
    assert pack.window is not None
    assert pack.window.end == (T0 + timedelta(days=12)).date()
    await service.aclose()


async def test_vectors_of_another_model_are_found_on_postgresql(
    pg_store: Store, config: Config
) -> None:
    service, sam, ids = await sam_says(pg_store, config)  # no embedder: no vectors
    assert await repo.people_with_stale_vectors(pg_store, "tiny", 4) == [sam.person_id]
    vectors = np.eye(len(ids), 4, dtype=np.float32)
    await repo.set_vectors(pg_store, ids, vectors, "tiny")
    assert await repo.people_with_stale_vectors(pg_store, "tiny", 4) == []
    # Another name, or the same name at another width (BYTEA's length), is stale.
    assert await repo.people_with_stale_vectors(pg_store, "other", 4) == [sam.person_id]
    assert await repo.people_with_stale_vectors(pg_store, "tiny", 8) == [sam.person_id]
    stale = await repo.stale_vectors(pg_store, sam.person_id, "tiny", 8, ids[1], 2)
    assert [row[0] for row in stale] == ids[2:4]
    await service.aclose()


async def test_long_episodes_are_cut_on_postgresql(pg_store: Store, config: Config) -> None:
    service, sam, _ = await sam_says(pg_store, config)
    long_text = "\n\n".join(f"Part {n} of a long story about the garden. " * 12 for n in range(4))
    (whole,) = await repo.insert_items(
        pg_store,
        [NewItem(sam.person_id, ItemType.EPISODE, long_text, T0, speaker="Sam", role="user")],
    )
    used = T0 + timedelta(days=2)
    async with pg_store.session() as session:
        row = await session.get(MemoryItem, whole)
        assert row is not None
        row.strength, row.access_count, row.last_accessed_at = 1.5, 3, used
        row.pinned, row.tier = True, Tier.WARM
    assert await service.cut_long_episodes() == 1
    assert await service.cut_long_episodes() == 0  # store_info remembers the length
    (old,) = await repo.get_items(pg_store, [whole])
    assert old.status.value == "superseded"
    parts = await repo.get_items(pg_store, range(whole + 1, whole + 10))
    assert len(parts) >= 4
    assert " ".join(p.content for p in parts).split() == long_text.split()
    # Each passage is the message as it was used, pinned and decayed.
    assert {(p.strength, p.access_count, p.last_accessed_at, p.pinned, p.tier) for p in parts} == {
        (1.5, 3, used, True, Tier.WARM)
    }
    await service.aclose()


async def test_ids_on_postgresql_are_never_given_again(pg_store: Store, config: Config) -> None:
    service, sam, ids = await sam_says(pg_store, config)
    await MemoryCurator(service).delete(ids[-1])
    (again,) = await repo.insert_items(
        pg_store, [NewItem(sam.person_id, ItemType.FACT, "Sam plays the cello", T0)]
    )
    assert again == ids[-1] + 1
    assert len(pg_store.identity) == 32
    await service.aclose()


async def test_traces_past_their_keep_are_deleted_on_postgresql(
    pg_store: Store, config: Config
) -> None:
    service, sam, _ = await sam_says(pg_store, config)
    for question in ("how is Miso?", "where does Ana live?", "what did I cook?"):
        await service.build_pack(PackRequest(sam.person_id, question, T0 + timedelta(days=30)))
    await service.traces_saved()
    now = datetime.now(UTC)
    async with pg_store.session() as session:
        traces = list(await session.scalars(select(MemoryTrace).order_by(MemoryTrace.id)))
        traces[0].created_at = now - timedelta(days=91)
        await session.commit()
    assert await service.prune_traces(now) == 1
    async with pg_store.session() as session:
        left = list(await session.scalars(select(MemoryTrace.query).order_by(MemoryTrace.id)))
    assert left == ["where does Ana live?", "what did I cook?"]
    await service.aclose()


async def test_one_gateway_per_postgresql_database(pg_store: Store, postgres: str) -> None:
    # Two gateways on one database would each find only the memory items they stored.
    async with claim_database(pg_store.url):
        with pytest.raises(DatabaseInUse) as refused:
            async with claim_database(pg_store.url):
                pass
        database = pg_store.url.rsplit("/", 1)[-1]
        holder = f"agentgw pid {os.getpid()} on {socket.gethostname()}, from 127.0.0.1"
        assert f"{database} is in use by another agentgw ({holder})" in str(refused.value)
        # Advisory locks are per database: another one on the server is free.
        async with claim_database(f"{postgres}/postgres"):
            pass
    # Released with its connection: the next gateway gets it.
    async with claim_database(pg_store.url):
        pass


async def held_by(store: Store) -> int | None:
    """The server process holding agentgw's advisory lock, looked up without taking it
    (a probe that took it would be another gateway to the one checking)."""
    async with store.session() as session:
        pid: int | None = await session.scalar(
            text(
                "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objid = :low"
            ),
            {"low": ADVISORY_KEY & 0xFFFFFFFF},
        )
    return pid


async def terminate_holder(store: Store) -> None:
    """End the session that holds agentgw's advisory lock, as a server restart would."""
    pid = await held_by(store)
    async with store.session() as session:
        ended = await session.scalar(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
    assert ended is True


async def test_a_lock_lost_with_its_session_is_taken_again(pg_store: Store) -> None:
    async with PostgresLock(pg_store.url) as lock:
        assert await lock.check() is True
        await terminate_holder(pg_store)
        # Unseen until checked, a second gateway could start now; the check takes it again.
        assert await lock.check() is False
        with pytest.raises(DatabaseInUse):
            async with PostgresLock(pg_store.url):
                pass
        # Lost, and another gateway took it meanwhile: the check says who.
        await terminate_holder(pg_store)
        async with PostgresLock(pg_store.url):
            with pytest.raises(DatabaseInUse):
                await lock.check()


async def test_a_claimed_database_checks_its_lock_while_held(pg_store: Store) -> None:
    lost: list[DatabaseInUse] = []
    async with claim_database(pg_store.url, check_every_s=0.05, on_lost=lost.append):
        first = await held_by(pg_store)
        assert first is not None
        await terminate_holder(pg_store)
        for _ in range(100):  # the next check, within a few tenths of a second
            await asyncio.sleep(0.05)
            again = await held_by(pg_store)
            if again is not None and again != first:
                break
        else:
            pytest.fail("the lock was not taken again")
    assert lost == []


async def test_a_claimed_database_lost_to_another_gateway_says_so(pg_store: Store) -> None:
    lost: list[DatabaseInUse] = []
    async with claim_database(pg_store.url, check_every_s=0.05, on_lost=lost.append):
        # Taken by another while this one's session is down, before its next check.
        for _ in range(50):
            await terminate_holder(pg_store)
            with contextlib.suppress(DatabaseInUse):
                async with PostgresLock(pg_store.url):
                    for _ in range(100):
                        await asyncio.sleep(0.05)
                        if lost:
                            break
                    break
        assert len(lost) == 1
    assert "lost its lock while its session was down, and another took it" in str(lost[0])


async def test_a_gateway_whose_database_another_took_stops(pg_store: Store, tmp_path: Path) -> None:
    # Two gateways writing one database would each find only their own memories: the
    # one that lost the lock stops, gracefully (exit 2), and says why.
    port = free_port()
    config = tmp_path / "agentgw.toml"
    config.write_text(
        f'[server]\nhost = "127.0.0.1"\nport = {port}\n'
        f"[store]\ndata_dir = {json.dumps(str(tmp_path / 'data'))}\n"
        f"url = {json.dumps(pg_store.url)}\nlock_check_s = 0.5\n"
        '[brain]\nkind = "scripted"\n[voice]\nenabled = false\n[memory]\nenabled = false\n',
        encoding="utf-8",
    )
    gateway = GatewayProcess(config, port, tmp_path / "gateway.log")
    await gateway.start()
    try:
        status = None
        for _ in range(20):
            await terminate_holder(pg_store)
            with contextlib.suppress(DatabaseInUse):  # it took the lock back first: again
                async with PostgresLock(pg_store.url):
                    status = await gateway.exited(timeout=60)
                break
        assert status == 2, gateway.log_text()[-3000:]
    finally:
        await gateway.kill()
    log = gateway.log_text()
    assert "lost its lock while its session was down, and another took it" in log
    assert "stop it first" in log  # the holder, named as a refused start names it
