"""Memory items: writing them, reading them as the pack's views, their status,
tiers, use and reinforcement, and the decay sweep's rows.

Part of ``memory.repo`` (each query one short transaction on the Store).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any, TypeVar

import numpy as np
from numpy.typing import NDArray
from sqlalchemy import (
    Select,
    String,
    bindparam,
    func,
    insert,
    or_,
    select,
    type_coerce,
    update,
)

from gateway.store import Store
from gateway.store.models import utcnow
from memory.embed import from_blob, to_blob
from memory.models import MemoryItem
from memory.pack_types import MemoryView
from memory.types import ItemStatus, ItemType, Tier

T = TypeVar("T")


@dataclass(frozen=True)
class NewItem:
    person_id: int
    type: ItemType
    content: str
    occurred_at: datetime
    speaker: str = ""
    role: str = ""
    author: str = ""
    channel: str = ""
    conversation_id: int | None = None
    source_message_ids: tuple[int, ...] = ()
    source_ref: str = ""
    observation_id: int | None = None
    priority: float = 0.0
    confidence: float = 1.0
    refers_start: date | None = None
    refers_end: date | None = None
    status: ItemStatus = ItemStatus.ACTIVE
    vector: NDArray[np.float32] | None = field(default=None, compare=False)
    embedding_model: str = ""
    # "": categorised when added (memory/categories.py), else by the weekly job.
    category: str = ""
    # An insight's sources: the archived items it stands for.
    source_item_ids: tuple[int, ...] = ()


def _row(item: NewItem) -> dict[str, Any]:
    return {
        "person_id": item.person_id,
        "type": item.type,
        "content": item.content,
        "speaker": item.speaker,
        "role": item.role,
        "author": item.author,
        "channel": item.channel,
        "conversation_id": item.conversation_id,
        "source_message_ids": list(item.source_message_ids),
        "source_ref": item.source_ref,
        "observation_id": item.observation_id,
        "priority": item.priority,
        "confidence": item.confidence,
        "status": item.status,
        "tier": Tier.ACTIVE,
        "strength": 0.0,
        "access_count": 0,
        "created_at": utcnow(),
        "occurred_at": item.occurred_at,
        "refers_start": item.refers_start,
        "refers_end": item.refers_end,
        "embedding": None if item.vector is None else to_blob(item.vector),
        "embedding_model": item.embedding_model if item.vector is not None else "",
        "category": item.category,
        "source_item_ids": list(item.source_item_ids),
    }


# Built once (every turn stores its messages; issue 28, "CPU per turn").
_INSERT_ITEMS = insert(MemoryItem).returning(MemoryItem.id, sort_by_parameter_order=True)


async def insert_items(store: Store, items: Sequence[NewItem]) -> list[int]:
    """Store the items (one transaction); their ids, in order.

    One Core insert of every row in the writer thread: ORM objects cost ~0.5 ms
    an item (a tenth of bulk ingest) and were built on the event loop.
    """
    if not items:
        return []
    rows = [_row(item) for item in items]
    return await store.write(
        lambda connection: [int(i) for i in connection.execute(_INSERT_ITEMS, rows).scalars()]
    )


def _as_sent(column: Any) -> Any:
    """``column`` as the database driver returns it, without SQLAlchemy's result
    processing (``_view_and_vector`` converts it)."""
    return type_coerce(column, String()).label(column.key)


# What the pack reads of an item, as plain columns: loading whole ORM objects (with
# identity map and attribute instrumentation) for a hundred candidates costs more
# than the query. Dates, enums and JSON come as the driver sends them: SQLAlchemy's
# per-column processors cost more than SQLite's own work for a pack's rows (150 rows
# with their links: 6.1 → 4.9 ms).
_VIEW_COLUMNS: tuple[Any, ...] = (
    MemoryItem.id,
    _as_sent(MemoryItem.type),
    MemoryItem.content,
    MemoryItem.speaker,
    MemoryItem.role,
    _as_sent(MemoryItem.occurred_at),
    MemoryItem.priority,
    MemoryItem.access_count,
    MemoryItem.strength,
    _as_sent(MemoryItem.last_accessed_at),
    _as_sent(MemoryItem.tier),
    MemoryItem.conversation_id,
    _as_sent(MemoryItem.source_message_ids),
    MemoryItem.source_ref,
    _as_sent(MemoryItem.refers_start),
    _as_sent(MemoryItem.refers_end),
    MemoryItem.confidence,
    MemoryItem.slot,
    MemoryItem.slot_value,
    _as_sent(MemoryItem.valid_until),
    _as_sent(MemoryItem.confirmed_at),
    MemoryItem.replaced_by_id,
    MemoryItem.category,
    MemoryItem.embedding,
)

_ITEM_TYPES = {member.value: member for member in ItemType}

_TIERS = {member.value: member for member in Tier}


def _utc(value: str | datetime) -> datetime:
    """A stored time, aware UTC, as ``UTCDateTime`` returns it. SQLite sends the
    text SQLAlchemy wrote (UTC, without an offset); other drivers send datetimes."""
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            # Parsed with its offset, a fifth of the time of ``replace(tzinfo=UTC)``.
            return datetime.fromisoformat(value + "+00:00")
        value = datetime.fromisoformat(value)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _day(value: str | date | None) -> date | None:
    return date.fromisoformat(value) if isinstance(value, str) else value


def _ids(value: str | list[int] | None) -> tuple[int, ...]:
    if not isinstance(value, str):
        return tuple(value or ())
    # The JSON list of ids SQLAlchemy wrote ("[]", "[12, 40]"), split here in a
    # fifth of json.loads's time; anything else goes to json.
    inner = value[1:-1] if value.startswith("[") else "?"
    if not inner:
        return ()
    with contextlib.suppress(ValueError):
        return tuple(map(int, inner.split(",")))
    return tuple(json.loads(value) or ())


def _recallable(ids: Any) -> Select[Any]:
    """Recallable items (active status) whose id is in ``ids``."""
    active = MemoryItem.status == ItemStatus.ACTIVE
    return select(*_VIEW_COLUMNS).where(MemoryItem.id.in_(ids), active)


# The ids an expanding parameter: one statement for every call, so SQLAlchemy builds
# and caches it once.
_RECALLABLE = _recallable(bindparam("ids", expanding=True))


def _view_and_vector(row: Sequence[Any]) -> tuple[MemoryView, NDArray[np.float32] | None]:
    # Unpacked by position (the order of _VIEW_COLUMNS): a Row's attributes are
    # looked up by name, a few microseconds per item.
    (
        item_id,
        item_type,
        content,
        speaker,
        role,
        occurred_at,
        priority,
        access_count,
        strength,
        last_accessed_at,
        tier,
        conversation_id,
        source_message_ids,
        source_ref,
        refers_start,
        refers_end,
        confidence,
        slot,
        slot_value,
        valid_until,
        confirmed_at,
        replaced_by_id,
        category,
        embedding,
    ) = row
    view = MemoryView(
        id=item_id,
        type=_ITEM_TYPES[item_type],
        content=content,
        speaker=speaker,
        role=role,
        occurred_at=_utc(occurred_at),
        priority=priority,
        access_count=access_count,
        strength=strength,
        last_accessed_at=None if last_accessed_at is None else _utc(last_accessed_at),
        tier=_TIERS[tier],
        conversation_id=conversation_id,
        source_message_ids=_ids(source_message_ids),
        source_ref=source_ref,
        refers_start=_day(refers_start),
        refers_end=_day(refers_end),
        confidence=confidence,
        slot=slot,
        slot_value=slot_value,
        valid_until=None if valid_until is None else _utc(valid_until),
        confirmed_at=None if confirmed_at is None else _utc(confirmed_at),
        replaced_by_id=replaced_by_id,
        category=category,
    )
    return view, None if embedding is None else from_blob(embedding)


async def fetch(
    store: Store, ids: Iterable[int]
) -> dict[int, tuple[MemoryView, NDArray[np.float32] | None]]:
    """Recallable items (active status) by id, with their stored vectors."""
    wanted = set(ids)
    if not wanted:
        return {}
    async with store.reader() as session:
        rows = (await session.execute(_RECALLABLE, {"ids": sorted(wanted)})).all()
    return {row[0]: _view_and_vector(row) for row in rows}


async def get_items(store: Store, ids: Iterable[int]) -> list[MemoryItem]:
    async with store.reader() as session:
        return list(
            (await session.scalars(select(MemoryItem).where(MemoryItem.id.in_(list(ids))))).all()
        )


async def long_episodes(store: Store, max_chars: int, after: int, limit: int) -> list[MemoryItem]:
    """Active episodes longer than ``max_chars``, by id after ``after``."""
    async with store.reader() as session:
        rows = await session.scalars(
            select(MemoryItem)
            .where(
                MemoryItem.type == ItemType.EPISODE,
                MemoryItem.status == ItemStatus.ACTIVE,
                MemoryItem.id > after,
                func.length(MemoryItem.content) > max_chars,
            )
            .order_by(MemoryItem.id)
            .limit(limit)
        )
        return list(rows.all())


async def set_status(
    store: Store,
    ids: Sequence[int],
    status: ItemStatus,
    at: datetime,
    *,
    superseded_by: int | None = None,
) -> None:
    if not ids:
        return
    async with store.session() as session:
        await session.execute(
            update(MemoryItem)
            .where(MemoryItem.id.in_(list(ids)))
            .values(status=status, status_changed_at=at, superseded_by_id=superseded_by)
        )


async def set_tiers(store: Store, tiers: dict[int, Tier]) -> None:
    by_tier: dict[Tier, list[int]] = {}
    for item_id, tier in tiers.items():
        by_tier.setdefault(tier, []).append(item_id)
    async with store.session() as session:
        for tier, ids in by_tier.items():
            await session.execute(
                update(MemoryItem).where(MemoryItem.id.in_(ids)).values(tier=tier)
            )


async def carry_use(store: Store, ids: Sequence[int], source: MemoryItem) -> None:
    """``ids`` take ``source``'s use: strength, accesses, last access, pin and tier."""
    async with store.session() as session:
        await session.execute(
            update(MemoryItem)
            .where(MemoryItem.id.in_(list(ids)))
            .values(
                strength=source.strength,
                access_count=source.access_count,
                last_accessed_at=source.last_accessed_at,
                pinned=source.pinned,
                tier=source.tier,
            )
        )


