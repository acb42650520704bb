"""Adjacent candidates point at each other, not only the best hits and their neighbours."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gateway.store import Store
from gateway.store.repo import resolve_address
from memory import repo
from memory.repo import NewItem
from memory.types import ItemStatus, ItemType

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


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
    fetched = await repo.fetch_more(store, repo.Fetched(), {ids[1], ids[3]}, [ids[1]])
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
    at_once = await repo.fetch_more(store, repo.Fetched(), first | {ids[4]}, hits)

    # What the searches without a vector found is read first; the rest after.
    fetched = repo.Fetched()
    await store.read(lambda connection: fetched.read(connection, first))
    assert set(fetched.rows) == {ids[2], ids[8]}  # the forgotten one is not recallable
    assert not fetched.complete({ids[4]}, hits)
    more = await repo.fetch_more(store, fetched, {ids[4]}, hits)
    assert (
        set(more.rows)
        == set(at_once.rows)
        == {ids[2], ids[3], ids[4], ids[5], ids[7], ids[8], ids[9]}
    )
    assert more.links == at_once.links
    # Links skip what is not recallable: the forgotten turn is no one's neighbour.
    assert more.links[ids[5]] == (ids[4], ids[7])
    assert more.complete({ids[4]}, hits)
