"""Decay, tiers and reinforcement (Agent Memory §5.7; echo/fizzle of ADR-0079).

Retention is ``exp(-0.693 · h / half_life)``: it halves every half-life, and
the half-life grows with the item's reinforcement strength, so memories that
keep being used fade slowly. Persona and relational items never fall below
``PINNED_RETENTION_FLOOR``. Retention sets the tier; archived items leave the
ANN index (the store and full-text search keep them) until they are
referenced again. The record (``RECORD_TYPES``: episodes, the stored messages)
is never archived by age: its lowest tier is ``RECORD_AGE_FLOOR`` (cold), still
in dense search, where its retention ranks it as before. Reinforcement ("echo")
is strongest when the person refers to an item, smaller when a reply visibly
used it, smallest when it was packed but unused ("fizzle").
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from memory.types import (
    PINNED_RETENTION_FLOOR,
    PINNED_TYPES,
    RECORD_AGE_FLOOR,
    RECORD_TYPES,
    ItemType,
    Tier,
)

LN2 = 0.693


class Decaying(Protocol):
    """What retention reads of an item (a stored row or the pack's view of one)."""

    @property
    def type(self) -> ItemType: ...

    @property
    def strength(self) -> float: ...

    @property
    def occurred_at(self) -> datetime: ...

    @property
    def last_accessed_at(self) -> datetime | None: ...


@dataclass(frozen=True)
class DecayPolicy:
    half_life_hours: Mapping[ItemType, float]
    # Each unit of strength adds this share of the base half-life.
    strength_growth: float = 1.0
    # Retention at or above tier_active is active, then warm, then cold, below tier_cold archived.
    tier_active: float = 0.5
    tier_warm: float = 0.2
    tier_cold: float = 0.05
    reinforce_referred: float = 1.0
    reinforce_used: float = 0.5
    reinforce_unused: float = 0.1

    def retentions(
        self,
        item_types: Sequence[ItemType],
        strengths: NDArray[np.float64],
        hours: NDArray[np.float64],
    ) -> NDArray[np.float64]:
        """Each item's retention (an entry per item), ``hours`` after it was last touched.
        Many at once: a pack scores a hundred candidates, a sweep thousands of items."""
        base = np.array([self.half_life_hours[t] for t in item_types], dtype=np.float64)
        half_life = base * (1.0 + self.strength_growth * np.maximum(0.0, strengths))
        value = np.exp(-LN2 * np.maximum(0.0, hours) / half_life)
        pinned = np.array([t in PINNED_TYPES for t in item_types], dtype=bool)
        return np.where(pinned, np.maximum(PINNED_RETENTION_FLOOR, value), value)

    def retention_at(self, items: Sequence[Decaying], now: datetime) -> NDArray[np.float64]:
        """Each item's retention at ``now``, counted from when it was last touched."""
        hours = [hours_between(last_touch(i.occurred_at, i.last_accessed_at), now) for i in items]
        return self.retentions(
            [i.type for i in items],
            np.array([i.strength for i in items], dtype=np.float64),
            np.array(hours, dtype=np.float64),
        )

    def tier(self, retention: float) -> Tier:
        if retention >= self.tier_active:
            return Tier.ACTIVE
        if retention >= self.tier_warm:
            return Tier.WARM
        if retention >= self.tier_cold:
            return Tier.COLD
        return Tier.ARCHIVED

    def tier_of(self, item_type: ItemType, retention: float) -> Tier:
        """The tier decay gives an item of this type: the record stops at its floor
        (a raw message archived out of the ANN index by age alone left dense search,
        and a question about it months later found it only by shared words)."""
        tier = self.tier(retention)
        if tier is Tier.ARCHIVED and item_type in RECORD_TYPES:
            return RECORD_AGE_FLOOR
        return tier


def hours_between(earlier: datetime, later: datetime) -> float:
    return (later - earlier).total_seconds() / 3600.0


def last_touch(occurred_at: datetime, last_accessed_at: datetime | None) -> datetime:
    """Recency counts from the latest of when it happened and when it was last used."""
    if last_accessed_at is None or last_accessed_at < occurred_at:
        return occurred_at
    return last_accessed_at


_CONTENT_WORD = re.compile(r"[a-z0-9][a-z0-9'-]{3,}")
_COMMON = frozenset(
    [
        "that",
        "this",
        "with",
        "have",
        "from",
        "they",
        "them",
        "then",
        "than",
        "there",
        "their",
        "what",
        "when",
        "where",
        "which",
        "would",
        "could",
        "should",
        "about",
        "really",
        "think",
        "know",
        "just",
        "like",
        "been",
        "were",
        "will",
        "your",
        "yours",
        "going",
        "thanks",
        "thank",
        "great",
        "awesome",
        "sounds",
        "that's",
        "it's",
        "i'm",
        "you're",
        "don't",
    ]
)


def content_words(text: str) -> set[str]:
    return {w for w in _CONTENT_WORD.findall(text.lower()) if w not in _COMMON}


def overlap(item_text: str, other_text: str, min_shared: int = 2) -> float:
    """How much of the smaller side's content words the two texts share (0-1).

    A short message naming two of an item's words refers to it ("How is Miso
    the grey cat?"); a long reply must repeat most of a short item's words to
    have used it. Fewer than ``min_shared`` shared words count as no overlap.
    """
    mine, theirs = content_words(item_text), content_words(other_text)
    shared = len(mine & theirs)
    if shared < min(min_shared, len(mine)) or not mine or not theirs:
        return 0.0
    return shared / min(len(mine), len(theirs))
