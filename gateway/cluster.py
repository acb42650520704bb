"""This process as a member of a cluster of gateways on one PostgreSQL (issue 25).

``ClusterNode`` is built by the app when ``store.cluster`` is on: it joins
the membership table, beats every third of ``store.lease_s``, runs each
singleton (the Telegram poller, ...) under a lease of its own (``Singleton``
in gateway/store/leases.py), and on a clean stop stops them, gives their
leases back and leaves, so another process takes over at once.

Its coordinator connection (the store's URL: leases, heartbeats and the
``LISTEN`` connection) must keep its session between transactions. PgBouncer
in transaction pooling hands each transaction whichever server connection is
free, which loses ``LISTEN`` and session advisory locks silently:
``check_session_pooling`` detects it at start and refuses with a clear error.

Its member session (gateway/store/liveness.py) holds a session lock while the
process lives: when it dies, PostgreSQL frees the lock at once, and the others
take its turns and leases then, not when its heartbeat and leases run out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
from aiohttp import web

from gateway.errors import StoreError
from gateway.store import Store
from gateway.store.leases import Leases, Singleton, describe, leases
from gateway.store.liveness import MemberSession
from gateway.store.members import heartbeat, join, leave, live_members, new_member_id
from gateway.store.notify import PgListener, asyncpg_dsn
from gateway.supervisor import TaskSupervisor

log = logging.getLogger(__name__)

# The Telegram poller's lease: one process calls getUpdates at a time.
TELEGRAM_POLLER = "telegram-poller"

_SET_PROBE = "SELECT set_config('agentgw.session_probe', '{token}', false)"
# Raises unless this connection's session still has the value set above.
_CHECK_PROBE = """
DO $$ BEGIN
  IF current_setting('agentgw.session_probe', true) IS DISTINCT FROM '{token}' THEN
    RAISE EXCEPTION 'agentgw: session state lost between transactions';
  END IF;
