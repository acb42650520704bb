"""Adjacent candidates point at each other, not only the best hits and their neighbours."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gateway.store import Store
from gateway.store.repo import resolve_address
from memory import repo
from memory.repo import NewItem
from memory.types import ItemType

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


async def test_every_fetched_episode_has_its_links(store: Store) -> None:
    who = await resolve_address(store, "webchat", "session-Ada", display_name="Ada")
    ids = await repo.insert_items(
        store,
        [
            NewItem(
                person_id=who.person_id,
                type=ItemType.EPISODE,
                content=f"turn {n}",
                occurred_at=T0 + timedelta(minutes=n),
                conversation_id=who.conversation_id,
            )
            for n in range(6)
        ],
    )
    # ids[1] is the best hit: ids[0] and ids[2] come as its neighbours. ids[3] is a
    # candidate of its own (say, a full-text hit) and no best hit.
    found, links = await repo.fetch_with_neighbours(store, {ids[1], ids[3]}, [ids[1]])
    assert set(found) == {ids[0], ids[1], ids[2], ids[3]}
    assert links[ids[1]] == (ids[0], ids[2])
    # Fetched as a neighbour or on its own: each knows what is around it, so the
    # answer after the hit's neighbour and the hit's neighbour point at each other.
    assert links[ids[2]] == (ids[1], ids[3])
    assert links[ids[3]] == (ids[2], ids[4])
    assert ids[4] not in found  # links do not fetch: only the hits' neighbours join
