"""The memory layer's queries, each one short transaction on the Store.

Full text uses SQLite FTS5 (``memory_fts``, made by migration 0002); on other
backends ``fts_search`` returns nothing and recall is dense only.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any, TypeVar

import numpy as np
from numpy.typing import NDArray
from sqlalchemy import (
    BindParameter,
    ColumnElement,
    Connection,
    Select,
    String,
    Subquery,
    bindparam,
    case,
    delete,
    func,
    insert,
    literal_column,
    or_,
    select,
    text,
    type_coerce,
    union,
    union_all,
    update,
)
from sqlalchemy.dialects import sqlite
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import aliased

from gateway.store import Store
from gateway.store.models import Person, StoreInfo, utcnow
from memory.embed import from_blob, to_blob
from memory.lexical import LexicalIndex
from memory.models import MemoryItem, MemoryTrace
from memory.pack import MemoryView
from memory.types import PINNED_TYPES, ItemStatus, ItemType, Tier

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
    }


async def insert_items(store: Store, items: Sequence[NewItem]) -> list[int]:
    """Store the items (one transaction); their ids, in order.

    One Core insert of every row in the writer thread: ORM objects cost ~0.5 ms
    an item (a tenth of bulk ingest) and were built on the event loop.
    """
    if not items:
        return []
    rows = [_row(item) for item in items]
    statement = insert(MemoryItem).returning(MemoryItem.id, sort_by_parameter_order=True)
    return await store.write(
        lambda connection: [int(i) for i in connection.execute(statement, rows).scalars()]
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


async def store_fact(store: Store, key: str) -> str | None:
    """A fact about the database (``store_info``), None when not recorded."""
    async with store.reader() as session:
        found = await session.get(StoreInfo, key)
        return None if found is None else found.value


async def set_store_fact(store: Store, key: str, value: str) -> None:
    async with store.session() as session:
        await session.merge(StoreInfo(key=key, value=value))


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


async def indexable_ids(store: Store, person_id: int) -> list[int]:
    """Items that belong in the person's ANN index: active status, not archived, embedded."""
    async with store.reader() as session:
        rows = await session.scalars(
            select(MemoryItem.id).where(
                MemoryItem.person_id == person_id,
                MemoryItem.status == ItemStatus.ACTIVE,
                MemoryItem.tier != Tier.ARCHIVED,
                MemoryItem.embedding.is_not(None),
            )
        )
        return list(rows.all())


async def _lexical_rows(
    store: Store, statement: Select[int, str, str]
) -> list[tuple[int, str, str]]:
    async with store.reader() as session:
        rows = await session.execute(statement)
        return [(int(r[0]), r[1], r[2] or "") for r in rows]


def _recallable_text(*where: ColumnElement[bool]) -> Select[int, str, str]:
    """(id, content, speaker) of recallable items, by id."""
    return (
        select(MemoryItem.id, MemoryItem.content, MemoryItem.speaker)
        .where(MemoryItem.status == ItemStatus.ACTIVE, *where)
        .order_by(MemoryItem.id)
    )


async def lexical_rows(
    store: Store, person_id: int, after_id: int, limit: int
) -> list[tuple[int, str, str]]:
    """(id, content, speaker) of the person's recallable items after ``after_id``, by id."""
    statement = _recallable_text(MemoryItem.person_id == person_id, MemoryItem.id > after_id)
    return await _lexical_rows(store, statement.limit(limit))


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
    return await _lexical_rows(store, _recallable_text(MemoryItem.id.in_(list(ids))))


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


async def save_trace(
    store: Store, trace: MemoryTrace, complete: Callable[[MemoryTrace], None] | None = None
) -> int:
    """Store a trace (not yet added to a session); its id.

    One Core insert in the store's writer thread: ``complete`` fills in the
    parts that are slow to build, and the JSON of a hundred candidates is
    serialised there, not on the event loop.
    """

    def insert_trace(connection: Connection) -> int:
        if complete is not None:
            complete(trace)
        values = {
            column.key: getattr(trace, column.key)
            for column in MemoryTrace.__table__.columns
            # Unset attributes are None: leave them to the columns' defaults.
            if column.key != "id" and getattr(trace, column.key) is not None
        }
        statement = insert(MemoryTrace).values(values).returning(MemoryTrace.id)
        return int(connection.execute(statement).scalar_one())

    return await store.write(insert_trace)