END $$
"""

TRANSACTION_POOLING = (
    "store.url: this connection loses its session between transactions (PgBouncer in "
    "transaction pooling?). A cluster's coordinator connection keeps session state "
    "(LISTEN, advisory locks): connect to PostgreSQL directly, or through a pooler "
    "in session pooling (pool_mode = session)"
)


async def check_session_pooling(url: str, *, timeout_s: float = 10.0) -> None:
    """Refuse (``StoreError``) a store URL whose connections don't keep their session.

    Connection A sets a session setting; connection B then holds a transaction
    open, so a transaction pooler must give A's next transaction another
    server connection (a pooler hands out its most recently freed one first,
    which would otherwise be A's own and hide the problem); A checks its
    setting is still there. Directly or in session pooling, A keeps its session.
    """
    dsn = asyncpg_dsn(url)
    token = secrets.token_hex(8)
    # No statement cache: a transaction pooler may not know asyncpg's named statements.
    options: dict[str, Any] = {"statement_cache_size": 0, "timeout": timeout_s}
    try:
        first = await asyncpg.connect(dsn, **options)
    except (OSError, asyncpg.PostgresError) as exc:
        raise StoreError(f"cannot reach the store to check its pooling: {exc}") from exc
    try:
        second = await asyncpg.connect(dsn, **options)
        try:
            await first.execute(_SET_PROBE.format(token=token))
            holding = second.transaction()
            await holding.start()
            try:
                await second.execute("SELECT 1")
                await first.execute(_CHECK_PROBE.format(token=token))
            finally:
                await holding.rollback()
        finally:
            await second.close(timeout=timeout_s)
    except asyncpg.RaiseError as exc:
        raise StoreError(TRANSACTION_POOLING) from exc
    except (OSError, asyncpg.PostgresError) as exc:
        raise StoreError(f"cannot check the store's pooling: {exc}") from exc
    finally:
        with contextlib.suppress(OSError, asyncpg.PostgresError):
            await first.close(timeout=timeout_s)


class ClusterNode:
    """This process's membership, heartbeat and singletons."""

    def __init__(self, store: Store, *, lease_s: float, listen: str, version: str) -> None:
        self.store = store
        self.lease_s = lease_s
        self.listen = listen
        self.version = version
        self.member_id = new_member_id()
        self.leases = Leases(store, self.member_id, lease_s)
        self.singletons: dict[str, Singleton] = {}
        self._tasks = TaskSupervisor()
        self._runners: list[asyncio.Task[Any]] = []
        self.beats = 0
        self.joined = False
        # Told the ids of members that just died (their session ended): the turn
        # router sweeps at once (gateway/cluster_router.py).
        self.on_member_gone: list[Callable[[set[str]], None]] = []
        # This member's session lock (the others see it gone the moment it dies) and
        # its watch on theirs.
        self.session = MemberSession(
            store.url,
            self.member_id,
            lease_s=lease_s,
            on_gone=self._members_gone,
            on_lost=self._wake_singletons,
        )
        # The process's one LISTEN connection: turn fan-out (gateway/fanout.py) and the
        # memory indexes' change feed (memory/feed.py) subscribe to it.
        self.listener = PgListener(store.url, name=f"agentgw {self.member_id}")

    async def start(self) -> None:
        """Join (the check for transaction pooling first), then beat in the background."""
        await check_session_pooling(self.store.url)
        # Locked before joining: a member row is never seen without its lock.
        await self.session.start()
        try:
            await join(self.store, self.member_id, listen=self.listen, version=self.version)
            self.joined = True
            self._tasks.spawn("cluster-heartbeat", self._beat())
            await self.listener.start()
        except BaseException:
            await self.aclose()
            raise
        log.info("cluster: joined as %s", self.member_id)

    def singleton(
        self,
        name: str,
        start: Callable[[], Awaitable[None]],
        stop: Callable[[], Awaitable[None]],
    ) -> Singleton:
        """Run ``start`` while this process holds lease ``name``; ``stop`` when it loses it."""
        if name in self.singletons:
            raise ValueError(f"singleton {name!r} already runs")
        runner = self.singletons[name] = Singleton(
            self.store,
            name,
            self.member_id,
            self.lease_s,
            start=start,
            stop=stop,
            session_alive=lambda: self.session.locked,
        )
        self._runners.append(self._tasks.spawn(f"lease-{name}", runner.run()))
        return runner

    def _members_gone(self, gone: set[str]) -> None:
        # Their leases are free now (gateway/store/leases.py): claim without waiting.
        self._wake_singletons()
        for callback in self.on_member_gone:
            callback(gone)

    def _wake_singletons(self) -> None:
        for runner in self.singletons.values():
            runner.wake()

    async def stop_singletons(self) -> None:
        """Stop every singleton's work and give its lease back (a clean stop begins)."""
        runners, self._runners = self._runners, []
        for task in runners:
            task.cancel()
        await asyncio.gather(*runners, return_exceptions=True)

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(self.lease_s / 3)
            try:
                if not await heartbeat(self.store, self.member_id):
                    # Pruned as dead (a long pause): come back as the same member.
                    log.warning("cluster: our member row was gone; joining again")
                    await join(self.store, self.member_id, listen=self.listen, version=self.version)
                self.beats += 1
            except StoreError as exc:
                log.warning("cluster: heartbeat failed: %s", exc)

    async def status(self) -> dict[str, Any]:
        """This process's view for ``/readyz``: itself, the live members and the leases."""
        live = await live_members(self.store, self.lease_s)
        me = next((m for m in live if m.id == self.member_id), None)
        return {
            "ok": me is not None,
            "member_id": self.member_id,
            "heartbeat_lag_s": round(me.lag_s, 2) if me is not None else None,
            "live_members": len(live),
            "holds": sorted(name for name, s in self.singletons.items() if s.held),
            "leases": describe(await leases(self.store)),
        }

    async def aclose(self) -> None:
        """Stop the singletons (each gives its lease back), then leave the cluster."""
        await self._tasks.aclose()
        await self.listener.aclose()
        if self.joined:
            self.joined = False
            try:
                await leave(self.store, self.member_id)
            except StoreError as exc:
                log.warning("cluster: could not leave cleanly (%s); our row ages out", exc)
        # Last: with the row gone first, the others never see this member as died.
        await self.session.aclose()


CLUSTER = web.AppKey("cluster", ClusterNode)
