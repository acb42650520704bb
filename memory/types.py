"""The vocabulary of the memory layer: item types, states, tiers and their floors."""

from __future__ import annotations

import enum


class ItemType(enum.StrEnum):
    """What a memory item holds; ``episode`` is one stored message, verbatim."""

    FACT = "fact"
    PREFERENCE = "preference"
    PERSONA = "persona"
    RELATIONAL = "relational"
    PROCEDURAL = "procedural"
    EVENT = "event"
    EPISODE = "episode"
    # One sentence standing for a cluster of archived items (weekly upkeep), linked to
    # them by ``source_item_ids``.
    INSIGHT = "insight"


class ItemStatus(enum.StrEnum):
    ACTIVE = "active"
    # Replaced by a newer item (``superseded_by_id``); kept for the record, never packed.
    SUPERSEDED = "superseded"
    # The person asked to forget it; kept only so the decision is auditable, never packed.
    FORGOTTEN = "forgotten"


class Tier(enum.StrEnum):
    """Retention tiers (§5.7): archived items leave the ANN index but stay in the store."""

    ACTIVE = "active"
    WARM = "warm"
    COLD = "cold"
    ARCHIVED = "archived"


# Explicit priority never counts for less than this, by type (Agent Memory §5.1).
PRIORITY_FLOORS: dict[ItemType, float] = {
    ItemType.PERSONA: 0.7,
    ItemType.RELATIONAL: 0.6,
    ItemType.PREFERENCE: 0.5,
    ItemType.PROCEDURAL: 0.3,
    ItemType.FACT: 0.1,
    ItemType.EVENT: 0.1,
    ItemType.EPISODE: 0.0,
    ItemType.INSIGHT: 0.1,
}

# Offered to every pack whatever the message, and never decaying below the retention floor.
PINNED_TYPES: tuple[ItemType, ...] = (ItemType.PERSONA, ItemType.RELATIONAL)
PINNED_RETENTION_FLOOR = 0.5

# The record: stored messages, verbatim. Age alone never archives them (out of the ANN
# index, where only a lexical match or a use could bring them back): the decay sweep and
# the weekly domain TTL demote them at most to ``RECORD_AGE_FLOOR``, which stays in
# dense search ranked by retention as every tier is. Everything derived from them
# (facts, preferences, insights...) can be archived: the record it came from is kept.
RECORD_TYPES: tuple[ItemType, ...] = (ItemType.EPISODE,)
RECORD_AGE_FLOOR = Tier.COLD


def effective_priority(item_type: ItemType, priority: float) -> float:
    return max(PRIORITY_FLOORS[item_type], min(1.0, max(0.0, priority)))
