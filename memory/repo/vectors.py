"""Items' stored vectors: reading them, and finding and replacing those of another model.

Part of ``memory.repo`` (each query one short transaction on the Store).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray
from sqlalchemy import (
    ColumnElement,
    func,
    or_,
    select,
    update,
)

from gateway.store import Store
from memory.embed import from_blob, to_blob
from memory.models import MemoryItem
from memory.types import ItemStatus, ItemType


async def stored_vectors(
    store: Store, ids: Sequence[int], chunk: int = 5000
) -> dict[int, tuple[NDArray[np.float32], str]]:
    """The stored vectors of those of ``ids`` that have one, with the model that made each."""
    found: dict[int, tuple[NDArray[np.float32], str]] = {}
    async with store.reader() as session:
        for start in range(0, len(ids), chunk):
            part = list(ids[start : start + chunk])
            rows = await session.execute(
                select(MemoryItem.id, MemoryItem.embedding, MemoryItem.embedding_model).where(
                    MemoryItem.id.in_(part), MemoryItem.embedding.is_not(None)
                )
            )
            found.update({int(r[0]): (from_blob(r[1]), r[2]) for r in rows if r[1] is not None})
    return found


async def vectors(store: Store, ids: Sequence[int]) -> NDArray[np.float32]:
    """Stored vectors of ``ids`` (all embedded), rows in the same order."""
    found = await stored_vectors(store, ids)
    return np.stack([found[i][0] for i in ids]) if ids else np.zeros((0, 0), np.float32)


def stale_vector(model: str, dim: int | None = None) -> ColumnElement[bool]:
    """No vector of this model: stored while no embedder was loaded, or embedded by
    another model (its name, or, when ``dim`` is known, its width: a folder's model
    was swapped)."""
    stale = [MemoryItem.embedding.is_(None), MemoryItem.embedding_model != model]
    if dim is not None:
        stale.append(func.length(MemoryItem.embedding) != dim * 4)
    return or_(*stale)


async def people_with_stale_vectors(store: Store, model: str, dim: int) -> list[int]:
    """Whose active items need embedding (one pass over the items)."""
    async with store.reader() as session:
        rows = await session.scalars(
            select(MemoryItem.person_id)
            .where(MemoryItem.status == ItemStatus.ACTIVE, stale_vector(model, dim))
            .distinct()
            .order_by(MemoryItem.person_id)
        )
        return list(rows.all())


async def stale_vectors(
    store: Store, person_id: int, model: str, dim: int, after: int, limit: int
) -> list[tuple[int, str, str, ItemType]]:
    """The person's active items without a vector of ``model``, by id after ``after``:
    (id, content, speaker, type)."""
    async with store.reader() as session:
        rows = await session.execute(
            select(MemoryItem.id, MemoryItem.content, MemoryItem.speaker, MemoryItem.type)
            .where(
                MemoryItem.person_id == person_id,
                MemoryItem.status == ItemStatus.ACTIVE,
                MemoryItem.id > after,
                stale_vector(model, dim),
            )
            .order_by(MemoryItem.id)
            .limit(limit)
        )
        return [(int(r[0]), r[1], r[2], r[3]) for r in rows]


async def set_vectors(
    store: Store, ids: Sequence[int], matrix: NDArray[np.float32], model: str
) -> None:
    async with store.session() as session:
        for item_id, vector in zip(ids, matrix, strict=True):
            await session.execute(
                update(MemoryItem)
                .where(MemoryItem.id == item_id)
                .values(embedding=to_blob(vector), embedding_model=model)
            )
