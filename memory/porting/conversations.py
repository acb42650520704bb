"""Conversations from other tools, stored as messages and ingested like lived turns.

An importer (openclaw, chatgpt, claude) turns its files into
``SourceConversation``s; ``store_conversation`` keeps each as the conversation
of its own identity (channel ``import``, external id ``<source>:<its id>``),
its messages keyed by a stable source key (``messages.client_id``), in one
transaction; then the messages without an episode yet go through
``MemoryService.ingest``, as a turn's do. A second import finds every key and
adds nothing; an import stopped between the two steps ingests the rest next
time (resumable). Notes for review (an OpenClaw SOUL.md) are stored, not
ingested: they describe the agent, and only a person should adopt them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, insert, select
from sqlalchemy.engine import Connection, CursorResult

from gateway.store import Store
from gateway.store.models import Conversation, Identity, Message, MessageRole, Person
from memory import repo
from memory.errors import PortingError
from memory.state import Episode

CHANNEL = "import"


@dataclass(frozen=True)
class SourceMessage:
    # Stable across exports of the same source: a node id, a message uuid, file+line.
    key: str
    role: MessageRole
    text: str
    at: datetime
    speaker: str


@dataclass(frozen=True)
class SourceConversation:
    source: str
    key: str
    title: str
    messages: tuple[SourceMessage, ...]
    # Stored as messages, but not ingested into memory (see the module's docstring).
    review: bool = False


@dataclass(frozen=True)
class Stored:
    conversation_id: int
    added: int
    # Every message of the conversation: (message id, its source message).
    messages: tuple[tuple[int, SourceMessage], ...]


def new_id(result: CursorResult[Any]) -> int:
    """The id an INSERT gave its row."""
    key = result.inserted_primary_key
    if key is None:
        raise PortingError("the store gave no id to a new row")
    return int(key[0])


def _short(text: str, limit: int) -> str:
    """``text`` if it fits the column, else a stable digest of it."""
    if len(text) <= limit:
        return text
    return text[: limit - 41] + ":" + hashlib.sha1(text.encode()).hexdigest()


def _store(connection: Connection, person_id: int, conv: SourceConversation) -> Stored:
    external = _short(f"{conv.source}:{conv.key}", 200)
    identity_id = connection.execute(
        select(Identity.id).where(Identity.channel == CHANNEL, Identity.external_id == external)
    ).scalar()
    first = conv.messages[0].at if conv.messages else None
    if identity_id is None:
        identity_id = new_id(
            connection.execute(
                insert(Identity).values(
                    person_id=person_id,
                    channel=CHANNEL,
                    external_id=external,
                    display_name=_short(conv.title, 200),
                    **({"created_at": first} if first else {}),
                )
            )
        )
    conversation_id = connection.execute(
        select(Conversation.id).where(Conversation.identity_id == identity_id)
    ).scalar()
    if conversation_id is None:
        conversation_id = new_id(
            connection.execute(
                insert(Conversation).values(
                    person_id=person_id,
                    identity_id=identity_id,
                    channel=CHANNEL,
                    **({"created_at": first, "updated_at": conv.messages[-1].at} if first else {}),
                )
            )
        )
    known = dict(
        connection.execute(
            select(Message.client_id, Message.id).where(Message.conversation_id == conversation_id)
        ).all()
    )
    out, added = [], 0
    for message in conv.messages:
        client_id = _short(message.key, 100)
        message_id = known.get(client_id)
        if message_id is None:
            message_id = new_id(
                connection.execute(
                    insert(Message).values(
                        conversation_id=conversation_id,
                        person_id=person_id,
                        role=message.role,
                        channel=CHANNEL,
                        text=message.text,
                        client_id=client_id,
                        tokens=len(message.text) // 4,
                        created_at=message.at,
                    )
                )
            )
            known[client_id] = message_id
            added += 1
        out.append((int(message_id), message))
    return Stored(int(conversation_id), added, tuple(out))


async def store_conversation(store: Store, person_id: int, conv: SourceConversation) -> Stored:
    # A whole conversation's messages: alone, no turn's write waits for its commit.
    return await store.write(lambda c: _store(c, person_id, conv), alone=True)


def episodes_of(person_id: int, stored: Stored) -> list[Episode]:
    return [
        Episode(
            person_id=person_id,
            text=m.text,
            at=m.at,
            role=m.role.value,
            speaker=m.speaker,
            conversation_id=stored.conversation_id,
            message_id=message_id,
            channel=CHANNEL,
            source_ref=f"m{message_id}",
        )
        for message_id, m in stored.messages
    ]


async def not_ingested(store: Store, person_id: int, episodes: Sequence[Episode]) -> list[Episode]:
    known = await repo.existing_refs(store, person_id, [e.source_ref for e in episodes])
    return [e for e in episodes if e.source_ref not in known]


def _person(connection: Connection, wanted: int | None, name: str) -> int:
    if wanted is not None:
        if connection.execute(select(Person.id).where(Person.id == wanted)).first() is None:
            raise PortingError(f"no person {wanted} in the store (--person)")
        return wanted
    ids = list(connection.execute(select(Person.id).order_by(Person.id).limit(2)).scalars())
    if len(ids) == 1:
        return int(ids[0])
    if ids:
        count = connection.execute(select(func.count()).select_from(Person)).scalar()
        raise PortingError(f"the store holds {count} people: say whose memory this is (--person)")
    return new_id(connection.execute(insert(Person).values(display_name=name)))


async def person_for_import(store: Store, wanted: int | None, name: str) -> int:
    """``wanted``, or the store's one person, or (an empty store) a new person ``name``."""
    return await store.write(lambda c: _person(c, wanted, name))
