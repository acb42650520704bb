"""Bounded memory per person: indexes start small and grow, idle people's indexes
leave memory (saved) and come back on demand, and new webchat people are
rate-limited per client address."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp
import numpy as np
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from numpy.typing import NDArray

from channels.new_people import NewPeopleLimit, is_loopback_peer
from gateway.app import create_app
from gateway.cli import main
from gateway.runtime import GATEWAY
from gateway.store import Store
from gateway.store.repo import Address, find_address, resolve_address
from memory import repo
from memory.flat_index import FLAT_MAX, FlatIndex
from memory.index import INITIAL_CAPACITY, IndexParams, PersonIndex
from memory.lexical import LexicalIndex
from memory.service import Episode, MemoryService, PackRequest
from memory.types import ItemType
from tests.conftest import make_config
from tests.test_cli import run_command

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
DIM = 64


class HashEmbedder:
    """Deterministic bag of words: texts sharing words get close vectors."""

    model_name = "hash-64"
    dim = DIM

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        out = np.zeros((len(texts), DIM), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"[a-z]+", text.lower()):
                out[row, int(hashlib.md5(word.encode()).hexdigest(), 16) % DIM] += 1.0
            out[row] /= float(np.linalg.norm(out[row])) or 1.0
        return out


def unit_vectors(n: int, seed: int = 3) -> NDArray[np.float32]:
    rows = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_an_index_starts_small_and_grows_past_its_first_room(tmp_path: Path) -> None:
    index = PersonIndex(tmp_path, 1, IndexParams(dim=DIM))
    assert index.open([]) == []
    assert index._index.get_max_elements() == INITIAL_CAPACITY
    small = index.nbytes
    vectors = unit_vectors(5 * INITIAL_CAPACITY)
    # A few at a time, as messages come: each add past the room doubles it.
    for start in range(0, len(vectors), 3):
        ids = list(range(start + 1, min(start + 4, len(vectors) + 1)))
        index.add(ids, vectors[start : start + 3])
    assert index.count == len(vectors)
    assert index._index.get_max_elements() >= len(vectors)
    assert index.nbytes > small
    for n in (0, INITIAL_CAPACITY, len(vectors) - 1):
        assert index.search(vectors[n], 1)[0][0] == n + 1
    index.save()
    again = PersonIndex(tmp_path, 1, IndexParams(dim=DIM))
    assert again.open(range(1, len(vectors) + 1)) == []
    assert again.origin == "loaded"
    assert again.search(vectors[-1], 1)[0][0] == len(vectors)


def test_a_small_index_is_exact_and_moves_into_hnswlib_past_flat_max(tmp_path: Path) -> None:
    index = PersonIndex(tmp_path, 1, IndexParams(dim=DIM))
    index.open([])
    assert isinstance(index._index, FlatIndex)
    vectors = unit_vectors(FLAT_MAX + 50)
    index.add(range(1, FLAT_MAX + 1), vectors[:FLAT_MAX])
    index.delete([5])
    assert isinstance(index._index, FlatIndex)
    # Exact: brute force's nearest, the deleted one left out.
    scores = vectors[:FLAT_MAX] @ vectors[4]
    scores[4] = -np.inf
    expected = [int(i) + 1 for i in np.argsort(-scores, kind="stable")[:10]]
    assert [label for label, _ in index.search(vectors[4], 10)] == expected
    assert index.nbytes < FLAT_MAX * DIM * 4 * 2
    index.save()
    loaded = PersonIndex(tmp_path, 1, IndexParams(dim=DIM))
    assert loaded.open([i for i in range(1, FLAT_MAX + 1) if i != 5]) == []
    assert loaded.origin == "loaded"
    assert isinstance(loaded._index, FlatIndex)
    assert [label for label, _ in loaded.search(vectors[4], 10)] == expected

    index.add(range(FLAT_MAX + 1, FLAT_MAX + 51), vectors[FLAT_MAX:])
    assert not isinstance(index._index, FlatIndex)
    assert index.count == FLAT_MAX + 49
    assert index.search(vectors[4], 1)[0][0] != 5  # still deleted
    assert index.search(vectors[-1], 1)[0][0] == FLAT_MAX + 50
    assert index.nbytes > 65536 * 40  # hnswlib's own table
    index.add([5], vectors[4:5])  # restored
    assert index.search(vectors[4], 1)[0][0] == 5
    index.save()
    again = PersonIndex(tmp_path, 1, IndexParams(dim=DIM))
    assert again.open(range(1, FLAT_MAX + 51)) == []
    assert not isinstance(again._index, FlatIndex)
    assert again.search(vectors[-1], 1)[0][0] == FLAT_MAX + 50


def test_a_new_persons_first_index_is_no_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("DEBUG", logger="memory.index")
    PersonIndex(tmp_path, 1, IndexParams(dim=DIM)).open([])
    assert [r.levelname for r in caplog.records] == ["DEBUG"]
    (tmp_path / "person-2.hnsw").write_bytes(b"junk")
    (tmp_path / "person-2.json").write_text("{}")
    PersonIndex(tmp_path, 2, IndexParams(dim=DIM)).open([])
    assert caplog.records[-1].levelname == "WARNING"


@pytest.fixture
async def tiny_cache(store: Store, tmp_path: Path) -> AsyncIterator[MemoryService]:
    """A service whose index cache holds one small person at most."""
    config = make_config(tmp_path, memory={"index_cache_mb": 0.03})
    service = MemoryService(store, config.memory, tmp_path / "memory-index", HashEmbedder())
    yield service
    await service.aclose()


async def say(service: MemoryService, who: Address, *lines: str) -> list[int]:
    return await service.ingest(
        [
            Episode(
                person_id=who.person_id,
                text=text,
                at=T0 + timedelta(minutes=n),
                role="user",
                speaker="Sam",
                conversation_id=who.conversation_id,
            )
            for n, text in enumerate(lines)
        ]
    )


async def use(service: MemoryService, who: Address, question: str) -> set[int]:
    """A pack for ``who`` (both indexes used); the ids it found by vector and by words."""
    await service.lexical(who.person_id, wait=True)
    pack = await service.build_pack(PackRequest(who.person_id, question, T0 + timedelta(days=1)))
    return {c["id"] for c in pack.result.trace if {"ann", "fts"} & set(c["sources"])}


async def test_idle_peoples_indexes_are_evicted_saved_and_reloaded(
    store: Store, tiny_cache: MemoryService, tmp_path: Path
) -> None:
    service = tiny_cache
    sam = await resolve_address(store, "webchat", "session-sam")
    ada = await resolve_address(store, "webchat", "session-ada")
    await say(service, sam, "I moved to Lisbon in May", "My cat Miso sleeps all day")
    await use(service, sam, "where do I live")
    # Stored and indexed just before the eviction: fewer changes than a save waits for.
    (bike,) = await say(service, sam, "My bike is a red Brompton")
    ann, lexical = await service.index(sam.person_id), await service.lexical(sam.person_id)
    assert ann is not None
    assert lexical is not None
    assert ann.dirty
    assert lexical.dirty

    await say(service, ada, "Ada paints ceramic tiles")
    await use(service, ada, "what does Ada paint")
    # Sam's pair did not fit beside Ada's: it left memory and was saved.
    assert sam.person_id not in service._indexes
    assert sam.person_id not in service._lexical
    assert service.index_cache.evicted >= 1
    assert sam.person_id not in service.index_cache
    await service._evictions.wait(sam.person_id)
    assert not ann.dirty
    assert not lexical.dirty
    held = await repo.indexable_ids(store, sam.person_id)
    on_disk = PersonIndex(tmp_path / "memory-index", sam.person_id, ann.params)
    assert on_disk.open(held) == []  # the file has every item, the bike too
    saved = LexicalIndex.load(
        tmp_path / "memory-index" / f"person-{sam.person_id}.lexical.npz",
        lexical._tokenizer,
        store.identity,
    )
    assert bike in saved.live_ids()

    # Sam again: both come back from the files, as saved, and find the bike.
    found = await use(service, sam, "what colour is my bike")
    assert bike in found
    reloaded = await service.index(sam.person_id)
    assert reloaded is not None
    assert reloaded is not ann
    assert reloaded.origin == "loaded"
    assert reloaded.count == len(held)
    assert service.index_cache.total_bytes <= service.index_cache.budget_bytes
    assert ada.person_id not in service._indexes


async def test_a_change_reaching_an_evicted_index_after_its_save_is_not_lost(
    store: Store, tiny_cache: MemoryService
) -> None:
    service = tiny_cache
    sam = await resolve_address(store, "webchat", "session-sam")
    ada = await resolve_address(store, "webchat", "session-ada")
    await say(service, sam, "I moved to Lisbon in May")
    old = await service.index(sam.person_id)
    assert old is not None
    await say(service, ada, "Ada paints ceramic tiles")
    await use(service, ada, "what does Ada paint")
    await service._evictions.wait(sam.person_id)
    assert sam.person_id not in service._indexes
    # An ingest that took Sam's index before the eviction adds to it after the save:
    # the item is stored first, so the reopened index reads it from the store.
    (late,) = await repo.insert_items(
        store,
        [
            repo.NewItem(
                person_id=sam.person_id,
                type=ItemType.EPISODE,
                content="My bike is a red Brompton",
                occurred_at=T0,
                conversation_id=sam.conversation_id,
                vector=HashEmbedder().embed(["Sam: My bike is a red Brompton"])[0],
                embedding_model=HashEmbedder.model_name,
            )
        ],
    )
    old.add([late], HashEmbedder().embed(["Sam: My bike is a red Brompton"]))
    assert late in await use(service, sam, "what colour is my bike")
    reopened = await service.index(sam.person_id)
    assert reopened is not None
    assert reopened.origin == "loaded, updated (+1 -0)"


def test_new_people_are_limited_per_address_and_loopback_is_not() -> None:
    now = [0.0]
    limit = NewPeopleLimit(per_hour=2.0, burst=3, clock=lambda: now[0])
    assert [limit.allow("203.0.113.7") for _ in range(4)] == [True, True, True, False]
    assert limit.allow("198.51.100.1")  # another address has its own bucket
    now[0] += 1800.0  # half an hour: one more
    assert [limit.allow("203.0.113.7") for _ in range(2)] == [True, False]
    for local in ("127.0.0.1", "127.5.5.5", "::1", "::ffff:127.0.0.1", None):
        assert is_loopback_peer(local)
        assert all(limit.allow(local) for _ in range(10))
    assert not is_loopback_peer("::ffff:203.0.113.7")


@pytest.fixture
async def served_from(tmp_path: Path) -> AsyncIterator[tuple[TestServer, list[str]]]:
    """The real app, limited to 2 new people an address; the peer address each
    connection appears to come from is the list's last entry (loopback at first)."""
    config = make_config(tmp_path, webchat={"new_people_per_hour": 1.0, "new_people_burst": 2})
    app = create_app(config)
    peer = ["127.0.0.1"]

    @web.middleware
    async def from_peer(request: web.Request, handler: web.Handler) -> web.StreamResponse:
        # As if the connection came from elsewhere (the test server listens on loopback).
        return await handler(request.clone(remote=peer[-1]))

    app.middlewares.insert(0, from_peer)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield server, peer
    finally:
        await server.close()


