"""What a person does to their memories from the panel: find, edit, pin,
archive, restore, delete; and the supersession chain of an item.

Every change keeps the ANN index in step with the store (an archived or
deleted item leaves it, a restored one comes back), so it takes effect on the
next pack. An edit of the content never overwrites: the edited text is a new
item that supersedes the old one, so the chain shows what was changed and when.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Select, delete, func, select, update

from gateway.untrusted import storable
from memory.models import MemoryItem, MemoryTrace
from memory.repo import NewItem
from memory.service import MemoryService
from memory.types import ItemStatus, ItemType, Tier

# The longest content a person may type into an item.
MAX_CONTENT_CHARS = 4000


class CurateError(ValueError):
    """A change the panel asked for that cannot be made; the message says why."""


class ItemNotFound(LookupError):
    pass


@dataclass(frozen=True)
class ItemFilter:
    """What the memory page lists; empty fields do not filter."""

    text: str = ""
    type: ItemType | None = None
    tier: Tier | None = None
    status: ItemStatus | None = None
    channel: str = ""
    person_id: int | None = None
    pinned: bool | None = None
    offset: int = 0
    limit: int = 50


def _filtered(query: Select[Any], f: ItemFilter) -> Select[Any]:
    if f.text:
        # Every status and tier, so archived and forgotten items can be found too.
        query = query.where(MemoryItem.content.icontains(f.text, autoescape=True))
    if f.type is not None:
        query = query.where(MemoryItem.type == f.type)
    if f.tier is not None:
        query = query.where(MemoryItem.tier == f.tier)
    if f.status is not None:
        query = query.where(MemoryItem.status == f.status)
    if f.channel:
        query = query.where(MemoryItem.channel == f.channel)
    if f.person_id is not None:
        query = query.where(MemoryItem.person_id == f.person_id)
    if f.pinned is not None:
        query = query.where(MemoryItem.pinned.is_(f.pinned))
    return query


class MemoryCurator:
    """The panel's hands on the memory layer."""

    def __init__(self, memory: MemoryService) -> None:
        self.memory = memory
        self.store = memory.store

    async def find(self, f: ItemFilter) -> tuple[list[MemoryItem], int]:
        """One page of matching items, newest first, and how many match in all."""
        async with self.store.session() as session:
            total = await session.scalar(
                _filtered(select(func.count(MemoryItem.id)).select_from(MemoryItem), f)
            )
            rows = await session.scalars(
                _filtered(select(MemoryItem), f)
                .order_by(MemoryItem.id.desc())
                .offset(f.offset)
                .limit(f.limit)
            )
            return list(rows.all()), int(total or 0)

    async def get(self, item_id: int) -> MemoryItem:
        async with self.store.session() as session:
            row = await session.get(MemoryItem, item_id)
        if row is None:
            raise ItemNotFound(f"memory item {item_id} does not exist")
        return row

    async def chain(self, item_id: int) -> list[MemoryItem]:
        """The item's versions, oldest first: what it superseded and what superseded it."""
        item = await self.get(item_id)
        older: list[MemoryItem] = []
        async with self.store.session() as session:
            frontier = [item.id]
            seen = {item.id}
            while frontier:
                rows = (
                    await session.scalars(
                        select(MemoryItem).where(MemoryItem.superseded_by_id.in_(frontier))
                    )
                ).all()
                frontier = [r.id for r in rows if r.id not in seen]
                seen.update(frontier)
                older.extend(r for r in rows if r.id in frontier)
            newer: list[MemoryItem] = []
            current = item
            while current.superseded_by_id is not None and current.superseded_by_id not in seen:
                nxt = await session.get(MemoryItem, current.superseded_by_id)
                if nxt is None:
                    break
                seen.add(nxt.id)
                newer.append(nxt)
                current = nxt
        return [*sorted(older, key=lambda r: r.id), item, *newer]

    async def edit(
        self,
        item_id: int,
        *,
        content: str | None = None,
        priority: float | None = None,
        author: str = "panel",
    ) -> MemoryItem:
        """New content makes a new item that supersedes this one; priority changes in place."""
        item = await self.get(item_id)
        if item.status is not ItemStatus.ACTIVE:
            raise CurateError(f"item {item_id} is {item.status.value}: restore it before editing")
        if content is not None:
            content = storable(content)  # as every inbound text: see gateway.untrusted
        if priority is not None and not 0.0 <= priority <= 1.0:
            raise CurateError("priority must be between 0 and 1")
        if content is None or content.strip() == item.content:
            if priority is not None:
                async with self.store.session() as session:
                    await session.execute(
                        update(MemoryItem).where(MemoryItem.id == item_id).values(priority=priority)
                    )
            return await self.get(item_id)
        text = content.strip()
        if not text:
            raise CurateError("the content may not be empty: delete the item instead")
        if len(text) > MAX_CONTENT_CHARS:
            raise CurateError(f"the content is longer than {MAX_CONTENT_CHARS} characters")
        now = datetime.now(UTC)
        (new_id,) = await self.memory.add_items(
            [
                NewItem(
                    person_id=item.person_id,
                    type=item.type,
                    content=text,
                    occurred_at=item.occurred_at,
                    speaker=item.speaker,
                    role=item.role,
                    author=author,
                    channel=item.channel,
                    conversation_id=item.conversation_id,
                    source_message_ids=tuple(item.source_message_ids or ()),
                    priority=item.priority if priority is None else priority,
                    refers_start=item.refers_start,
                    refers_end=item.refers_end,
                )
            ]
        )
        async with self.store.session() as session:
            await session.execute(
                update(MemoryItem)
                .where(MemoryItem.id == new_id)
                .values(pinned=item.pinned, tier=Tier.ACTIVE)
            )
            await session.execute(
                update(MemoryItem)
                .where(MemoryItem.id == item_id)
                .values(
                    status=ItemStatus.SUPERSEDED, status_changed_at=now, superseded_by_id=new_id
                )
            )
        await self.memory.unrecall(item.person_id, [item_id])
        return await self.get(new_id)

    async def set_pinned(self, item_id: int, pinned: bool) -> MemoryItem:
        item = await self.get(item_id)
        async with self.store.session() as session:
            await session.execute(
                update(MemoryItem).where(MemoryItem.id == item.id).values(pinned=pinned)
            )
        return await self.get(item_id)

    async def archive(self, item_id: int) -> MemoryItem:
        """Out of the ANN index and the pinned set; full text still finds it when referred to."""
        item = await self.get(item_id)
        async with self.store.session() as session:
            await session.execute(
                update(MemoryItem)
                .where(MemoryItem.id == item.id)
                .values(tier=Tier.ARCHIVED, pinned=False, status_changed_at=datetime.now(UTC))
            )
        await self._unindex(item.person_id, [item.id])
        return await self.get(item_id)

    async def restore(self, item_id: int) -> MemoryItem:
        """Back to active (from archived or forgotten), and into the index again."""
        item = await self.get(item_id)
        if item.status is ItemStatus.SUPERSEDED:
            raise CurateError(
                f"item {item_id} was superseded by item {item.superseded_by_id}: edit that one"
            )
        now = datetime.now(UTC)
        async with self.store.session() as session:
            await session.execute(
                update(MemoryItem)
                .where(MemoryItem.id == item.id)
                .values(
                    tier=Tier.ACTIVE,
                    status=ItemStatus.ACTIVE,
                    status_changed_at=now,
                    # Restored counts as touched now, so decay does not archive it at once.
                    last_accessed_at=now,
                )
            )
        index = await self.memory.index(item.person_id)
        # Forgotten under an earlier model (or with none), it is embedded now.
        vector = await self.memory.vector_of(item) if index is not None else None
        if index is not None and vector is not None:
            await asyncio.to_thread(index.add, [item.id], vector[None, :])
        await self.memory.recall_again(item.person_id, [item.id])
        return await self.get(item_id)

    async def delete(self, item_id: int) -> None:
        """Gone from the store, the full text and the index; what it superseded stays."""
        item = await self.get(item_id)
        async with self.store.session() as session:
            await session.execute(
                update(MemoryItem)
                .where(MemoryItem.superseded_by_id == item.id)
                .values(superseded_by_id=None)
            )
            await session.execute(delete(MemoryItem).where(MemoryItem.id == item.id))
        await self.memory.unrecall(item.person_id, [item.id])

    async def trace(self, turn_id: int) -> MemoryTrace | None:
        async with self.store.session() as session:
            return await session.scalar(
                select(MemoryTrace)
                .where(MemoryTrace.turn_id == turn_id)
                .order_by(MemoryTrace.id.desc())
                .limit(1)
            )

    async def contents(self, ids: list[int]) -> dict[int, MemoryItem]:
        if not ids:
            return {}
        async with self.store.session() as session:
            rows = await session.scalars(select(MemoryItem).where(MemoryItem.id.in_(ids)))
            return {r.id: r for r in rows.all()}

    async def _unindex(self, person_id: int, ids: list[int]) -> None:
        index = await self.memory.index(person_id)
        if index is not None:
            await asyncio.to_thread(index.delete, ids)
