"""A turn's rows: the inbound message and its turn, the turn started (its history and
number), the reply or the failure, a retry; and a cluster claim's guard.

Part of the core's queries (``gateway.store.repo``): each one short transaction
on the Store.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Integer, bindparam, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from gateway.errors import StoreError
from gateway.store.addresses import Address
from gateway.store.db import Store
from gateway.store.models import (
    Conversation,
    Message,
    MessageRole,
    Turn,
    TurnStatus,
    utcnow,
)
from gateway.store.notify import notify
from gateway.tokens import estimate_tokens


@dataclass(frozen=True)
class StoredInbound:
    address: Address
    message_id: int
    turn_id: int
    text: str
    created_at: datetime
    client_id: str | None
    # True when the client_id had been seen: nothing new was stored.
    duplicate: bool
    status: TurnStatus
    reply_id: int | None = None
    reply_text: str | None = None
    error_code: str | None = None
    # In a cluster: the process whose claim runs this turn (gateway/store/claims.py);
    # its reply or failure is written only while the claim is still its own.
    claimed_by: str | None = None


class ClaimLost(StoreError):
    """The turn's claim expired and another process took it: this answer is not written."""

    code = "claim_lost"


_CLAIM_HOLDER = select(Turn.claimed_by).where(Turn.id == bindparam("b_turn_id")).with_for_update()


def hold_claim(connection: Connection, turn_id: int, owner: str | None) -> None:
    """Inside a write: raise ``ClaimLost`` unless ``owner`` still holds the turn's claim
    (None: no cluster, nothing to check). The row stays locked to the commit, so a
    claim cannot change hands between this check and the write it guards."""
    if owner is None:
        return
    holder = connection.execute(_CLAIM_HOLDER, {"b_turn_id": turn_id}).scalar_one_or_none()
    if holder != owner:
        raise ClaimLost(f"turn {turn_id} is now claimed by {holder!r}, not {owner!r}")


# A claimed turn's reply, told to every process of the cluster when it commits
# (gateway/fanout.py): never lost with a process that dies right after storing it.
REPLIED_CHANNEL = "agentgw_turn_replied"
# The reply's text rides along when it fits; else the receivers read it back.
_REPLIED_TEXT_BYTES = 7000


def replied_payload(
    owner: str,
    conversation_id: int,
    message_id: int,
    reply_id: int,
    created_at: datetime,
    text: str,
) -> str:
    payload: dict[str, Any] = {
        "o": owner,
        "c": conversation_id,
        "m": message_id,
        "r": reply_id,
        "a": created_at.isoformat(),
    }
    if len(text.encode()) <= _REPLIED_TEXT_BYTES:
        payload["t"] = text
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"))


# The turn's hot path: statements built once (their compiled form is cached),
# values passed at execution; ``update`` takes its SET columns from the values.
_INSERT_MESSAGE = insert(Message).returning(Message.id)
_INSERT_TURN = insert(Turn).returning(Turn.id)
_UPDATE_TURN = update(Turn).where(Turn.id == bindparam("b_turn_id"))
_TOUCH_CONVERSATION = update(Conversation).where(Conversation.id == bindparam("b_conversation_id"))
_QUEUED_MESSAGES = select(Turn.inbound_message_id).where(
    Turn.conversation_id == bindparam("b_conversation_id"),
    Turn.status == TurnStatus.RECEIVED,
)
_HISTORY = (
    select(Message.id, Message.role, Message.text, Message.tokens, Message.created_at)
    .where(
        Message.conversation_id == bindparam("b_conversation_id"),
        Message.id != bindparam("b_message_id"),
        Message.id.not_in(_QUEUED_MESSAGES),
    )
    .order_by(Message.id.desc())
    .limit(bindparam("b_limit", type_=Integer))
)


# This turn's place in its conversation: 1 for the first.
_TURN_NUMBER = (
    select(func.count())
    .select_from(Turn)
    .where(
        Turn.conversation_id == bindparam("b_conversation_id"),
        Turn.id <= bindparam("b_turn_id"),
    )
)


def _update_turn(connection: Connection, turn_id: int, values: Mapping[str, Any]) -> None:
    if values:
        connection.execute(_UPDATE_TURN, {"b_turn_id": turn_id, **values})


def _write_values(connection: Connection, pending: Mapping[int, Mapping[str, Any]] | None) -> None:
    for turn_id, values in (pending or {}).items():
        _update_turn(connection, turn_id, values)


