"""Named leases in the store (issue 25): one holder at a time, on PostgreSQL's clock.

A lease is a row of ``cluster_leases`` (name, holder, until). Taking it is one
statement, ``INSERT … ON CONFLICT (name) DO UPDATE … WHERE the holder is me or
the lease ran out``, and its end is ``now() + lease_s`` on the *server's*
clock: machines whose clocks disagree still agree on who holds what. A holder
renews every third of ``lease_s`` (``renew`` succeeds only while its lease has
not run out) and gives the lease back on a clean stop. A holder that died is
taken over at once: its member session ended with it, so its lock is free
(gateway/store/liveness.py) and the next ``claim`` takes the lease, however long
it had left. Once ``until`` passes, a lease is free in any case (a holder that
stalls, or a machine that vanished with its connections half-open).

A holder that cannot renew (the database unreachable, or another took the
lease after it expired) stops its work: ``Singleton`` calls ``stop`` when a
renewal says the lease is gone, and also when renewals have failed until the
lease's end as this process measured it. That end is counted from just
*before* the claim was sent, so it is never later than the server's: the old
holder stops before a new one can start.

Every statement is a single one in its own transaction, so leases work through
any pooler; they run on the store's engine directly, not in its write turn,
so a busy turn never delays a renewal. PostgreSQL only (``store.cluster``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import Connection, text
from sqlalchemy.exc import SQLAlchemyError

from gateway.errors import StoreError
from gateway.store.db import Store
from gateway.store.liveness import holder_gone

log = logging.getLogger(__name__)

T = TypeVar("T")

# Taken when free, ours, run out, or held by a member whose session ended (it died:
# gateway/store/liveness.py) though its lease has time left.
_CLAIM = text(
    f"""
    INSERT INTO cluster_leases (name, holder, until, taken_at)
    VALUES (:name, :holder, now() + make_interval(secs => :lease_s), now())
    ON CONFLICT (name) DO UPDATE SET
        holder = EXCLUDED.holder,
        until = EXCLUDED.until,
        taken_at = CASE
            WHEN cluster_leases.holder = EXCLUDED.holder AND cluster_leases.until >= now()
            THEN cluster_leases.taken_at ELSE EXCLUDED.taken_at END
    WHERE cluster_leases.holder = EXCLUDED.holder OR cluster_leases.until < now()
        OR {holder_gone("cluster_leases.holder")}
    RETURNING holder
    """
)
_RENEW = text(
    """
    UPDATE cluster_leases SET until = now() + make_interval(secs => :lease_s)
    WHERE name = :name AND holder = :holder AND until >= now()
    RETURNING name
    """
)
_RELEASE = text("DELETE FROM cluster_leases WHERE name = :name AND holder = :holder")
_RELEASE_ALL = text("DELETE FROM cluster_leases WHERE holder = :holder")
_LIST = text(
    f"""
    SELECT name, holder, until, taken_at,
           EXTRACT(EPOCH FROM (until - now()))::float8 AS remaining_s,
           {holder_gone("holder")} AS holder_gone
    FROM cluster_leases ORDER BY name
    """
)


@dataclass(frozen=True)
class LeaseState:
    name: str
    holder: str
    until: datetime
    taken_at: datetime
    # Seconds left on the server's clock; negative once it ran out (free to take).
    remaining_s: float
    # Whether the holder is a member whose session ended (it died: free to take).
    holder_gone: bool

    @property
    def held(self) -> bool:
        return self.remaining_s >= 0 and not self.holder_gone


async def run_direct(store: Store, work: Callable[[Connection], T]) -> T:
    if store.is_sqlite:
        raise StoreError("cluster leases need a PostgreSQL store (store.cluster)")
    try:
        async with store.engine.begin() as connection:
            return await connection.run_sync(work)
    except SQLAlchemyError as exc:
        raise StoreError(f"database error: {exc.__class__.__name__}: {exc}") from exc


async def claim(store: Store, name: str, holder: str, lease_s: float) -> bool:
    """Take ``name`` for ``lease_s`` seconds (or extend it, when ``holder`` has it)."""
    params = {"name": name, "holder": holder, "lease_s": lease_s}
    return await run_direct(store, lambda c: c.execute(_CLAIM, params).first() is not None)


async def renew(store: Store, name: str, holder: str, lease_s: float) -> bool:
    """Extend ``holder``'s lease; False when it ran out or another holder has it."""
    params = {"name": name, "holder": holder, "lease_s": lease_s}
    return await run_direct(store, lambda c: c.execute(_RENEW, params).first() is not None)


async def release(store: Store, name: str, holder: str) -> None:
    await run_direct(store, lambda c: c.execute(_RELEASE, {"name": name, "holder": holder}))


async def release_all(store: Store, holder: str) -> None:
    await run_direct(store, lambda c: c.execute(_RELEASE_ALL, {"holder": holder}))


