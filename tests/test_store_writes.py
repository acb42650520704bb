"""The store's writers take turns: concurrent turns never meet SQLite's lock."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import Connection, func, insert, select

from gateway.errors import StoreError
from gateway.store import Message, MessageRole, Store, Turn
from gateway.store.repo import finish_turn, resolve_address, start_turn, store_inbound


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    async with Store(f"sqlite+aiosqlite:///{tmp_path / 'writes.db'}") as opened:
        yield opened


async def test_many_conversations_writing_at_once_all_commit(store: Store) -> None:
    async def conversation(n: int) -> None:
        address = await resolve_address(store, "webchat", f"page-{n:03d}")
        for k in range(3):
            stored = await store_inbound(
                store, address, f"message {k}", datetime.now(UTC), f"c-{n}-{k}"
            )
            await start_turn(store, stored.turn_id, address.conversation_id, stored.message_id, 20)
            await finish_turn(store, stored, f"answer {k}", {"brain": "scripted"})

    await asyncio.gather(*(conversation(n) for n in range(40)))
    async with store.reader() as db:
        messages = await db.scalar(select(func.count()).select_from(Message))
        replied = await db.scalar(
            select(func.count()).select_from(Turn).where(Turn.reply_message_id.is_not(None))
        )
    assert (messages, replied) == (40 * 3 * 2, 40 * 3)


async def test_a_failed_write_is_rolled_back_and_mapped(store: Store) -> None:
    address = await resolve_address(store, "webchat", "page-rollback")

    def half_then_fail(connection: Connection) -> None:
        connection.execute(
            insert(Message),
            {
                "conversation_id": address.conversation_id,
                "person_id": address.person_id,
                "role": MessageRole.USER,
                "channel": "webchat",
                "text": "never kept",
                "created_at": datetime.now(UTC),
            },
        )
        # No such conversation: the foreign key fails the second insert.
        connection.execute(
            insert(Turn),
            {"conversation_id": 999_999, "inbound_message_id": 1, "received_at": datetime.now(UTC)},
        )

    with pytest.raises(StoreError, match="IntegrityError"):
        await store.write(half_then_fail)
    async with store.reader() as db:
        assert await db.scalar(select(func.count()).select_from(Message)) == 0


async def test_a_session_opened_inside_a_session_does_not_wait_for_itself(store: Store) -> None:
    address = await resolve_address(store, "webchat", "page-nested")
    async with asyncio.timeout(10), store.session():
        # The same task writes again while it holds the writers' turn.
        stored = await store_inbound(store, address, "inside", datetime.now(UTC), "c-nested")
    assert stored.duplicate is False
