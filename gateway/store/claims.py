"""A conversation's turns across a cluster of gateways: claims on the turn rows (issue 25).

On PostgreSQL with ``store.cluster``, any process may store a message, and
exactly one process runs each turn, in the conversation's order. A turn is
run under a *claim*: ``turns.claimed_by`` (the process) and
``turns.claim_until`` (the database's clock plus ``store.lease_s``), renewed
while the turn runs. A transaction cannot stay open for a streamed turn of
seconds or minutes, so the claim is a lease in the row, not a held lock.

``claim_next_turn`` takes the conversation's *earliest open* turn (received,
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
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

import asyncpg
from sqlalchemy import Connection, bindparam, select, text, update

from gateway.store.db import Store
from gateway.store.liveness import holder_gone
from gateway.store.models import Conversation, Message, Turn, TurnStatus, utcnow
from gateway.store.notify import asyncpg_dsn
from gateway.store.repo import Address, StoredInbound

log = logging.getLogger(__name__)

# The advisory lock's first key: this module's locks, apart from anyone else's.
LOCK_SPACE = 0x61677475  # "agtu"
OPEN = (TurnStatus.RECEIVED, TurnStatus.GENERATING)

_LOCK = text("SELECT pg_advisory_xact_lock(:space, :key)")
_GONE = text(f"SELECT {holder_gone(':holder')}")
_NOW = text("SELECT now()")
_EARLIEST_OPEN = (
    select(Turn.id, Turn.inbound_message_id, Turn.status, Turn.claimed_by, Turn.claim_until)
    .where(Turn.conversation_id == bindparam("b_conversation_id"), Turn.status.in_(OPEN))
    .order_by(Turn.id)
    .limit(1)
)
_TURN_MESSAGE = (
    select(
        Message.text,
        Message.created_at,
        Message.client_id,
        Conversation.person_id,
        Conversation.identity_id,
        Conversation.channel,
    )
    .join(Conversation, Conversation.id == Message.conversation_id)
    .where(Message.id == bindparam("b_message_id"))
)


@dataclass(frozen=True)
class OpenHead:
    """A conversation's earliest open turn, as the sweeper sees it."""

    conversation_id: int
    claim_until: datetime | None
    received_at: datetime
    # Claimed by a member whose session ended (it died), though the claim has time left.
    holder_gone: bool = False


async def claim_next_turn(
    store: Store, conversation_id: int, owner: str, lease_s: float
) -> StoredInbound | None:
    """Claim the conversation's earliest open turn for ``owner``; None when there is
    none, or when another claim on it is still live (its holder runs it)."""

    def work(connection: Connection) -> StoredInbound | None:
        connection.execute(_LOCK, {"space": LOCK_SPACE, "key": conversation_id})
        now = connection.execute(_NOW).scalar_one()
        head = connection.execute(_EARLIEST_OPEN, {"b_conversation_id": conversation_id}).first()
        if head is None:
            return None
        turn_id, message_id, status, holder, claim_until = head
        # A live claim: its holder runs the turn, unless that member is gone (its
        # session ended with it: gateway/store/liveness.py).
        if (
            claim_until is not None
            and claim_until > now
            and (holder == owner or not connection.execute(_GONE, {"holder": holder}).scalar_one())
        ):
            return None
        connection.execute(
            update(Turn)
            .where(Turn.id == turn_id)
            .values(claimed_by=owner, claim_until=now + timedelta(seconds=lease_s))
        )
        row = connection.execute(_TURN_MESSAGE, {"b_message_id": message_id}).one()
        text_, created_at, client_id, person_id, identity_id, channel = row
        return StoredInbound(
            address=Address(person_id, identity_id, conversation_id, channel),
            message_id=message_id,
            turn_id=turn_id,
            text=text_,
            created_at=created_at,
            client_id=client_id,
            duplicate=False,
            status=TurnStatus(status),
            claimed_by=owner,
        )

    return await store.write(work)


async def end_claim(store: Store, turn_id: int, owner: str) -> bool:
    """After a run: a turn the pipeline left open under ``owner``'s claim (a bug, a
    cancelled run) is closed as interrupted, so nobody runs it again unasked (a
    ``retry`` reopens it). True when there was one."""

    def work(connection: Connection) -> bool:
        result = connection.execute(
            update(Turn)
            .where(Turn.id == turn_id, Turn.claimed_by == owner, Turn.status.in_(OPEN))
            .values(
                status=TurnStatus.FAILED,
                error_code="interrupted",
                error_message="the turn's run ended before it was answered",
                finished_at=utcnow(),
            )
        )
        return bool(result.rowcount)

    return await store.write(work)


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


_RENEW = (
    "UPDATE turns SET claim_until = now() + make_interval(secs => $3)"
    " WHERE id = ANY($1::int[]) AND claimed_by = $2"
    " AND status IN ('received', 'generating') RETURNING id"
)


class ClaimRenewer:
    """Renews every claim this process holds, in one statement every ``lease_s / 3``.

    On a connection of its own, outside the store's pool and its write turn: a
    process busy writing (a burst of turns, memory work) must not let its claims
    expire while its writes wait in line. ``held`` is the set of turn ids being run.
    """

    def __init__(self, url: str, owner: str, lease_s: float) -> None:
        self._dsn = asyncpg_dsn(url)
        self.owner = owner
        self.lease_s = lease_s
        self.held: set[int] = set()
        self._connection: asyncpg.Connection | None = None
        self._task: asyncio.Task[None] | None = None
        self.renewals = 0
        self.lost = 0

    async def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="claim-renewer")

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._connection is not None and not self._connection.is_closed():
            with contextlib.suppress(OSError, asyncpg.PostgresError):
                await self._connection.close(timeout=2)
        self._connection = None

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.lease_s / 3)
            if self.held:
                await self.renew()

    async def renew(self) -> set[int]:
        """Renew now; the ids whose claim is no longer this process's (taken over)."""
        held = set(self.held)
        try:
            if self._connection is None or self._connection.is_closed():
                self._connection = await asyncpg.connect(
                    self._dsn, server_settings={"application_name": "agentgw claims"}
                )
            rows = await self._connection.fetch(_RENEW, list(held), self.owner, self.lease_s)
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            self._connection = None
            log.warning("could not renew %d turn claims: %s", len(held), exc)
            return set()
        self.renewals += 1
        # Answered meanwhile (no longer open), or taken over: the reply's write checks.
        lost = held - {int(row["id"]) for row in rows} - (held - self.held)
        self.lost += len(lost)
        return lost
