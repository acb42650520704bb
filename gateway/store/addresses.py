"""Who is speaking: people, their identities and conversations, found or made on
first contact; and the count of refused strangers.

Part of the core's queries (``gateway.store.repo``): each one short transaction
on the Store.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, bindparam, insert, select
from sqlalchemy.exc import IntegrityError

from gateway.errors import StoreError
from gateway.store.db import Store
from gateway.store.models import AccessRefusal, Conversation, Identity, Person, utcnow


@dataclass(frozen=True)
class Address:
    """Who is speaking, resolved: the person, their identity and conversation."""

    person_id: int
    identity_id: int
    conversation_id: int
    channel: str


async def resolve_address(
    store: Store, channel: str, external_id: str, display_name: str = ""
) -> Address:
    """The person, identity and conversation for a sender, created on first contact."""
    found = await _find_address(store, channel, external_id)
    if found is not None:
        return found
    now = utcnow()

    def create(connection: Connection) -> Address:
        person_id = connection.execute(
            insert(Person).returning(Person.id),
            {"display_name": display_name, "created_at": now},
        ).scalar_one()
        identity_id = connection.execute(
            insert(Identity).returning(Identity.id),
            {
                "person_id": person_id,
                "channel": channel,
                "external_id": external_id,
                "display_name": display_name,
                "created_at": now,
            },
        ).scalar_one()
        conversation_id = connection.execute(
            insert(Conversation).returning(Conversation.id),
            {
                "person_id": person_id,
                "identity_id": identity_id,
                "channel": channel,
                "created_at": now,
                "updated_at": now,
            },
        ).scalar_one()
        return Address(int(person_id), int(identity_id), int(conversation_id), channel)

    try:
        return await store.write(create)
    except StoreError as exc:  # a concurrent first contact won the insert
        if not isinstance(exc.__cause__, IntegrityError):
            raise
    found = await _find_address(store, channel, external_id)
    if found is None:
        raise LookupError(f"identity {channel}:{external_id} vanished")
    return found


async def find_address(store: Store, channel: str, external_id: str) -> Address | None:
    """The sender's address if they were seen before; None for a new one (nothing is made)."""
    return await _find_address(store, channel, external_id)


# Every page that connects looks its sender up: built once, one hop (issue 28).
_ADDRESS = (
    select(Identity.person_id, Identity.id, Conversation.id)
    .join(Conversation, Conversation.identity_id == Identity.id)
    .where(
        Identity.channel == bindparam("channel"),
        Identity.external_id == bindparam("external_id"),
    )
)


async def _find_address(store: Store, channel: str, external_id: str) -> Address | None:
    params = {"channel": channel, "external_id": external_id}
    row = await store.read(lambda connection: connection.execute(_ADDRESS, params).first())
    if row is None:
        return None
    return Address(row[0], row[1], row[2], channel)


async def count_refusal(store: Store, channel: str, external_id: str) -> int:
    """Count one refused message from a stranger; returns their count so far."""
    async with store.session() as session:
        refusal = await session.get(AccessRefusal, (channel, external_id))
        if refusal is None:
            session.add(AccessRefusal(channel=channel, external_id=external_id, count=1))
            return 1
        refusal.count += 1
        return refusal.count