@dataclass(frozen=True)
class Reinforcement:
    item_id: int
    strength: float
    accessed: bool


async def reinforce(store: Store, changes: Sequence[Reinforcement], at: datetime) -> None:
    async with store.session() as session:
        for change in changes:
            values: dict[str, Any] = {"strength": MemoryItem.strength + change.strength}
            if change.accessed:
                values |= {
                    "access_count": MemoryItem.access_count + 1,
                    "last_accessed_at": at,
                    "tier": Tier.ACTIVE,
                }
            await session.execute(
                update(MemoryItem).where(MemoryItem.id == change.item_id).values(**values)
            )


@dataclass(frozen=True)
class DecayRow:
    id: int
    person_id: int
    type: ItemType
    strength: float
    occurred_at: datetime
    last_accessed_at: datetime | None
    tier: Tier


async def decay_rows(store: Store, after_id: int, limit: int) -> list[DecayRow]:
    async with store.reader() as session:
        rows = await session.execute(
            select(
                MemoryItem.id,
                MemoryItem.person_id,
                MemoryItem.type,
                MemoryItem.strength,
                MemoryItem.occurred_at,
                MemoryItem.last_accessed_at,
                MemoryItem.tier,
            )
            .where(MemoryItem.status == ItemStatus.ACTIVE, MemoryItem.id > after_id)
            .order_by(MemoryItem.id)
            .limit(limit)
        )
        return [DecayRow(*r) for r in rows]


