"""Turn events to every process of a cluster: ``LISTEN``/``NOTIFY`` (issue 25).

A page of a conversation may be open on any process, and the turn may run on
any other. Each event the local hub publishes (the message stored, reply
deltas, waiting and tool notices, the reply, the error) is sent on one
channel, ``agentgw_turn_events``; every other process hands it to its own
hub's subscribers (``ConversationHub.deliver``), so its pages see the turn as
if it ran there.

Payloads stay small: ids and kinds, the text of a delta (long ones split in
chunks under PostgreSQL's 8000-byte limit), and the text of a message, a
reply or an error when it fits; past that only the ids go, and the receiver
reads the text from the store. Deltas are sent in batches every ``BATCH_S``
(consecutive deltas of one reply merged), one statement per batch on a
connection of their own, so a streamed reply costs a few notifications a
second, not one per token; any other event (a message, a reply, an error)
goes at once, with the deltas queued before it. Each payload carries the sending
process and a sequence number: PostgreSQL folds identical payloads sent in
one transaction into one, and two deltas may well have the same text.

A notification lost while the listening connection was down is healed from
the store on reconnecting: every remote turn seen open (a message, deltas)
whose reply or error did not come is looked up, and its reply or error is
delivered from the stored rows. A page that misses a delta still gets the
reply's whole text.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

import asyncpg
from sqlalchemy import Connection, select

from gateway.hub import ConversationHub
from gateway.messages import TurnEvent, TurnEventKind
from gateway.store import Store
from gateway.store.models import Message, Turn, TurnStatus
from gateway.store.notify import MAX_PAYLOAD_BYTES, PgListener, asyncpg_dsn
from gateway.store.repo import REPLIED_CHANNEL

log = logging.getLogger(__name__)

CHANNEL = "agentgw_turn_events"
# Events wait this long to go out together (a reply's deltas in one notification).
BATCH_S = 0.05
# Headroom under the limit for the payload's ids and keys around a text.
_TEXT_BYTES = MAX_PAYLOAD_BYTES - 600
_SEND = "SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p"
_CLOSING = (TurnEventKind.REPLY, TurnEventKind.ERROR)
# The replied channel's payloads, marked on the one delivery queue.
_REPLIED_MARK = "\x00replied:"
KEPT = 10_000
# How long a reply's own notification waits for the batch that carries it.
REPLIED_GRACE_S = 10 * BATCH_S


def encode(origin: str, seq: int, event: TurnEvent, *, nudge: bool = False) -> list[str]:
    """The event's payloads: one, or a delta's text in several under the size limit.

    ``nudge`` (a MESSAGE only) asks the other processes to claim its turn: its own
    process will not run it soon (its models are still loading)."""
    base: dict[str, Any] = {
        "o": origin,
        "k": event.kind.value,
        "c": event.conversation_id,
        "m": event.message_id,
    }
    if nudge:
        base["n"] = 1
    if event.reply_id is not None:
        base["r"] = event.reply_id
    if event.code:
        base["e"] = event.code
    if event.client_id is not None:
        base["i"] = event.client_id
    if event.created_at is not None:
        base["a"] = event.created_at.isoformat()
    if event.waited_s:
        base["w"] = event.waited_s
    texts = [event.text]
    if len(event.text.encode()) > _TEXT_BYTES:
        if event.kind is TurnEventKind.DELTA:
            texts = _chunks(event.text)
        else:
            # The receiver reads the message's, the reply's or the error's text back.
            texts, base["x"] = [""], 1
    if event.partial:
        if len(event.partial.encode()) + len(texts[0].encode()) > _TEXT_BYTES:
            base["x"] = 1
        else:
            base["p"] = event.partial
    payloads = []
    for index, chunk in enumerate(texts):
        payload = {**base, "s": f"{seq}.{index}", "t": chunk}
        payloads.append(json.dumps(payload, ensure_ascii=False, separators=(",", ":")))
    return payloads


def _chunks(text: str) -> list[str]:
    chunks: list[str] = []
    current: list[str] = []
    size = 0
    for char in text:
        width = len(char.encode())
        if size + width > _TEXT_BYTES:
            chunks.append("".join(current))
            current, size = [], 0
        current.append(char)
        size += width
    chunks.append("".join(current))
    return chunks


def decode(payload: str) -> tuple[str, TurnEvent, bool, bool]:
    """The sender, the event, whether its text must be read from the store, and whether
    the sender asks the others to claim its turn (``encode``'s ``nudge``)."""
    raw = json.loads(payload)
    created = raw.get("a")
    event = TurnEvent(
        TurnEventKind(raw["k"]),
        int(raw["c"]),
        int(raw["m"]),
        text=str(raw.get("t", "")),
        reply_id=raw.get("r"),
        code=str(raw.get("e", "")),
        client_id=raw.get("i"),
        created_at=datetime.fromisoformat(created) if created else None,
        partial=str(raw.get("p", "")),
        waited_s=float(raw.get("w", 0.0)),
    )
    return str(raw["o"]), event, bool(raw.get("x")), bool(raw.get("n"))


def replied_event(payload: str) -> tuple[str, TurnEvent]:
    """The process that answered and the REPLY event of a ``REPLIED_CHANNEL`` payload
    (its text empty if it was left out)."""
    raw = json.loads(payload)
    return str(raw["o"]), TurnEvent(
        TurnEventKind.REPLY,
        int(raw["c"]),
        int(raw["m"]),
        text=str(raw.get("t", "")),
        reply_id=int(raw["r"]),
        created_at=datetime.fromisoformat(raw["a"]),
    )


class TurnFanout:
    """This process's side of the fan-out: sends the local hub's events, delivers the others'."""

    def __init__(
        self, store: Store, hub: ConversationHub, listener: PgListener, origin: str
    ) -> None:
        self.store = store
        self.hub = hub
        self.listener = listener
        self.origin = origin
        # Told the conversation of a message another process stored and asked the
        # others to run (the cluster router's nudge: it may have a turn to claim).
        self.on_remote_message: Callable[[int], None] | None = None
        # Asked when this process stores a message: whether the others should claim
        # its turn (this process cannot run turns yet). Otherwise the storing
        # process claims the turn itself, and a nudge would only make every other
        # process try a claim that fails, or win the race and run a conversation
        # whose memory it has not open (measured: 60 of 150 turns ran on the
        # process without the page, with the person's indexes open on both).
        self.asks_others: Callable[[], bool] = lambda: False
        self._dsn = asyncpg_dsn(store.url)
        # Events to send, each with whether it asks the others to claim its turn.
        self._outbox: list[tuple[TurnEvent, bool]] = []
        self._queued = asyncio.Event()
        # Set by a message, a reply or an error: the batch goes now, not after BATCH_S.
        self._urgent = asyncio.Event()
        self._seq = 0
        self._sender: asyncpg.Connection | None = None
        self._inbox: asyncio.Queue[str] = asyncio.Queue()
        # Remote turns seen open here, whose reply or error has not come yet.
        self._open: dict[tuple[int, int], None] = {}
        self._tasks: list[asyncio.Task[None]] = []
        # Replies delivered here (by id), turns answered (their late deltas dropped),
        # the newest KEPT of each.
        self._replied: dict[int, None] = {}
        self._answered: dict[tuple[int, int], None] = {}
        self.sent = 0
        self.received = 0

    async def start(self) -> None:
        self._sender = await asyncpg.connect(
            self._dsn, server_settings={"application_name": "agentgw fan-out"}
        )
        await self.listener.subscribe(CHANNEL, self._received, self._heal)
        await self.listener.subscribe(REPLIED_CHANNEL, self._received_reply)
        self._tasks = [
            asyncio.create_task(self._send_loop(), name="fanout-send"),
            asyncio.create_task(self._deliver_loop(), name="fanout-deliver"),
        ]
        self.hub.relay = self._relay

    async def aclose(self) -> None:
        self.hub.relay = None
        await self._flush()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._sender is not None and not self._sender.is_closed():
            with contextlib.suppress(OSError, asyncpg.PostgresError):
                await self._sender.close(timeout=2)
        self._sender = None

    def _relay(self, event: TurnEvent) -> None:
        last = self._outbox[-1][0] if self._outbox else None
        if (
            event.kind is TurnEventKind.DELTA
            and last is not None
            and last.kind is TurnEventKind.DELTA
            and (last.conversation_id, last.message_id) == (event.conversation_id, event.message_id)
        ):
            # One reply's deltas of one batch go as one (chunked if long).
            merged = TurnEvent(
                TurnEventKind.DELTA,
                event.conversation_id,
                event.message_id,
                text=last.text + event.text,
            )
            self._outbox[-1] = (merged, False)
        else:
            nudge = event.kind is TurnEventKind.MESSAGE and self.asks_others()
            self._outbox.append((event, nudge))
            if event.kind is not TurnEventKind.DELTA:
                self._urgent.set()
        self._queued.set()

    async def _send_loop(self) -> None:
        while True:
            await self._queued.wait()
            # Deltas wait a moment to go out together; anything else goes at once, with
            # the deltas before it. A page on another process then sees a turn's reply
            # about when the page on this one does: a person who reads it there and
            # types the next message on that other page sees the replies in order.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._urgent.wait(), BATCH_S)
            self._urgent.clear()
            await self._flush()

    async def _flush(self) -> None:
        self._queued.clear()
        events, self._outbox = self._outbox, []
        if not events:
            return
        payloads: list[str] = []
        for event, nudge in events:
            self._seq += 1
            payloads.extend(encode(self.origin, self._seq, event, nudge=nudge))
        for attempt in (1, 2):
            try:
                if self._sender is None or self._sender.is_closed():
                    self._sender = await asyncpg.connect(
                        self._dsn, server_settings={"application_name": "agentgw fan-out"}
                    )
                await self._sender.execute(_SEND, CHANNEL, payloads)
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                self._sender = None
                log.warning(
                    "fan-out: could not send %d events (attempt %d): %s",
                    len(payloads),
                    attempt,
                    exc,
                )
            else:
                self.sent += len(payloads)
                return
        # The other processes' pages read these turns' replies from the store.

    async def _received(self, payload: str) -> None:
        self._inbox.put_nowait(payload)

    async def _received_reply(self, payload: str) -> None:
        # Sent by the reply's own transaction (repo.finish_turn) on commit, so before
        # the batch that carries the reply's last deltas and its REPLY event: held
        # back a moment, then queued; it counts only when that batch never came
        # (its process died in between), so the pages see deltas, then the reply.
        loop = asyncio.get_running_loop()
        loop.call_later(REPLIED_GRACE_S, self._inbox.put_nowait, _REPLIED_MARK + payload)

    async def _deliver_loop(self) -> None:
        # One consumer: events reach the pages in the order they were sent.
        while True:
            payload = await self._inbox.get()
            try:
                await self._deliver(payload)
            except Exception:
                log.exception("fan-out: could not deliver %.200s", payload)

    async def _deliver(self, payload: str) -> None:
        nudge = False
        if payload.startswith(_REPLIED_MARK):
            origin, event = replied_event(payload[len(_REPLIED_MARK) :])
            fetch = not event.text
        else:
            origin, event, fetch, nudge = decode(payload)
        if origin == self.origin:
            return
        self.received += 1
        key = (event.conversation_id, event.message_id)
        if event.kind is TurnEventKind.REPLY and event.reply_id is not None:
            # A reply comes twice (its transaction's notification, the batch's): once
            # to the pages. A delta that comes after it is late, and dropped.
            if event.reply_id in self._replied:
                return
            self._replied[event.reply_id] = None
            self._answered[key] = None
            while len(self._replied) > KEPT:
                self._replied.pop(next(iter(self._replied)))
            while len(self._answered) > KEPT:
                self._answered.pop(next(iter(self._answered)))
        elif event.kind is TurnEventKind.DELTA and key in self._answered:
            return
        if event.kind in _CLOSING:
            self._open.pop(key, None)
        else:
            self._open[key] = None
        if fetch:
            event = await self._with_stored_text(event)
        await self.hub.deliver(event)
        if nudge and self.on_remote_message is not None:
            self.on_remote_message(event.conversation_id)

    async def _with_stored_text(self, event: TurnEvent) -> TurnEvent:
        def work(connection: Connection) -> tuple[str, str]:
            if event.kind is TurnEventKind.REPLY and event.reply_id is not None:
                row = connection.execute(select(Message.text).where(Message.id == event.reply_id))
                return str(row.scalar_one()), event.partial
            if event.kind is TurnEventKind.ERROR:
                partial = connection.execute(
                    select(Turn.partial_text).where(Turn.inbound_message_id == event.message_id)
                ).scalar_one_or_none()
                return event.text, partial or ""
            row = connection.execute(select(Message.text).where(Message.id == event.message_id))
            return str(row.scalar_one()), event.partial

        text, partial = await self.store.read(work)
        return TurnEvent(
            event.kind,
            event.conversation_id,
            event.message_id,
            text=text,
            reply_id=event.reply_id,
            code=event.code,
            client_id=event.client_id,
            created_at=event.created_at,
            partial=partial,
            waited_s=event.waited_s,
        )

    async def _heal(self) -> None:
        """After the LISTEN connection was down: the ends of remote turns it may have
        missed, from the store."""
        keys = list(self._open)
        if not keys:
            return
        message_ids = [message_id for _conversation, message_id in keys]

        def work(connection: Connection) -> list[Any]:
            return list(
                connection.execute(
                    select(
                        Turn.conversation_id,
                        Turn.inbound_message_id,
                        Turn.status,
                        Turn.error_code,
                        Turn.partial_text,
                        Message.id,
                        Message.text,
                        Message.created_at,
                    )
                    .outerjoin(Message, Message.id == Turn.reply_message_id)
                    .where(Turn.inbound_message_id.in_(message_ids))
                ).all()
            )

        for row in await self.store.read(work):
            conversation_id, message_id, status, code, partial, reply_id, text, created = row
            if status is TurnStatus.REPLIED and reply_id is not None:
                event = TurnEvent(
                    TurnEventKind.REPLY,
                    conversation_id,
                    message_id,
                    text=text,
                    reply_id=reply_id,
                    created_at=created,
                )
            elif status is TurnStatus.FAILED:
                event = TurnEvent(
                    TurnEventKind.ERROR,
                    conversation_id,
                    message_id,
                    text="this message failed; it is saved",
                    code=code or "",
                    partial=partial or "",
                )
            else:
                continue
            self._open.pop((conversation_id, message_id), None)
            await self.hub.deliver(event)
