"""Store facts (``store_info``) and people's names.

Part of ``memory.repo`` (each query one short transaction on the Store).
"""

from __future__ import annotations

from sqlalchemy import (
    select,
)

from gateway.store import Store
from gateway.store.models import Person, StoreInfo
from memory.models import MemoryItem


async def store_fact(store: Store, key: str) -> str | None:
    """A fact about the database (``store_info``), None when not recorded."""
    async with store.reader() as session:
        found = await session.get(StoreInfo, key)
        return None if found is None else found.value


async def set_store_fact(store: Store, key: str, value: str) -> None:
    async with store.session() as session:
        await session.merge(StoreInfo(key=key, value=value))


async def speaker_names(store: Store, person_id: int) -> list[str]:
    """The first names of everyone who speaks in the person's items."""
    async with store.reader() as session:
        rows = await session.scalars(
            select(MemoryItem.speaker).where(MemoryItem.person_id == person_id).distinct()
        )
        return sorted({name.split()[0] for name in rows.all() if name.strip()})


async def person_name(store: Store, person_id: int) -> str:
    async with store.reader() as session:
        person = await session.get(Person, person_id)
        return person.display_name if person is not None else ""