async def store_inbound(
    store: Store,
    address: Address,
    text: str,
    received_at: datetime,
    client_id: str | None,
) -> StoredInbound:
    """Store the message and its turn in one transaction, or find the earlier copy.

    The insert comes first: a ``client_id`` already stored (a resend, or the
    same message from two connections at once) breaks the unique constraint
    and is answered with the stored copy, so the common case costs one
    transaction and a race between two connections cannot fail either.
    """

    def work(connection: Connection) -> tuple[int, int]:
        message_id = connection.execute(
            _INSERT_MESSAGE,
            {
                "conversation_id": address.conversation_id,
                "person_id": address.person_id,
                "role": MessageRole.USER,
                "channel": address.channel,
                "text": text,
                "client_id": client_id,
                "tokens": estimate_tokens(text),
                "created_at": received_at,
            },
        ).scalar_one()
        turn_id = connection.execute(
            _INSERT_TURN,
            {
                "conversation_id": address.conversation_id,
                "inbound_message_id": message_id,
                "status": TurnStatus.RECEIVED,
                "received_at": received_at,
                "context_tokens": {},
            },
        ).scalar_one()
        connection.execute(
            _TOUCH_CONVERSATION,
            {"b_conversation_id": address.conversation_id, "updated_at": received_at},
        )
        return int(message_id), int(turn_id)

    try:
        message_id, turn_id = await store.write(work)
    except StoreError as exc:
        if client_id is None or not isinstance(exc.__cause__, IntegrityError):
            raise
        earlier = await find_by_client_id(store, address, client_id)
        if earlier is None:
            # Some other constraint failed: that is a real error.
            raise
        return earlier
    return StoredInbound(
        address=address,
        message_id=message_id,
        turn_id=turn_id,
        text=text,
        created_at=received_at,
        client_id=client_id,
        duplicate=False,
        status=TurnStatus.RECEIVED,
    )


async def find_by_client_id(store: Store, address: Address, client_id: str) -> StoredInbound | None:
    async with store.reader() as session:
        row = (
            await session.execute(
                select(Message, Turn)
                .join(Turn, Turn.inbound_message_id == Message.id)
                .where(
                    Message.conversation_id == address.conversation_id,
                    Message.client_id == client_id,
                )
            )
        ).first()
        if row is None:
            return None
        message, turn = row
        reply_text = None
        if turn.reply_message_id is not None:
            reply = await session.get(Message, turn.reply_message_id)
            reply_text = reply.text if reply is not None else None
        return StoredInbound(
            address=address,
            message_id=message.id,
            turn_id=turn.id,
            text=message.text,
            created_at=message.created_at,
            client_id=client_id,
            duplicate=True,
            status=turn.status,
            reply_id=turn.reply_message_id,
            reply_text=reply_text,
            error_code=turn.error_code,
        )


@dataclass(frozen=True)
class PastRow:
    """One message of a conversation's history, as a turn's prompt needs it."""

    id: int
    role: MessageRole
    text: str
    tokens: int
    created_at: datetime


async def start_turn(
    store: Store,
    turn_id: int,
    conversation_id: int,
    message_id: int,
    limit: int,
    pending_values: Mapping[int, Mapping[str, Any]] | None = None,
) -> TurnStart:
    """Mark the turn generating and read its history, oldest first, and its number.

    The history is every message of the conversation stored so far except
    this one and the user messages whose turns still wait in the queue: the
    reply to the previous message is in it even when this message arrived
    before that reply was stored. ``pending_values`` are turn columns the
    pipeline measured after an earlier turn's last write, written here too.
    """

    def work(connection: Connection) -> TurnStart:
        _update_turn(connection, turn_id, {"status": TurnStatus.GENERATING, "started_at": utcnow()})
        _write_values(connection, pending_values)
        rows = connection.execute(
            _HISTORY,
            {"b_conversation_id": conversation_id, "b_message_id": message_id, "b_limit": limit},
        ).all()
        number = connection.execute(
            _TURN_NUMBER, {"b_conversation_id": conversation_id, "b_turn_id": turn_id}
        ).scalar_one()
        return TurnStart([PastRow(r[0], r[1], r[2], r[3], r[4]) for r in reversed(rows)], number)

    return await store.write(work)


@dataclass(frozen=True)
class TurnStart:
    """What ``start_turn`` read: the history (oldest first) and the turn's number."""

    history: list[PastRow]
    turn_number: int


@dataclass(frozen=True)
class StoredReply:
    id: int
    text: str
    created_at: datetime


async def replied_by(store: Store, conversation_id: int, brain: str, before_turn_id: int) -> bool:
    """Whether ``brain`` replied to an earlier turn of this conversation."""
    query = (
        select(Turn.id)
        .where(
            Turn.conversation_id == conversation_id,
            Turn.brain == brain,
            Turn.status == TurnStatus.REPLIED,
            Turn.id < before_turn_id,
        )
        .limit(1)
    )
    async with store.reader() as session:
        return (await session.scalar(query)) is not None


