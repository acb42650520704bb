"""A conversation's turns across a cluster of gateways: claims on the turn rows (issue 25).

On PostgreSQL with ``store.cluster``, any process may store a message, and
exactly one process runs each turn, in the conversation's order. A turn is
run under a *claim*: ``turns.claimed_by`` (the process) and
``turns.claim_until`` (the database's clock plus ``store.lease_s``), renewed
while the turn runs. A transaction cannot stay open for a streamed turn of
seconds or minutes, so the claim is a lease in the row, not a held lock.

``TurnClaims.claim`` takes the conversation's *earliest open* turn (received,
or generating under a claim that expired or whose holder is gone: its process
died, and its member session with it, gateway/store/liveness.py) when no live
claim holds it. Inside its transaction a transaction-level advisory lock on
the conversation id makes the read-then-update atomic among processes: two
processes claiming for one conversation at once are served one after the
other, and the second sees the first's claim. ``FOR UPDATE SKIP LOCKED`` was
the other way considered: it locks one row, but the rule spans rows ("no
other turn of this conversation is claimed"), and ``FOR UPDATE`` with
``LIMIT 1`` re-checks a row that changed under it and may then return no row
at all although a later turn is open; the advisory lock has no such case.

A claim ends when its turn is answered or fails (the turn is no longer
open); ``hold_claim`` (repo.py) makes the reply's write conditional on the
claim still being this process's, so a process that stalled past its lease
cannot store a second answer.

``TurnClaims`` takes, ends and renews this process's claims on a connection
of its own, one statement at a time: not in the store's write turn (one
writer at a time per process), where a claim waited behind the turns'
writes. Measured with one process, 60 conversations on a quiet machine: the
write turn was busy 90 % of the time, and claims and their ends were 14 % of
it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

import asyncpg
from sqlalchemy import Connection, text

from gateway.errors import StoreError
from gateway.store.db import Store
from gateway.store.liveness import holder_gone
from gateway.store.models import TurnStatus, utcnow
from gateway.store.notify import asyncpg_dsn, cancel_and_wait, close_quietly
from gateway.store.repo import Address, StoredInbound

log = logging.getLogger(__name__)

T = TypeVar("T")

# The advisory lock's first key: this module's locks, apart from anyone else's.
LOCK_SPACE = 0x61677475  # "agtu"
OPEN = (TurnStatus.RECEIVED, TurnStatus.GENERATING)
_OPEN_SQL = "('received', 'generating')"

_LOCK = "SELECT pg_advisory_xact_lock($1::int, $2::int)"
# The conversation's earliest open turn, and whether it is free to take: never
# claimed, its claim ran out, or its holder is another member that is gone.
_HEAD = (
    "SELECT t.id, (t.claim_until IS NULL OR t.claim_until <= now()"
    f" OR (t.claimed_by IS DISTINCT FROM $2 AND {holder_gone('t.claimed_by')})) AS free"
    f" FROM turns t WHERE t.conversation_id = $1 AND t.status IN {_OPEN_SQL}"
    " ORDER BY t.id LIMIT 1"
)
_TAKE = (
    "UPDATE turns t SET claimed_by = $2, claim_until = now() + make_interval(secs => $3)"
    " FROM messages m JOIN conversations c ON c.id = m.conversation_id"
    " WHERE t.id = $1 AND m.id = t.inbound_message_id"
    " RETURNING t.status, m.id AS message_id, m.text, m.created_at, m.client_id,"
    " c.person_id, c.identity_id, c.channel"
)
# A turn its run left open (a bug, a cancelled run) is closed as interrupted.
_END = (
    "UPDATE turns SET status = 'failed', error_code = 'interrupted',"
    " error_message = 'the turn''s run ended before it was answered', finished_at = $3"
    f" WHERE id = $1 AND claimed_by = $2 AND status IN {_OPEN_SQL}"
)
_RENEW = (
    "UPDATE turns SET claim_until = now() + make_interval(secs => $3)"
    f" WHERE id = ANY($1::int[]) AND claimed_by = $2 AND status IN {_OPEN_SQL} RETURNING id"
)


@dataclass(frozen=True)
class OpenHead:
    """A conversation's earliest open turn, as the sweeper sees it."""

    conversation_id: int
    claim_until: datetime | None
    received_at: datetime
    # Claimed by a member whose session ended (it died), though the claim has time left.
    holder_gone: bool = False


