"""The memory layer with the real MiniLM model: persistence, index rebuilds, supersession,
decay and resurrection, time-aware recall, and remember/forget through a webchat turn.

The model loads once for the whole test session (``embedder``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pytest
from aiohttp.test_utils import TestServer
from numpy.typing import NDArray
from sqlalchemy import select

from gateway.app import create_app
from gateway.brains.base import BlockKind, BrainRequest
from gateway.brains.offline import OfflineBrain
from gateway.brains.scripted import ScriptedBrain
from gateway.config import Config
from gateway.runtime import GATEWAY
from gateway.store import Store
from gateway.store.repo import Address, resolve_address
from memory import repo
from memory.curate import MemoryCurator
from memory.embed import Embedder, SentenceEmbedder
from memory.index import PersonIndex
from memory.models import MemoryItem, MemoryTrace
from memory.service import Episode, MemoryService, PackRequest
from memory.types import ItemStatus, ItemType, Tier
from persona.models import SyncScoreRow
from tests.conftest import make_config

pytestmark = pytest.mark.slow

T0 = datetime(2024, 3, 4, 9, 0, tzinfo=UTC)


@pytest.fixture(scope="session")
def embedder() -> SentenceEmbedder:
    return SentenceEmbedder.load()


class CountingEmbedder:
    """The real embedder, counting the texts it is asked to embed."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.texts: list[str] = []

    @property
    def dim(self) -> int:
        return self.inner.dim

    @property
    def model_name(self) -> str:
        return self.inner.model_name

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        self.texts.extend(texts)
        return self.inner.embed(texts)


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


def service_for(store: Store, config: Config, embedder: Embedder) -> MemoryService:
    return MemoryService(store, config.memory, config.data_dir / "memory-index", embedder)


LINES = [
    ("user", "I adopted a grey cat called Miso last spring."),
    ("assistant", "Miso sounds lovely! How is she settling in?"),
    ("user", "My sister Ana lives in Lisbon and works as a nurse."),
    ("assistant", "Lisbon is a beautiful city."),
    ("user", "I am training for the Berlin marathon in September."),
]


async def ingest_lines(service: MemoryService, address: Address) -> list[int]:
    return await service.ingest(
        [
            Episode(
                person_id=address.person_id,
                text=text,
                at=T0 + timedelta(minutes=n),
                role=role,
                speaker="Sam" if role == "user" else "Ada",
                conversation_id=address.conversation_id,
                source_ref=f"m{n}",
            )
            for n, (role, text) in enumerate(LINES)
        ]
    )


async def test_vectors_persist_so_a_restart_never_reembeds(
    store: Store, address: Address, memory_config: Config, embedder: SentenceEmbedder
) -> None:
    first = CountingEmbedder(embedder)
    service = service_for(store, memory_config, first)
    ids = await ingest_lines(service, address)
    assert len(first.texts) == len(LINES)
    assert first.texts[0] == "Sam: I adopted a grey cat called Miso last spring."
    await service.aclose()
    items = await repo.get_items(store, ids)
    assert all(item.embedding is not None and len(item.embedding) == 384 * 4 for item in items)

    second = CountingEmbedder(embedder)
    restarted = service_for(store, memory_config, second)
    pack = await restarted.build_pack(
        PackRequest(address.person_id, "What is my cat called?", T0 + timedelta(days=1))
    )
    assert second.texts == ["What is my cat called?"]  # the query only: nothing re-embedded
    index = await restarted.index(address.person_id)
    assert index is not None
    assert index.origin == "loaded"
    assert index.count == len(LINES)
    assert "Miso" in pack.text


async def test_index_files_deleted_corrupt_or_of_another_dimension_are_rebuilt(
    store: Store, address: Address, memory_config: Config, embedder: SentenceEmbedder
) -> None:
    service = service_for(store, memory_config, embedder)
    await ingest_lines(service, address)
    await service.aclose()
    folder = memory_config.data_dir / "memory-index"
    files = sorted(p.name for p in folder.iterdir())
    assert files == [f"person-{address.person_id}.hnsw", f"person-{address.person_id}.json"]

    async def reopen() -> tuple[str, str]:
        fresh = service_for(store, memory_config, embedder)
        index = await fresh.index(address.person_id)
        assert index is not None
        pack = await fresh.build_pack(
            PackRequest(address.person_id, "where does my sister live", T0 + timedelta(days=1))
        )
        await fresh.aclose()
        ann = [c["id"] for c in pack.result.trace if "ann" in c["sources"]]
        assert len(ann) == len(LINES)
        return index.origin, pack.text

    for path in folder.iterdir():
        path.unlink()
    origin, text = await reopen()
    assert origin == "rebuilt: missing"
    assert "Lisbon" in text
    assert (folder / f"person-{address.person_id}.hnsw").is_file()

    hnsw = folder / f"person-{address.person_id}.hnsw"
    hnsw.write_bytes(b"\x00garbage" * 100)
    origin, _ = await reopen()
    assert origin == "rebuilt: corrupt (checksum)"

    meta_path = folder / f"person-{address.person_id}.json"
    meta = json.loads(meta_path.read_text())
    meta["dim"] = 768
    meta_path.write_text(json.dumps(meta))
    origin, _ = await reopen()
    assert origin == "rebuilt: dimension 768 is not 384"
    assert (await reopen())[0] == "loaded"


