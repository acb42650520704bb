"""PostgreSQL ``LISTEN``/``NOTIFY`` for a cluster of gateways (issue 25).

A notification is a nudge, never the data: its payload is small (an id, a
conversation, a kind) and the receiver reads what changed from the store. So
a notification lost while the listening connection was down costs nothing but
time: on reconnecting, every subscriber's ``on_reconnect`` runs, and each
catches up from the store (items after the last id it saw, turns still
pending, ...).

``notify`` is sent inside the writer's transaction (``pg_notify`` in the same
``Store.write``), so PostgreSQL delivers it only when the rows it points at
are committed: a receiver never reads before the writer's rows are there.

The listening connection is one asyncpg connection of its own, outside the
store's pool: ``LISTEN`` belongs to a session, which a pooled connection does
not keep (and PgBouncer in transaction pooling does not either).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import asyncpg
from sqlalchemy import Connection, make_url, text

from gateway.errors import StoreError

log = logging.getLogger(__name__)

# PostgreSQL refuses a payload of 8000 bytes or more; ours are ids and names.
MAX_PAYLOAD_BYTES = 7999
# Reconnect waits: 0.2 s, 0.4 s, ... capped, so a server restart is met within seconds.
RECONNECT_FIRST_S = 0.2
RECONNECT_MAX_S = 5.0

OnPayload = Callable[[str], Awaitable[None]]
OnReconnect = Callable[[], Awaitable[None]]

_NOTIFY = text("SELECT pg_notify(:channel, :payload)")


def notify(connection: Connection, channel: str, payload: str) -> None:
    """Queue ``payload`` on ``channel``; PostgreSQL sends it when this transaction commits.

    Called inside ``Store.write``'s work, beside the rows the payload points at.
    """
    if len(payload.encode()) > MAX_PAYLOAD_BYTES:
        raise StoreError(
            f"notification on {channel!r}: payload of {len(payload.encode())} bytes "
            f"(at most {MAX_PAYLOAD_BYTES}); send an id and read the rest from the store"
        )
    connection.execute(_NOTIFY, {"channel": channel, "payload": payload})


async def cancel_and_wait(task: asyncio.Task[None] | None) -> None:
    """Cancel a connection's background task and wait until it has ended."""
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def close_quietly(connection: asyncpg.Connection | None) -> None:
    """Close a connection of our own; one that is already broken is let go."""
    if connection is not None and not connection.is_closed():
        with contextlib.suppress(OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
            await connection.close(timeout=2)


def asyncpg_dsn(url: str) -> str:
    """The libpq DSN asyncpg takes, from the store's SQLAlchemy URL."""
    parsed = make_url(url)
    if not parsed.drivername.startswith("postgresql"):
        raise StoreError(f"LISTEN/NOTIFY needs a PostgreSQL store, not {parsed.drivername}")
    return parsed.set(drivername="postgresql").render_as_string(hide_password=False)


@dataclass
class _Channel:
    on_payload: list[OnPayload] = field(default_factory=list)
    on_reconnect: list[OnReconnect] = field(default_factory=list)


class PgListener:
    """One ``LISTEN`` connection for the process; reconnects, and tells subscribers to catch up.

    ``subscribe`` may come before or after ``start``. Callbacks run as tasks of
    their own, so a slow one holds up neither the connection nor the others; a
    callback that raises is logged and the listener goes on.
    """

    def __init__(self, url: str, *, name: str = "agentgw listener") -> None:
        self._dsn = asyncpg_dsn(url)
        self._name = name
        self._channels: defaultdict[str, _Channel] = defaultdict(_Channel)
        self._connection: asyncpg.Connection | None = None
        self._lost = asyncio.Event()
        self._runner: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._connected = asyncio.Event()
        self.reconnects = 0

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    async def subscribe(
        self, channel: str, on_payload: OnPayload, on_reconnect: OnReconnect | None = None
    ) -> None:
        subscribers = self._channels[channel]
        first = not subscribers.on_payload
        subscribers.on_payload.append(on_payload)
        if on_reconnect is not None:
            subscribers.on_reconnect.append(on_reconnect)
        if first and self._connection is not None and not self._connection.is_closed():
            await self._connection.add_listener(channel, self._received)

    async def start(self, *, timeout_s: float = 10.0) -> None:
        """Connect (failing clearly if the server can't be reached) and keep connected."""
        await asyncio.wait_for(self._connect(), timeout_s)
        self._runner = asyncio.create_task(self._keep_connected(), name="pg-listener")

    async def wait_connected(self) -> None:
        await self._connected.wait()

    async def aclose(self) -> None:
        if self._runner is not None:
            self._runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._runner
            self._runner = None
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._close_connection()

    async def _connect(self) -> None:
        try:
            connection = await asyncpg.connect(
                self._dsn, server_settings={"application_name": self._name}
            )
        except (OSError, asyncpg.PostgresError) as exc:
            raise StoreError(f"cannot open the LISTEN connection: {exc}") from exc
        self._lost.clear()
        connection.add_termination_listener(lambda _connection: self._lost.set())
        for channel in self._channels:
            await connection.add_listener(channel, self._received)
        self._connection = connection
        self._connected.set()

    async def _close_connection(self) -> None:
        connection, self._connection = self._connection, None
        self._connected.clear()
        if connection is not None and not connection.is_closed():
            with contextlib.suppress(OSError, asyncpg.PostgresError):
                await connection.close(timeout=2)

    async def _keep_connected(self) -> None:
        while True:
            await self._lost.wait()
            await self._close_connection()
            log.warning("the LISTEN connection was lost; reconnecting")
            wait = RECONNECT_FIRST_S
            while True:
                try:
                    await self._connect()
                    break
                except StoreError as exc:
                    log.warning("%s; again in %.1f s", exc, wait)
                    await asyncio.sleep(wait)
                    wait = min(wait * 2, RECONNECT_MAX_S)
            self.reconnects += 1
            # Notifications sent meanwhile are gone: each subscriber reads what it missed.
            for subscribers in self._channels.values():
                for catch_up in subscribers.on_reconnect:
                    self._spawn(catch_up())

    def _received(self, _connection: Any, _pid: int, channel: str, payload: str) -> None:
        subscribers = self._channels.get(channel)
        if subscribers is None:
            return
        for callback in subscribers.on_payload:
            self._spawn(callback(payload))

    def _spawn(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("a LISTEN subscriber failed", exc_info=task.exception())
