"""Which members of a cluster are alive *now*: a session lock each (issue 25).

A heartbeat says a member was alive up to ``lease_s`` ago. A member killed
(SIGKILL, a crash, the OOM killer) would be counted alive for up to
``lease_s`` more, and its turns and leases would wait that long. But the
kernel closes a dead process's sockets at once, and PostgreSQL ends the
session of a closed connection at once (its backend is waiting to read from
it), releasing that session's locks. So each member holds, for as long as it
lives, a session-level advisory lock keyed by its member id, on a connection
of its own (``MemberSession``): a member whose lock is free is gone, whatever
its heartbeat says.

``holder_gone(column)`` is that test as SQL, for the statements that decide
whether a claim or lease is still its holder's: a turn's claim
(gateway/store/claims.py) and a named lease (gateway/store/leases.py); a
member's row counts alive only with its lock (gateway/store/members.py). A
holder found gone must be a member (a row in ``cluster_members``), so a holder
name that never had a session is left to its lease. ``MemberSession`` also watches the
others, every ``WATCH_S``: a member with a fresh heartbeat and a free lock has
just died, and ``on_gone`` is told, so the router sweeps and the singletons
claim at once instead of at the next period.

What the lock cannot see, the lease still covers: a machine that vanishes
(power, a network partition) leaves its connections half-open until TCP
keepalive ends them, and a process that stalls keeps its lock. And a member
whose lock connection drops while it lives (a server restart, a network blip)
looks gone until it locks again: the others may take its turns and leases
meanwhile; the fences (``hold_claim`` on a reply, renewals that fail) then
make it stop, never answer twice.

The key is ``hashtext(member id)`` under a space of our own. Two live members
whose ids collide share one lock: the second cannot take it (and keeps
trying), and while both live neither can look gone early; the leases still
cover them. A collision never makes a live member look gone.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import asyncpg

from gateway.errors import StoreError
from gateway.store.notify import asyncpg_dsn, cancel_and_wait, close_quietly

log = logging.getLogger(__name__)

# The advisory lock's first key (int4): members' session locks, apart from anyone else's.
MEMBER_SPACE = 0x6167746D  # "agtm"
# How often a member looks for others that just died (at most a third of lease_s).
WATCH_S = 1.0


def session_locked(column: str) -> str:
    """SQL: whether the member named by ``column`` (an expression) holds its session lock.

    A two-key advisory lock shows in pg_locks as classid (the first key), objid
    (the second, as an oid) and objsubid 2; advisory locks are per database."""
    return (
        "EXISTS (SELECT 1 FROM pg_locks AS l WHERE l.locktype = 'advisory' AND l.granted"
        " AND l.objsubid = 2"
        " AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        f" AND l.classid = {MEMBER_SPACE} AND l.objid = hashtext({column})::oid)"
    )


def holder_gone(column: str) -> str:
    """SQL: whether ``column`` names a member of the cluster whose session has ended.

    Only a member (a row in ``cluster_members``: it locked before it joined) can
    be found gone this way; any other holder name is left to its lease's end."""
    return (
        f"(EXISTS (SELECT 1 FROM cluster_members AS gm WHERE gm.id = {column})"
        f" AND NOT {session_locked(column)})"
    )


_TRY_LOCK = "SELECT pg_try_advisory_lock($1::int, hashtext($2))"
# Members the heartbeat still counts alive whose session lock is free: just died.
_GONE = (
    "SELECT m.id FROM cluster_members AS m"
    " WHERE m.id <> $1 AND m.heartbeat_at > now() - make_interval(secs => $2)"
    f" AND NOT {session_locked('m.id')}"
)


class MemberSession:
    """This member's session lock, held on a connection of its own, and a watch on
    the others' (``on_gone`` is called with the ids of members that just died;
    ``on_lost`` when this member's own session was lost)."""

    def __init__(
        self,
        url: str,
        member_id: str,
        *,
        lease_s: float,
        on_gone: Callable[[set[str]], None] | None = None,
        on_lost: Callable[[], None] | None = None,
        every_s: float = WATCH_S,
    ) -> None:
        self._dsn = asyncpg_dsn(url)
        self.member_id = member_id
        self.lease_s = lease_s
        self.on_gone = on_gone
        # Told when this member's own session is lost (its lock with it).
        self.on_lost = on_lost
        self.every_s = min(every_s, lease_s / 3)
        self._connection: asyncpg.Connection | None = None
        self._task: asyncio.Task[None] | None = None
        self.locked = False
        # The members seen gone at the last look: each is told once.
        self._gone: set[str] = set()

    async def start(self, *, timeout_s: float = 10.0) -> None:
        """Connect and take the lock (failing clearly if the server can't be reached),
        then keep it and watch the others in the background."""
        try:
            await asyncio.wait_for(self._ensure(), timeout_s)
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError) as exc:
            await self._close()
            raise StoreError(f"cannot open the cluster member's session: {exc}") from exc
        self._task = asyncio.create_task(self._loop(), name="member-session")

    async def aclose(self) -> None:
        """Stop watching and end the session: the lock is free, this member is gone."""
        await cancel_and_wait(self._task)
        self._task = None
        await self._close()

    async def _ensure(self) -> None:
        if self._connection is None or self._connection.is_closed():
            self.locked = False
            self._connection = await asyncpg.connect(
                self._dsn, server_settings={"application_name": f"agentgw {self.member_id}"[:63]}
            )
        if not self.locked:
            self.locked = bool(
                await self._connection.fetchval(_TRY_LOCK, MEMBER_SPACE, self.member_id)
            )
            if not self.locked:
                # An old session of ours not yet ended, or another member's id with
                # the same hash: we look alive meanwhile, and try again each look.
                log.warning("cluster: this member's session lock is held elsewhere; retrying")

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.every_s)
            try:
                await self._ensure()
                assert self._connection is not None  # made by _ensure
                rows = await self._connection.fetch(_GONE, self.member_id, self.lease_s)
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                # The session is lost with its lock: the others may count us gone
                # until the next look locks again.
                log.warning("cluster: the member session failed (%s); reconnecting", exc)
                await self._close()
                if self.on_lost is not None:
                    self.on_lost()
                continue
            gone = {str(row["id"]) for row in rows}
            new, self._gone = gone - self._gone, gone
            if new and self.on_gone is not None:
                log.warning("cluster: %s gone (its session ended)", ", ".join(sorted(new)))
                self.on_gone(new)

    async def _close(self) -> None:
        connection, self._connection = self._connection, None
        self.locked = False
        await close_quietly(connection)
