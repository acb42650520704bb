"""The memory layer as one service: ingest, remember/forget, the pack, reinforcement, decay.

Owns the per-person ANN indexes and talks to the store through ``memory.repo``.
Model and index work crosses to worker threads here (``asyncio.to_thread``);
without an embedder (``memory.embedder = "none"`` or a model that failed to
load) everything still works on full text alone, and the traces say so.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta, tzinfo
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from gateway.clock import day_start, local, local_day
from gateway.config import Config, MemoryConfig
from gateway.errors import StoreError
from gateway.heap import freeze_long_lived
from gateway.store import Store
from gateway.zones import PersonZones
from memory import repo
from memory.decay import DecayPolicy, content_words, overlap
from memory.embed import Embedder, EmbedQueue, SentenceEmbedder
from memory.embed_onnx import model_cache
from memory.errors import EmbeddingUnavailable, IndexUnavailable
from memory.index import IndexParams, PersonIndex
from memory.index_cache import EvictionSaves, IndexCache
from memory.lexical import Fts5Tokenizer, LexicalIndex, LexicalUnreadable
from memory.models import MemoryItem, MemoryTrace
from memory.pack import Candidate, MemoryView, PackResult, PackSettings, search_text, select
from memory.passages import passages
from memory.repo import NewItem, Reinforcement
from memory.salience import salience
from memory.score import ScoreWeights
from memory.timeparse import TimeWindow, find_anchor, resolve_window
from memory.types import ItemStatus, ItemType, Tier

log = logging.getLogger(__name__)

# How far before/after an event "before the trip" looks.
ANCHOR_SPAN = timedelta(days=30)
REMEMBER_PRIORITY = 0.8
# Items between progress lines while a start embeds a store anew (a new model).
BACKFILL_REPORT = 10_000
# store_info's key for the passage length the store's episodes were last cut to.
EPISODES_CUT_AT = "episodes_cut_at_chars"


@dataclass(frozen=True)
class Episode:
    """One stored message to keep as an episode item."""

    person_id: int
    text: str
    at: datetime
    role: str
    speaker: str
    conversation_id: int | None = None
    message_id: int | None = None
    channel: str = ""
    source_ref: str = ""
    # FORGOTTEN for a "forget ..." request itself, so it does not bring the subject back.
    status: ItemStatus = ItemStatus.ACTIVE


@dataclass(frozen=True)
class PackRequest:
    person_id: int
    text: str
    at: datetime
    turn_id: int | None = None
    # Messages already in the prompt verbatim (the recent history).
    exclude_message_ids: frozenset[int] = frozenset()
    # Lines shown first inside the pack (what was just remembered or forgotten).
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Pack:
    text: str
    tokens: int
    kept: tuple[int, ...]
    result: PackResult
    window: TimeWindow | None
    timings_ms: dict[str, float]


@dataclass(frozen=True)
class Remembered:
    item_id: int
    type: ItemType
    text: str
    superseded: tuple[tuple[int, str], ...] = ()


@dataclass(frozen=True)
class Forgotten:
    query: str
    items: tuple[tuple[int, str], ...] = ()


@dataclass(frozen=True)
class Reinforced:
    used: tuple[int, ...] = ()
    referred: tuple[int, ...] = ()
    unused: tuple[int, ...] = ()
    resurrected: tuple[int, ...] = ()


@dataclass
class SweepStats:
    seen: int = 0
    tiers: dict[str, int] = field(default_factory=dict)
    archived: int = 0


def pack_settings(memory: MemoryConfig) -> PackSettings:
    return PackSettings(
        budget_tokens=memory.budget_tokens,
        weights=ScoreWeights(
            memory.weight_similarity,
            memory.weight_priority,
            memory.weight_recency,
            memory.weight_frequency,
        ),
        decay=decay_policy(memory),
        mmr_lambda=memory.mmr_lambda,
        lexical_weight=memory.lexical_weight,
        neighbour_weight=memory.neighbour_weight,
        answer_weight=memory.answer_weight,
        session_weight=memory.session_weight,
        speaker_boost=memory.speaker_boost,
        time_boost=memory.time_boost,
        frequency_half_count=memory.frequency_half_count,
        persona_min_items=memory.persona_min_items,
        relational_min_items=memory.relational_min_items,
        type_quota={t: getattr(memory, f"quota_{t.value}") for t in ItemType},
    )


def decay_policy(memory: MemoryConfig) -> DecayPolicy:
    return DecayPolicy(
        half_life_hours={t: getattr(memory, f"half_life_hours_{t.value}") for t in ItemType},
        strength_growth=memory.strength_growth,
        tier_active=memory.tier_active,
        tier_warm=memory.tier_warm,
        tier_cold=memory.tier_cold,
        reinforce_referred=memory.reinforce_referred,
        reinforce_used=memory.reinforce_used,
        reinforce_unused=memory.reinforce_unused,
    )


def load_embedder(memory: MemoryConfig) -> SentenceEmbedder:
    """The configured model, its queries on ONNX Runtime when ``memory.query_runtime``
    says so (and the export agrees with torch). Blocking: seconds."""
    embedder = SentenceEmbedder.load(
        memory.embedding_model, device=memory.embedding_device, batch_size=memory.embedding_batch
    )
    if memory.query_runtime == "onnx":
        embedder.use_onnx(model_cache(memory))
    freeze_long_lived("embedding model loaded")
    return embedder


def embedding_text(item_type: ItemType, speaker: str, content: str) -> str:
    """What is embedded: an episode with its speaker, so "what did Sam say" finds Sam's turns."""
    if item_type is ItemType.EPISODE and speaker:
        return f"{speaker}: {content}"
    return content


def _day_bounds(window: TimeWindow, zone: tzinfo) -> tuple[datetime, datetime]:
    """From the window's first day's start to its last day's end in ``zone``, in UTC."""
    return day_start(window.start, zone), day_start(window.end + timedelta(days=1), zone)


@functools.cache
def single_threaded_blas() -> None:
    """numpy's BLAS on one thread, for the whole process.

    The pack's matrix products are small (some 150 x 384 vectors): a second
    BLAS thread saves microseconds when a core is free and, when both cores are
    busy, spins and waits for one: MMR's similarity matrix took 12 ms with two
    threads on a loaded machine against 0.4 ms with one. Torch (bulk
    embedding) keeps its own threads.
    """
    from threadpoolctl import threadpool_limits

    # Once: threadpoolctl inspects every loaded library to find the BLAS.
    threadpool_limits(limits=1, user_api="blas")