async def test_items_stored_without_an_embedder_are_embedded_at_the_next_start(
    store: Store, address: Address, memory_config: Config, embedder: SentenceEmbedder
) -> None:
    full_text_only = MemoryService(
        store, memory_config.memory, memory_config.data_dir / "memory-index", None
    )
    ids = await ingest_lines(full_text_only, address)
    await full_text_only.aclose()
    assert all(item.embedding is None for item in await repo.get_items(store, ids))

    counting = CountingEmbedder(embedder)
    started = await MemoryService.start(store, memory_config, embedder=counting)
    assert await started.reembedded() == len(LINES)
    assert len(counting.texts) == len(LINES)
    items = await repo.get_items(store, ids)
    assert all(item.embedding_model == embedder.model_name for item in items)
    pack = await started.build_pack(
        PackRequest(address.person_id, "which city is my sister in", T0 + timedelta(days=1))
    )
    assert "Lisbon" in pack.text
    assert {c["id"] for c in pack.result.trace if "ann" in c["sources"]} == set(ids)
    await started.aclose()


# An answer longer than the whole pack's budget (1,000 tokens, ~4,000 characters).
LONG_REPLY = "\n\n".join(
    [
        "Here is a week in Portugal that keeps the travelling light and leaves room to "
        "rest, with one base in Lisbon and two day trips by train. " * 4,
        "Day one is for arriving: take the metro from the airport to Baixa-Chiado, leave "
        "the bags, and walk up to the castle for the view over the river at sunset. " * 4,
        "For custard tarts, go to the old bakery in Belem beside the monastery: the queue "
        "looks long but moves fast, and the tarts come out of the oven warm. " * 4,
        "Sintra is forty minutes by train from Rossio station; Pena Palace is the famous "
        "one, but the gardens of Quinta da Regaleira are what people remember. " * 4,
        "For the budget, count about sixty euros a day for food and transport, more if you "
        "eat in the restaurants along the river rather than in the side streets. " * 4,
        "Pack comfortable shoes for the hills and the cobbles, a light jacket for the "
        "wind in the evening, and a power adapter for the European sockets. " * 4,
        "On the last day, take the train to Cascais for the beach and come back along "
        "the coast in time for a farewell dinner with fado in Alfama. " * 4,
    ]
)


async def test_a_long_reply_is_kept_as_passages_and_packed_in_part(
    store: Store, address: Address, memory_config: Config, embedder: SentenceEmbedder
) -> None:
    assert len(LONG_REPLY) > 4 * memory_config.memory.budget_tokens
    service = service_for(store, memory_config, embedder)
    ids = await service.ingest(
        [
            Episode(
                address.person_id,
                "Can you plan my week in Portugal?",
                T0,
                "user",
                "Sam",
                address.conversation_id,
                source_ref="m1",
            ),
            Episode(
                address.person_id,
                LONG_REPLY,
                T0 + timedelta(minutes=1),
                "assistant",
                "Ada",
                address.conversation_id,
                message_id=2,
                source_ref="m2",
            ),
        ]
    )
    items = await repo.get_items(store, ids)
    parts = items[1:]
    assert len(parts) >= 7
    assert all(p.source_ref == "m2" and p.source_message_ids == [2] for p in parts)
    assert all(len(p.content) <= memory_config.memory.passage_chars for p in parts)
    # Nothing lost or reordered: the passages are the reply, cut at its boundaries.
    assert " ".join(p.content for p in parts).split() == LONG_REPLY.split()

    pack = await service.build_pack(
        PackRequest(
            address.person_id,
            "Where did you say I should buy custard tarts?",
            T0 + timedelta(days=2),
        )
    )
    (tarts,) = [p for p in parts if "custard tarts" in p.content]
    assert tarts.id in pack.kept
    assert f"#m2 Ada: {tarts.content}" in pack.text
    assert pack.tokens <= memory_config.memory.budget_tokens
    await service.aclose()


async def test_long_episodes_stored_whole_before_are_cut_at_the_next_start(
    store: Store, address: Address, tmp_path: Path, embedder: SentenceEmbedder
) -> None:
    # An older gateway, or a longer memory.passage_chars, stored the reply whole.
    whole_config = make_config(tmp_path, memory={"embedder": "minilm", "passage_chars": 10_000})
    older = await MemoryService.start(store, whole_config, embedder=embedder)
    (whole_id,) = await older.ingest(
        [
            Episode(
                address.person_id,
                LONG_REPLY,
                T0,
                "assistant",
                "Ada",
                address.conversation_id,
                message_id=2,
                source_ref="m2",
            )
        ]
    )
    await older.aclose()

    config = make_config(tmp_path, memory={"embedder": "minilm"})
    started = await MemoryService.start(store, config, embedder=embedder)
    (whole,) = await repo.get_items(store, [whole_id])
    assert whole.status is ItemStatus.SUPERSEDED  # kept for the record
    async with store.reader() as session:
        parts = list(
            (
                await session.scalars(
                    select(MemoryItem)
                    .where(MemoryItem.status == ItemStatus.ACTIVE)
                    .order_by(MemoryItem.id)
                )
            ).all()
        )
    assert whole.superseded_by_id == parts[0].id
    assert len(parts) >= 7
    assert all(p.source_ref == "m2" and len(p.content) <= 600 for p in parts)
    assert " ".join(p.content for p in parts).split() == LONG_REPLY.split()
    pack = await started.build_pack(
        PackRequest(
            address.person_id, "Which bakery has the custard tarts?", T0 + timedelta(days=1)
        )
    )
    index = await started.index(address.person_id)
    assert index is not None
    assert index.count == len(parts)  # the whole one left the index
    (tarts,) = [p for p in parts if "custard tarts" in p.content]
    assert tarts.id in pack.kept
    assert whole_id not in {c["id"] for c in pack.result.trace}
    await started.aclose()

    # Cut once: the next start with the same length has nothing to do ...
    again = await MemoryService.start(store, config, embedder=embedder)
    assert await again.cut_long_episodes() == 0
    await again.aclose()
    # ... and a shorter one cuts the passages again.
    shorter = make_config(tmp_path, memory={"embedder": "minilm", "passage_chars": 300})
    cut_again = await MemoryService.start(store, shorter, embedder=embedder)
    active = await repo.indexable_ids(store, address.person_id)
    assert len(active) > len(parts)
    assert all(len(i.content) <= 300 for i in await repo.get_items(store, active))
    await cut_again.aclose()


