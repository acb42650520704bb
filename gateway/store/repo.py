"""The queries of the core, each one short transaction on the Store."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.errors import StoreError
from gateway.store.db import Store
from gateway.store.models import (
    AccessRefusal,
    Conversation,
    Identity,
    Message,
    MessageRole,
    Person,
    Turn,
    TurnStatus,
    utcnow,
)
from gateway.tokens import estimate_tokens


@dataclass(frozen=True)
class Address:
    """Who is speaking, resolved: the person, their identity and conversation."""

    person_id: int
    identity_id: int
    conversation_id: int
    channel: str


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


async def resolve_address(
    store: Store, channel: str, external_id: str, display_name: str = ""
) -> Address:
    """The person, identity and conversation for a sender, created on first contact."""
    async with store.session() as session:
        found = await _find_address(session, channel, external_id)
        if found is not None:
            return found
    try:
        async with store.session() as session:
            person = Person(display_name=display_name)
            session.add(person)
            await session.flush()
            identity = Identity(
                person_id=person.id,
                channel=channel,
                external_id=external_id,
                display_name=display_name,
            )
            session.add(identity)
            await session.flush()
            conversation = Conversation(
                person_id=person.id, identity_id=identity.id, channel=channel
            )
            session.add(conversation)
            await session.flush()
            return Address(person.id, identity.id, conversation.id, channel)
    except StoreError as exc:  # a concurrent first contact won the insert
        if not isinstance(exc.__cause__, IntegrityError):
            raise
    async with store.session() as session:
        found = await _find_address(session, channel, external_id)
    if found is None:
        raise LookupError(f"identity {channel}:{external_id} vanished")
    return found


async def _find_address(session: AsyncSession, channel: str, external_id: str) -> Address | None:
    row = (
        await session.execute(
            select(Identity.person_id, Identity.id, Conversation.id)
            .join(Conversation, Conversation.identity_id == Identity.id)
            .where(Identity.channel == channel, Identity.external_id == external_id)
        )
    ).first()
    if row is None:
        return None
    return Address(row[0], row[1], row[2], channel)


async def store_inbound(
    store: Store,
    address: Address,
    text: str,
    received_at: datetime,
    client_id: str | None,
) -> StoredInbound:
    """Store the message and its turn in one transaction, or find the earlier copy."""
    if client_id is not None:
        earlier = await find_by_client_id(store, address, client_id)
        if earlier is not None:
            return earlier
    async with store.session() as session:
        message = Message(
            conversation_id=address.conversation_id,
            person_id=address.person_id,
            role=MessageRole.USER,
            channel=address.channel,
            text=text,
            client_id=client_id,
            tokens=estimate_tokens(text),
            created_at=received_at,
        )
        session.add(message)
        await session.flush()
        turn = Turn(
            conversation_id=address.conversation_id,
            inbound_message_id=message.id,
            status=TurnStatus.RECEIVED,
            received_at=received_at,
            context_tokens={},
        )
        session.add(turn)
        await session.flush()
        await session.execute(
            update(Conversation)
            .where(Conversation.id == address.conversation_id)
            .values(updated_at=received_at)
        )
        return StoredInbound(
            address=address,
            message_id=message.id,
            turn_id=turn.id,
            text=text,
            created_at=received_at,
            client_id=client_id,
            duplicate=False,
            status=TurnStatus.RECEIVED,
        )


async def find_by_client_id(store: Store, address: Address, client_id: str) -> StoredInbound | None:
    async with store.session() as session:
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


async def start_turn(
    store: Store, turn_id: int, conversation_id: int, before_message_id: int, limit: int
) -> list[Message]:
    """Mark the turn generating and read the history before its message, oldest first."""
    async with store.session() as session:
        await session.execute(
            update(Turn)
            .where(Turn.id == turn_id)
            .values(status=TurnStatus.GENERATING, started_at=utcnow())
        )
        rows = (
            await session.scalars(
                select(Message)
                .where(
                    Message.conversation_id == conversation_id,
                    Message.id < before_message_id,
                )
                .order_by(Message.id.desc())
                .limit(limit)
            )
        ).all()
    return list(reversed(rows))


async def finish_turn(
    store: Store,
    inbound: StoredInbound,
    reply_text: str,
    values: dict[str, Any],
) -> Message:
    """Store the reply and close the turn as replied, in one transaction."""
    now = utcnow()
    async with store.session() as session:
        reply = Message(
            conversation_id=inbound.address.conversation_id,
            person_id=inbound.address.person_id,
            role=MessageRole.ASSISTANT,
            channel=inbound.address.channel,
            text=reply_text,
            tokens=values.get("output_tokens") or estimate_tokens(reply_text),
            created_at=now,
        )
        session.add(reply)
        await session.flush()
        await session.execute(
            update(Turn)
            .where(Turn.id == inbound.turn_id)
            .values(
                status=TurnStatus.REPLIED,
                reply_message_id=reply.id,
                finished_at=now,
                **values,
            )
        )
        await session.execute(
            update(Conversation)
            .where(Conversation.id == inbound.address.conversation_id)
            .values(updated_at=now)
        )
        return reply


async def fail_turn(
    store: Store, turn_id: int, code: str, message: str, values: dict[str, Any] | None = None
) -> None:
    async with store.session() as session:
        await session.execute(
            update(Turn)
            .where(Turn.id == turn_id)
            .values(
                status=TurnStatus.FAILED,
                error_code=code,
                error_message=message,
                finished_at=utcnow(),
                **(values or {}),
            )
        )


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
                started_at=None,
                finished_at=None,
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


async def record_turn_values(store: Store, turn_id: int, values: dict[str, Any]) -> None:
    async with store.session() as session:
        await session.execute(update(Turn).where(Turn.id == turn_id).values(**values))


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


@dataclass(frozen=True)
class HistoryEntry:
    message_id: int
    role: MessageRole
    text: str
    channel: str
    created_at: datetime
    client_id: str | None
    # For user messages: the state of their turn.
    status: TurnStatus | None = None
    error_code: str | None = None
    reply_to: int | None = None


async def conversation_history(
    store: Store, conversation_id: int, *, after_id: int = 0, limit: int = 100
) -> list[HistoryEntry]:
    """Messages of a conversation for a (re)connecting page, oldest first."""
    async with store.session() as session:
        messages = (
            await session.scalars(
                select(Message)
                .where(Message.conversation_id == conversation_id, Message.id > after_id)
                .order_by(Message.id.desc())
                .limit(limit)
            )
        ).all()
        ids = [m.id for m in messages]
        turns = (
            await session.scalars(
                select(Turn).where(
                    (Turn.inbound_message_id.in_(ids)) | (Turn.reply_message_id.in_(ids))
                )
            )
        ).all()
    by_inbound = {t.inbound_message_id: t for t in turns}
    by_reply = {t.reply_message_id: t for t in turns if t.reply_message_id is not None}
    entries = []
    for m in reversed(messages):
        turn = by_inbound.get(m.id)
        replied = by_reply.get(m.id)
        entries.append(
            HistoryEntry(
                message_id=m.id,
                role=m.role,
                text=m.text,
                channel=m.channel,
                created_at=m.created_at,
                client_id=m.client_id,
                status=turn.status if turn else None,
                error_code=turn.error_code if turn else None,
                reply_to=replied.inbound_message_id if replied else None,
            )
        )
    return entries


async def count_refusal(store: Store, channel: str, external_id: str) -> int:
    """Count one refused message from a stranger; returns their count so far."""
    async with store.session() as session:
        refusal = await session.get(AccessRefusal, (channel, external_id))
        if refusal is None:
            session.add(AccessRefusal(channel=channel, external_id=external_id, count=1))
            return 1
        refusal.count += 1
        return refusal.count