async def prune_traces(store: Store, before: datetime, batch: int = 100) -> int:
    """Delete the traces made before ``before``, oldest first; how many.

    A batch per write, so the turns' own writes (messages, items, new traces)
    wait for one batch at most, not for a year of traces: 100 compressed traces
    took ~20 ms to delete (p50) on the 100k benchmark store.
    """
    oldest = (
        select(MemoryTrace.id)
        .where(MemoryTrace.created_at < before)
        .order_by(MemoryTrace.created_at)
        .limit(batch)
    )

    def delete_batch(connection: Connection) -> int:
        result = connection.execute(delete(MemoryTrace).where(MemoryTrace.id.in_(oldest)))
        return int(result.rowcount)

    deleted = 0
    while True:
        removed = await store.write(delete_batch)
        deleted += removed
        if removed < batch:
            return deleted


async def trace_for_turn(store: Store, turn_id: int) -> MemoryTrace | None:
    async with store.reader() as session:
        return await session.scalar(
            select(MemoryTrace)
            .where(MemoryTrace.turn_id == turn_id)
            .order_by(MemoryTrace.id.desc())
        )


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


async def speaker_names(store: Store, person_id: int) -> list[str]:
    """The first names of everyone who speaks in the person's items."""
    async with store.reader() as session:
        rows = await session.scalars(
            select(MemoryItem.speaker).where(MemoryItem.person_id == person_id).distinct()
        )
        return sorted({name.split()[0] for name in rows.all() if name.strip()})


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


async def existing_refs(store: Store, person_id: int, refs: Sequence[str]) -> set[str]:
    """Which of these source refs already have an item (a retried turn is not stored twice)."""
    if not refs:
        return set()
    async with store.reader() as session:
        rows = await session.scalars(
            select(MemoryItem.source_ref).where(
                MemoryItem.person_id == person_id, MemoryItem.source_ref.in_(list(refs))
            )
        )
        return set(rows.all())


async def person_name(store: Store, person_id: int) -> str:
    async with store.reader() as session:
        person = await session.get(Person, person_id)
        return person.display_name if person is not None else ""


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


@dataclass(frozen=True)
class SourceQuery:
    """The candidate searches of one pack that need no query vector (one transaction)."""

    person_id: int
    message: str
    limit: int
    pinned_max: int
    topic_since: datetime
    topic_max: int
    window: tuple[datetime, datetime, date, date] | None
    window_max: int
    # Try the unjoined full-text search first (false once it fell short for this person).
    lexical_first: bool = True


def _adjacent(later: bool) -> Any:
    """The recallable episode right before (or after) the row's, in its conversation."""
    other = aliased(MemoryItem)
    return (
        select(other.id)
        .where(
            other.conversation_id == MemoryItem.conversation_id,
            other.type == ItemType.EPISODE,
            other.status == ItemStatus.ACTIVE,
            other.id > MemoryItem.id if later else other.id < MemoryItem.id,
        )
        .order_by(other.id if later else other.id.desc())
        .limit(1)
        .correlate(MemoryItem)
        .scalar_subquery()
    )


def _episode_link(later: bool) -> Any:
    is_episode = (MemoryItem.type == ItemType.EPISODE) & MemoryItem.conversation_id.is_not(None)
    return case((is_episode, _adjacent(later)), else_=None)


# Recallable items by id with, for episodes, the previous and next recallable episode
# of their conversation: the pack's candidates and their links in one statement, built
# once. A statement built per call cost SQLAlchemy more than SQLite's own time (a text
# with a bound parameter of its own for each id: ~1.8 ms per 150 ids).
# ``ix_memory_items_episode_links`` (migration 0008) answers the links from the index
# alone.
_LINKS = (_episode_link(False), _episode_link(True))
_RECALLABLE_LINKED = _RECALLABLE.add_columns(*_LINKS)

# The same read as SQLite text, run on the driver's own connection. The ids go as one
# JSON parameter (json_each), so the text never changes and the driver prepares it
# once per connection. SQLAlchemy's expanding IN and result rows cost more than
# SQLite itself here: 60 rows in 1.3 ms this way against 1.9.
_RECALLABLE_LINKED_SQLITE = str(
    _recallable(select(func.json_each(literal_column("?")).table_valued("value").c.value))
    .add_columns(*_LINKS)
    .compile(dialect=sqlite.dialect(), compile_kwargs={"literal_binds": True})
)


def _recallable_linked(connection: Connection, ids: list[int]) -> Iterable[Sequence[Any]]:
    """The rows of ``_RECALLABLE_LINKED`` for ``ids``."""
    driver = connection.connection.driver_connection
    # Other drivers (PostgreSQL's, aiosqlite's adapted connection) go through SQLAlchemy.
    if not isinstance(driver, sqlite3.Connection):
        return connection.execute(_RECALLABLE_LINKED, {"ids": ids})
    parameters = (json.dumps(ids),)
    try:
        return driver.execute(_RECALLABLE_LINKED_SQLITE, parameters).fetchall()
    except sqlite3.Error as error:
        # As SQLAlchemy would raise it, so the store reports it like any other.
        raise DBAPIError(_RECALLABLE_LINKED_SQLITE, parameters, error) from error