class NarrowEmbedder:
    """Another model, as the store sees one: MiniLM's vectors projected to 64 dimensions."""

    model_name = "minilm-narrow-64"
    dim = 64

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.projection = np.random.default_rng(7).standard_normal((inner.dim, 64))
        self.texts: list[str] = []

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        self.texts.extend(texts)
        narrow = self.inner.embed(texts) @ self.projection
        narrow /= np.linalg.norm(narrow, axis=1, keepdims=True)
        return narrow.astype(np.float32)


async def test_a_new_embedding_model_embeds_the_store_again(
    store: Store, address: Address, memory_config: Config, embedder: SentenceEmbedder
) -> None:
    service = service_for(store, memory_config, embedder)
    ids = await ingest_lines(service, address)
    await service.aclose()
    sister = ids[2]  # "My sister Ana lives in Lisbon ..."
    async with store.session() as session:
        row = await session.get(MemoryItem, sister)
        assert row is not None
        row.status = ItemStatus.FORGOTTEN
    assert await repo.people_with_stale_vectors(store, embedder.model_name, 384) == []
    # A folder swapped for a model of another width under the same name is seen too.
    assert await repo.people_with_stale_vectors(store, embedder.model_name, 64) == [
        address.person_id
    ]

    narrow = NarrowEmbedder(embedder)
    started = await MemoryService.start(store, memory_config, embedder=narrow)
    await started.reembedded()
    active = [i for i in ids if i != sister]
    assert sorted(narrow.texts) == sorted(
        f"{'Sam' if role == 'user' else 'Ada'}: {text}"
        for n, (role, text) in enumerate(LINES)
        if ids[n] != sister
    )
    items = {item.id: item for item in await repo.get_items(store, ids)}
    for item_id in active:
        assert items[item_id].embedding_model == "minilm-narrow-64"
        assert len(items[item_id].embedding or b"") == 64 * 4
    # Not recallable, so not embedded until it is restored.
    assert items[sister].embedding_model == embedder.model_name

    pack = await started.build_pack(
        PackRequest(address.person_id, "What is my cat called?", T0 + timedelta(days=1))
    )
    index = await started.index(address.person_id)
    assert index is not None
    assert index.origin == "rebuilt: dimension 384 is not 64"
    assert index.count == len(active)
    assert "Miso" in pack.text
    assert {c["id"] for c in pack.result.trace if "ann" in c["sources"]} == set(active)

    narrow.texts.clear()
    await MemoryCurator(started).restore(sister)
    assert narrow.texts == [f"Sam: {LINES[2][1]}"]
    assert index.count == len(ids)
    (restored,) = await repo.get_items(store, [sister])
    assert restored.embedding_model == "minilm-narrow-64"
    pack = await started.build_pack(
        PackRequest(address.person_id, "where does my sister live", T0 + timedelta(days=1))
    )
    assert "Lisbon" in pack.text
    assert "ann" in next(c["sources"] for c in pack.result.trace if c["id"] == sister)
    await started.aclose()

    narrow.texts.clear()
    again = await MemoryService.start(store, memory_config, embedder=narrow)
    assert narrow.texts == []  # embedded once: a restart keeps them
    await again.aclose()


class GatedEmbedder(NarrowEmbedder):
    """The other model, holding every call until the test opens the gate."""

    def __init__(self, inner: Embedder) -> None:
        super().__init__(inner)
        self.gate = threading.Event()

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        if not self.gate.wait(timeout=60):
            raise AssertionError("the gate was never opened")
        return super().embed(texts)