class TurnClaims:
    """This process's claims: taken, ended and renewed on a connection of its own.

    ``held`` is the set of turn ids being run; every ``lease_s / 3`` one
    statement renews them all. A statement that fails (the server restarted,
    the connection broke) raises ``StoreError`` and the next one connects again.
    """

    def __init__(self, url: str, owner: str, lease_s: float) -> None:
        self._dsn = asyncpg_dsn(url)
        self.owner = owner
        self.lease_s = lease_s
        self.held: set[int] = set()
        self._connection: asyncpg.Connection | None = None
        # One statement (or claim transaction) at a time on the connection.
        self._turn = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self.renewals = 0
        self.lost = 0

    async def start(self) -> None:
        """Renew the held claims in the background."""
        self._task = asyncio.create_task(self._loop(), name="claim-renewer")

    async def aclose(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
        connection, self._connection = self._connection, None
        await close_quietly(connection)

    async def _connected(self) -> asyncpg.Connection:
        if self._connection is None or self._connection.is_closed():
            self._connection = await asyncpg.connect(
                self._dsn, server_settings={"application_name": "agentgw claims"}
            )
        return self._connection

    async def claim(self, conversation_id: int) -> StoredInbound | None:
        """Claim the conversation's earliest open turn; None when there is none, or
        when another claim on it is still live (its holder runs it)."""

        async def work(connection: asyncpg.Connection) -> StoredInbound | None:
            async with connection.transaction():
                await connection.execute(_LOCK, LOCK_SPACE, conversation_id)
                head = await connection.fetchrow(_HEAD, conversation_id, self.owner)
                if head is None or not head["free"]:
                    return None
                row = await connection.fetchrow(_TAKE, head["id"], self.owner, self.lease_s)
            assert row is not None  # the turn's row was just read under the lock
            return _claimed(row, int(head["id"]), conversation_id, self.owner)

        return await self._run(work)

    async def end(self, turn_id: int) -> bool:
        """After a run: a turn the pipeline left open under this process's claim (a bug,
        a cancelled run) is closed as interrupted, so nobody runs it again unasked (a
        ``retry`` reopens it). True when there was one."""

        async def work(connection: asyncpg.Connection) -> bool:
            status: str = await connection.execute(_END, turn_id, self.owner, utcnow())
            return status != "UPDATE 0"

        return await self._run(work)

    async def renew(self) -> set[int]:
        """Renew now; the ids whose claim is no longer this process's (taken over)."""
        held = set(self.held)

        async def work(connection: asyncpg.Connection) -> list[Any]:
            return list(await connection.fetch(_RENEW, list(held), self.owner, self.lease_s))

        try:
            rows = await self._run(work)
        except StoreError as exc:
            log.warning("could not renew %d turn claims: %s", len(held), exc)
            return set()
        self.renewals += 1
        # Answered meanwhile (no longer open), or taken over: the reply's write checks.
        lost = held - {int(row["id"]) for row in rows} - (held - self.held)
        self.lost += len(lost)
        return lost

    async def _run(self, work: Callable[[asyncpg.Connection], Awaitable[T]]) -> T:
        async with self._turn:
            try:
                return await work(await self._connected())
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                connection, self._connection = self._connection, None
                if connection is not None:
                    connection.terminate()
                raise StoreError(f"turn claims: {exc.__class__.__name__}: {exc}") from exc

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.lease_s / 3)
            if self.held:
                await self.renew()


def _claimed(row: Any, turn_id: int, conversation_id: int, owner: str) -> StoredInbound:
    return StoredInbound(
        address=Address(row["person_id"], row["identity_id"], conversation_id, row["channel"]),
        message_id=row["message_id"],
        turn_id=turn_id,
        text=row["text"],
        created_at=row["created_at"],
        client_id=row["client_id"],
        duplicate=False,
        status=TurnStatus(row["status"]),
        claimed_by=owner,
    )


_NOW = text("SELECT now()")


_OPEN_HEADS = text(
    "SELECT t.conversation_id, t.claim_until, t.received_at,"
    f" t.claim_until > now() AND {holder_gone('t.claimed_by')}"
    " FROM turns t JOIN ("
    " SELECT conversation_id, min(id) AS id FROM turns"
    " WHERE status IN ('received', 'generating') GROUP BY conversation_id"
    ") head ON head.id = t.id"
)


async def open_heads(store: Store) -> tuple[list[OpenHead], datetime]:
    """Every conversation's earliest open turn and its claim, and the database's now."""

    def work(connection: Connection) -> tuple[list[OpenHead], datetime]:
        rows = connection.execute(_OPEN_HEADS).all()
        now = connection.execute(_NOW).scalar_one()
        return [OpenHead(int(r[0]), r[1], r[2], bool(r[3])) for r in rows], now

    return await store.read(work)
