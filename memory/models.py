"""Tables of the memory layer: memory items and pack traces.

They live on the core's ``Base`` so one Alembic history covers every table
(migration ``0002``, which also creates the SQLite FTS5 table ``memory_fts``
and the triggers that keep it in step with ``memory_items``). Vectors are
stored with their items, so a restart or an index rebuild never re-embeds.
"""

from __future__ import annotations

import enum
from datetime import date, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    Date,
    Enum,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from gateway.store.models import Base, CompressedJSON, utcnow
from memory.types import ItemStatus, ItemType, Tier


def _enum_column(enum_type: type[enum.StrEnum]) -> Enum:
    """Stored as the member's string value in a VARCHAR, like the core's enums."""
    return Enum(
        enum_type,
        native_enum=False,
        length=16,
        values_callable=lambda members: [m.value for m in members],
    )


class MemoryItem(Base):
    """One thing the agent may recall about a person (a message, a fact, a preference...)."""

    __tablename__ = "memory_items"
    __table_args__ = (
        Index("ix_memory_items_person_state", "person_id", "status", "tier"),
        Index("ix_memory_items_person_type", "person_id", "type"),
        Index("ix_memory_items_conversation", "conversation_id", "id"),
        # The pack's previous/next episode of each candidate (migration 0008).
        Index("ix_memory_items_episode_links", "conversation_id", "type", "status", "id"),
        Index("ix_memory_items_person_ref", "person_id", "source_ref"),
        # Deleting an item sets superseded_by_id to NULL where it points at it (0009).
        Index("ix_memory_items_superseded_by", "superseded_by_id"),
        # The pack's active topic, pinned items and time window (migration 0006).
        Index("ix_memory_items_person_touched", "person_id", "status", "last_accessed_at"),
        Index("ix_memory_items_person_pinned", "person_id", "pinned"),
        # The current statements of a slot, when a new one may end them (migration 0018).
        Index("ix_memory_items_person_slot", "person_id", "slot"),
        # Category summaries and domain TTLs read a person's items by category (0017).
        Index("ix_memory_items_person_category", "person_id", "category", "status"),
        Index("ix_memory_items_person_occurred", "person_id", "status", "occurred_at"),
        Index(
            "ix_memory_items_person_refers",
            "person_id",
            "status",
            text("coalesce(refers_end, refers_start)"),
        ),
        # Ids are never given twice (migration 0009): traces and index files name items by id.
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    person_id: Mapped[int] = mapped_column(ForeignKey("people.id", ondelete="CASCADE"))
    type: Mapped[ItemType] = mapped_column(_enum_column(ItemType))
    content: Mapped[str] = mapped_column(Text)
    # Who said or wrote it, as the pack names them ("Sam", "Ada"); role user/assistant or "".
    speaker: Mapped[str] = mapped_column(String(200), default="")
    role: Mapped[str] = mapped_column(String(16), default="")
    # What wrote the item: user, assistant, remember, observer, import.
    author: Mapped[str] = mapped_column(String(32), default="")
    channel: Mapped[str] = mapped_column(String(32), default="")
    conversation_id: Mapped[int | None] = mapped_column(
        ForeignKey("conversations.id", ondelete="SET NULL"), default=None
    )
    # Provenance: the stored messages it comes from, and a short reference shown in the
    # pack: "m<message id>" for a gateway message, an outside id such as LoCoMo's dia_id.
    source_message_ids: Mapped[list[int]] = mapped_column(JSON, default=list)
    source_ref: Mapped[str] = mapped_column(String(100), default="")
    observation_id: Mapped[int | None] = mapped_column(Integer, default=None, index=True)
    # Explicit priority 0-1 (floors per type apply on use) and how sure we are of it.
    priority: Mapped[float] = mapped_column(Float, default=0.0)
    confidence: Mapped[float] = mapped_column(Float, default=1.0)
    status: Mapped[ItemStatus] = mapped_column(_enum_column(ItemStatus), default=ItemStatus.ACTIVE)
    # Pinned in the panel: offered to every pack, like persona and relational items.
    pinned: Mapped[bool] = mapped_column(Boolean, default=False, server_default="0")
    tier: Mapped[Tier] = mapped_column(_enum_column(Tier), default=Tier.ACTIVE)
    # Reinforcement so far; the half-life grows with it (§5.7).
    strength: Mapped[float] = mapped_column(Float, default=0.0)
    access_count: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # When it was said or happened (a message's own time); recency counts from here.
    occurred_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_accessed_at: Mapped[datetime | None] = mapped_column(default=None)
    # The dates it refers to ("yesterday" in a message of 8 May refers to 7 May).
    refers_start: Mapped[date | None] = mapped_column(Date, default=None)
    refers_end: Mapped[date | None] = mapped_column(Date, default=None)
    superseded_by_id: Mapped[int | None] = mapped_column(
        ForeignKey("memory_items.id", ondelete="SET NULL"), default=None
    )
    status_changed_at: Mapped[datetime | None] = mapped_column(default=None)
    # What it claims (memory/slots.py): "ada:residence" = "porto"; None: no claim. A newer
    # statement of the same slot ends it: ``valid_until`` (when it stopped being true)
    # and ``replaced_by_id``. It stays recallable: validity ranks and tags, never hides
    # (memory/trust.py). ``confirmed_at``: last said again (the trust pass's TTL).
    slot: Mapped[str | None] = mapped_column(String(120), default=None)
    slot_value: Mapped[str] = mapped_column(String(200), default="", server_default="")
    valid_until: Mapped[datetime | None] = mapped_column(default=None)
    replaced_by_id: Mapped[int | None] = mapped_column(Integer, default=None)
    confirmed_at: Mapped[datetime | None] = mapped_column(default=None)
    # float32 little-endian, L2-normalised; None until embedded.
    embedding: Mapped[bytes | None] = mapped_column(LargeBinary, default=None)
    embedding_model: Mapped[str] = mapped_column(String(100), default="")
    # persona, preferences, facts, events, relationships, work, health or hobbies
    # (memory/categories.py): set when written, backfilled by the weekly job; ""
    # until then. Its domain TTL decides when the weekly job archives it (0017).
    category: Mapped[str] = mapped_column(String(16), default="", server_default="")
    # The items an insight stands for (the archived cluster it sums up); [] otherwise.
    source_item_ids: Mapped[list[int]] = mapped_column(JSON, default=list, server_default="[]")


class MemorySummary(Base):
    """One version of a person's summary of one category ("what I know about you").

    The weekly job rebuilds each from the active items alone; a rebuild that reads
    differently is a new version, so an earlier one is never silently overwritten.
    """

    __tablename__ = "memory_summaries"
    __table_args__ = (
        Index(
            "ix_memory_summaries_person_category", "person_id", "category", "version", unique=True
        ),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    person_id: Mapped[int] = mapped_column(ForeignKey("people.id", ondelete="CASCADE"))
    category: Mapped[str] = mapped_column(String(16))
    version: Mapped[int] = mapped_column(Integer)
    text: Mapped[str] = mapped_column(Text)
    # The items quoted, in order; how it was written: "extractive" or the model's name.
    item_ids: Mapped[list[int]] = mapped_column(JSON, default=list)
    method: Mapped[str] = mapped_column(String(100), default="extractive")
    # How many active items of the category there were.
    items: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class MemoryTrace(Base):
    """Why a pack holds what it holds: every candidate, its signals, kept or dropped and why."""

    __tablename__ = "memory_traces"

    id: Mapped[int] = mapped_column(primary_key=True)
    turn_id: Mapped[int | None] = mapped_column(
        ForeignKey("turns.id", ondelete="CASCADE"), default=None, index=True
    )
    person_id: Mapped[int] = mapped_column(ForeignKey("people.id", ondelete="CASCADE"), index=True)
    # Indexed for upkeep, which deletes traces older than memory.trace_keep_days.
    created_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)
    query: Mapped[str] = mapped_column(Text, default="")
    budget_tokens: Mapped[int] = mapped_column(Integer, default=0)
    used_tokens: Mapped[int] = mapped_column(Integer, default=0)
    # The resolved time window of the message, if it named one.
    time_window: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    # [{"id", "type", "sources", "signals": {...}, "score", "decision", "reason"}, ...]
    candidates: Mapped[list[dict[str, Any]]] = mapped_column(CompressedJSON, default=list)
    kept_ids: Mapped[list[int]] = mapped_column(JSON, default=list)
    # What the sanitiser neutralised: [{"id", "rules": [...]}].
    filtered: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    # remember/forget done in this turn, timings, degraded modes.
    notes: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


class MemoryMerge(Base):
    """A nightly merge of near-duplicates (issue 21): what it changed, so it can be undone.

    ``merged_ids`` were superseded by ``survivor_id``; ``before`` holds the fields
    of the survivor the merge changed, as they were, and ``added`` what it added to
    its counters, so an unmerge gives back the survivor's own state and keeps any
    use since. Migration 0016.
    """

    __tablename__ = "memory_merges"

    id: Mapped[int] = mapped_column(primary_key=True)
    person_id: Mapped[int] = mapped_column(ForeignKey("people.id", ondelete="CASCADE"), index=True)
    survivor_id: Mapped[int] = mapped_column(
        ForeignKey("memory_items.id", ondelete="CASCADE"), index=True
    )
    merged_ids: Mapped[list[int]] = mapped_column(JSON, default=list)
    # Cosine of each merged item to the survivor, in the order of merged_ids.
    similarities: Mapped[list[float]] = mapped_column(JSON, default=list)
    before: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    added: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    undone_at: Mapped[datetime | None] = mapped_column(default=None)


class MemoryPromotion(Base):
    """The last day an item's priority was raised for being used in a pack (once a day)."""

    __tablename__ = "memory_promotions"

    item_id: Mapped[int] = mapped_column(
        ForeignKey("memory_items.id", ondelete="CASCADE"), primary_key=True
    )
    promoted_on: Mapped[date] = mapped_column(Date)