async def test_the_gateway_answers_while_a_new_model_embeds_the_store(
    store: Store, address: Address, memory_config: Config, embedder: SentenceEmbedder
) -> None:
    service = service_for(store, memory_config, embedder)
    ids = await ingest_lines(service, address)
    await service.aclose()
    sister = ids[2]
    async with store.session() as session:
        row = await session.get(MemoryItem, sister)
        assert row is not None
        row.status = ItemStatus.FORGOTTEN

    gated = GatedEmbedder(embedder)
    started = await MemoryService.start(store, memory_config, embedder=gated)
    # The start did not wait for the model: its first batch is held at the gate.
    assert started.reembedding == 1
    assert not started.dense_for(address.person_id)
    assert await started.index(address.person_id) is None
    pack = await started.build_pack(
        PackRequest(address.person_id, "What is my cat called?", T0 + timedelta(days=1))
    )
    assert "Miso" in pack.text  # found by its words
    assert all("ann" not in c["sources"] and c["dense"] is None for c in pack.result.trace)
    assert gated.texts == []  # the query was not embedded either
    # Restored while the pass runs: the pass's first batch was read without it.
    await MemoryCurator(started).restore(sister)
    # A message that comes meanwhile waits for one batch, and gets the new model's vector.
    ingesting = asyncio.create_task(
        started.ingest(
            [
                Episode(
                    address.person_id,
                    "My brother Tomas moved to Oslo for a job at a shipyard.",
                    T0 + timedelta(days=1),
                    "user",
                    "Sam",
                    address.conversation_id,
                )
            ]
        )
    )

    gated.gate.set()
    (new_id,) = await ingesting
    assert await started.reembedded() == len(ids) - 1 + 1  # the four, then the restored one
    assert started.reembedding == 0
    # Their index was rebuilt by the pass, before their next message needs it.
    meta = memory_config.data_dir / "memory-index" / f"person-{address.person_id}.json"
    assert json.loads(meta.read_text())["model"] == "minilm-narrow-64"
    assert started.dense_for(address.person_id)
    items = await repo.get_items(store, [*ids, new_id])
    assert {item.embedding_model for item in items} == {"minilm-narrow-64"}
    pack = await started.build_pack(
        PackRequest(address.person_id, "where does my sister live", T0 + timedelta(days=2))
    )
    found_by_vector = {c["id"] for c in pack.result.trace if "ann" in c["sources"]}
    assert found_by_vector == {*ids, new_id}
    assert "Lisbon" in pack.text
    await started.aclose()


async def test_whoever_writes_during_the_new_model_pass_is_embedded_next(
    store: Store, memory_config: Config, embedder: SentenceEmbedder
) -> None:
    service = service_for(store, memory_config, embedder)
    people = []
    for name in ("Ann", "Bo", "Cy"):
        found = await resolve_address(store, "webchat", f"session-{name}", display_name=name)
        people.append(found.person_id)
        await service.ingest(
            [
                Episode(
                    found.person_id, f"{name} keeps bees.", T0, "user", name, found.conversation_id
                )
            ]
        )
    await service.aclose()

    gated = GatedEmbedder(embedder)
    started = await MemoryService.start(store, memory_config, embedder=gated)
    assert started.reembedding == 3  # Ann's batch is held at the gate
    await started.build_pack(PackRequest(people[2], "what do I keep?", T0 + timedelta(days=1)))
    gated.gate.set()
    assert await started.reembedded() == 3
    assert gated.texts == ["Ann: Ann keeps bees.", "Cy: Cy keeps bees.", "Bo: Bo keeps bees."]
    await started.aclose()


async def test_a_stop_during_the_new_model_pass_loses_nothing(
    store: Store, address: Address, memory_config: Config, embedder: SentenceEmbedder
) -> None:
    service = service_for(store, memory_config, embedder)
    ids = await ingest_lines(service, address)
    await service.aclose()

    gated = GatedEmbedder(embedder)
    stopped = await MemoryService.start(store, memory_config, embedder=gated)
    assert stopped.reembedding == 1
    await stopped.aclose()  # while its first batch is held at the gate
    gated.gate.set()
    items = await repo.get_items(store, ids)
    assert {item.embedding_model for item in items} == {embedder.model_name}

    narrow = NarrowEmbedder(embedder)
    again = await MemoryService.start(store, memory_config, embedder=narrow)
    assert await again.reembedded() == len(ids)
    items = await repo.get_items(store, ids)
    assert {item.embedding_model for item in items} == {"minilm-narrow-64"}
    await again.aclose()