async def first_frames(server: TestServer, session: str) -> list[dict[str, object]]:
    async with (
        aiohttp.ClientSession() as client,
        client.ws_connect(server.make_url(f"/ws?session={session}")) as ws,
    ):
        frames = [await ws.receive_json(timeout=5)]
        if frames[0]["type"] == "hello":
            frames.append(await ws.receive_json(timeout=5))
        return frames


async def test_the_webchat_refuses_a_new_person_past_the_limit(
    served_from: tuple[TestServer, list[str]],
) -> None:
    server, peer = served_from
    store = server.app[GATEWAY].store
    # Loopback (the default bind) is exempt: as many new people as it likes.
    for n in range(4):
        assert (await first_frames(server, f"local-page-{n}"))[0]["type"] == "hello"
    peer.append("203.0.113.7")
    for n in range(2):
        assert (await first_frames(server, f"remote-page-{n}"))[0]["type"] == "hello"
    refused = await first_frames(server, "remote-page-2")
    assert refused == [
        {
            "type": "error",
            "code": "rate_limited",
            "message": "too many new conversations from 203.0.113.7: at most 1 an hour; "
            "come back with a session you already used",
        }
    ]
    assert await find_address(store, "webchat", "remote-page-2") is None
    # A session it already has is no new person: still welcome.
    assert (await first_frames(server, "remote-page-0"))[0]["type"] == "hello"
    peer.append("198.51.100.1")
    assert (await first_frames(server, "other-address-0"))[0]["type"] == "hello"


