"""The store's writers take turns: concurrent turns never meet SQLite's lock."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import Connection, func, insert, select

from gateway.errors import StoreError
from gateway.store import Message, MessageRole, Store, Turn
from gateway.store.addresses import Address
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


def _message_row(address: Address, text: str) -> Callable[[Connection], int]:
    def work(connection: Connection) -> int:
        return int(
            connection.execute(
                insert(Message).returning(Message.id),
                {
                    "conversation_id": address.conversation_id,
                    "person_id": address.person_id,
                    "role": MessageRole.USER,
                    "channel": "webchat",
                    "text": text,
                    "created_at": datetime.now(UTC),
                },
            ).scalar_one()
        )

    return work


async def _behind_a_held_write(store: Store) -> tuple[asyncio.Task[None], threading.Event]:
    """A write that holds the writer thread until the event is set, already running."""
    release, running = threading.Event(), threading.Event()

    def hold(_connection: Connection) -> None:
        running.set()
        release.wait(10)

    held = asyncio.create_task(store.write(hold))
    await asyncio.to_thread(running.wait, 10)
    return held, release


async def test_writes_queued_while_one_runs_commit_together_in_order(store: Store) -> None:
    address = await resolve_address(store, "webchat", "page-together")
    held, release = await _behind_a_held_write(store)
    commits = store.commits
    queued = [asyncio.create_task(store.write(_message_row(address, f"m{n}"))) for n in range(5)]
    await asyncio.sleep(0.05)
    release.set()
    ids = await asyncio.gather(*queued)
    await held
    # The held write's commit, then one for the five queued behind it.
    assert store.commits - commits == 2
    assert ids == sorted(ids)
    async with store.reader() as db:
        texts = (await db.scalars(select(Message.text).order_by(Message.id))).all()
    assert texts == [f"m{n}" for n in range(5)]


async def test_a_failing_write_among_queued_ones_fails_only_its_caller(store: Store) -> None:
    address = await resolve_address(store, "webchat", "page-one-fails")

    def broken(connection: Connection) -> None:
        _message_row(address, "never kept")(connection)
        # No such conversation: the foreign key fails.
        connection.execute(
            insert(Turn),
            {"conversation_id": 999_999, "inbound_message_id": 1, "received_at": datetime.now(UTC)},
        )

    held, release = await _behind_a_held_write(store)
    first = asyncio.create_task(store.write(_message_row(address, "kept 1")))
    failing = asyncio.create_task(store.write(broken))
    last = asyncio.create_task(store.write(_message_row(address, "kept 2")))
    await asyncio.sleep(0.05)
    release.set()
    await asyncio.gather(first, last, held)
    with pytest.raises(StoreError, match="IntegrityError"):
        await failing
    async with store.reader() as db:
        texts = (await db.scalars(select(Message.text).order_by(Message.id))).all()
    assert texts == ["kept 1", "kept 2"]


async def test_a_write_cancelled_while_queued_does_not_run(store: Store) -> None:
    address = await resolve_address(store, "webchat", "page-cancelled")
    held, release = await _behind_a_held_write(store)
    dropped = asyncio.create_task(store.write(_message_row(address, "dropped")))
    kept = asyncio.create_task(store.write(_message_row(address, "kept")))
    await asyncio.sleep(0.05)
    dropped.cancel()
    release.set()
    await asyncio.gather(kept, held)
    with pytest.raises(asyncio.CancelledError):
        await dropped
    async with store.reader() as db:
        texts = (await db.scalars(select(Message.text))).all()
    assert texts == ["kept"]
