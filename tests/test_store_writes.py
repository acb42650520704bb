"""The store's writers take turns: concurrent turns never meet SQLite's lock."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
from collections.abc import AsyncIterator, Callable, Coroutine
from contextvars import ContextVar
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import pytest
from sqlalchemy import Connection, func, insert, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gateway.errors import StoreError
from gateway.store import Message, MessageRole, Store, Turn
from gateway.store.addresses import Address
from gateway.store.db import BATCH_WRITES
from gateway.store.repo import finish_turn, resolve_address, start_turn, store_inbound
from gateway.store.threads import TransactionEnded

T = TypeVar("T")


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


def _blocking_row(
    address: Address, text: str
) -> tuple[Callable[[Connection], int], threading.Event, threading.Event]:
    """A write of one message that holds the writer thread until released: the work,
    the event it sets once running, and the event that releases it."""
    running, release = threading.Event(), threading.Event()

    def work(connection: Connection) -> int:
        running.set()
        release.wait(30)
        return _message_row(address, text)(connection)

    return work, running, release


async def _texts(store: Store) -> list[str]:
    async with store.reader() as db:
        return list((await db.scalars(select(Message.text).order_by(Message.id))).all())


async def _between_two(
    store: Store, address: Address, middle: Callable[[Connection], object]
) -> tuple[asyncio.Task[int], asyncio.Task[object], asyncio.Task[int]]:
    """``middle`` queued between "kept 1" and "kept 2" behind a held write, all released
    into one batch; the held write is done when this returns."""
    held, release = await _behind_a_held_write(store)
    first = asyncio.create_task(store.write(_message_row(address, "kept 1")))
    between = asyncio.create_task(store.write(middle))
    last = asyncio.create_task(store.write(_message_row(address, "kept 2")))
    await asyncio.sleep(0.05)
    release.set()
    await held
    return first, between, last


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
    texts = await _texts(store)
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
    texts = await _texts(store)
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


async def test_a_long_write_alone_keeps_the_short_ones_before_it_out_of_its_batch(
    store: Store,
) -> None:
    address = await resolve_address(store, "webchat", "page-alone")
    bulk, bulk_running, bulk_release = _blocking_row(address, "bulk")
    held, release = await _behind_a_held_write(store)
    before = asyncio.create_task(store.write(_message_row(address, "before")))
    long = asyncio.create_task(store.write(bulk, alone=True))
    after = asyncio.create_task(store.write(_message_row(address, "after")))
    await asyncio.sleep(0.05)
    release.set()
    try:
        # Committed while the long write still runs: it was not in the long one's batch.
        async with asyncio.timeout(10):
            await before
        assert await asyncio.to_thread(bulk_running.wait, 10)
    finally:
        bulk_release.set()
    await asyncio.gather(long, after, held)
    texts = await _texts(store)
    assert texts == ["before", "bulk", "after"]


async def test_a_batch_holds_at_most_batch_writes(store: Store) -> None:
    address = await resolve_address(store, "webchat", "page-capped")
    held, release = await _behind_a_held_write(store)
    commits = store.commits
    queued = [
        asyncio.create_task(store.write(_message_row(address, f"m{n}")))
        for n in range(BATCH_WRITES + 8)
    ]
    await asyncio.sleep(0.05)
    release.set()
    await asyncio.gather(*queued, held)
    # The held write, then BATCH_WRITES together, then the 8 left.
    assert store.commits - commits == 3


def _rolls_back(connection: Connection) -> None:
    connection.rollback()


def _flush_fails_and_is_caught(connection: Connection) -> None:
    with Session(bind=connection) as session:
        # No such conversation: the flush fails, and the session rolls the
        # connection's transaction back with it.
        session.add(
            Turn(conversation_id=999_999, inbound_message_id=1, received_at=datetime.now(UTC))
        )
        with contextlib.suppress(IntegrityError):
            session.flush()


@pytest.mark.parametrize("ender", [_rolls_back, _flush_fails_and_is_caught])
async def test_a_write_that_ends_the_batch_fails_itself_not_the_others(
    store: Store, ender: Callable[[Connection], None]
) -> None:
    address = await resolve_address(store, "webchat", "page-ends")
    first, ending, last = await _between_two(store, address, ender)
    ids = await asyncio.gather(first, last)
    with pytest.raises(TransactionEnded):
        await ending
    async with store.reader() as db:
        rows = (await db.execute(select(Message.id, Message.text).order_by(Message.id))).all()
    assert [tuple(row) for row in rows] == list(zip(ids, ["kept 1", "kept 2"], strict=True))


async def test_a_write_that_commits_the_batch_halfway_is_refused_and_nothing_runs_twice(
    store: Store,
) -> None:
    address = await resolve_address(store, "webchat", "page-commits")

    def commits(connection: Connection) -> None:
        _message_row(address, "committed early")(connection)
        connection.commit()
        _message_row(address, "after its commit")(connection)

    first, committing, last = await _between_two(store, address, commits)
    await asyncio.gather(first, last)
    with pytest.raises(TransactionEnded):
        await committing
    texts = await _texts(store)
    assert texts == ["kept 1", "committed early", "kept 2"]


async def test_a_duplicate_in_a_batch_reruns_only_the_writes_before_it(store: Store) -> None:
    address = await resolve_address(store, "webchat", "page-duplicate")
    other = await resolve_address(store, "webchat", "page-other")
    now = datetime.now(UTC)
    held, release = await _behind_a_held_write(store)
    commits = store.commits
    first = asyncio.create_task(store_inbound(store, address, "hello", now, "c-1"))
    again = asyncio.create_task(store_inbound(store, address, "hello", now, "c-1"))
    unrelated = asyncio.create_task(store_inbound(store, other, "hi", now, "c-2"))
    row = asyncio.create_task(store.write(_message_row(other, "plain")))
    await asyncio.sleep(0.05)
    release.set()
    stored, duplicate, third, plain = await asyncio.gather(first, again, unrelated, row)
    await held
    # The held write; the first again alone (the duplicate gets its error); the two
    # after the duplicate together. Each alone would be 4.
    assert store.commits - commits == 3
    assert (stored.duplicate, duplicate.duplicate, third.duplicate) == (False, True, False)
    assert (duplicate.message_id, duplicate.turn_id) == (stored.message_id, stored.turn_id)
    async with store.reader() as db:
        by_client = dict(
            (
                await db.execute(
                    select(Message.client_id, Message.id).where(Message.client_id.is_not(None))
                )
            ).all()
        )
        turns = dict((await db.execute(select(Turn.inbound_message_id, Turn.id))).all())
        texts = (await db.scalars(select(Message.text).order_by(Message.id))).all()
    # The ids handed back after the rerun are the rows stored.
    assert by_client == {"c-1": stored.message_id, "c-2": third.message_id}
    assert turns == {stored.message_id: stored.turn_id, third.message_id: third.turn_id}
    assert texts == ["hello", "hi", "plain"]
    assert plain == max(by_client.values()) + 1


class _Interrupt(BaseException):
    """Not an Exception: what a ``KeyboardInterrupt`` would be to the batch."""


async def test_a_base_exception_from_a_write_reaches_only_its_caller(store: Store) -> None:
    address = await resolve_address(store, "webchat", "page-base")

    def interrupted(_connection: Connection) -> None:
        raise _Interrupt

    first, bad, last = await _between_two(store, address, interrupted)
    await asyncio.gather(first, last)
    with pytest.raises(_Interrupt):
        await bad
    # The drain goes on.
    await store.write(_message_row(address, "later"))
    texts = await _texts(store)
    assert texts == ["kept 1", "kept 2", "later"]


async def test_a_cancelled_drain_reports_its_batch_and_runs_the_queued_writes(
    store: Store,
) -> None:
    address = await resolve_address(store, "webchat", "page-drain-cancelled")
    held, release = await _behind_a_held_write(store)
    queued = asyncio.create_task(store.write(_message_row(address, "queued")))
    await asyncio.sleep(0.05)
    drain = store._write_drain
    assert drain is not None
    drain.cancel()
    await asyncio.sleep(0.05)
    release.set()
    # The held write ran in the thread and committed: its caller is told so, not
    # cancelled; the write queued behind it runs in a new drain.
    await held
    assert await queued > 0
    assert drain.cancelled()
    async with store.reader() as db:
        texts = (await db.scalars(select(Message.text))).all()
    assert texts == ["queued"]
    # close() is not upset by the cancelled drain (the fixture closes too).
    await store.close()
    assert store._writer is None
    assert store._engine is None


async def test_close_runs_the_queued_writes_first(store: Store) -> None:
    address = await resolve_address(store, "webchat", "page-close")
    held, release = await _behind_a_held_write(store)
    queued = [asyncio.create_task(store.write(_message_row(address, f"m{n}"))) for n in range(3)]
    await asyncio.sleep(0.05)
    closing = asyncio.create_task(store.close())
    await asyncio.sleep(0.05)
    release.set()
    await closing
    await held
    assert len(set(await asyncio.gather(*queued))) == 3
    assert store._writer is None


async def test_a_caller_cancelled_mid_batch_leaves_the_others_theirs(store: Store) -> None:
    address = await resolve_address(store, "webchat", "page-caller-cancelled")
    slow, running, release = _blocking_row(address, "slow")
    first, cancelled, last = await _between_two(store, address, slow)
    await asyncio.to_thread(running.wait, 10)
    cancelled.cancel()
    release.set()
    await asyncio.gather(first, last)
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    # Its batch was under way: its statements ran and committed with the others.
    texts = await _texts(store)
    assert texts == ["kept 1", "slow", "kept 2"]


def _outside(coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
    """A task that does not inherit this one's write turn (held in ``store.session()``)."""
    return asyncio.get_running_loop().create_task(coro, context=contextvars.Context())