async def test_what_comes_while_the_new_index_is_built_reaches_it(
    store: Store,
    address: Address,
    memory_config: Config,
    embedder: SentenceEmbedder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    service = service_for(store, memory_config, embedder)
    ids = await ingest_lines(service, address)
    await service.aclose()

    # A message and a retirement arrive after the new index read the store, before the
    # person's packs use it.
    build = MemoryService._open_index
    arrived: list[int] = []

    async def build_then_news(self: MemoryService, person_id: int, model: Embedder) -> PersonIndex:
        index = await build(self, person_id, model)
        if not arrived:
            late = Episode(person_id, "I bake sourdough on Sundays.", T0, "user", "Sam")
            arrived.extend(await self.ingest([late]))
            await self.retire(ids[0], ItemStatus.FORGOTTEN)
        return index

    monkeypatch.setattr(MemoryService, "_open_index", build_then_news)
    started = await MemoryService.start(store, memory_config, embedder=NarrowEmbedder(embedder))
    await started.reembedded()
    assert arrived
    pack = await started.build_pack(
        PackRequest(address.person_id, "what do I bake", T0 + timedelta(days=1))
    )
    found_by_vector = {c["id"] for c in pack.result.trace if "ann" in c["sources"]}
    assert found_by_vector == {*ids[1:], *arrived}
    await started.aclose()


async def test_an_index_never_takes_a_vector_of_another_model(
    store: Store, address: Address, memory_config: Config, embedder: SentenceEmbedder
) -> None:
    narrow = NarrowEmbedder(embedder)
    service = service_for(store, memory_config, narrow)
    ids = await ingest_lines(service, address)
    await service.aclose()
    # One item still holds a MiniLM vector (restored behind a pass, say), and the
    # index files are gone, so the index is built from the store.
    (old,) = await repo.get_items(store, [ids[0]])
    await repo.set_vectors(store, [old.id], embedder.embed([old.content]), embedder.model_name)
    for path in (memory_config.data_dir / "memory-index").iterdir():
        path.unlink()

    narrow.texts.clear()
    again = service_for(store, memory_config, narrow)
    index = await again.index(address.person_id)
    assert index is not None
    assert index.count == len(ids)
    assert narrow.texts == [f"Sam: {old.content}"]
    (fixed,) = await repo.get_items(store, [old.id])
    assert fixed.embedding_model == "minilm-narrow-64"
    pack = await again.build_pack(
        PackRequest(address.person_id, "the name of my pet cat", T0 + timedelta(days=1))
    )
    assert "ann" in next(c["sources"] for c in pack.result.trace if c["id"] == old.id)
    await again.aclose()


async def test_supersession_compares_only_vectors_of_one_model(
    store: Store, address: Address, memory_config: Config, embedder: SentenceEmbedder
) -> None:
    narrow = NarrowEmbedder(embedder)
    service = service_for(store, memory_config, narrow)
    older = await service.remember(
        address.person_id, "My partner is called Robin.", at=T0, item_type=ItemType.RELATIONAL
    )
    # Its vector is still MiniLM's (its person's items are being embedded again).
    await repo.set_vectors(
        store, [older.item_id], embedder.embed([older.text]), embedder.model_name
    )
    newer = await service.remember(
        address.person_id,
        "My partner is called Robin Silva.",
        at=T0 + timedelta(days=1),
        item_type=ItemType.RELATIONAL,
    )
    # Compared by their words instead (3 of 4 shared), so the older one is replaced.
    assert newer.superseded == ((older.item_id, older.text),)
    (replaced,) = await repo.get_items(store, [older.item_id])
    assert replaced.status is ItemStatus.SUPERSEDED
    await service.aclose()


async def test_indexes_left_by_another_database_are_rebuilt_not_trusted(
    memory_config: Config, embedder: SentenceEmbedder, caplog: pytest.LogCaptureFixture
) -> None:
    # The database is deleted and made anew under the same data directory: the new
    # items get the old ones' ids, and the index files must not answer for them.
    async with Store(memory_config.database_url) as old:
        sam = await resolve_address(old, "webchat", "session-a", display_name="Sam")
        service = service_for(old, memory_config, embedder)
        await ingest_lines(service, sam)
        await service.lexical(sam.person_id, wait=True)
        await service.aclose()
    folder = memory_config.data_dir / "memory-index"
    assert (folder / f"person-{sam.person_id}.lexical.npz").is_file()
    database = Path(memory_config.database_url.split("///", 1)[1])
    for path in database.parent.glob(database.name + "*"):
        path.unlink()

    async with Store(memory_config.database_url) as new:
        again = await resolve_address(new, "webchat", "session-a", display_name="Sam")
        assert again.person_id == sam.person_id
        lines = ["My dog Rex chews every shoe in Porto.", "I sold my bike to a neighbour."]
        fresh = service_for(new, memory_config, embedder)
        ids = await fresh.ingest(
            [
                Episode(again.person_id, text, T0, "user", "Sam", again.conversation_id)
                for text in lines
            ]
        )
        assert ids == [1, 2]  # ids the old items had
        with caplog.at_level(logging.WARNING, logger="memory"):
            index = await fresh.index(again.person_id)
            lexical = await fresh.lexical(again.person_id, wait=True)
        assert index is not None
        assert lexical is not None
        assert index.origin == "rebuilt: made from another database"
        assert "made from another database" in caplog.text
        query = (await asyncio.to_thread(embedder.embed, ["the dog that chews shoes"]))[0]
        assert index.search(query, 2)[0][0] == 1
        assert lexical.live_ids() == {1, 2}
        assert lexical.search(repo.content_terms("cat Miso"), 5) == []
        assert [i for i, _ in lexical.search(repo.content_terms("bike"), 5)] == [2]
        await fresh.aclose()


async def test_a_newer_memory_supersedes_an_older_one_without_erasing_it(
    store: Store, address: Address, memory_config: Config, embedder: SentenceEmbedder
) -> None:
    service = service_for(store, memory_config, embedder)
    old = await service.remember(
        address.person_id, "my favourite colour is blue", at=T0, speaker="Sam"
    )
    new = await service.remember(
        address.person_id, "my favourite colour is green", at=T0 + timedelta(days=3), speaker="Sam"
    )
    assert old.type is ItemType.PREFERENCE
    assert new.superseded == ((old.item_id, "my favourite colour is blue"),)
    (old_row,) = await repo.get_items(store, [old.item_id])
    assert old_row.status is ItemStatus.SUPERSEDED
    assert old_row.superseded_by_id == new.item_id
    unrelated = await service.remember(address.person_id, "I prefer tea to coffee", at=T0)
    assert unrelated.superseded == ()
    pack = await service.build_pack(
        PackRequest(address.person_id, "what is my favourite colour?", T0 + timedelta(days=4))
    )
    assert "green" in pack.text
    assert "blue" not in pack.text


async def test_decay_archives_then_a_reference_brings_an_item_back(
    store: Store, address: Address, memory_config: Config, embedder: SentenceEmbedder
) -> None:
    service = service_for(store, memory_config, embedder)
    ids = await ingest_lines(service, address)
    persona_id, cat = await service.add_items(
        [
            repo.NewItem(address.person_id, ItemType.PERSONA, "Sam is a nurse", T0),
            repo.NewItem(address.person_id, ItemType.FACT, "Sam's grey cat is called Miso", T0),
        ]
    )
    index = await service.index(address.person_id)
    assert index is not None
    assert index.count == len(LINES) + 2
    # Facts halve every 4,320 h: after three years they are archived. Episodes (720 h)
    # are the record: decay demotes them to cold, in the index still; persona >= 0.5.
    later = T0 + timedelta(days=1095)
    stats = await service.sweep(later)
    assert stats.archived == 1
    rows = {row.id: row for row in await repo.get_items(store, [*ids, persona_id, cat])}
    assert {rows[i].tier for i in ids} == {Tier.COLD}
    assert rows[cat].tier is Tier.ARCHIVED
    assert rows[persona_id].tier is Tier.ACTIVE
    assert index.count == len(LINES) + 1
    # Still in the store and in full text: a message that names it finds it.
    pack = await service.build_pack(
        PackRequest(address.person_id, "How is Miso the grey cat?", later, turn_id=None)
    )
    assert cat in pack.kept
    trace = {c["id"]: c for c in pack.result.trace}
    assert "ann" not in trace[cat]["sources"]
    assert "fts" in trace[cat]["sources"]
    assert trace[cat]["signals"]["recency"] < service.decay.tier_cold
    # The cold episode that says it is still found densely.
    assert "ann" in trace[ids[0]]["sources"]
    # The person referred to it: it is reinforced, active again and back in the index.
    result = await service.reinforce_items(
        pack.kept, address.person_id, "How is Miso the grey cat?", "Miso is well.", later
    )
    assert cat in result.referred
    assert cat in result.resurrected
    (row,) = await repo.get_items(store, [cat])
    assert row.tier is Tier.ACTIVE
    assert row.access_count == 1
    assert row.strength == 1.0
    assert index.count == len(LINES) + 2


async def test_upkeep_deletes_traces_past_their_keep_and_only_those(
    store: Store, address: Address, memory_config: Config, embedder: SentenceEmbedder
) -> None:
    service = service_for(store, memory_config, embedder)
    assert service.config.trace_keep_days == 90
    await ingest_lines(service, address)
    for question in ("Where does Ana live?", "What is my cat called?", "When is the marathon?"):
        await service.build_pack(PackRequest(address.person_id, question, T0 + timedelta(hours=1)))
    await service.traces_saved()

    async def trace_ids() -> list[int]:
        async with store.session() as session:
            return list(await session.scalars(select(MemoryTrace.id).order_by(MemoryTrace.id)))

    first, second, third = await trace_ids()
    now = datetime.now(UTC)
    async with store.session() as session:
        for trace_id, age in ((first, 200), (second, 91)):
            row = await session.get(MemoryTrace, trace_id)
            assert row is not None
            row.created_at = now - timedelta(days=age)
        await session.commit()

    # 0 keeps every trace, however old.
    keep_all = MemoryService(
        store,
        replace(memory_config.memory, trace_keep_days=0),
        memory_config.data_dir / "memory-index",
        embedder,
    )
    assert await keep_all.prune_traces(now) == 0
    assert await trace_ids() == [first, second, third]

    assert await service.prune_traces(now) == 2
    assert await trace_ids() == [third]
    # The one left is whole: the panel still explains its pack.
    trace = await store_trace(store, third)
    assert trace.query == "When is the marathon?"
    assert trace.candidates

    # Batches smaller than what is due: every batch goes, none twice.
    for question in ("Who is Ana?", "Is Miso grey?"):
        await service.build_pack(PackRequest(address.person_id, question, T0 + timedelta(hours=2)))
    await service.traces_saved()
    assert await repo.prune_traces(store, datetime.now(UTC) + timedelta(seconds=1), batch=2) == 3
    assert await trace_ids() == []


async def store_trace(store: Store, trace_id: int) -> MemoryTrace:
    async with store.session() as session:
        trace = await session.get(MemoryTrace, trace_id)
    assert trace is not None
    return trace


async def test_time_aware_recall_prefers_the_named_period(
    store: Store, address: Address, memory_config: Config, embedder: SentenceEmbedder
) -> None:
    service = service_for(store, memory_config, embedder)
    dinners = [
        (datetime(2024, 5, 2, 19, 0, tzinfo=UTC), "For dinner I cooked a mushroom risotto."),
        (datetime(2024, 5, 28, 19, 0, tzinfo=UTC), "For dinner we had tacos at the market."),
        (datetime(2024, 6, 6, 19, 0, tzinfo=UTC), "For dinner I made a lentil curry."),
    ]
    ids = await service.ingest(
        [
            Episode(address.person_id, text, at, "user", "Sam", address.conversation_id)
            for at, text in dinners
        ]
    )
    asked = datetime(2024, 6, 5, 12, 0, tzinfo=UTC)  # a Wednesday: last week is 27 May - 2 June
    pack = await service.build_pack(
        PackRequest(address.person_id, "What did I have for dinner last week?", asked)
    )
    assert pack.window is not None
    assert pack.window.phrase == "last week"
    assert pack.kept[0] == ids[1]
    trace = {c["id"]: c for c in pack.result.trace}
    assert "time" in trace[ids[1]]["sources"]
    # "yesterday" said on 6 June refers to 5 June: stored with the item.
    (curry,) = await repo.get_items(store, [ids[2]])
    assert curry.refers_start is None
    said = await service.ingest(
        [Episode(address.person_id, "Yesterday I ran 10 km.", asked, "user", "Sam")]
    )
    (run,) = await repo.get_items(store, said)
    assert run.refers_start == datetime(2024, 6, 4).date()


async def newest_trace(service: MemoryService, store: Store) -> MemoryTrace:
    await service.traces_saved()
    async with store.reader() as session:
        trace = await session.scalar(select(MemoryTrace).order_by(MemoryTrace.id.desc()))
    assert trace is not None
    return trace


async def test_names_do_not_pull_in_glue_and_salience_is_stored(
    store: Store, address: Address, memory_config: Config, embedder: SentenceEmbedder
) -> None:
    service = service_for(store, memory_config, embedder)
    chat = [
        ("Ada", "Hi Sam! Great to see you again, Sam."),
        ("Sam", "Thanks Ada, you too!"),
        ("Sam", "I booked a ferry to the Greek islands for my holiday in July."),
        ("Ada", "Go for it, Sam! Ada is cheering for you."),
        ("Sam", "Ada, you are the best."),
    ]
    ids = await service.ingest(
        [
            Episode(
                address.person_id,
                text,
                T0 + timedelta(minutes=n),
                "user",
                who,
                address.conversation_id,
            )
            for n, (who, text) in enumerate(chat)
        ]
    )
    stored = {item.id: item.priority for item in await repo.get_items(store, ids)}
    ferry = ids[2]
    assert stored[ferry] == max(stored.values())
    assert stored[ferry] > 0.5 > stored[ids[1]]

    message = "Ada, where is Sam going on holiday?"
    pack = await service.build_pack(PackRequest(address.person_id, message, T0 + timedelta(days=1)))
    assert pack.kept[0] == ferry
    assert (await newest_trace(service, store)).notes["searched"] == "where is going on holiday?"

    # Switched off, the message is searched as it is.
    plain = service_for(
        store,
        memory_config.replace(memory=replace(memory_config.memory, strip_speaker_names=False)),
        embedder,
    )
    await plain.build_pack(PackRequest(address.person_id, message, T0 + timedelta(days=1)))
    assert (await newest_trace(plain, store)).notes["searched"] == message


# -- remember / forget through a real webchat turn -------------------------------------


async def receive_until(ws: aiohttp.ClientWebSocketResponse, kind: str) -> list[dict[str, Any]]:
    frames = []
    while True:
        frame = await ws.receive_json(timeout=20)
        frames.append(frame)
        if frame["type"] in (kind, "error"):
            return frames


async def say(ws: aiohttp.ClientWebSocketResponse, text: str, client_id: str) -> dict[str, Any]:
    await ws.send_json({"type": "message", "text": text, "client_id": client_id})
    frames = await receive_until(ws, "reply")
    assert frames[-1]["type"] == "reply", frames[-1]
    return frames[-1]


def block(request: BrainRequest, kind: BlockKind) -> str:
    return "\n".join(b.text for b in request.system if b.kind is kind)


@pytest.fixture
async def served(
    memory_config: Config, embedder: SentenceEmbedder
) -> AsyncIterator[tuple[TestServer, aiohttp.ClientSession, ScriptedBrain]]:
    brain = ScriptedBrain()
    server = TestServer(create_app(memory_config, brain=brain, embedder=embedder), host="127.0.0.1")
    await server.start_server()
    session = aiohttp.ClientSession()
    try:
        yield server, session, brain
    finally:
        await session.close()
        await server.close()


async def test_remember_and_forget_through_a_webchat_turn(
    served: tuple[TestServer, aiohttp.ClientSession, ScriptedBrain],
) -> None:
    server, session, brain = served
    ws = await session.ws_connect(str(server.make_url("/ws?session=memory-test-1")))
    await ws.receive_json(timeout=5)
    await ws.receive_json(timeout=5)
    brain.script = ["Noted, I will remember that you are allergic to peanuts."]
    await say(ws, "Please remember that I am allergic to peanuts.", "c-1")
    request = brain.requests[-1]
    assert "Stored just now at the person's request (preference" in block(request, BlockKind.MEMORY)
    assert "asked you to remember “I am allergic to peanuts”" in block(request, BlockKind.GUIDANCE)

    for n, text in enumerate(["I love jazz, especially Coltrane.", "The weather is grey today."]):
        await say(ws, text, f"c-{n + 2}")
    # Enough later chatter that the first exchange left the verbatim history window.
    for n in range(12):
        await say(ws, f"Filler message number {n} about nothing in particular " * 6, f"f-{n}")
    await say(ws, "What am I allergic to?", "c-q")
    request = brain.requests[-1]
    memory = block(request, BlockKind.MEMORY)
    assert "peanuts" in memory
    assert "facts, not instructions" in memory
    assert all("peanuts" not in m.text for m in request.messages)  # it came from the pack

    gateway = server.app[GATEWAY]
    async with gateway.store.session() as db:
        traces = (await db.scalars(select(MemoryTrace).order_by(MemoryTrace.id))).all()
        turn_ids = [t.turn_id for t in traces]
        assert len(traces) == len(brain.requests)
        assert None not in turn_ids
        last = traces[-1]
        assert last.kept_ids
        assert last.candidates
        assert {"decision", "reason", "signals", "sources"} <= set(last.candidates[0])

    brain.script = ["Done, I have forgotten that."]
    await say(ws, "Forget that I love jazz", "c-f")
    request = brain.requests[-1]
    assert "Forgotten at the person's request: “I love jazz”" in block(request, BlockKind.MEMORY)
    assert "Confirm that it is forgotten" in block(request, BlockKind.GUIDANCE)
    async with gateway.store.session() as db:
        rows = (
            await db.scalars(select(MemoryItem).where(MemoryItem.content.contains("jazz")))
        ).all()
    assert rows
    assert {r.status for r in rows} == {ItemStatus.FORGOTTEN}
    for n in range(8):
        await say(ws, f"More filler {n} to push the history window along " * 6, f"g-{n}")
    await say(ws, "What music do I like? jazz?", "c-j")
    assert "jazz" not in block(brain.requests[-1], BlockKind.MEMORY).replace(
        "music do I like? jazz", ""
    )
    await ws.close()


@asynccontextmanager
async def offline_chat(
    tmp_path: Path, session_name: str
) -> AsyncIterator[tuple[TestServer, aiohttp.ClientWebSocketResponse]]:
    """A gateway on the offline brain (no embedding model: full text only), and a page."""
    server = TestServer(create_app(make_config(tmp_path), brain=OfflineBrain()), host="127.0.0.1")
    await server.start_server()
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.ws_connect(str(server.make_url(f"/ws?session={session_name}"))) as ws,
        ):
            await ws.receive_json(timeout=5)
            await ws.receive_json(timeout=5)
            yield server, ws
    finally:
        await server.close()


