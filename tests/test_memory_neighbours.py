"""Adjacent candidates point at each other, not only the best hits and their neighbours."""

from __future__ import annotations

import sqlite3
from datetime import UTC, date, datetime, timedelta, timezone
from typing import Any

import numpy as np
import pytest
from sqlalchemy import Connection, create_engine
from sqlalchemy.exc import DBAPIError

from gateway.store import Store
from gateway.store.repo import resolve_address
from memory import repo
from memory.pack_types import MemoryView
from memory.repo import NewItem
from memory.types import ItemStatus, ItemType, Tier

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


async def fetch_more(
    store: Store, fetched: repo.Fetched, ids: set[int], hits: list[int]
) -> repo.Fetched:
    return await repo.fetch_more_then(store, fetched, ids, hits, lambda done: done)


async def turns(store: Store, count: int) -> list[int]:
    """``count`` episodes of one conversation, a minute apart."""
    who = await resolve_address(store, "webchat", "session-Ada", display_name="Ada")
    return await repo.insert_items(
        store,
        [
            NewItem(
                person_id=who.person_id,
                type=ItemType.EPISODE,
                content=f"turn {n}",
                occurred_at=T0 + timedelta(minutes=n),
                conversation_id=who.conversation_id,
            )
            for n in range(count)
        ],
    )


async def test_every_fetched_episode_has_its_links(store: Store) -> None:
    ids = await turns(store, 6)
    # ids[1] is the best hit: ids[0] and ids[2] come as its neighbours. ids[3] is a
    # candidate of its own (say, a full-text hit) and no best hit.
    fetched = await fetch_more(store, repo.Fetched(), {ids[1], ids[3]}, [ids[1]])
    found, links = fetched.rows, fetched.links
    assert set(found) == {ids[0], ids[1], ids[2], ids[3]}
    assert links[ids[1]] == (ids[0], ids[2])
    # Fetched as a neighbour or on its own: each knows what is around it, so the
    # answer after the hit's neighbour and the hit's neighbour point at each other.
    assert links[ids[2]] == (ids[1], ids[3])
    assert links[ids[3]] == (ids[2], ids[4])
    assert ids[4] not in found  # links do not fetch: only the hits' neighbours join


async def test_reading_in_two_steps_gives_what_one_read_gives(store: Store) -> None:
    ids = await turns(store, 10)
    await repo.set_status(store, [ids[6]], ItemStatus.FORGOTTEN, T0)
    first, hits = {ids[2], ids[6], ids[8]}, [ids[4], ids[8]]
    at_once = await fetch_more(store, repo.Fetched(), first | {ids[4]}, hits)

    # What the searches without a vector found is read first; the rest after.
    fetched = repo.Fetched()
    await store.read(lambda connection: fetched.read(connection, first))
    assert set(fetched.rows) == {ids[2], ids[8]}  # the forgotten one is not recallable
    assert not fetched.complete({ids[4]}, hits)
    more = await fetch_more(store, fetched, {ids[4]}, hits)
    assert (
        set(more.rows)
        == set(at_once.rows)
        == {ids[2], ids[3], ids[4], ids[5], ids[7], ids[8], ids[9]}
    )
    assert more.links == at_once.links
    # Links skip what is not recallable: the forgotten turn is no one's neighbour.
    assert more.links[ids[5]] == (ids[4], ids[7])
    assert more.complete({ids[4]}, hits)