async def similar_active(
    store: Store, person_id: int, item_type: ItemType, exclude: int, model: str
) -> list[tuple[int, str, NDArray[np.float32] | None]]:
    """Active items of one type (not episodes), for supersession checks; each with its
    vector when ``model`` made it (an older model's is not comparable)."""
    async with store.reader() as session:
        rows = await session.execute(
            select(
                MemoryItem.id, MemoryItem.content, MemoryItem.embedding, MemoryItem.embedding_model
            ).where(
                MemoryItem.person_id == person_id,
                MemoryItem.type == item_type,
                MemoryItem.status == ItemStatus.ACTIVE,
                MemoryItem.id != exclude,
            )
        )
        return [
            (int(r[0]), r[1], from_blob(r[2]) if r[2] is not None and r[3] == model else None)
            for r in rows
        ]


@dataclass(frozen=True)
class HeldItem:
    """A recallable item as "what do you remember about me?" lists it."""

    id: int
    type: ItemType
    role: str
    content: str
    occurred_at: datetime


async def held_for_person(store: Store, person_id: int, limit: int) -> list[HeldItem]:
    """The person's newest recallable items: their own messages (episodes said by them,
    this conversation's included) and every stored fact, preference...; never the
    agent's words. Newest first."""
    query = (
        select(
            MemoryItem.id,
            MemoryItem.type,
            MemoryItem.role,
            MemoryItem.content,
            MemoryItem.occurred_at,
        )
        .where(
            MemoryItem.person_id == person_id,
            MemoryItem.status == ItemStatus.ACTIVE,
            or_(MemoryItem.type != ItemType.EPISODE, MemoryItem.role == "user"),
        )
        .order_by(MemoryItem.occurred_at.desc(), MemoryItem.id.desc())
        .limit(limit)
    )
    async with store.reader() as session:
        rows = await session.execute(query)
        return [HeldItem(*row) for row in rows.all()]


# Built once (every turn's ingest asks): the person and refs bound at execution.
_EXISTING_REFS = select(MemoryItem.source_ref).where(
    MemoryItem.person_id == bindparam("person_id"),
    MemoryItem.source_ref.in_(bindparam("refs", expanding=True)),
)


async def existing_refs(store: Store, person_id: int, refs: Sequence[str]) -> set[str]:
    """Which of these source refs already have an item (a retried turn is not stored twice)."""
    if not refs:
        return set()
    params = {"person_id": person_id, "refs": list(refs)}
    return await store.read(
        lambda connection: set(connection.scalars(_EXISTING_REFS, params).all())
    )


async def forgotten_messages(store: Store, person_id: int, message_ids: Sequence[int]) -> bool:
    """Whether any of these messages was forgotten (or was itself a "forget" request)."""
    refs = [f"m{i}" for i in message_ids]
    if not refs:
        return False
    async with store.reader() as session:
        found = await session.scalar(
            select(MemoryItem.id)
            .where(
                MemoryItem.person_id == person_id,
                MemoryItem.source_ref.in_(refs),
                MemoryItem.status == ItemStatus.FORGOTTEN,
            )
            .limit(1)
        )
        return found is not None