def test_bench_gateway_new_people_prints_rss_figures_as_json() -> None:
    """A tiny real run of ``--new-people``: the gateway as a subprocess, its RSS read."""
    result = run_command(
        "bench", "gateway", "--new-people", "6", "--index-cache-mb", "1", "--json", timeout=120
    )
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout)
    assert (figures["new_people"], figures["replied"], figures["errors"]) == (6, 6, 0)
    assert figures["index_cache_mb"] == 1.0
    readings = figures["rss_mb_by_people"]
    assert [n for n, _ in readings] == [0, 1, 2, 3, 4, 5, 6]
    assert all(mb > 0 for _, mb in readings)
    assert figures["rss_before_mb"] == readings[0][1]
    assert figures["rss_after_mb"] == readings[-1][1]
    assert figures["per_person_mb"] == pytest.approx(
        (readings[-1][1] - readings[0][1]) / 6, abs=0.02
    )
    assert figures["settled_at"] == 3


def test_bench_gateway_refuses_no_new_people(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "gateway", "--new-people", "0"]) == 2
    assert "--new-people" in capsys.readouterr().err


async def test_people_used_at_once_under_a_tiny_cache_lose_nothing(
    store: Store, tiny_cache: MemoryService
) -> None:
    """Ingests, packs and retirements of six people interleaved, evicting one another
    all along: the indexes held at the end hold exactly what the store says."""
    service = tiny_cache
    people = [await resolve_address(store, "webchat", f"session-{n}") for n in range(6)]
    last_trip: dict[int, int] = {}

    async def talk(who: Address) -> None:
        for turn in range(5):
            trip, _ = await say(service, who, f"Trip {turn} to Lisbon", f"Pottery class {turn}")
            last_trip[who.person_id] = trip
            await use(service, who, f"what happened on trip {turn}")
            if turn % 2:
                await service.forget(who.person_id, "pottery class", at=T0)

    await asyncio.gather(*(talk(who) for who in people))
    assert service.index_cache.evicted > len(people)
    for who in people:
        held = set(await repo.indexable_ids(store, who.person_id))
        recallable, _ = await repo.recallable_ids(store, who.person_id)
        assert 5 <= len(held) < 10  # pottery forgotten twice
        ann = service._indexes.get(who.person_id)
        if ann is not None:
            assert ann._live == held
        lexical = service._lexical.get(who.person_id)
        if lexical is not None:
            assert lexical.live_ids() == recallable
        # Reopened (or as held), the last item still found.
        assert last_trip[who.person_id] in await use(service, who, "Trip 4 to Lisbon")


