"""Store facts (``store_info``) and people's names.

Part of ``memory.repo`` (each query one short transaction on the Store).
"""

from __future__ import annotations

from sqlalchemy import bindparam, select

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


# Read on a person's first turn: built once, one hop (issue 28, "CPU per turn").
_SPEAKERS = (
    select(MemoryItem.speaker).where(MemoryItem.person_id == bindparam("person_id")).distinct()
)
_DISPLAY_NAME = select(Person.display_name).where(Person.id == bindparam("person_id"))


async def speaker_names(store: Store, person_id: int) -> list[str]:
    """The first names of everyone who speaks in the person's items."""
    params = {"person_id": person_id}
    names = await store.read(lambda connection: list(connection.scalars(_SPEAKERS, params)))
    return sorted({name.split()[0] for name in names if name.strip()})


async def person_name(store: Store, person_id: int) -> str:
    params = {"person_id": person_id}
    found = await store.read(lambda connection: connection.scalar(_DISPLAY_NAME, params))
    return found or ""