ItemRow = tuple[MemoryView, NDArray[np.float32] | None]
Links = tuple[int | None, int | None]


@dataclass
class Fetched:
    """Candidate rows read so far for one pack, and each episode's links.

    A pack reads in two steps: the searches that need no query vector fetch
    their items while the query is still being embedded (``pack_sources``), and
    ``fetch_more_then`` then reads only what the ANN search and the best hits'
    neighbours add. ``tried`` holds every id asked for, so an item that is not
    recallable is never asked for again.
    """

    rows: dict[int, ItemRow] = field(default_factory=dict)
    links: dict[int, Links] = field(default_factory=dict)
    tried: set[int] = field(default_factory=set)

    def neighbours(self, hits: Iterable[int]) -> set[int]:
        return {n for h in hits for n in self.links.get(h, (None, None)) if n is not None}

    def complete(self, ids: Iterable[int], hits: Sequence[int]) -> bool:
        """Whether ``ids``, ``hits`` and the hits' neighbours are all read."""
        return set(ids) | set(hits) | self.neighbours(hits) <= self.tried

    def read(self, connection: Connection, ids: Iterable[int], hits: Sequence[int] = ()) -> None:
        """Read ``ids`` and the neighbours of ``hits``, each episode with its links."""
        self._read(connection, set(ids) | set(hits))
        # Every episode read knows its links, not only the hits': an answer two turns
        # after a hit, or a hit found by both searches, is adjacent to another
        # candidate without being a best hit itself.
        self._read(connection, self.neighbours(hits))

    def _read(self, connection: Connection, ids: set[int]) -> None:
        new = sorted(ids - self.tried)
        if not new:
            return
        self.tried.update(new)
        for row in _recallable_linked(connection, new):
            self.rows[row[0]] = _view_and_vector(row[:-2])
            if row[-2] is not None or row[-1] is not None:
                self.links[row[0]] = (row[-2], row[-1])


@dataclass(frozen=True)
class Sources:
    lexical: list[tuple[int, float]]
    pinned: list[int]
    topic: list[int]
    window: list[int]
    # Whether the unjoined full-text search sufficed (see ``_ranked_hits``).
    lexical_first: bool = True
    # Their items, already read (with their links): see ``Fetched``.
    fetched: Fetched = field(default_factory=Fetched)


async def pack_sources(
    store: Store, query: SourceQuery, lexical: LexicalIndex | None = None
) -> Sources:
    """Full text, pinned, active topic and time window candidates, and their items, in one
    reader call.

    Full text comes from the person's in-memory ``lexical`` index when it is
    ready, else from the store's FTS5 table (SQLite only).
    """
    return await store.read(
        lambda connection: _pack_sources(connection, query, store.is_sqlite, lexical)
    )


def _pack_sources(
    connection: Connection, query: SourceQuery, sqlite: bool, index: LexicalIndex | None
) -> Sources:
    lexical: list[tuple[int, float]] = []
    lexical_first = query.lexical_first
    if index is not None:
        lexical = index.search(content_terms(query.message), query.limit)
    elif sqlite and (expression := fts_query(query.message)):
        lexical, lexical_first = _ranked_hits(
            connection, query.person_id, expression, query.limit, query.lexical_first
        )
    pinned = list(connection.execute(*_pinned_query(query.person_id, query.pinned_max)).scalars())
    topic = list(
        connection.execute(
            *_topic_query(query.person_id, query.topic_since, query.topic_max)
        ).scalars()
    )
    window: list[int] = []
    if query.window is not None:
        start, end, first, last = query.window
        window = list(
            connection.execute(
                *_window_query(query.person_id, start, end, (first, last), query.window_max)
            ).scalars()
        )
    fetched = Fetched()
    fetched.read(connection, [i for i, _ in lexical] + pinned + topic + window)
    return Sources(lexical, pinned, topic, window, lexical_first, fetched)


async def fetch_more_then(
    store: Store,
    fetched: Fetched,
    ids: Iterable[int],
    hits: Sequence[int],
    then: Callable[[Fetched], T],
) -> T:
    """``fetched`` completed with ``ids`` and, for the episode ``hits``, their
    neighbours (every episode read knows its links, so adjacent candidates point
    at each other); then ``then(fetched)`` in the same worker thread (a reader's,
    or any when the first step read them all)."""
    ids = set(ids)
    if fetched.complete(ids, hits):
        return await asyncio.to_thread(then, fetched)

    def read_then(connection: Connection) -> T:
        fetched.read(connection, ids, hits)
        return then(fetched)

    return await store.read(read_then)
