"""Slots and validity: the current statements of a subject, ending them, confirming them.

Part of ``memory.repo`` (each query one short transaction on the Store).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
from numpy.typing import NDArray
from sqlalchemy import select, update

from gateway.store import Store
from memory.embed import from_blob
from memory.models import MemoryItem
from memory.types import ItemStatus, ItemType


@dataclass(frozen=True)
class SlotRow:
    """A current statement of a slot (valid, recallable)."""

    id: int
    slot: str
    value: str
    content: str
    occurred_at: datetime
    conversation_id: int | None
    vector: NDArray[np.float32] | None = field(default=None, compare=False)


# What a statement row holds: id, slot, value, content, when said, conversation.
_STATEMENT = (
    MemoryItem.id,
    MemoryItem.slot,
    MemoryItem.slot_value,
    MemoryItem.content,
    MemoryItem.occurred_at,
    MemoryItem.conversation_id,
)


async def current_of_subject(
    store: Store, person_id: int, subject: str, model: str
) -> list[SlotRow]:
    """The subject's statements that claim a slot and are still valid, oldest first;
    each with its vector when ``model`` made it."""
    # A range on the (person_id, slot) index rather than LIKE (case-insensitive in
    # SQLite, so never answered from the index).
    low, high = f"{subject}:", f"{subject};"
    query = (
        select(*_STATEMENT, MemoryItem.embedding, MemoryItem.embedding_model)
        .where(
            MemoryItem.person_id == person_id,
            MemoryItem.slot >= low,
            MemoryItem.slot < high,
            MemoryItem.valid_until.is_(None),
            MemoryItem.status == ItemStatus.ACTIVE,
        )
        .order_by(MemoryItem.occurred_at, MemoryItem.id)
    )
    async with store.reader() as session:
        rows = (await session.execute(query)).all()
    return [
        SlotRow(
            int(r[0]),
            r[1] or "",
            r[2],
            r[3],
            r[4],
            r[5],
            from_blob(r[6]) if r[6] is not None and r[7] == model else None,
        )
        for r in rows
    ]


async def set_slot(store: Store, item_id: int, slot: str, value: str) -> None:
    async with store.session() as session:
        await session.execute(
            update(MemoryItem)
            .where(MemoryItem.id == item_id)
            .values(slot=slot, slot_value=value[:200])
        )


async def end_items(
    store: Store,
    ids: Sequence[int],
    until: datetime,
    replaced_by: int,
    *,
    slot: tuple[str, str] | None = None,
) -> None:
    """``ids`` stop being valid at ``until``, replaced by ``replaced_by``; they stay
    recallable. ``slot``: also give them this slot and value (an agent's reply that
    repeated the old value is outdated with it)."""
    if not ids:
        return
    values: dict[str, object] = {"valid_until": until, "replaced_by_id": replaced_by}
    if slot is not None:
        values |= {"slot": slot[0], "slot_value": slot[1][:200]}
    async with store.session() as session:
        await session.execute(
            update(MemoryItem)
            .where(MemoryItem.id.in_(list(ids)), MemoryItem.valid_until.is_(None))
            .values(**values)
        )


async def confirm(store: Store, ids: Sequence[int], at: datetime) -> None:
    """Said again: the trust pass's TTL counts from ``at``."""
    if not ids:
        return
    async with store.session() as session:
        await session.execute(
            update(MemoryItem).where(MemoryItem.id.in_(list(ids))).values(confirmed_at=at)
        )


async def replies_after(
    store: Store, conversation_id: int, after_id: int, limit: int
) -> list[tuple[int, str, str]]:
    """The next ``limit`` episodes of a conversation after ``after_id``: (id, role, content)."""
    query = (
        select(MemoryItem.id, MemoryItem.role, MemoryItem.content)
        .where(
            MemoryItem.conversation_id == conversation_id,
            MemoryItem.type == ItemType.EPISODE,
            MemoryItem.id > after_id,
        )
        .order_by(MemoryItem.id)
        .limit(limit)
    )
    async with store.reader() as session:
        return [(int(r[0]), r[1], r[2]) for r in (await session.execute(query)).all()]


async def ended_of(store: Store, ids: Sequence[int]) -> dict[int, datetime]:
    """Of these items, those a newer statement ended: id -> when."""
    if not ids:
        return {}
    query = select(MemoryItem.id, MemoryItem.valid_until).where(
        MemoryItem.id.in_(list(ids)), MemoryItem.valid_until.is_not(None)
    )
    async with store.reader() as session:
        return {int(r[0]): r[1] for r in (await session.execute(query)).all() if r[1] is not None}


async def older_statements(
    store: Store, person_id: int, speaker: str, role: str, before: datetime, limit: int
) -> list[SlotRow]:
    """The speaker's own messages said before ``before`` and still valid, newest first
    (slot or not): what a change said in other words may end (memory/changes.py)."""
    query = (
        select(*_STATEMENT)
        .where(
            MemoryItem.person_id == person_id,
            MemoryItem.type == ItemType.EPISODE,
            MemoryItem.speaker == speaker,
            MemoryItem.role == role,
            MemoryItem.occurred_at < before,
            MemoryItem.valid_until.is_(None),
            MemoryItem.status == ItemStatus.ACTIVE,
        )
        .order_by(MemoryItem.occurred_at.desc(), MemoryItem.id.desc())
        .limit(limit)
    )
    async with store.reader() as session:
        rows = (await session.execute(query)).all()
    return [SlotRow(int(r[0]), r[1] or "", r[2], r[3], r[4], r[5]) for r in rows]
