"""What every layer of ``MemoryService`` shares: its state, its requests and results,
and the settings built from config.

The service itself is in memory/service.py; its layers, each in a module of its
own, are listed in the "Memory modules" section of docs/DESIGN.md.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from pathlib import Path
from typing import Any, Literal

from gateway.clock import day_start
from gateway.config import MemoryConfig, UpkeepJobsConfig
from gateway.heap import freeze_long_lived
from gateway.store import Store
from gateway.zones import PersonZones
from memory.categories import CategoryPrototypes
from memory.decay import DecayPolicy
from memory.embed import RECENT_TEXTS, Embedder, EmbedQueue, SentenceEmbedder
from memory.embed_onnx import model_cache
from memory.index import PersonIndex
from memory.index_cache import EvictionSaves, IndexCache
from memory.lexical import Fts5Tokenizer, LexicalIndex
from memory.pack_activity import PackActivity
from memory.pack_types import PackResult, PackSettings
from memory.repo import NewItem
from memory.score import ScoreWeights
from memory.timeparse import TimeWindow
from memory.tree.service import MemoryTree
from memory.ttl import domain_ttls
from memory.types import ItemStatus, ItemType
from memory.utility import UtilityModel

# A change to which items are searchable, told to a cluster's other gateways (memory/feed.py).
ChangeOp = Literal["add", "restore", "drop", "unindex"]
Publish = Callable[[ChangeOp, int, Sequence[int]], Awaitable[None]]
# The most queries one model call takes (more wait for the next): a query in a
# batch waits for the batch's longest text, so it stays small.
QUERY_BATCH = 8
# How long the memory's own texts wait for others under load (memory.embed.EmbedQueue).
MEMORY_GATHER_S = 0.1

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
    # The budget's mode (gateway/budget.py): a smaller pack, no dense search.
    budget_tokens: int | None = None
    dense: bool = True
    budget_mode: str = "normal"


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


def pack_settings(memory: MemoryConfig, jobs: UpkeepJobsConfig | None = None) -> PackSettings:
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
        trust_pass=memory.trust_pass,
        query_conflicts=memory.query_conflicts,
        superseded_penalty=memory.superseded_penalty,
        ttl_days=domain_ttls(jobs if jobs is not None else UpkeepJobsConfig()),
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


def day_bounds(window: TimeWindow, zone: tzinfo) -> tuple[datetime, datetime]:
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


class ServiceState:
    """The state every layer of ``MemoryService`` reads and writes."""

    def __init__(
        self,
        store: Store,
        config: MemoryConfig,
        index_dir: Path,
        embedder: Embedder | None,
        *,
        zones: PersonZones | None = None,
        jobs: UpkeepJobsConfig | None = None,
    ) -> None:
        single_threaded_blas()
        self.store = store
        self.config = config
        # What the weekly and monthly upkeep jobs change ([upkeep_jobs]).
        self.jobs = jobs if jobs is not None else UpkeepJobsConfig()
        # The utility model, when one is configured: the weekly job's categories,
        # summaries and insights come from it (memory/utility.py); None: without a model.
        self.utility: UtilityModel | None = None
        # Each category's prototype vectors (memory/categories.py), embedded at first use.
        self._prototypes: CategoryPrototypes | None = None
        self.index_dir = index_dir
        self.embedder = embedder
        # Each person's time zone (their own, else ``agent.timezone``): the days that
        # words like "yesterday" name, and the days of the pack's lines.
        self.zones = zones if zones is not None else PersonZones(None, UTC)
        self.settings = pack_settings(config, self.jobs)
        self.decay = decay_policy(config)
        # The memory tree (memory/tree/): updated off the reply's path after writes.
        # The packs under way: upkeep batches in this process start between them.
        self.packs = PackActivity()
        self.tree = MemoryTree(store, config, self.zones, lambda: self.utility, self.packs)
        self._indexes: dict[int, PersonIndex] = {}
        # In a cluster, tells the other gateways which items became searchable or
        # stopped being so (memory/feed.py); None on a single gateway.
        self.publish: Publish | None = None
        self._opening: dict[int, asyncio.Lock] = {}
        # Who speaks in each person's conversations (first names), for search_text.
        self._speakers: dict[int, set[str]] = {}
        # Concurrent turns' small embedding requests share one model call.
        # After-turn texts: under load they wait a moment to share a call (issue 28).
        self._embeds = (
            EmbedQueue(embedder, recent=RECENT_TEXTS, gather_s=MEMORY_GATHER_S)
            if embedder is not None
            else None
        )
        # The packs' queries have their own queue: concurrent turns' queries share a
        # model call (a text alone cost ~9 ms of CPU, ~5-6 ms in a batch; issue 28),
        # and a query never waits behind the memory's larger batches (ONNX Runtime
        # runs both at once).
        self._query_embeds = (
            EmbedQueue(embedder, max_batch=QUERY_BATCH) if embedder is not None else None
        )
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

    @property
    def dense(self) -> bool:
        return self.embedder is not None

    @property
    def embed_queue(self) -> EmbedQueue | None:
        """The queue the memory's own texts are embedded through, for other after-turn
        work that wants the same model's vectors (the local judge's reply)."""
        return self._embeds

    def dense_for(self, person_id: int) -> bool:
        """Whether the person's packs search by vector now (not while theirs are redone)."""
        return self.embedder is not None and person_id not in self._reembedding

    @property
    def reembedding(self) -> int:
        """How many people's items are still waiting for vectors of this model."""
        return len(self._reembedding)


def fields_of(item: NewItem) -> dict[str, Any]:
    return {name: getattr(item, name) for name in NewItem.__dataclass_fields__}