async def leases(store: Store) -> list[LeaseState]:
    """Every lease row, with the seconds left on the server's clock."""

    def work(connection: Connection) -> list[LeaseState]:
        return [LeaseState(*row) for row in connection.execute(_LIST).all()]

    return await run_direct(store, work)


class Singleton:
    """Runs ``start`` while this process holds lease ``name``, ``stop`` once it does not.

    ``run`` is a task for the process's life: it tries to claim every third of
    ``lease_s``, renews as often while it holds, and on cancel stops the work
    and gives the lease back, so another process takes over at once instead
    of after ``lease_s``.
    """

    def __init__(
        self,
        store: Store,
        name: str,
        holder: str,
        lease_s: float,
        *,
        start: Callable[[], Awaitable[None]],
        stop: Callable[[], Awaitable[None]],
        session_alive: Callable[[], bool] | None = None,
    ) -> None:
        self.store = store
        self.name = name
        self.holder = holder
        self.lease_s = lease_s
        self._start = start
        self._stop = stop
        # Whether this member's session lock is held (gateway/store/liveness.py). While
        # it is not, the others count this member gone and may take the lease: its
        # work stops, and it claims nothing until the session is back.
        self._session_alive = session_alive
        self.held = False
        # This process's end of its lease (monotonic): never later than the server's.
        self._deadline = 0.0
        self.takeovers = 0
        self._woken = asyncio.Event()

    def wake(self) -> None:
        """Tick now, not at the next period (a member died: its lease may be free; or
        this member's session was lost: its work stops)."""
        self._woken.set()

    async def run(self) -> None:
        try:
            while True:
                await self.tick()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._woken.wait(), self.lease_s / 3)
                self._woken.clear()
        finally:
            if self.held:
                # Shielded: the stop and the release must run though the task is cancelled.
                await asyncio.shield(self._give_back())

    async def tick(self) -> None:
        if self._session_alive is not None and not self._session_alive():
            if self.held:
                await self._lose("this member's session was lost; the others may take it")
            return
        sent = time.monotonic()
        try:
            if self.held:
                # A renewal that hangs past the lease's end must not keep the work going.
                ok = await asyncio.wait_for(
                    renew(self.store, self.name, self.holder, self.lease_s),
                    max(0.05, self._deadline - sent),
                )
            else:
                ok = await claim(self.store, self.name, self.holder, self.lease_s)
        except (StoreError, TimeoutError) as exc:
            log.warning("lease %s: %s", self.name, exc or "the renewal timed out")
            if self.held and time.monotonic() >= self._deadline:
                await self._lose("renewals failed until the lease ran out")
            return
        if ok:
            self._deadline = sent + self.lease_s
            if not self.held:
                self.held = True
                self.takeovers += 1
                log.info("lease %s: taken by %s", self.name, self.holder)
                try:
                    await self._start()
                except Exception:
                    log.exception("lease %s: its work failed to start; giving it back", self.name)
                    await self._give_back()
        elif self.held:
            await self._lose("another holder has it")

    async def _lose(self, why: str) -> None:
        log.warning("lease %s: lost (%s); stopping its work", self.name, why)
        self.held = False
        try:
            await self._stop()
        except Exception:
            log.exception("lease %s: stopping its work failed", self.name)

    async def _give_back(self) -> None:
        self.held = False
        try:
            await self._stop()
        finally:
            with contextlib.suppress(StoreError):
                await release(self.store, self.name, self.holder)


@dataclass(frozen=True)
class Leases:
    """This process's leases: its holder name (its member id) and ``store.lease_s``."""

    store: Store
    holder: str
    lease_s: float

    @asynccontextmanager
    async def hold(self, name: str, *, wait_s: float = 0.0) -> AsyncIterator[bool]:
        """Hold ``name`` for the block (renewed meanwhile), yielding False when another
        process holds it (after waiting up to ``wait_s`` for it)."""
        deadline = time.monotonic() + wait_s
        while not await claim(self.store, name, self.holder, self.lease_s):
            if time.monotonic() >= deadline:
                yield False
                return
            await asyncio.sleep(min(0.2, self.lease_s / 10))
        keeper = asyncio.create_task(self._keep(name), name=f"lease-{name}")
        try:
            yield True
        finally:
            keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeper
            with contextlib.suppress(StoreError):
                await asyncio.shield(release(self.store, name, self.holder))

    async def _keep(self, name: str) -> None:
        while True:
            await asyncio.sleep(self.lease_s / 3)
            try:
                if not await renew(self.store, name, self.holder, self.lease_s):
                    log.warning("lease %s: lost while its work ran", name)
                    return
            except StoreError as exc:
                log.warning("lease %s: renewal failed: %s", name, exc)


def describe(states: list[LeaseState]) -> list[dict[str, Any]]:
    """The leases as JSON-able rows (``agentgw cluster status --json``, ``/readyz``)."""
    return [
        {
            "name": s.name,
            "holder": s.holder if s.held else None,
            "until": s.until.isoformat(),
            "taken_at": s.taken_at.isoformat(),
            "remaining_s": round(s.remaining_s, 2),
        }
        for s in states
    ]