class MemoryService:
    def __init__(
        self,
        store: Store,
        config: MemoryConfig,
        index_dir: Path,
        embedder: Embedder | None,
        *,
        zones: PersonZones | None = None,
    ) -> None:
        single_threaded_blas()
        self.store = store
        self.config = config
        self.index_dir = index_dir
        self.embedder = embedder
        # Each person's time zone (their own, else ``agent.timezone``): the days that
        # words like "yesterday" name, and the days of the pack's lines.
        self.zones = zones if zones is not None else PersonZones(None, UTC)
        self.settings = pack_settings(config)
        self.decay = decay_policy(config)
        self._indexes: dict[int, PersonIndex] = {}
        self._opening: dict[int, asyncio.Lock] = {}
        # Who speaks in each person's conversations (first names), for search_text.
        self._speakers: dict[int, set[str]] = {}
        # Concurrent turns' small embedding requests share one model call.
        self._embeds = EmbedQueue(embedder) if embedder is not None else None
        # People whose full-text search needs the joined query (a small share of the store).
        self._lexical_joined: set[int] = set()
        # Each person's in-memory BM25 index (see memory/lexical.py), built in the
        # background on first use; the store's FTS5 answers until it is ready.
        self._tokenizer = Fts5Tokenizer()
        self._lexical: dict[int, LexicalIndex] = {}
        self._lexical_builds: dict[int, asyncio.Task[LexicalIndex]] = {}
        # Items that stopped or started being recallable while a person's index was
        # being built, which may have read them before: applied in order once it is
        # registered (``_build_lexical``). Present while a build runs.
        self._lexical_pending: dict[int, list[tuple[bool, list[int]]]] = {}
        # Traces being stored after their pack was returned (see ``_save_trace``).
        self._trace_writes: set[asyncio.Task[int | None]] = set()
        self._trace_of_turn: dict[int, asyncio.Task[int | None]] = {}
        # People whose items are being given vectors of this model in the background
        # (``begin_reembedding``): until theirs are done, their packs search without
        # vectors, as vectors of two models never meet in one index, MMR or score.
        self._reembedding: set[int] = set()
        # Those of them not started yet, in order; a person who writes moves to the front.
        self._reembed_queue: list[int] = []
        self._reembed_task: asyncio.Task[int] | None = None
        self.reembedded_items = 0
        # Both indexes of the people used last, within ``memory.index_cache_mb``; the
        # others' are saved and leave memory (memory/index_cache.py).
        self.index_cache = IndexCache(int(config.index_cache_mb * 1024 * 1024))
        self._evictions = EvictionSaves(store.identity)

    @classmethod
    async def start(
        cls,
        store: Store,
        config: Config,
        *,
        embedder: Embedder | None = None,
        zones: PersonZones | None = None,
        loader: Callable[[MemoryConfig], Embedder] = load_embedder,
    ) -> MemoryService:
        """The service for ``config``; loads the embedder with ``loader`` in a worker
        thread unless given."""
        memory = config.memory
        if embedder is None and memory.embedder == "minilm":
            try:
                embedder = await asyncio.to_thread(loader, memory)
            except EmbeddingUnavailable as exc:
                log.warning("memory: %s; recall runs on full text only", exc)
        service = cls(
            store,
            memory,
            config.data_dir / "memory-index",
            embedder,
            zones=zones if zones is not None else PersonZones(store, config.zone),
        )
        try:
            await service.begin_reembedding()
            await service.cut_long_episodes()
        except BaseException:
            # Stopped or failed halfway: the background pass it began ends here too.
            await service.aclose()
            raise
        return service

    @property
    def dense(self) -> bool:
        return self.embedder is not None

    def dense_for(self, person_id: int) -> bool:
        """Whether the person's packs search by vector now (not while theirs are redone)."""
        return self.embedder is not None and person_id not in self._reembedding

    @property
    def reembedding(self) -> int:
        """How many people's items are still waiting for vectors of this model."""
        return len(self._reembedding)

    # -- indexes ---------------------------------------------------------------

    async def index(self, person_id: int) -> PersonIndex | None:
        """The person's ANN index, opened (loaded, updated or rebuilt) on first use; None
        without an embedder or while their items are given vectors of this model."""
        embedder = self.embedder
        if embedder is None or person_id in self._reembedding:
            return None
        index = self._indexes.get(person_id) or await self._open_index(person_id, embedder)
        self._used(person_id)
        return index

    async def _open_index(self, person_id: int, embedder: Embedder) -> PersonIndex:
        lock = self._opening.setdefault(person_id, asyncio.Lock())
        async with lock:
            found = self._indexes.get(person_id)
            if found is not None:
                return found
            # Evicted a moment ago: load what that save writes, not a file it replaces.
            await self._evictions.wait(person_id)
            params = IndexParams(
                dim=embedder.dim,
                m=self.config.index_m,
                ef_construction=self.config.index_ef_construction,
                ef_search=self.config.index_ef_search,
                model=embedder.model_name,
                store=self.store.identity,
            )
            index = PersonIndex(self.index_dir, person_id, params)
            await self._fill_index(index, person_id, index.open)
            if index.origin != "loaded":
                await asyncio.to_thread(index.save)
            log.info(
                "memory index of person %d: %s, %d items", person_id, index.origin, index.count
            )
            self._indexes[person_id] = index
            self._used(person_id)
            return index

    async def _fill_index(
        self, index: PersonIndex, person_id: int, keep: Callable[[list[int]], list[int]]
    ) -> None:
        """``keep`` the person's indexable ids in ``index`` (it returns those it lacks),
        and add those with their vectors."""
        ids = await repo.indexable_ids(self.store, person_id)
        missing = await asyncio.to_thread(keep, ids)
        if missing:
            matrix = await self._current_vectors(missing)
            await asyncio.to_thread(index.add, missing, matrix)

    async def lexical(self, person_id: int, *, wait: bool = False) -> LexicalIndex | None:
        """The person's in-memory full-text index; None while it is being built (its
        first use starts the build) unless ``wait``. Without FTS5 (PostgreSQL) there
        is nothing else to search, so the first pack always waits."""
        found = self._lexical.get(person_id)
        if found is not None:
            self._used(person_id)
            return found
        task = self._lexical_builds.get(person_id)
        if task is None:
            self._lexical_pending[person_id] = []
            task = asyncio.create_task(
                self._build_lexical(person_id), name=f"memory-lexical-{person_id}"
            )
            self._lexical_builds[person_id] = task
            task.add_done_callback(lambda done: self._lexical_built(person_id, done))
        if wait or not self.store.is_sqlite:
            return await asyncio.shield(task)
        return None

    def _lexical_built(self, person_id: int, task: asyncio.Task[LexicalIndex]) -> None:
        if self._lexical_builds.get(person_id) is task:
            del self._lexical_builds[person_id]
            # A build that failed leaves no index for them: the next one reads anew.
            self._lexical_pending.pop(person_id, None)
        if not task.cancelled() and task.exception() is not None:
            # The next pack tries again; until then full text comes from FTS5.
            log.error("memory: full-text index of person %d: %s", person_id, task.exception())

    def _lexical_path(self, person_id: int) -> Path:
        return self.index_dir / f"person-{person_id}.lexical.npz"

    async def _build_lexical(self, person_id: int, chunk: int = 5000) -> LexicalIndex:
        """Load the saved index and bring it up to date, or build it from the store."""
        started = time.perf_counter()
        path = self._lexical_path(person_id)
        index: LexicalIndex | None = None
        # Evicted a moment ago: load what that save writes.
        await self._evictions.wait(person_id)
        try:
            index = await asyncio.to_thread(
                LexicalIndex.load, path, self._tokenizer, self.store.identity
            )
        except LexicalUnreadable as exc:
            if path.exists():
                log.warning("memory: full-text index of person %d: %s; rebuilt", person_id, exc)
        if index is not None:
            origin = "loaded"
            last = await self._catch_up_lexical(index, person_id, chunk)
        else:
            origin = "built"
            index = LexicalIndex(self._tokenizer)
            last = await self._fill_lexical(index, person_id, 0, chunk)
        self._lexical[person_id] = index
        try:
            # Items stored meanwhile: read here, or added by add_items now that the
            # index is registered (adding one twice is harmless).
            await self._fill_lexical(index, person_id, last, chunk)
            # Items retired or restored meanwhile: the reads above may have come before
            # them. Changes made while these are applied join the queue, so the order
            # holds.
            while pending := self._lexical_pending.get(person_id):
                self._lexical_pending[person_id] = []
                for restore, ids in pending:
                    await self._change_lexical(index, ids, restore=restore)
        except BaseException:
            # The queue goes with the failed build, so the index may lack changes it
            # held: searches go back to FTS5 and the next build reads the store anew.
            if self._lexical.get(person_id) is index:
                del self._lexical[person_id]
                self._used(person_id)  # its size leaves the cache's total
            raise
        self._lexical_pending.pop(person_id, None)
        self._used(person_id)
        await asyncio.to_thread(index.compact)
        if index.dirty or origin == "built":
            await self._save_lexical(person_id, index)
        freeze_long_lived(f"full-text index of person {person_id} {origin}")
        log.info(
            "memory: full-text index of person %d: %s, %d items in %.1f s",
            person_id,
            origin,
            index.count,
            time.perf_counter() - started,
        )
        return index

    async def _catch_up_lexical(self, index: LexicalIndex, person_id: int, chunk: int) -> int:
        """Bring a loaded index to what the store holds now; the highest id then."""
        stored, newest = await repo.recallable_ids(self.store, person_id)
        held = await asyncio.to_thread(index.live_ids)
        gone = held - stored
        if gone:
            await asyncio.to_thread(index.discard, gone)
        missing = sorted(stored - held)
        for start in range(0, len(missing), chunk):
            rows = await repo.lexical_rows_of(self.store, missing[start : start + chunk])
            await asyncio.to_thread(index.add, rows)
        return newest

    async def _save_lexical(self, person_id: int, index: LexicalIndex) -> None:
        # A lost save costs the next start a build, never a search.
        try:
            await asyncio.to_thread(index.save, self._lexical_path(person_id), self.store.identity)
        except OSError:
            log.exception("memory: could not save the full-text index of person %d", person_id)

    async def _fill_lexical(
        self, index: LexicalIndex, person_id: int, after: int, chunk: int
    ) -> int:
        while rows := await repo.lexical_rows(self.store, person_id, after, chunk):
            await asyncio.to_thread(index.add, rows)
            after = rows[-1][0]
        return after

    async def unrecall(self, person_id: int, ids: Sequence[int]) -> None:
        """Items that stopped being recallable (superseded, forgotten, deleted) leave
        both indexes; archived ones only leave the ANN index (``_unindex``)."""
        await self._unindex(person_id, ids)
        await self._lexical_changed(person_id, ids, restore=False)

    async def recall_again(self, person_id: int, ids: Sequence[int]) -> None:
        """Items restored to active: back into the full-text index (the ANN index is
        the caller's, which has their vectors)."""
        await self._lexical_changed(person_id, ids, restore=True)

    async def _lexical_changed(self, person_id: int, ids: Sequence[int], *, restore: bool) -> None:
        if not ids:
            return
        pending = self._lexical_pending.get(person_id)
        if pending is not None:
            pending.append((restore, list(ids)))
            return
        lexical = self._lexical.get(person_id)
        if lexical is not None:
            await self._change_lexical(lexical, ids, restore=restore)

    async def _change_lexical(
        self, index: LexicalIndex, ids: Sequence[int], *, restore: bool
    ) -> None:
        if restore:
            rows = await repo.lexical_rows_of(self.store, ids)
            await asyncio.to_thread(index.add, rows)
        else:
            await asyncio.to_thread(index.discard, ids)

    async def _maybe_save(self, index: PersonIndex) -> None:
        # Saving writes the whole file: waiting for a share of the index keeps bulk
        # ingest linear. Unsaved changes are safe: the store has every vector, and
        # opening the index adds what its file lacks.
        if self._indexes.get(index.person_id) is not index:
            # Evicted meanwhile: its eviction saves it, and a save from here could land
            # after the reopened index's own.
            return
        if index.dirty >= max(self.config.index_save_every, index.count // 4):
            await asyncio.to_thread(index.save)

    def _used(self, person_id: int) -> None:
        """The person's indexes were used or grew: they go last in the cache, and the
        people used longest ago are evicted while the cache is over its budget."""
        ann, lexical = self._indexes.get(person_id), self._lexical.get(person_id)
        if ann is None and lexical is None:
            # Evicted while it was being added to: it is reopened at its next use.
            self.index_cache.forget(person_id)
            return
        size = (ann.nbytes if ann is not None else 0) + (lexical.nbytes if lexical else 0)
        for other in self.index_cache.use(person_id, size, self._busy):
            self._evict(other)

    def _busy(self, person_id: int) -> bool:
        """Whether an index of the person is being opened or built (not evicted then)."""
        opening = self._opening.get(person_id)
        return person_id in self._lexical_builds or (opening is not None and opening.locked())

    def _evict(self, person_id: int) -> None:
        ann, lexical = self._indexes.pop(person_id, None), self._lexical.pop(person_id, None)
        self._evictions.start(person_id, ann, lexical, self._lexical_path(person_id))
        log.debug("memory: the indexes of person %d leave memory (least recently used)", person_id)

    async def save_indexes(self) -> None:
        # Only those still held when their turn comes: an evicted one is its
        # eviction's to save (memory/index_cache.py).
        for person_id, index in list(self._indexes.items()):
            if index.dirty and self._indexes.get(person_id) is index:
                try:
                    await asyncio.to_thread(index.save)
                except IndexUnavailable:
                    log.exception("memory: could not save %s", index.path.name)
        for person_id, lexical in list(self._lexical.items()):
            if lexical.dirty and self._lexical.get(person_id) is lexical:
                await self._save_lexical(person_id, lexical)

    async def aclose(self) -> None:
        if self._reembed_task is not None:
            # What it embedded is stored; the next start goes on from there.
            self._reembed_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reembed_task
        await self.traces_saved()
        for task in list(self._lexical_builds.values()):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._embeds is not None:
            await self._embeds.aclose()
        await self.save_indexes()
        await self._evictions.aclose()
        self._indexes.clear()

    # -- writing ---------------------------------------------------------------

    async def _embed(self, texts: Sequence[str]) -> NDArray[np.float32] | None:
        if self._embeds is None or not texts:
            return None
        return await self._embeds.embed(list(texts))

    async def add_items(self, items: Sequence[NewItem]) -> list[int]:
        """Embed (one batch), store and index new items; their ids in order."""
        if not items:
            return []
        matrix = await self._embed([embedding_text(i.type, i.speaker, i.content) for i in items])
        model = self.embedder.model_name if self.embedder is not None else ""
        if matrix is not None:
            items = [
                NewItem(**{**_fields(item), "vector": matrix[n], "embedding_model": model})
                for n, item in enumerate(items)
            ]
        ids = await repo.insert_items(self.store, items)
        recallable: dict[int, list[tuple[int, str, str]]] = {}
        # Taken now: one may be evicted while another is added to (then the rows are
        # read from the store when it is loaded again).
        lexicals: dict[int, LexicalIndex] = {}
        for item_id, item in zip(ids, items, strict=True):
            lexical = self._lexical.get(item.person_id)
            if item.status is ItemStatus.ACTIVE and lexical is not None:
                lexicals[item.person_id] = lexical
                recallable.setdefault(item.person_id, []).append(
                    (item_id, item.content, item.speaker)
                )
        for person_id, found in recallable.items():
            await asyncio.to_thread(lexicals[person_id].add, found)
            self._used(person_id)
        if matrix is not None:
            by_person: dict[int, list[int]] = {}
            for n, item in enumerate(items):
                if item.status is ItemStatus.ACTIVE:
                    by_person.setdefault(item.person_id, []).append(n)
            for person_id, rows in by_person.items():
                index = await self.index(person_id)
                if index is not None:
                    await asyncio.to_thread(index.add, [ids[n] for n in rows], matrix[rows])
                    await self._maybe_save(index)
                    self._used(person_id)
        return ids

    async def ingest(self, episodes: Sequence[Episode]) -> list[int]:
        """Every message becomes an episode item, with the dates it refers to; a long
        one becomes one item per passage (``memory.passage_chars``), in order. The ids
        of the items stored, in order."""
        items = []
        for e in episodes:
            items.extend(self._passage_items(e, await self.zones.of(e.person_id)))
            if e.speaker and e.person_id in self._speakers:
                self._speakers[e.person_id].add(e.speaker.split()[0])
        return await self.add_items(items)

    def _passage_items(self, e: Episode, zone: tzinfo) -> list[NewItem]:
        """The episode items of one message: itself, or its passages."""
        items = []
        for text in passages(e.text, self.config.passage_chars):
            window = resolve_window(text, local(e.at, zone))
            items.append(
                NewItem(
                    person_id=e.person_id,
                    type=ItemType.EPISODE,
                    content=text,
                    occurred_at=e.at,
                    speaker=e.speaker,
                    role=e.role,
                    author=e.role,
                    channel=e.channel,
                    conversation_id=e.conversation_id,
                    source_message_ids=() if e.message_id is None else (e.message_id,),
                    source_ref=e.source_ref,
                    refers_start=window.start if window else None,
                    refers_end=window.end if window else None,
                    status=e.status,
                    priority=salience(text) if self.config.episode_salience else 0.0,
                )
            )
        return items

    async def speakers(self, person_id: int) -> set[str]:
        """The first names of who speaks in the person's conversations (loaded once)."""
        found = self._speakers.get(person_id)
        if found is None:
            found = set(await repo.speaker_names(self.store, person_id))
            self._speakers[person_id] = found
        return found

    async def begin_reembedding(self, batch: int = 64) -> None:
        """Give vectors of this model to the active items that lack them, in the
        background, person by person.

        They were stored while no embedder was loaded, or embedded by the model
        configured before (``memory.embedding_model`` changed): the store keeps each
        vector's model. A new model over a big store takes minutes (~200 items a
        second here), and the gateway answers meanwhile: a person's packs search
        full text, pinned, topic and time until their items are done, then by vector
        again. Vectors of items not recallable (superseded, forgotten) stay until a
        restore needs them (``vector_of``). Batches are small so that a turn's own
        embedding waits for one at most.
        """
        embedder = self.embedder
        if embedder is None or (self._reembed_task is not None and not self._reembed_task.done()):
            return
        people = await repo.people_with_stale_vectors(self.store, embedder.model_name, embedder.dim)
        if not people:
            return
        self._reembedding.update(people)
        self._reembed_queue = list(people)
        log.info(
            "memory: giving vectors of %s to the items of %d people in the background; "
            "their recall searches full text until then",
            embedder.model_name,
            len(people),
        )
        self._reembed_task = asyncio.create_task(self._reembed(batch), name="memory-reembed")

    async def reembedded(self) -> int:
        """Wait for the background embedding (if any) to end; how many items it embedded."""
        if self._reembed_task is not None:
            await asyncio.shield(self._reembed_task)
        return self.reembedded_items

    async def backfill(self, batch: int = 256) -> int:
        """``begin_reembedding`` and wait for it: how many items it embedded."""
        before = self.reembedded_items
        await self.begin_reembedding(batch)
        return await self.reembedded() - before

    def _embed_next(self, person_id: int) -> None:
        """The person is writing: their items are embedded next."""
        if person_id in self._reembed_queue:
            self._reembed_queue.remove(person_id)
            self._reembed_queue.insert(0, person_id)

    async def _reembed(self, batch: int) -> int:
        embedder = self.embedder
        if embedder is None:
            return 0
        report_at = self.reembedded_items + BACKFILL_REPORT
        while self._reembed_queue:
            person_id = self._reembed_queue.pop(0)
            try:
                async for count in self._embed_stale(person_id, embedder, batch):
                    self.reembedded_items += count
                    if self.reembedded_items >= report_at:
                        log.info(
                            "memory: %d items embedded so far, %d people left",
                            self.reembedded_items,
                            len(self._reembedding),
                        )
                        report_at += BACKFILL_REPORT
            except (EmbeddingUnavailable, StoreError):
                # They stay on full text; the next start tries again.
                log.exception("memory: could not embed the items of person %d", person_id)
                continue
            # Their index is rebuilt before their packs use vectors again, so none waits
            # for it (at 100,000 items a rebuild takes a while). What was stored or
            # retired meanwhile did not reach it: it is caught up once they are back.
            try:
                index = await self._open_index(person_id, embedder)
                self._reembedding.discard(person_id)
                await self._fill_index(index, person_id, index.keep_only)
            except (IndexUnavailable, EmbeddingUnavailable, StoreError):
                # Their next pack opens the index as any first pack does.
                log.exception("memory: could not build the index of person %d", person_id)
            finally:
                self._reembedding.discard(person_id)
        log.info("memory: %d items have vectors of this model now", self.reembedded_items)
        return self.reembedded_items

    async def _embed_stale(
        self, person_id: int, embedder: Embedder, batch: int
    ) -> AsyncIterator[int]:
        """Embed the person's active items that have no vector of ``embedder``'s model,
        by id; yields each batch's count."""
        model, dim = embedder.model_name, embedder.dim
        after = 0
        while True:
            rows = await repo.stale_vectors(self.store, person_id, model, dim, after, batch)
            if not rows and after:
                # Once more from the start: an item restored behind the pass kept its old vector.
                after = 0
                continue
            if not rows:
                return
            matrix = await self._embed([embedding_text(t, s, c) for _, c, s, t in rows])
            if matrix is None:
                return
            ids = [r[0] for r in rows]
            await repo.set_vectors(self.store, ids, matrix, model)
            after = ids[-1]
            yield len(ids)

    async def _current_vectors(self, ids: Sequence[int]) -> NDArray[np.float32]:
        """Vectors of this model for ``ids``, rows in the same order: the stored ones,
        and any missing or still of another model embedded now and stored (an item
        restored while its person's items were being embedded again)."""
        assert self.embedder is not None
        model, dim = self.embedder.model_name, self.embedder.dim
        stored = await repo.stored_vectors(self.store, ids)
        stale = [
            i
            for i in ids
            if i not in stored or stored[i][1] != model or stored[i][0].shape[0] != dim
        ]
        if stale:
            rows = {item.id: item for item in await repo.get_items(self.store, stale)}
            texts = [embedding_text(rows[i].type, rows[i].speaker, rows[i].content) for i in stale]
            matrix = await self._embed(texts)
            if matrix is None:
                raise EmbeddingUnavailable("no embedder for the items of another model")
            await repo.set_vectors(self.store, stale, matrix, model)
            stored.update({i: (matrix[n], model) for n, i in enumerate(stale)})
        return np.stack([stored[i][0] for i in ids]) if ids else np.zeros((0, dim), np.float32)

    async def cut_long_episodes(self, batch: int = 100) -> int:
        """Episodes stored whole and longer than a passage (before passages existed, or
        before ``memory.passage_chars`` was lowered) become their passages, as a new
        message would; the whole one is superseded by the first, kept for the record.
        The store remembers the length it was cut to, so a start with the same or a
        longer one reads nothing. The number of episodes cut."""
        limit = self.config.passage_chars
        known = await repo.store_fact(self.store, EPISODES_CUT_AT)
        if known is not None and known.isdigit() and int(known) <= limit:
            return 0
        cut, after = 0, 0
        while rows := await repo.long_episodes(self.store, limit, after, batch):
            for whole in rows:
                await self._cut(whole)
            after = rows[-1].id
            cut += len(rows)
        await repo.set_store_fact(self.store, EPISODES_CUT_AT, str(limit))
        if cut:
            log.info("memory: %d long episodes kept as passages of %d characters", cut, limit)
        return cut

    async def _cut(self, whole: MemoryItem) -> None:
        said = Episode(
            person_id=whole.person_id,
            text=whole.content,
            at=whole.occurred_at,
            role=whole.role,
            speaker=whole.speaker,
            conversation_id=whole.conversation_id,
            message_id=whole.source_message_ids[0] if whole.source_message_ids else None,
            channel=whole.channel,
            source_ref=whole.source_ref,
        )
        parts = self._passage_items(said, await self.zones.of(whole.person_id))
        ids = await self.add_items(parts)
        # The passages are the message it was: as used, as pinned, as far decayed.
        await repo.carry_use(self.store, ids, whole)
        if whole.tier is Tier.ARCHIVED:
            await self._unindex(whole.person_id, ids)
        await repo.set_status(
            self.store, [whole.id], ItemStatus.SUPERSEDED, datetime.now(UTC), superseded_by=ids[0]
        )
        await self.unrecall(whole.person_id, [whole.id])

    async def vector_of(self, item: MemoryItem) -> NDArray[np.float32] | None:
        """The item's vector of this model: the stored one, else embedded now and stored."""
        if self.embedder is None:
            return None
        vector: NDArray[np.float32] = (await self._current_vectors([item.id]))[0]
        return vector

    async def remember(
        self,
        person_id: int,
        text: str,
        *,
        at: datetime,
        speaker: str = "",
        message_id: int | None = None,
        conversation_id: int | None = None,
        channel: str = "",
        item_type: ItemType | None = None,
    ) -> Remembered:
        """Store what the person asked to be remembered; it supersedes a close older item."""
        from memory.commands import classify

        kind = item_type or classify(text)
        window = resolve_window(text, local(at, await self.zones.of(person_id)))
        (item_id,) = await self.add_items(
            [
                NewItem(
                    person_id=person_id,
                    type=kind,
                    content=text,
                    occurred_at=at,
                    speaker=speaker,
                    role="user",
                    author="remember",
                    channel=channel,
                    conversation_id=conversation_id,
                    source_message_ids=() if message_id is None else (message_id,),
                    priority=REMEMBER_PRIORITY,
                    refers_start=window.start if window else None,
                    refers_end=window.end if window else None,
                )
            ]
        )
        superseded = await self.supersede(person_id, item_id, kind, text, at)
        return Remembered(item_id, kind, text, superseded)

    async def supersede(
        self, person_id: int, item_id: int, kind: ItemType, text: str, at: datetime
    ) -> tuple[tuple[int, str], ...]:
        """Older items of the same type this close to the new one stop being current."""
        if kind is ItemType.EPISODE:
            return ()
        model = self.embedder.model_name if self.embedder is not None else ""
        others = await repo.similar_active(self.store, person_id, kind, item_id, model)
        new_vector = (await repo.vectors(self.store, [item_id]))[0] if self.dense else None
        replaced = []
        for other_id, content, vector in others:
            if new_vector is not None and vector is not None:
                close = float(vector @ new_vector) >= self.config.supersede_similarity
            else:
                mine, theirs = content_words(text), content_words(content)
                close = bool(mine | theirs) and len(mine & theirs) / len(mine | theirs) >= 0.6
            if close:  # a newer version, or the same thing said again: the newest is current
                replaced.append((other_id, content))
        if replaced:
            ids = [r[0] for r in replaced]
            await repo.set_status(self.store, ids, ItemStatus.SUPERSEDED, at, superseded_by=item_id)
            await self.unrecall(person_id, ids)
            log.info("memory %d supersedes %s", item_id, ids)
        return tuple(replaced)

    async def retire(self, item_id: int, status: ItemStatus) -> None:
        """One item stops being recalled (superseded or forgotten) but stays in the store."""
        rows = await repo.get_items(self.store, [item_id])
        if not rows:
            return
        await repo.set_status(self.store, [item_id], status, datetime.now(UTC))
        await self.unrecall(rows[0].person_id, [item_id])

    async def _unindex(self, person_id: int, ids: Sequence[int]) -> None:
        index = await self.index(person_id)
        if index is not None and ids:
            await asyncio.to_thread(index.delete, ids)
            await self._maybe_save(index)

    async def forget(self, person_id: int, what: str, *, at: datetime) -> Forgotten:
        """Items holding every content word of ``what`` (and close to it) stop being recalled."""
        hits = await self._full_text(person_id, what, self.config.forget_max_items * 3, every=True)
        if not hits:
            return Forgotten(what)
        found = await repo.fetch(self.store, [h for h, _ in hits])
        query = await self._embed([what])
        chosen: list[tuple[int, str]] = []
        for item_id, _score in hits:
            if item_id not in found:
                continue
            view, vector = found[item_id]
            if self._too_far(query, vector):
                continue
            chosen.append((item_id, view.content))
            if len(chosen) >= self.config.forget_max_items:
                break
        ids = [c[0] for c in chosen]
        await repo.set_status(self.store, ids, ItemStatus.FORGOTTEN, at)
        await self.unrecall(person_id, ids)
        if ids:
            log.info("memory: person %d asked to forget %r: items %s", person_id, what, ids)
        return Forgotten(what, tuple(chosen))

    async def _full_text(
        self, person_id: int, message: str, limit: int, *, every: bool = False
    ) -> list[tuple[int, float]]:
        """The person's active items matching the message's content words (with
        ``every``, all of them), best BM25 first: FTS5 on SQLite; on other stores,
        which have no FTS5, the person's in-memory index (built at first use)."""
        if self.store.is_sqlite:
            expression = repo.fts_query(message, every=every)
            return await repo.fts_match(self.store, person_id, expression, limit)
        lexical = await self.lexical(person_id)
        if lexical is None:
            return []
        words = repo.content_terms(message)
        return await asyncio.to_thread(lexical.search, words, limit, every=every)

    def _too_far(
        self, query: NDArray[np.float32] | None, vector: NDArray[np.float32] | None
    ) -> bool:
        if query is None or vector is None:
            return False
        return float(vector @ query[0]) < self.config.forget_similarity

    # -- the pack --------------------------------------------------------------

    async def build_pack(self, request: PackRequest) -> Pack:
        """Candidates, score, MMR, quotas and budget, render; the trace stored with the turn."""
        started = time.perf_counter()
        timings: dict[str, float] = {}
        zone = await self.zones.of(request.person_id)
        window = resolve_window(request.text, local(request.at, zone))
        searched = request.text
        if self.config.strip_speaker_names:
            searched = search_text(request.text, await self.speakers(request.person_id))

        # Without vectors of this model for all their items yet, none are used at all.
        dense = self.dense_for(request.person_id)
        if not dense:
            self._embed_next(request.person_id)
        index = await self.index(request.person_id)
        lexical = await self.lexical(request.person_id)

        # The query's embedding and ANN search (a worker thread) overlap the full-text
        # and the store's searches, and the reading of what they found (a reader thread).
        (query, ann), found_sources = await asyncio.gather(
            self._query_and_ann(searched, index, started, timings, dense=dense),
            repo.pack_sources(
                self.store, self._source_query(request, searched, window, zone), lexical
            ),
        )
        if not found_sources.lexical_first:
            self._lexical_joined.add(request.person_id)
        if window is None:
            window = await self._anchor_window(request, zone)
            if window is not None:
                start, end = _day_bounds(window, zone)
                found_sources = replace(
                    found_sources,
                    window=await repo.window_ids(
                        self.store,
                        request.person_id,
                        start,
                        end,
                        (window.start, window.end),
                        self.config.time_window_max,
                    ),
                )
        timings["search_ms"] = (time.perf_counter() - started) * 1000
        sources: dict[int, set[str]] = {}
        for name, ids in (
            ("ann", [i for i, _ in ann]),
            ("fts", [i for i, _ in found_sources.lexical]),
            ("pinned", found_sources.pinned),
            ("topic", found_sources.topic),
            ("time", found_sources.window),
        ):
            for item_id in ids:
                sources.setdefault(item_id, set()).add(name)
        lexical_of = dict(found_sources.lexical)
        # What the searches found, and how much of it the recent history already holds
        # (the trace says why a pack is empty).
        found = {"items": 0, "in_history": 0}

        def assemble_and_select(fetched: repo.Fetched) -> PackResult:
            candidates = {
                item_id: self._candidate(
                    view,
                    vector if dense else None,
                    sources.get(item_id, {"neighbour"}),
                    lexical_of,
                    query,
                )
                for item_id, (view, vector) in fetched.rows.items()
                if not set(view.source_message_ids) & request.exclude_message_ids
            }
            found["items"] = len(fetched.rows)
            found["in_history"] = len(fetched.rows) - len(candidates)
            self._link_neighbours(candidates, fetched.links)
            timings["candidates_ms"] = (time.perf_counter() - started) * 1000
            return select(
                list(candidates.values()),
                replace(self.settings, zone=zone),
                query=request.text,
                now=request.at,
                window=window,
                notes=request.notes,
            )

        # What is left to read, the candidates and the pack, in one call to a worker
        # thread: no hop back to the loop between them.
        result = await repo.fetch_more_then(
            self.store,
            found_sources.fetched,
            sources,
            self._best_hits(ann, found_sources.lexical),
            assemble_and_select,
        )
        timings["pack_ms"] = (time.perf_counter() - started) * 1000
        if self.config.store_traces:
            self._save_trace(
                MemoryTrace(
                    turn_id=request.turn_id,
                    person_id=request.person_id,
                    query=request.text,
                    budget_tokens=self.settings.budget_tokens,
                    used_tokens=result.tokens,
                    time_window=None if window is None else window.as_dict(),
                    kept_ids=list(result.kept),
                    filtered=list(result.filtered),
                    notes={
                        "dense": dense,
                        # Searched without vectors while theirs are redone.
                        "reembedding": self.dense and not dense,
                        "searched": searched,
                        "notes": list(request.notes),
                        "found": found["items"],
                        "in_history": found["in_history"],
                        "timings_ms": {k: round(v, 2) for k, v in timings.items()},
                    },
                ),
                result,
            )
        return Pack(result.text, result.tokens, result.kept, result, window, timings)

    async def _query_and_ann(
        self,
        searched: str,
        index: PersonIndex | None,
        started: float,
        timings: dict[str, float],
        *,
        dense: bool,
    ) -> tuple[NDArray[np.float32] | None, list[tuple[int, float]]]:
        """The query vector and its nearest items (none when not ``dense``)."""
        embedder, n = self.embedder, self.config.candidates
        if embedder is None or not dense:
            return None, []
        # ONNX Runtime takes concurrent calls, so a query needs no queue: embedding and
        # search go as one call to a worker thread, with no hop back to the loop between.
        if getattr(embedder, "query_runtime", "") == "onnx":

            def embed_and_search() -> tuple[NDArray[np.float32], list[tuple[int, float]]]:
                vector = embedder.embed([searched])[0]
                timings["embed_ms"] = (time.perf_counter() - started) * 1000
                return vector, index.search(vector, n) if index is not None else []

            return await asyncio.to_thread(embed_and_search)
        vectors = await self._embed([searched])
        timings["embed_ms"] = (time.perf_counter() - started) * 1000
        if vectors is None:
            return None, []
        if index is None:
            return vectors[0], []
        return vectors[0], await asyncio.to_thread(index.search, vectors[0], n)

    def _save_trace(self, trace: MemoryTrace, result: PackResult) -> None:
        """Store the trace beside the reply, not before it: the reply needs only the pack.

        The candidates' entries are built in the store's writer thread, where
        they are serialised. ``reinforce`` (after the turn) and ``aclose`` wait
        for it; ``traces_saved`` waits for every trace begun so far (the panel
        reads them later).
        """

        def fill_candidates(unsaved: MemoryTrace) -> None:
            unsaved.candidates = list(result.trace)

        task = asyncio.create_task(self._write_trace(trace, fill_candidates), name="memory-trace")
        self._trace_writes.add(task)
        task.add_done_callback(self._trace_writes.discard)
        if trace.turn_id is not None:
            self._trace_of_turn[trace.turn_id] = task
            task.add_done_callback(lambda done: self._forget_trace(trace.turn_id, done))

    def _forget_trace(self, turn_id: int | None, task: asyncio.Task[int | None]) -> None:
        # Only its own entry: a second pack of the same turn may have replaced it.
        if turn_id is not None and self._trace_of_turn.get(turn_id) is task:
            del self._trace_of_turn[turn_id]

    async def _write_trace(
        self, trace: MemoryTrace, complete: Callable[[MemoryTrace], None]
    ) -> int | None:
        try:
            return await repo.save_trace(self.store, trace, complete)
        except StoreError:
            # A lost trace loses the explanation and the turn's reinforcement, never the reply.
            log.exception("memory: could not store the trace of turn %s", trace.turn_id)
            return None

    async def traces_saved(self, turn_id: int | None = None) -> None:
        """Wait until the traces begun so far (or that of ``turn_id``) are stored."""
        if turn_id is not None:
            task = self._trace_of_turn.get(turn_id)
            pending = [task] if task is not None else []
        else:
            pending = list(self._trace_writes)
        if pending:
            await asyncio.gather(*pending)

    def _source_query(
        self, request: PackRequest, searched: str, window: TimeWindow | None, zone: tzinfo
    ) -> repo.SourceQuery:
        bounds = None
        if window is not None:
            start, end = _day_bounds(window, zone)
            bounds = (start, end, window.start, window.end)
        return repo.SourceQuery(
            person_id=request.person_id,
            message=searched,
            limit=self.config.candidates,
            pinned_max=self.config.pinned_max,
            topic_since=request.at - timedelta(seconds=self.config.topic_window_s),
            topic_max=self.config.topic_max,
            window=bounds,
            window_max=self.config.time_window_max,
            lexical_first=request.person_id not in self._lexical_joined,
        )

    def _best_hits(
        self, ann: Sequence[tuple[int, float]], lexical: Sequence[tuple[int, float]]
    ) -> list[int]:
        """The best hits by a quick fusion of both searches: their neighbours join the pack."""
        if self.config.neighbour_hits <= 0:
            return []
        best_lexical = max((score for _, score in lexical), default=0.0) or 1.0
        quick: dict[int, float] = {}
        for item_id, cosine in ann:
            quick[item_id] = cosine
        for item_id, score in lexical:
            # Full text counts whole here: its hits have no cosine before they are fetched.
            quick[item_id] = quick.get(item_id, 0.0) + score / best_lexical
        ranked = sorted(quick, key=lambda i: (-quick[i], i))
        return ranked[: self.config.neighbour_hits]

    def _candidate(
        self,
        view: MemoryView,
        vector: NDArray[np.float32] | None,
        sources: set[str],
        lexical: dict[int, float],
        query: NDArray[np.float32] | None,
    ) -> Candidate:
        dense = None if vector is None or query is None else float(vector @ query)
        return Candidate(view, vector, set(sources), dense, lexical.get(view.id, 0.0))

    async def _anchor_window(self, request: PackRequest, zone: tzinfo) -> TimeWindow | None:
        """ "before the trip": a window on one side of when the trip was talked about."""
        anchor = find_anchor(request.text)
        if anchor is None:
            return None
        hits = await self._full_text(request.person_id, anchor.event, 1)
        if not hits:
            return None
        found = await repo.fetch(self.store, [hits[0][0]])
        if not found:
            return None
        when = local_day(found[hits[0][0]][0].occurred_at, zone)
        if anchor.relation == "before":
            return TimeWindow(when - ANCHOR_SPAN, when, anchor.phrase)
        return TimeWindow(when, when + ANCHOR_SPAN, anchor.phrase)

    def _link_neighbours(
        self,
        candidates: dict[int, Candidate],
        links: dict[int, tuple[int | None, int | None]],
    ) -> None:
        """Adjacent messages close in time point at each other, for neighbour relevance."""
        gap = self.config.neighbour_gap_s
        for item_id, (prev_id, next_id) in links.items():
            me = candidates.get(item_id)
            if me is None:
                continue
            for other_id, before in ((prev_id, True), (next_id, False)):
                other = candidates.get(other_id) if other_id is not None else None
                if other is None:
                    continue
                seconds = abs((other.item.occurred_at - me.item.occurred_at).total_seconds())
                if seconds > gap:
                    continue
                if before:
                    me.prev_id, other.next_id = other.item.id, me.item.id
                else:
                    me.next_id, other.prev_id = other.item.id, me.item.id

    # -- after the turn ----------------------------------------------------------

    async def reinforce(
        self, turn_id: int, person_id: int, user_text: str, reply_text: str, at: datetime
    ) -> Reinforced:
        """Echo for items the person referred to or the reply used; fizzle for the rest."""
        await self.traces_saved(turn_id)
        trace = await repo.trace_for_turn(self.store, turn_id)
        if trace is None or not trace.kept_ids:
            return Reinforced()
        return await self.reinforce_items(trace.kept_ids, person_id, user_text, reply_text, at)

    async def reinforce_items(
        self,
        kept_ids: Sequence[int],
        person_id: int,
        user_text: str,
        reply_text: str,
        at: datetime,
    ) -> Reinforced:
        """Reinforce the items a pack held, by what the message and the reply did with them."""
        items = await repo.get_items(self.store, kept_ids)
        threshold = self.config.use_overlap
        used, referred, unused, revived = [], [], [], []
        changes = []
        for item in items:
            if overlap(item.content, user_text) >= threshold:
                referred.append(item.id)
                changes.append(Reinforcement(item.id, self.decay.reinforce_referred, True))
            elif overlap(item.content, reply_text) >= threshold:
                used.append(item.id)
                changes.append(Reinforcement(item.id, self.decay.reinforce_used, True))
            else:
                unused.append(item.id)
                changes.append(Reinforcement(item.id, self.decay.reinforce_unused, False))
                continue
            if item.tier is Tier.ARCHIVED:
                revived.append(item.id)
        await repo.reinforce(self.store, changes, at)
        if revived:
            await self._reindex(person_id, revived)
            log.info("memory: archived items %s came back (referenced again)", revived)
        return Reinforced(tuple(used), tuple(referred), tuple(unused), tuple(revived))

    async def _reindex(self, person_id: int, ids: Sequence[int]) -> None:
        index = await self.index(person_id)
        if index is None:
            return
        with_vectors = [
            i
            for i, (_, vector) in (await repo.fetch(self.store, ids)).items()
            if vector is not None
        ]
        if with_vectors:
            matrix = await self._current_vectors(with_vectors)
            await asyncio.to_thread(index.add, with_vectors, matrix)
            await self._maybe_save(index)

    async def sweep(self, now: datetime, chunk: int = 5000) -> SweepStats:
        """Recompute every active item's tier; archived ones leave the ANN index."""
        stats = SweepStats()
        after = 0
        while rows := await repo.decay_rows(self.store, after, chunk):
            after = rows[-1].id
            changes: dict[int, Tier] = {}
            leaving: dict[int, list[int]] = {}
            retained = self.decay.retention_at(rows, now)
            for row, retention in zip(rows, retained.tolist(), strict=True):
                tier = self.decay.tier(retention)
                stats.seen += 1
                stats.tiers[tier.value] = stats.tiers.get(tier.value, 0) + 1
                if tier is not row.tier:
                    changes[row.id] = tier
                    if tier is Tier.ARCHIVED:
                        leaving.setdefault(row.person_id, []).append(row.id)
            await repo.set_tiers(self.store, changes)
            for person_id, ids in leaving.items():
                stats.archived += len(ids)
                await self._unindex(person_id, ids)
        return stats

    async def prune_traces(self, now: datetime) -> int:
        """Delete the traces older than ``trace_keep_days`` (none when it is 0); how many."""
        if self.config.trace_keep_days <= 0:
            return 0
        return await repo.prune_traces(
            self.store, now - timedelta(days=self.config.trace_keep_days)
        )

    async def upkeep_forever(self) -> None:
        """Decay sweep, trace pruning and index saves now and every ``upkeep_interval_s``
        (a supervised task)."""
        while True:
            upkeep = asyncio.ensure_future(self._upkeep_pass())
            try:
                await asyncio.shield(upkeep)
            except asyncio.CancelledError:
                # A stop lets the pass under way finish: cut in a query, its connection
                # was left to SQLAlchemy's finaliser, which logged a traceback (one pass
                # runs at every start, so a stop soon after a start met it).
                await upkeep
                raise
            await asyncio.sleep(self.config.upkeep_interval_s)

    async def _upkeep_pass(self) -> None:
        now = datetime.now(UTC)
        stats = await self.sweep(now)
        pruned = await self.prune_traces(now)
        await self.save_indexes()
        # A pass that changed nothing is not news on the console (one runs at every start).
        log.log(
            logging.INFO if stats.archived or pruned else logging.DEBUG,
            "memory upkeep: %d items, tiers %s, %d archived, %d traces past their keep deleted",
            stats.seen,
            stats.tiers,
            stats.archived,
            pruned,
        )


def _fields(item: NewItem) -> dict[str, Any]:
    return {name: getattr(item, name) for name in NewItem.__dataclass_fields__}