async def finish_turn(
    store: Store,
    inbound: StoredInbound,
    reply_text: str,
    values: dict[str, Any],
    pending_values: Mapping[int, Mapping[str, Any]] | None = None,
) -> StoredReply:
    """Store the reply and close the turn as replied, in one transaction.

    ``pending_values``: as for ``start_turn``.
    """
    now = utcnow()
    address = inbound.address

    def work(connection: Connection) -> int:
        hold_claim(connection, inbound.turn_id, inbound.claimed_by)
        reply_id = connection.execute(
            _INSERT_MESSAGE,
            {
                "conversation_id": address.conversation_id,
                "person_id": address.person_id,
                "role": MessageRole.ASSISTANT,
                "channel": address.channel,
                "text": reply_text,
                "client_id": None,
                "tokens": values.get("output_tokens") or estimate_tokens(reply_text),
                "created_at": now,
            },
        ).scalar_one()
        _update_turn(
            connection,
            inbound.turn_id,
            {
                **values,
                "status": TurnStatus.REPLIED,
                "reply_message_id": reply_id,
                "finished_at": now,
            },
        )
        connection.execute(
            _TOUCH_CONVERSATION, {"b_conversation_id": address.conversation_id, "updated_at": now}
        )
        _write_values(connection, pending_values)
        if inbound.claimed_by is not None:
            notify(
                connection,
                REPLIED_CHANNEL,
                replied_payload(
                    inbound.claimed_by,
                    address.conversation_id,
                    inbound.message_id,
                    int(reply_id),
                    now,
                    reply_text,
                ),
            )
        return int(reply_id)

    return StoredReply(await store.write(work), reply_text, now)


async def fail_turn(
    store: Store,
    turn_id: int,
    code: str,
    message: str,
    values: dict[str, Any] | None = None,
    partial_text: str | None = None,
    claimed_by: str | None = None,
) -> None:
    """Close the turn as failed; ``partial_text``: what its broken reply had streamed.

    ``claimed_by``: the cluster claim the failure is written under (``ClaimLost``
    when another process holds the turn now)."""

    def work(connection: Connection) -> None:
        hold_claim(connection, turn_id, claimed_by)
        _update_turn(
            connection,
            turn_id,
            {
                **(values or {}),
                "status": TurnStatus.FAILED,
                "error_code": code,
                "error_message": message,
                "partial_text": partial_text,
                "finished_at": utcnow(),
            },
        )

    await store.write(work)


async def reopen_failed_turn(
    store: Store, address: Address, message_id: int
) -> StoredInbound | None:
    """Put a failed turn of this conversation back to received; None if it is not one.

    The status check is part of the UPDATE, so two retries racing for the same
    turn reopen it once.
    """
    async with store.session() as session:
        result = await session.execute(
            update(Turn)
            .where(
                Turn.conversation_id == address.conversation_id,
                Turn.inbound_message_id == message_id,
                Turn.status == TurnStatus.FAILED,
            )
            .values(
                status=TurnStatus.RECEIVED,
                error_code=None,
                error_message=None,
                partial_text=None,
                started_at=None,
                finished_at=None,
                # A cluster claim of the failed run must not hold the retry back.
                claimed_by=None,
                claim_until=None,
            )
        )
        if not getattr(result, "rowcount", 0):
            return None
        row = (
            await session.execute(
                select(Message, Turn.id)
                .join(Turn, Turn.inbound_message_id == Message.id)
                .where(Message.id == message_id)
            )
        ).one()
        message, turn_id = row
        return StoredInbound(
            address=address,
            message_id=message.id,
            turn_id=turn_id,
            text=message.text,
            created_at=message.created_at,
            client_id=message.client_id,
            duplicate=False,
            status=TurnStatus.RECEIVED,
        )


async def record_turn_values(store: Store, values: Mapping[int, Mapping[str, Any]]) -> None:
    """Columns of several turns (timings measured after their last write), one transaction."""

    def work(connection: Connection) -> None:
        _write_values(connection, values)

    await store.write(work)


async def fail_unfinished_turns(store: Store) -> int:
    """At start: turns a previous process left received or generating become failed."""
    async with store.session() as session:
        result = await session.execute(
            update(Turn)
            .where(Turn.status.in_([TurnStatus.RECEIVED, TurnStatus.GENERATING]))
            .values(
                status=TurnStatus.FAILED,
                error_code="interrupted",
                error_message="the gateway stopped before this turn was answered",
                finished_at=utcnow(),
            )
        )
        return int(getattr(result, "rowcount", 0) or 0)
