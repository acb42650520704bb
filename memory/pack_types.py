"""The Memory Pack's data: a stored item as the pack reads it, a candidate, the pack's
settings and its result (memory/pack.py decides; memory/recall.py gathers)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, tzinfo
from functools import cached_property
from typing import Any

import numpy as np
from numpy.typing import NDArray

from gateway.brains.base import Recollection
from gateway.config import UpkeepJobsConfig
from memory.decay import DecayPolicy
from memory.score import ScoreWeights
from memory.ttl import domain_ttls
from memory.types import ItemType, Tier


# Not frozen: a frozen dataclass's __init__ sets each field through
# object.__setattr__ (4 µs against 1 here), and a pack reads 150 of these a message.
@dataclass(slots=True)
class MemoryView:
    """A stored item as the pack reads it (read only by convention)."""

    id: int
    type: ItemType
    content: str
    speaker: str = ""
    role: str = ""
    occurred_at: datetime = datetime(1970, 1, 1)
    priority: float = 0.0
    access_count: int = 0
    strength: float = 0.0
    last_accessed_at: datetime | None = None
    tier: Tier = Tier.ACTIVE
    conversation_id: int | None = None
    source_message_ids: tuple[int, ...] = ()
    source_ref: str = ""
    refers_start: date | None = None
    refers_end: date | None = None
    confidence: float = 1.0
    # The slot it claims and its value (memory/slots.py); when it stopped being valid.
    slot: str | None = None
    slot_value: str = ""
    valid_until: datetime | None = None
    confirmed_at: datetime | None = None
    # What ended it (memory/validity.py): the pack puts an ended item after it.
    replaced_by_id: int | None = None
    # Its category (memory/categories.py): the TTL of a frame's ``[stale]``.
    category: str = ""


# Slots: a pack makes, scores and frees ~150 of these a message (no __dict__ each).
@dataclass(slots=True)
class Candidate:
    item: MemoryView
    vector: NDArray[np.float32] | None
    sources: set[str] = field(default_factory=set)
    # Cosine to the message (None without a vector), BM25 (positive, 0 when no hit).
    dense: float | None = None
    lexical: float = 0.0
    # The adjacent messages of the same conversation, for neighbour relevance.
    prev_id: int | None = None
    next_id: int | None = None


@dataclass(frozen=True)
class PackSettings:
    budget_tokens: int
    weights: ScoreWeights
    decay: DecayPolicy
    mmr_lambda: float = 0.7
    lexical_weight: float = 0.5
    neighbour_weight: float = 0.3
    # Added to neighbour_weight for a turn after another speaker's question (its answer).
    answer_weight: float = 0.3
    # Share of the best relevance among the candidates of the same conversation and day.
    session_weight: float = 0.6
    speaker_boost: float = 1.0
    time_boost: float = 0.5
    frequency_half_count: float = 3.0
    persona_min_items: int = 2
    relational_min_items: int = 1
    # Most of the budget one type may take (share of the budget, 0-1).
    type_quota: Mapping[ItemType, float] = field(default_factory=dict)
    # The people's zone: the days of "the same day", of a time window and of each line.
    zone: tzinfo = UTC
    # The trust pass (memory/trust.py): tags, current-first order, ended items ranked
    # lower (their score x (1 - superseded_penalty)); stale past their category's domain
    # TTL (days by category, memory/ttl.py: the weekly archive's table).
    trust_pass: bool = True
    # Two kept statements of the speaker's own that answer the message with different
    # values are flagged [conflict] at pack time (memory/trust.py ``query_conflicts``).
    query_conflicts: bool = False
    superseded_penalty: float = 0.5
    ttl_days: Mapping[str, float] = field(default_factory=lambda: domain_ttls(UpkeepJobsConfig()))


@dataclass(frozen=True)
class PackResult:
    text: str
    tokens: int
    kept: tuple[int, ...]
    filtered: tuple[dict[str, Any], ...]
    # Builds ``trace``. The reply needs only the text: the trace's dicts (one per
    # candidate, a millisecond for a hundred) are built where the trace is stored,
    # off the reply's path.
    explain: Callable[[], tuple[dict[str, Any], ...]] = field(repr=False, compare=False)
    # The kept items as data (day, who, sanitised text), in the pack's order.
    recollections: tuple[Recollection, ...] = ()
    # The stored messages the kept items come from.
    kept_message_ids: frozenset[int] = frozenset()

    @cached_property
    def trace(self) -> tuple[dict[str, Any], ...]:
        """Every candidate: its sources, signals and score, kept or dropped and why."""
        return self.explain()