async def test_an_ingest_for_two_people_that_evicts_one_midway(
    store: Store, tmp_path: Path
) -> None:
    """One batch for two people whose full-text indexes are held: adding the first's
    grows it past the budget and evicts the second's before its turn comes."""
    config = make_config(tmp_path, memory={"index_cache_mb": 0.05})
    service = MemoryService(store, config.memory, tmp_path / "memory-index", None)
    try:
        ann = await resolve_address(store, "webchat", "session-ann")
        bob = await resolve_address(store, "webchat", "session-bob")
        await say(service, bob, "Bob keeps bees")
        await service.lexical(bob.person_id, wait=True)
        await say(service, ann, "Ann rows on the river")
        await service.lexical(ann.person_id, wait=True)
        assert {ann.person_id, bob.person_id} <= set(service._lexical)
        many_words = " ".join(f"word{n}x" for n in range(40))
        _, bob_item = await service.ingest(
            [
                Episode(
                    person_id=ann.person_id, text=many_words, at=T0, role="user", speaker="Ann"
                ),
                Episode(
                    person_id=bob.person_id,
                    text="Bob sells honey",
                    at=T0,
                    role="user",
                    speaker="Bob",
                ),
            ]
        )
        assert bob.person_id not in service._lexical
        assert ann.person_id in service._lexical
        found = await service.lexical(bob.person_id, wait=True)
        assert found is not None
        assert bob_item in found.live_ids()
        assert [i for i, _ in found.search(["honey"], 5)] == [bob_item]
    finally:
        await service.aclose()
