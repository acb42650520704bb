"""How the panel names a person: never by a session id.

In order: the name the store keeps for them (``people.display_name``, set from
Telegram's names; else an identity's), then the name they gave in a message
("my name is Sam", "call me Sam", newest first), then "Web visitor N" for a
webchat visitor (N counts webchat sessions by first contact, so a visitor
keeps their number), and "Person N" for anyone else.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from sqlalchemy import func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased

from gateway.store.models import Identity, Person
from memory.models import MemoryItem
from memory.types import ItemStatus

# A capitalised word after the phrase: "call me later" names no one.
_GAVE_NAME = re.compile(
    r"\b(?:[Mm]y name is|[Mm]y name's|[Cc]all me|I'm called|I am called)\s+"
    r"(?P<name>[A-Z][\w'\u2019-]{0,39})"
)


def given_name(text: str) -> str:
    """The name in "my name is Sam" / "call me Sam", or ""."""
    match = _GAVE_NAME.search(text)
    return match["name"] if match else ""


async def person_names(session: AsyncSession, person_ids: Iterable[int]) -> dict[int, str]:
    """A readable name for each person id (see the module's docstring)."""
    ids = sorted({int(i) for i in person_ids})
    if not ids:
        return {}
    names: dict[int, str] = {}
    for person_id, name in (
        await session.execute(select(Person.id, Person.display_name).where(Person.id.in_(ids)))
    ).all():
        if name.strip():
            names[person_id] = name.strip()
    identities = (
        await session.execute(
            select(Identity.person_id, Identity.id, Identity.channel, Identity.display_name)
            .where(Identity.person_id.in_(ids))
            .order_by(Identity.id)
        )
    ).all()
    first_web: dict[int, int] = {}
    for person_id, identity_id, channel, name in identities:
        if name.strip():
            names.setdefault(person_id, name.strip())
        if channel == "webchat":
            first_web.setdefault(person_id, identity_id)

    unnamed = [i for i in ids if i not in names]
    if unnamed:
        said = await session.execute(
            select(MemoryItem.person_id, MemoryItem.content)
            .where(
                MemoryItem.person_id.in_(unnamed),
                MemoryItem.role == "user",
                MemoryItem.status == ItemStatus.ACTIVE,
                or_(
                    MemoryItem.content.ilike("%name is %"),
                    MemoryItem.content.ilike("%name's %"),
                    MemoryItem.content.ilike("%call me %"),
                    MemoryItem.content.ilike("%called %"),
                ),
            )
            .order_by(MemoryItem.id.desc())
        )
        for person_id, content in said.all():
            if person_id not in names and (name := given_name(content)):
                names[person_id] = name

    numbered = {p: i for p, i in first_web.items() if p not in names}
    if numbered:
        earlier = aliased(Identity)
        rank = (
            select(func.count(earlier.id))
            .where(earlier.channel == "webchat", earlier.id <= Identity.id)
            .scalar_subquery()
        )
        rows = await session.execute(
            select(Identity.person_id, rank).where(Identity.id.in_(numbered.values()))
        )
        for person_id, n in rows.all():
            names[person_id] = f"Web visitor {n}"
    return {i: names.get(i, f"Person {i}") for i in ids}


async def named_people(session: AsyncSession, limit: int = 200) -> list[tuple[int, str]]:
    """(id, name) of the people the gateway knows, newest first (a filter's choices)."""
    ids = (await session.scalars(select(Person.id).order_by(Person.id.desc()).limit(limit))).all()
    names = await person_names(session, ids)
    return [(i, names[i]) for i in ids]
