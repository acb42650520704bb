"""The candidate searches: full text (SQLite FTS5 ``memory_fts``, made by migration
0002; on other backends ``fts_search`` returns nothing and recall is dense only),
pinned, active topic and time window, and the rows the in-memory BM25 index is
built from.

Part of ``memory.repo`` (each query one short transaction on the Store).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import date, datetime
from typing import Any

from sqlalchemy import (
    BindParameter,
    ColumnElement,
    Connection,
    Integer,
    Select,
    Subquery,
    bindparam,
    func,
    select,
    text,
    union,
    union_all,
)

from gateway.store import Store
from memory.models import MemoryItem
from memory.types import PINNED_TYPES, ItemStatus, Tier

_TERM = re.compile(r"[a-z0-9]+")

_STOP_TEXT = """a an the and or but if of at by for with about against between into through during
    before after above below to from up down in out on off over under again further then once
    here there when where why how all any both each few more most other some such no nor not
    only own same so than too very s t can will just don should now is are was were be been
    being have has had having do does did doing i me my myself we our ours you your yours he
    him his she her hers it its they them their what which who whom this that these those am
    would could ever also get got"""

_STOP = frozenset(_STOP_TEXT.split())


def content_terms(message: str) -> list[str]:
    """The message's content words, lower case, each once, in order (stop words left out)."""
    return list(
        dict.fromkeys(t for t in _TERM.findall(message.lower()) if t not in _STOP and len(t) > 1)
    )


def fts_query(message: str, *, every: bool = False) -> str:
    """An FTS5 OR-query of the message's content words (with ``every``, an AND-query),
    each quoted, so nothing is syntax."""
    return (" AND " if every else " OR ").join(f'"{t}"' for t in content_terms(message))


_FTS = text(
    "SELECT memory_fts.rowid, -bm25(memory_fts, 1.0, 0.5) AS score "
    "FROM memory_fts JOIN memory_items m ON m.id = memory_fts.rowid "
    "WHERE memory_fts MATCH :query AND m.person_id = :person AND m.status = 'active' "
    "ORDER BY bm25(memory_fts, 1.0, 0.5), memory_fts.rowid LIMIT :limit"
)

# How many best hits of all people the unjoined query reads per hit wanted.
FTS_OVERFETCH = 4

# The best hits of everyone, each with whether it is the person's active item.
# Without the join of ``_FTS``: joining every match to memory_items costs a row
# lookup per match (two thirds of the query at 100k items); here only the best
# ``:limit`` are looked up.
_UNJOINED = text(
    "SELECT h.id, h.score, m.person_id = :person AND m.status = 'active' AS mine "
    "FROM (SELECT rowid AS id, -bm25(memory_fts, 1.0, 0.5) AS score FROM memory_fts "
    "WHERE memory_fts MATCH :query ORDER BY score DESC, id LIMIT :limit) AS h "
    "LEFT JOIN memory_items m ON m.id = h.id ORDER BY h.score DESC, h.id"
)


def _ranked_hits(
    connection: Connection, person_id: int, expression: str, limit: int, first: bool
) -> tuple[list[tuple[int, float]], bool]:
    """The person's best full-text hits and whether the unjoined search sufficed;
    ``first=False`` goes straight to the joined one (``_FTS``, exact).

    Unjoined, the best ``limit * FTS_OVERFETCH`` hits of everyone are read. When
    ``limit`` of them are the person's active items, or there were no more hits,
    they are the answer (exactly ``_FTS``'s). Otherwise (the person holds a small
    share of the store) the joined query runs.
    """
    if limit <= 0:
        return [], first
    if first:
        over = limit * FTS_OVERFETCH
        params = {"query": expression, "limit": over, "person": person_id}
        rows = connection.execute(_UNJOINED, params).all()
        hits = [(int(item_id), float(score)) for item_id, score, mine in rows if mine]
        if len(hits) >= limit or len(rows) < over:
            return hits[:limit], True
    params = {"query": expression, "person": person_id, "limit": limit}
    rows = connection.execute(_FTS, params).all()
    return [(int(r[0]), float(r[1])) for r in rows], False


async def fts_search(
    store: Store, person_id: int, message: str, limit: int
) -> list[tuple[int, float]]:
    """(item id, BM25 as a positive number) of the best full-text matches, best first."""
    return await fts_match(store, person_id, fts_query(message), limit)


async def fts_match(
    store: Store, person_id: int, expression: str, limit: int
) -> list[tuple[int, float]]:
    """Like ``fts_search`` for a ready FTS5 expression (quoted terms with AND / OR)."""
    if not expression or not store.is_sqlite:
        return []
    return await store.read(
        lambda connection: _ranked_hits(connection, person_id, expression, limit, True)[0]
    )


# The pack's pinned, topic and time-window statements are built once, with bound
# parameters: built per call, SQLAlchemy's cache key for a union cost ~0.5 ms, 25
# times SQLite's work for the pinned query.
def _built_pinned() -> Select[Any]:
    # The two halves of the OR as a union, each on its own index (person and type,
    # person and pinned): SQLite would otherwise read every item of the person.
    person: BindParameter[int] = bindparam("person_id")
    offered = union_all(
        select(MemoryItem.id).where(
            MemoryItem.person_id == person, MemoryItem.type.in_(PINNED_TYPES)
        ),
        select(MemoryItem.id).where(MemoryItem.person_id == person, MemoryItem.pinned.is_(True)),
    )
    return (
        select(MemoryItem.id)
        .where(MemoryItem.id.in_(offered), MemoryItem.status == ItemStatus.ACTIVE)
        .order_by(MemoryItem.pinned.desc(), MemoryItem.priority.desc(), MemoryItem.id.desc())
        .limit(bindparam("limit"))
    )