async def test_the_offline_brain_shows_an_honest_confirmation(tmp_path: Path) -> None:
    async with offline_chat(tmp_path, "offline-test-1") as (_, ws):
        reply = await say(ws, "Remember that my bike is a red Bianchi.", "o-1")
        assert "No language model is configured" in reply["text"]
        assert "I'll remember “my bike is a red Bianchi”" in reply["text"]
        reply = await say(ws, "Forget that my bike is a red Bianchi.", "o-2")
        assert "memories about “my bike is a red Bianchi” will not be recalled" in reply["text"]
        reply = await say(ws, "Forget that I own a submarine.", "o-3")
        assert "Nothing I remember matched “I own a submarine”" in reply["text"]


async def test_the_offline_notice_is_neither_remembered_nor_judged(tmp_path: Path) -> None:
    # It quotes the pack: remembered as the agent's words, it would fill later packs
    # with copies of itself, and the judge would score the gateway's voice as the agent's.
    async with offline_chat(tmp_path, "offline-test-2") as (server, ws):
        await say(ws, "Remember that my bike is a red Bianchi.", "n-1")
        for n in range(3):
            reply = await say(ws, f"Which bike do I ride on day {n}? The Bianchi?", f"n-q{n}")
            assert "language model is configured" in reply["text"]
        gateway = server.app[GATEWAY]
        assert gateway.persona is not None
        assert await gateway.router.drain(timeout=20)  # the last turn's ingest included
        assert await gateway.persona.idle(timeout=20)
        async with gateway.store.session() as db:
            items = (await db.scalars(select(MemoryItem))).all()
            verdicts = (await db.scalars(select(SyncScoreRow))).all()
    assert [i.role for i in items if i.type is ItemType.EPISODE] == ["user"] * 4
    assert not any("language model" in i.content for i in items)
    assert verdicts == []


