"""One pack's reads: its candidate searches and their items in one reader call, then
what the ANN search and the best hits' neighbours add (``Fetched``).

Part of ``memory.repo`` (each query one short transaction on the Store).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

import numpy as np
from numpy.typing import NDArray
from sqlalchemy import (
    Connection,
    case,
    func,
    literal_column,
    select,
)
from sqlalchemy.dialects import sqlite
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import aliased

from gateway.store import Store
from memory.lexical import LexicalIndex
from memory.models import MemoryItem
from memory.pack_types import MemoryView
from memory.repo.items import _RECALLABLE, T, _recallable, _view_and_vector
from memory.repo.search import (
    _pinned_query,
    _ranked_hits,
    _topic_query,
    _window_query,
    content_terms,
    fts_query,
)
from memory.types import ItemStatus, ItemType


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