_PINNED = _built_pinned()

# Items used since ``since``: the conversation's active topic.
_TOPIC = (
    select(MemoryItem.id)
    .where(
        MemoryItem.person_id == bindparam("person_id"),
        MemoryItem.status == ItemStatus.ACTIVE,
        MemoryItem.last_accessed_at >= bindparam("since"),
    )
    .order_by(MemoryItem.last_accessed_at.desc())
    .limit(bindparam("limit"))
)


def _built_window() -> Select[Any]:
    """Items said within [start, end) or referring to a day in [first, last], newest
    first.

    The newest ``limit`` of each half, then of both: each half on its own index
    (migration 0006), where the OR of the two read every item of the person (65 ms
    at 100k items).
    """

    def newest(*conditions: ColumnElement[bool]) -> Subquery:
        return (
            select(MemoryItem.id, MemoryItem.occurred_at)
            .where(
                MemoryItem.person_id == bindparam("person_id"),
                MemoryItem.status == ItemStatus.ACTIVE,
                *conditions,
            )
            .order_by(MemoryItem.occurred_at.desc(), MemoryItem.id.desc())
            .limit(bindparam("limit"))
            .subquery()
        )

    said = newest(
        MemoryItem.occurred_at >= bindparam("start"), MemoryItem.occurred_at < bindparam("end")
    )
    refers = newest(
        MemoryItem.refers_start <= bindparam("last"),
        func.coalesce(MemoryItem.refers_end, MemoryItem.refers_start) >= bindparam("first"),
    )
    both = union(select(said), select(refers)).subquery()
    return (
        select(both.c.id)
        .order_by(both.c.occurred_at.desc(), both.c.id.desc())
        .limit(bindparam("limit"))
    )


_WINDOW = _built_window()

Bound = tuple[Select[Any], dict[str, Any]]


def _pinned_query(person_id: int, limit: int) -> Bound:
    return _PINNED, {"person_id": person_id, "limit": max(0, limit)}


def _topic_query(person_id: int, since: datetime, limit: int) -> Bound:
    return _TOPIC, {"person_id": person_id, "since": since, "limit": max(0, limit)}


def _window_query(
    person_id: int, start: datetime, end: datetime, days: tuple[date, date], limit: int
) -> Bound:
    return _WINDOW, {
        "person_id": person_id,
        "start": start,
        "end": end,
        "first": days[0],
        "last": days[1],
        "limit": max(0, limit),
    }


async def window_ids(
    store: Store,
    person_id: int,
    start: datetime,
    end: datetime,
    days: tuple[date, date],
    limit: int,
) -> list[int]:
    async with store.reader() as session:
        rows = await session.scalars(*_window_query(person_id, start, end, days, limit))
        return list(rows.all())


# A person's first turn opens both their indexes with these: built once, the values
# bound at execution, read in one hop (issue 28, "CPU per turn").
_INDEXABLE = select(MemoryItem.id).where(
    MemoryItem.person_id == bindparam("person_id"),
    MemoryItem.status == ItemStatus.ACTIVE,
    MemoryItem.tier != Tier.ARCHIVED,
    MemoryItem.embedding.is_not(None),
)


async def indexable_ids(store: Store, person_id: int) -> list[int]:
    """Items that belong in the person's ANN index: active status, not archived, embedded."""
    params = {"person_id": person_id}
    return await store.read(lambda connection: list(connection.scalars(_INDEXABLE, params)))


async def _lexical_rows(
    store: Store, statement: Select[int, str, str], params: dict[str, Any]
) -> list[tuple[int, str, str]]:
    def read(connection: Connection) -> list[tuple[int, str, str]]:
        rows = connection.execute(statement, params)
        return [(int(r[0]), r[1], r[2] or "") for r in rows]

    return await store.read(read)


def _recallable_text(*where: ColumnElement[bool]) -> Select[int, str, str]:
    """(id, content, speaker) of recallable items, by id."""
    return (
        select(MemoryItem.id, MemoryItem.content, MemoryItem.speaker)
        .where(MemoryItem.status == ItemStatus.ACTIVE, *where)
        .order_by(MemoryItem.id)
    )


_TEXT_AFTER = _recallable_text(
    MemoryItem.person_id == bindparam("person_id"), MemoryItem.id > bindparam("after_id")
).limit(bindparam("limit", type_=Integer))
_TEXT_OF = _recallable_text(MemoryItem.id.in_(bindparam("ids", expanding=True)))


async def lexical_rows(
    store: Store, person_id: int, after_id: int, limit: int
) -> list[tuple[int, str, str]]:
    """(id, content, speaker) of the person's recallable items after ``after_id``, by id."""
    params = {"person_id": person_id, "after_id": after_id, "limit": limit}
    return await _lexical_rows(store, _TEXT_AFTER, params)


async def recallable_ids(store: Store, person_id: int) -> tuple[set[int], int]:
    """The person's recallable item ids, and the highest id of any item now: an
    item stored later has a higher id."""

    def read(connection: Connection) -> tuple[set[int], int]:
        newest = connection.execute(select(func.max(MemoryItem.id))).scalar()
        ids = connection.execute(
            select(MemoryItem.id).where(
                MemoryItem.person_id == person_id, MemoryItem.status == ItemStatus.ACTIVE
            )
        ).scalars()
        return set(ids), int(newest or 0)

    return await store.read(read)


async def lexical_rows_of(store: Store, ids: Sequence[int]) -> list[tuple[int, str, str]]:
    """(id, content, speaker) of those of ``ids`` that are recallable."""
    return await _lexical_rows(store, _TEXT_OF, {"ids": list(ids)})