async def test_the_packs_rows_read_as_the_orm_reads_them(store: Store) -> None:
    who = await resolve_address(store, "webchat", "session-Ada", display_name="Ada")
    (item_id,) = await repo.insert_items(
        store,
        [
            NewItem(
                person_id=who.person_id,
                type=ItemType.PREFERENCE,
                content="Ada likes night trains",
                occurred_at=datetime(2025, 3, 1, 12, 0, 0, 123456, tzinfo=UTC),
                speaker="Ada",
                role="user",
                conversation_id=who.conversation_id,
                source_message_ids=(7, 9),
                source_ref="D1:3",
                priority=0.6,
                refers_start=date(2025, 2, 27),
                refers_end=date(2025, 3, 2),
                vector=np.array([0.6, 0.8], dtype=np.float32),
            )
        ],
    )
    at = datetime(2025, 3, 4, 8, 30, tzinfo=UTC)
    await repo.reinforce(store, [repo.Reinforcement(item_id, 0.5, accessed=True)], at)
    await repo.set_tiers(store, {item_id: Tier.WARM})

    fetched = await fetch_more(store, repo.Fetched(), {item_id}, [])
    view, vector = fetched.rows[item_id]
    (orm,) = await repo.get_items(store, [item_id])
    assert view == MemoryView(
        id=orm.id,
        type=orm.type,
        content=orm.content,
        speaker=orm.speaker,
        role=orm.role,
        occurred_at=orm.occurred_at,
        priority=orm.priority,
        access_count=orm.access_count,
        strength=orm.strength,
        last_accessed_at=orm.last_accessed_at,
        tier=orm.tier,
        conversation_id=orm.conversation_id,
        source_message_ids=tuple(orm.source_message_ids),
        source_ref=orm.source_ref,
        refers_start=orm.refers_start,
        refers_end=orm.refers_end,
    )
    # And what was stored, so the comparison is not of two equal mistakes.
    assert view.type is ItemType.PREFERENCE
    assert view.tier is Tier.WARM
    assert view.occurred_at == datetime(2025, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)
    assert view.last_accessed_at == at
    assert view.access_count == 1
    assert (view.refers_start, view.refers_end) == (date(2025, 2, 27), date(2025, 3, 2))
    assert view.source_message_ids == (7, 9)
    assert vector is not None
    assert np.allclose(vector, [0.6, 0.8])


def test_rows_convert_from_text_or_from_a_drivers_own_types() -> None:
    # SQLite sends text; PostgreSQL's drivers send datetimes, dates and lists.
    naive, aware = (
        datetime(2025, 3, 1, 12, 0),
        datetime(2025, 3, 1, 14, 0, tzinfo=timezone(timedelta(hours=2))),
    )
    assert repo._utc("2025-03-01 12:00:00.000000") == naive.replace(tzinfo=UTC)
    assert repo._utc("2025-03-01 12:00:00").tzinfo is UTC
    # Text with its own offset (not what SQLAlchemy writes) is still read right.
    assert repo._utc("2025-03-01 14:00:00+02:00") == naive.replace(tzinfo=UTC)
    assert repo._utc(naive) == naive.replace(tzinfo=UTC)
    assert repo._utc(aware) == naive.replace(tzinfo=UTC)
    assert repo._utc(aware).tzinfo is UTC
    assert repo._day("2025-02-27") == repo._day(date(2025, 2, 27)) == date(2025, 2, 27)
    assert repo._day(None) is None
    assert repo._ids("[7, 9]") == repo._ids([7, 9]) == (7, 9)
    assert repo._ids("[12]") == (12,)
    assert repo._ids(None) == repo._ids("null") == repo._ids("[]") == ()


async def test_sqlites_own_read_gives_what_sqlalchemys_gives(store: Store) -> None:
    ids = await turns(store, 8)
    await repo.set_status(store, [ids[3]], ItemStatus.FORGOTTEN, T0)
    await repo.reinforce(store, [repo.Reinforcement(ids[5], 0.5, accessed=True)], T0)
    wanted = [ids[0], ids[2], ids[3], ids[5], ids[7], 10_000]

    def both(connection: Connection) -> tuple[bool, list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        on_driver = isinstance(connection.connection.driver_connection, sqlite3.Connection)
        driver = [tuple(row) for row in repo._recallable_linked(connection, wanted)]
        core = [tuple(row) for row in connection.execute(repo._RECALLABLE_LINKED, {"ids": wanted})]
        return on_driver, driver, core

    on_driver, driver, core = await store.read(both)
    assert on_driver  # the store's readers hand out the driver's connection
    assert driver == core
    # Recallable only (not the forgotten one, not an unknown id), links skipping the gap.
    assert [row[0] for row in driver] == [ids[0], ids[2], ids[5], ids[7]]
    assert {row[0]: row[-2:] for row in driver}[ids[2]] == (ids[1], ids[4])


def test_a_driver_error_is_reported_as_sqlalchemy_reports_one() -> None:
    engine = create_engine("sqlite://")  # no tables
    with engine.connect() as connection, pytest.raises(DBAPIError, match="memory_items"):
        repo._recallable_linked(connection, [1, 2])