async def test_writes_are_taken_for_a_batch_once_the_turn_is_the_drains(store: Store) -> None:
    address = await resolve_address(store, "webchat", "page-taken-late")
    commits = store.commits
    async with store.session():
        # The drain waits for the write turn this task holds.
        dropped = _outside(store.write(_message_row(address, "dropped")))
        kept = _outside(store.write(_message_row(address, "kept")))
        await asyncio.sleep(0.05)
        dropped.cancel()
        joined = _outside(store.write(_message_row(address, "joined")))
        await asyncio.sleep(0.05)
    await asyncio.gather(kept, joined)
    with pytest.raises(asyncio.CancelledError):
        await dropped
    # The session's commit, then one for the two left.
    assert store.commits - commits == 2
    texts = await _texts(store)
    assert texts == ["kept", "joined"]


async def test_a_drain_that_finds_the_store_closed_fails_its_writes(store: Store) -> None:
    address = await resolve_address(store, "webchat", "page-closed-under")
    waiting = store._write_turn
    async with store.session():
        closing = _outside(store.close())
        # close() waits for the write turn to clear the writer...
        while not waiting._waiters:  # noqa: ASYNC110 - asyncio.Lock has no event to wait on
            await asyncio.sleep(0.01)
        # ...and a write queued after it finds the writer gone once its turn comes.
        late = _outside(store.write(_message_row(address, "late")))
        await asyncio.sleep(0.05)
    await closing
    with pytest.raises(StoreError, match="not open"):
        await late


_CALLER: ContextVar[str] = ContextVar("caller", default="none")


async def test_the_drain_runs_in_a_context_of_its_own(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []
    drain = store._drain_writes

    async def drain_seeing() -> None:
        seen.append(_CALLER.get())
        await drain()

    monkeypatch.setattr(store, "_drain_writes", drain_seeing)
    _CALLER.set("first caller")
    await store.write(lambda connection: None)
    assert seen == ["none"]


async def test_close_waiting_for_a_drain_that_is_cancelled_still_closes(store: Store) -> None:
    address = await resolve_address(store, "webchat", "page-close-cancelled")
    held, release = await _behind_a_held_write(store)
    queued = asyncio.create_task(store.write(_message_row(address, "queued")))
    closing = asyncio.create_task(store.close())
    await asyncio.sleep(0.05)
    drain = store._write_drain
    assert drain is not None
    drain.cancel()
    await asyncio.sleep(0.05)
    release.set()
    await closing
    await held
    assert await queued > 0
    assert store._writer is None
    assert store._engine is None
