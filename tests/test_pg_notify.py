"""LISTEN/NOTIFY between gateways (gateway/store/notify.py) on a throwaway PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import Connection, text

from gateway.errors import StoreError
from gateway.store import Store
from gateway.store.notify import PgListener, notify
from gateway.testing.postgres import PG_BINARIES, create_database
from tests.test_memory_postgres import postgres

pytestmark = pytest.mark.skipif(not PG_BINARIES, reason="Debian postgresql is not installed")
__all__ = ["postgres"]


@pytest.fixture
async def pg(postgres: str) -> AsyncIterator[Store]:
    async with Store(await create_database(postgres)) as store:
        yield store


async def test_a_notification_arrives_when_its_transaction_commits(pg: Store) -> None:
    got: asyncio.Queue[str] = asyncio.Queue()
    listener = PgListener(pg.url)
    await listener.subscribe("items", got.put)
    await listener.start()
    try:
        committed = asyncio.Event()

        def write(connection: Connection) -> None:
            notify(connection, "items", "42")
            connection.execute(text("SELECT pg_sleep(0.3)"))

        writing = asyncio.create_task(pg.write(write))
        writing.add_done_callback(lambda _task: committed.set())
        payload = await asyncio.wait_for(got.get(), 10)
        # Delivered only once the writer's rows were committed, never before.
        assert committed.is_set()
        assert payload == "42"

        def rolled_back(connection: Connection) -> None:
            notify(connection, "items", "never")
            raise RuntimeError("the writer fails")

        with pytest.raises(RuntimeError):
            await pg.write(rolled_back)
        await pg.write(lambda connection: notify(connection, "items", "43"))
        assert await asyncio.wait_for(got.get(), 10) == "43"
    finally:
        await listener.aclose()


async def test_a_payload_past_the_limit_is_refused_clearly(pg: Store) -> None:
    with pytest.raises(StoreError, match="send an id"):
        await pg.write(lambda connection: notify(connection, "items", "x" * 8000))


async def test_a_lost_connection_reconnects_and_subscribers_catch_up(pg: Store) -> None:
    got: asyncio.Queue[str] = asyncio.Queue()
    caught_up = asyncio.Event()

    async def catch_up() -> None:
        caught_up.set()

    listener = PgListener(pg.url, name="listener under test")
    await listener.subscribe("turns", got.put, catch_up)
    await listener.start()
    try:
        # The server ends the listening session, as a server restart or a proxy would.
        await pg.write(
            lambda connection: connection.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE application_name = 'listener under test'"
                )
            )
        )
        await asyncio.wait_for(caught_up.wait(), 15)
        assert listener.reconnects == 1
        await listener.wait_connected()
        await pg.write(lambda connection: notify(connection, "turns", "after"))
        assert await asyncio.wait_for(got.get(), 10) == "after"
    finally:
        await listener.aclose()