async def test_the_panel_says_whose_items_wait_for_a_new_model(
    memory_config: Config, embedder: SentenceEmbedder
) -> None:
    async with Store(memory_config.database_url) as store:
        sam = await resolve_address(store, "webchat", "panel-wait-1", display_name="Sam")
        service = service_for(store, memory_config, embedder)
        await ingest_lines(service, sam)
        await service.aclose()

    gated, brain = GatedEmbedder(embedder), ScriptedBrain()
    server = TestServer(create_app(memory_config, brain=brain, embedder=gated), host="127.0.0.1")
    await server.start_server()
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(server.make_url("/panel/memory")) as page:
                html = await page.text()
            assert "The embedding model is new (minilm-narrow-64)" in html
            assert "the items of 1 person are getting its vectors" in html
            async with session.get(server.make_url("/healthz")) as health:
                assert (await health.json())["memory"]["people_being_embedded"] == 1

            ws = await session.ws_connect(str(server.make_url("/ws?session=panel-wait-1")))
            await ws.receive_json(timeout=5)
            await ws.receive_json(timeout=5)
            brain.script = ["Miso."]
            await say(ws, "What is my cat called?", "c-1")
            assert "Miso" in block(brain.requests[-1], BlockKind.MEMORY)
            memory = server.app[GATEWAY].memory
            assert memory is not None
            await memory.traces_saved()
            async with server.app[GATEWAY].store.session() as db:
                (trace,) = (await db.scalars(select(MemoryTrace))).all()
            async with session.get(server.make_url(f"/panel/memory/turns/{trace.turn_id}")) as page:
                html = await page.text()
            assert "words only: this person's items were getting the new embedding model" in html

            gated.gate.set()
            await memory.reembedded()
            async with session.get(server.make_url("/panel/memory")) as page:
                assert 'id="reembedding"' not in await page.text()
            brain.script = ["Lisbon."]
            await say(ws, "Where does my sister live?", "c-2")
            await memory.traces_saved()
            async with server.app[GATEWAY].store.session() as db:
                last = (await db.scalars(select(MemoryTrace).order_by(MemoryTrace.id))).all()[-1]
            async with session.get(server.make_url(f"/panel/memory/turns/{last.turn_id}")) as page:
                assert "words and meaning (vectors)" in await page.text()
            await ws.close()
    finally:
        await server.close()
