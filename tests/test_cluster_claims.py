"""Turn claims on the store (gateway/store/claims.py), on a throwaway PostgreSQL.

Two ``Store`` objects on one database, and ``TurnClaims`` each with their own
connection, stand for two gateway processes, as separate processes have.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime

import pytest
from sqlalchemy import func, select

from gateway.store import Store
from gateway.store.claims import TurnClaims, open_heads
from gateway.store.models import Message, MessageRole, Turn, TurnStatus
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


@asynccontextmanager
async def claims(store: Store, owner: str, lease_s: float = 30.0) -> AsyncIterator[TurnClaims]:
    """One process's claims, on a connection of their own."""
    turn_claims = TurnClaims(store.url, owner, lease_s)
    try:
        yield turn_claims
    finally:
        await turn_claims.aclose()


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
    conversation = address.conversation_id
    # Both processes, two lanes each (each lane a connection of its own), claim at once.
    async with (
        claims(a, "A") as a1,
        claims(a, "A") as a2,
        claims(b, "B") as b1,
        claims(b, "B") as b2,
        claims(b, "B2") as other,
    ):
        for _round in range(6):
            got = await asyncio.gather(*(c.claim(conversation) for c in (a1, b1, a2, b2)))
            claimed = [turn for turn in got if turn is not None]
            assert len(claimed) == 1, claimed
            # While it runs, nobody else gets the conversation's next turn.
            assert await other.claim(conversation) is None
            answered.append(claimed[0].message_id)
            await _reply(a if claimed[0].claimed_by == "A" else b, claimed[0])
        assert answered == [s.message_id for s in stored]
        assert await a1.claim(conversation) is None


async def test_an_expired_claim_is_taken_over_and_the_late_reply_is_refused(
    two: tuple[Store, Store],
) -> None:
    a, b = two
    address = await resolve_address(a, "webchat", "expiry-session")
    first, _second = await _messages(a, address, 2)
    conversation = address.conversation_id
    async with claims(a, "A", 0.3) as dying_claims, claims(b, "B") as taker:
        dying = await dying_claims.claim(conversation)
        assert dying is not None
        # Renewed (one statement for all held claims), the claim outlives its first 0.3 s.
        async with claims(a, "A", 0.6) as keeper:
            keeper.held.add(dying.turn_id)
            assert await keeper.renew() == set()
        assert dying.message_id == first.message_id
        assert await taker.claim(conversation) is None
        heads, now = await open_heads(b)
        assert [h.conversation_id for h in heads] == [conversation]
        assert heads[0].claim_until is not None
        assert heads[0].claim_until > now
        await asyncio.sleep(0.8)
        # A stopped renewing (it died, or stalled): B takes the same turn over.
        taken = await taker.claim(conversation)
        assert taken is not None
        assert taken.message_id == first.message_id
        async with claims(a, "A") as renewer:
            renewer.held.add(dying.turn_id)
            assert await renewer.renew() == {dying.turn_id}
        # A wakes up and tries to answer: refused, nothing stored; its failure neither.
        with pytest.raises(ClaimLost):
            await _reply(a, dying)
        with pytest.raises(ClaimLost):
            await fail_turn(a, dying.turn_id, "x", "late", claimed_by="A")
        # Nor does its run's end touch the turn B now runs.
        assert not await dying_claims.end(dying.turn_id)
        await _reply(b, taken)
        async with a.reader() as session:
            replies = await session.scalar(
                select(func.count())
                .select_from(Message)
                .where(
                    Message.conversation_id == conversation,
                    Message.role == MessageRole.ASSISTANT,
                )
            )
        assert replies == 1
        async with claims(a, "A") as again:
            nxt = await again.claim(conversation)
        assert nxt is not None
        assert nxt.status is TurnStatus.RECEIVED
        assert nxt.text == "message 1"


async def test_a_failed_turn_retried_is_claimed_at_once(two: tuple[Store, Store]) -> None:
    a, b = two
    address = await resolve_address(a, "webchat", "retry-session")
    (first,) = await _messages(a, address, 1)
    conversation = address.conversation_id
    async with claims(a, "A") as on_a, claims(b, "B") as on_b:
        claimed = await on_a.claim(conversation)
        assert claimed is not None
        await fail_turn(a, claimed.turn_id, "brain_error", "down", claimed_by="A")
        assert await on_b.claim(conversation) is None
        reopened = await reopen_failed_turn(b, address, first.message_id)
        assert reopened is not None
        # The failed run's claim (30 s to go) does not hold the retry back.
        again = await on_b.claim(conversation)
        assert again is not None
        assert again.message_id == first.message_id


async def test_a_run_that_left_its_turn_open_ends_it_as_interrupted(
    two: tuple[Store, Store],
) -> None:
    a, _b = two
    address = await resolve_address(a, "webchat", "left-open-session")
    await _messages(a, address, 1)
    async with claims(a, "A") as on_a:
        claimed = await on_a.claim(address.conversation_id)
        assert claimed is not None
        assert await on_a.end(claimed.turn_id)  # nothing answered it: closed
        assert not await on_a.end(claimed.turn_id)  # once
        assert await on_a.claim(address.conversation_id) is None  # not run again unasked
    async with a.reader() as session:
        turn = await session.get(Turn, claimed.turn_id)
    assert turn is not None
    assert (turn.status, turn.error_code) == (TurnStatus.FAILED, "interrupted")
