"""The weekly and monthly jobs' reads and writes, each one short transaction on the Store.

Every read that picks work goes by id after a cursor, so a dry run (which changes
nothing) still advances, and a real run killed mid-way reads what is left.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
from numpy.typing import NDArray
from sqlalchemy import ColumnElement, func, insert, select, update

from gateway.store import Store
from memory.embed import from_blob
from memory.models import MemoryItem, MemorySummary
from memory.types import PINNED_TYPES, ItemStatus, ItemType, Tier


@dataclass(frozen=True)
class JobItem:
    """What the jobs read of an item; ``vector`` None when not of ``model``."""

    id: int
    person_id: int
    type: ItemType
    content: str
    speaker: str
    category: str
    occurred_at: datetime
    last_accessed_at: datetime | None
    source_message_ids: tuple[int, ...]
    vector: NDArray[np.float32] | None


_JOB_COLUMNS = (
    MemoryItem.id,
    MemoryItem.person_id,
    MemoryItem.type,
    MemoryItem.content,
    MemoryItem.speaker,
    MemoryItem.category,
    MemoryItem.occurred_at,
    MemoryItem.last_accessed_at,
    MemoryItem.source_message_ids,
    MemoryItem.embedding,
    MemoryItem.embedding_model,
)


def _job_item(row: Sequence[Any], model: str) -> JobItem:
    blob, made_by = row[9], row[10]
    return JobItem(
        id=int(row[0]),
        person_id=int(row[1]),
        type=row[2],
        content=row[3],
        speaker=row[4],
        category=row[5],
        occurred_at=row[6],
        last_accessed_at=row[7],
        source_message_ids=tuple(row[8] or ()),
        vector=from_blob(blob) if blob is not None and made_by == model and model else None,
    )


def _person(person_id: int | None) -> list[ColumnElement[bool]]:
    return [] if person_id is None else [MemoryItem.person_id == person_id]


def last_touch() -> ColumnElement[datetime]:
    """When the item was last used, else when it happened (recency's own origin)."""
    return func.coalesce(MemoryItem.last_accessed_at, MemoryItem.occurred_at)


async def people(store: Store, person_id: int | None) -> list[int]:
    """Who has items (just ``person_id`` when given)."""
    async with store.reader() as session:
        rows = await session.scalars(
            select(MemoryItem.person_id)
            .distinct()
            .where(*_person(person_id))
            .order_by(MemoryItem.person_id)
        )
        return [int(r) for r in rows]


async def uncategorised(
    store: Store, person_id: int | None, after: int, limit: int, model: str
) -> list[JobItem]:
    async with store.reader() as session:
        rows = await session.execute(
            select(*_JOB_COLUMNS)
            .where(MemoryItem.category == "", MemoryItem.id > after, *_person(person_id))
            .order_by(MemoryItem.id)
            .limit(limit)
        )
        return [_job_item(r, model) for r in rows]


async def set_categories(store: Store, categories: dict[int, str]) -> None:
    by_category: dict[str, list[int]] = {}
    for item_id, category in categories.items():
        by_category.setdefault(category, []).append(item_id)
    async with store.session() as session:
        for category, ids in by_category.items():
            await session.execute(
                update(MemoryItem).where(MemoryItem.id.in_(ids)).values(category=category)
            )


async def summary_items(store: Store, person_id: int, category: str, model: str) -> list[JobItem]:
    """The person's active items of the category a summary is made of: recallable,
    not archived, and never the agent's own words."""
    async with store.reader() as session:
        rows = await session.execute(
            select(*_JOB_COLUMNS)
            .where(
                MemoryItem.person_id == person_id,
                MemoryItem.category == category,
                MemoryItem.status == ItemStatus.ACTIVE,
                MemoryItem.tier != Tier.ARCHIVED,
                MemoryItem.role != "assistant",
            )
            .order_by(MemoryItem.id)
        )
        return [_job_item(r, model) for r in rows]


@dataclass(frozen=True)
class SummaryVersion:
    version: int
    text: str
    item_ids: tuple[int, ...]
    method: str


async def latest_summary(store: Store, person_id: int, category: str) -> SummaryVersion | None:
    async with store.reader() as session:
        row = (
            await session.execute(
                select(
                    MemorySummary.version,
                    MemorySummary.text,
                    MemorySummary.item_ids,
                    MemorySummary.method,
                )
                .where(MemorySummary.person_id == person_id, MemorySummary.category == category)
                .order_by(MemorySummary.version.desc())
                .limit(1)
            )
        ).first()
    if row is None:
        return None
    return SummaryVersion(int(row[0]), row[1], tuple(row[2] or ()), row[3])


async def add_summary(
    store: Store,
    person_id: int,
    category: str,
    version: int,
    text: str,
    item_ids: Sequence[int],
    method: str,
    items: int,
    at: datetime,
) -> None:
    async with store.session() as session:
        await session.execute(
            insert(MemorySummary).values(
                person_id=person_id,
                category=category,
                version=version,
                text=text,
                item_ids=list(item_ids),
                method=method,
                items=items,
                created_at=at,
            )
        )


async def summaries(store: Store, person_id: int) -> dict[str, list[SummaryVersion]]:
    """Every version of the person's summaries, by category, oldest first."""
    async with store.reader() as session:
        rows = await session.execute(
            select(
                MemorySummary.category,
                MemorySummary.version,
                MemorySummary.text,
                MemorySummary.item_ids,
                MemorySummary.method,
            )
            .where(MemorySummary.person_id == person_id)
            .order_by(MemorySummary.category, MemorySummary.version)
        )
        found: dict[str, list[SummaryVersion]] = {}
        for category, version, text, ids, method in rows:
            found.setdefault(category, []).append(
                SummaryVersion(int(version), text, tuple(ids or ()), method)
            )
        return found


def _unused_since(cutoff: datetime) -> list[ColumnElement[bool]]:
    """Active, unpinned, not of a pinned type, and not used since ``cutoff``."""
    return [
        MemoryItem.status == ItemStatus.ACTIVE,
        MemoryItem.pinned.is_(False),
        MemoryItem.type.not_in(list(PINNED_TYPES)),
        last_touch() < cutoff,
    ]


async def stale_ids(
    store: Store,
    person_id: int | None,
    categories: Sequence[str] | None,
    other_than: Sequence[str],
    cutoff: datetime,
    tiers: Sequence[Tier],
    after: int,
    limit: int,
    *,
    except_types: Sequence[ItemType] = (),
) -> list[tuple[int, int]]:
    """(id, person) of items in ``tiers`` not used since ``cutoff``: of ``categories``,
    or (None) of any category but ``other_than``; none of ``except_types``."""
    where = [
        *_unused_since(cutoff),
        MemoryItem.tier.in_(list(tiers)),
        MemoryItem.id > after,
        *_person(person_id),
    ]
    if except_types:
        where.append(MemoryItem.type.not_in(list(except_types)))
    if categories is not None:
        where.append(MemoryItem.category.in_(list(categories)))
    else:
        where.append(MemoryItem.category.not_in(list(other_than)))
    async with store.reader() as session:
        rows = await session.execute(
            select(MemoryItem.id, MemoryItem.person_id)
            .where(*where)
            .order_by(MemoryItem.id)
            .limit(limit)
        )
        return [(int(r[0]), int(r[1])) for r in rows]


async def set_tier(store: Store, ids: Sequence[int], tier: Tier, at: datetime) -> None:
    if not ids:
        return
    async with store.session() as session:
        await session.execute(
            update(MemoryItem)
            .where(MemoryItem.id.in_(list(ids)))
            .values(tier=tier, status_changed_at=at)
        )


async def covered_by_insights(store: Store, person_id: int) -> set[int]:
    """The items some insight of the person already stands for."""
    async with store.reader() as session:
        rows = await session.scalars(
            select(MemoryItem.source_item_ids).where(
                MemoryItem.person_id == person_id, MemoryItem.type == ItemType.INSIGHT
            )
        )
        return {int(i) for ids in rows for i in (ids or ())}


async def archived_ids(store: Store, person_id: int, model: str) -> list[int]:
    """The person's archived items with a vector of ``model`` (insights aside), oldest first."""
    async with store.reader() as session:
        rows = await session.scalars(
            select(MemoryItem.id)
            .where(
                MemoryItem.person_id == person_id,
                MemoryItem.status == ItemStatus.ACTIVE,
                MemoryItem.tier == Tier.ARCHIVED,
                MemoryItem.type != ItemType.INSIGHT,
                MemoryItem.embedding.is_not(None),
                MemoryItem.embedding_model == model,
            )
            .order_by(MemoryItem.id)
        )
        return [int(r) for r in rows]


async def job_items(store: Store, ids: Sequence[int], model: str) -> list[JobItem]:
    """These items (by id, in that order) as the jobs read them."""
    found: dict[int, JobItem] = {}
    async with store.reader() as session:
        for start in range(0, len(ids), 5000):
            rows = await session.execute(
                select(*_JOB_COLUMNS).where(MemoryItem.id.in_(list(ids[start : start + 5000])))
            )
            found |= {item.id: item for item in (_job_item(r, model) for r in rows)}
    return [found[i] for i in ids if i in found]


async def vector_sample(store: Store, model: str, size: int) -> list[JobItem]:
    """``size`` items with a stored vector of ``model``, chosen at random."""
    async with store.reader() as session:
        rows = await session.execute(
            select(*_JOB_COLUMNS)
            .where(MemoryItem.embedding.is_not(None), MemoryItem.embedding_model == model)
            .order_by(func.random())
            .limit(size)
        )
        return [_job_item(r, model) for r in rows]
