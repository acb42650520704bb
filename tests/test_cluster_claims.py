"""Turn claims on the store (gateway/store/claims.py), on a throwaway PostgreSQL.

Two ``Store`` objects on one database stand for two gateway processes: each
has its own connections and its own write turn, as separate processes do.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest
from sqlalchemy import func, select

from gateway.store import Store
from gateway.store.claims import ClaimRenewer, claim_next_turn, open_heads
from gateway.store.models import Message, MessageRole, TurnStatus
from gateway.store.repo import (
    Address,
    ClaimLost,
    StoredInbound,
    fail_turn,
    finish_turn,
    reopen_failed_turn,
    resolve_address,
    store_inbound,
)
from gateway.testing.postgres import PG_BINARIES, create_database
from tests.test_memory_postgres import postgres

pytestmark = pytest.mark.skipif(not PG_BINARIES, reason="Debian postgresql is not installed")
__all__ = ["postgres"]


@pytest.fixture
async def two(postgres: str) -> AsyncIterator[tuple[Store, Store]]:
    url = await create_database(postgres)
    async with Store(url) as first, Store(url) as second:
        yield first, second


async def _messages(store: Store, address: Address, count: int) -> list[StoredInbound]:
    return [
        await store_inbound(store, address, f"message {i}", datetime.now(UTC), f"c{i}")
        for i in range(count)
    ]


async def _reply(store: Store, claimed: StoredInbound) -> None:
    await finish_turn(store, claimed, f"reply to {claimed.text}", {"brain": "test"})


async def test_two_processes_claiming_at_once_get_one_turn_in_order(
    two: tuple[Store, Store],
) -> None:
    a, b = two
    address = await resolve_address(a, "webchat", "race-session-1")
    stored = await _messages(a, address, 6)
    answered: list[int] = []
    for _round in range(6):
        # Both processes, several lanes each, claim the conversation at once.
        got = await asyncio.gather(
            *(
                claim_next_turn(store, address.conversation_id, name, 30.0)
                for store, name in ((a, "A"), (b, "B"), (a, "A"), (b, "B"))
            )
        )
        claimed = [turn for turn in got if turn is not None]
        assert len(claimed) == 1, claimed
        # While it runs, nobody else gets the conversation's next turn.
        assert await claim_next_turn(b, address.conversation_id, "B2", 30.0) is None
        answered.append(claimed[0].message_id)
        await _reply(a if claimed[0].claimed_by == "A" else b, claimed[0])
    assert answered == [s.message_id for s in stored]
    assert await claim_next_turn(a, address.conversation_id, "A", 30.0) is None


async def test_an_expired_claim_is_taken_over_and_the_late_reply_is_refused(
    two: tuple[Store, Store],
) -> None:
    a, b = two
    address = await resolve_address(a, "webchat", "expiry-session")
    first, _second = await _messages(a, address, 2)
    dying = await claim_next_turn(a, address.conversation_id, "A", 0.3)
    assert dying is not None
    # Renewed (the renewer's own connection), the claim outlives its first 0.3 s.
    keeper = ClaimRenewer(a.url, "A", 0.6)
    keeper.held.add(dying.turn_id)
    assert await keeper.renew() == set()
    await keeper.aclose()
    assert dying.message_id == first.message_id
    assert await claim_next_turn(b, address.conversation_id, "B", 30.0) is None
    heads, now = await open_heads(b)
    assert [h.conversation_id for h in heads] == [address.conversation_id]
    assert heads[0].claim_until is not None
    assert heads[0].claim_until > now
    await asyncio.sleep(0.8)
    # A stopped renewing (it died, or stalled): B takes the same turn over.
    taken = await claim_next_turn(b, address.conversation_id, "B", 30.0)
    assert taken is not None
    assert taken.message_id == first.message_id
    renewer = ClaimRenewer(a.url, "A", 30.0)
    renewer.held.add(dying.turn_id)
    try:
        assert await renewer.renew() == {dying.turn_id}
    finally:
        await renewer.aclose()
    # A wakes up and tries to answer: refused, nothing stored; its failure neither.
    with pytest.raises(ClaimLost):
        await _reply(a, dying)
    with pytest.raises(ClaimLost):
        await fail_turn(a, dying.turn_id, "x", "late", claimed_by="A")
    await _reply(b, taken)
    async with a.reader() as session:
        replies = await session.scalar(
            select(func.count())
            .select_from(Message)
            .where(
                Message.conversation_id == address.conversation_id,
                Message.role == MessageRole.ASSISTANT,
            )
        )
    assert replies == 1
    nxt = await claim_next_turn(a, address.conversation_id, "A", 30.0)
    assert nxt is not None
    assert nxt.status is TurnStatus.RECEIVED
    assert nxt.text == "message 1"


async def test_a_failed_turn_retried_is_claimed_at_once(two: tuple[Store, Store]) -> None:
    a, b = two
    address = await resolve_address(a, "webchat", "retry-session")
    (first,) = await _messages(a, address, 1)
    claimed = await claim_next_turn(a, address.conversation_id, "A", 30.0)
    assert claimed is not None
    await fail_turn(a, claimed.turn_id, "brain_error", "down", claimed_by="A")
    assert await claim_next_turn(b, address.conversation_id, "B", 30.0) is None
    reopened = await reopen_failed_turn(b, address, first.message_id)
    assert reopened is not None
    # The failed run's claim (30 s to go) does not hold the retry back.
    again = await claim_next_turn(b, address.conversation_id, "B", 30.0)
    assert again is not None
    assert again.message_id == first.message_id
