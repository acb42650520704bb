"""The observer as an extractor of the upkeep calendar (issue 21): its backlog, read now.

The observer reads a conversation once its unread messages reach a token
threshold, so what was said last before a stop, a crash or a long silence can
stay unread. ``observer_extractor(loop)`` is what the nightly catch-up and the
session flush call (``memory.jobs.base.Extractor``): for one person or for
everyone, every conversation with messages past the observer's cursor gets a
forced pass now; it returns how many messages were read. Each pass runs as a
task of the persona loop (``PersonaLoop.observe_now``), so a shutdown waits for
it like any other.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable

from sqlalchemy import Select, bindparam, func, select

from gateway.store import Store
from gateway.store.models import Conversation, Message
from memory.jobs.base import Extractor
from persona.loop import PersonaLoop
from persona.models import ObserveCursor


@functools.cache
def _behind(of_person: bool, before: bool) -> Select[int, int]:
    """The statement of ``conversations_behind``, built once per shape (a session's
    first turn asks; issue 28, "CPU per turn"): its values bound at execution."""
    messages = select(Message.conversation_id, func.max(Message.id).label("newest"))
    if before:
        messages = messages.where(Message.id < bindparam("before_message_id"))
    newest = messages.group_by(Message.conversation_id).subquery()
    query = (
        select(Conversation.id, Conversation.person_id)
        .join(newest, newest.c.conversation_id == Conversation.id)
        .outerjoin(ObserveCursor, ObserveCursor.conversation_id == Conversation.id)
        .where(newest.c.newest > func.coalesce(ObserveCursor.observed_through_message_id, 0))
        .order_by(Conversation.id)
    )
    if of_person:
        query = query.where(Conversation.person_id == bindparam("person_id"))
    return query


async def conversations_behind(
    store: Store, person_id: int | None, before_message_id: int | None = None
) -> list[tuple[int, int]]:
    """(conversation, person) of every conversation with messages the observer has not
    read (older than ``before_message_id`` when given), of one person or everyone;
    oldest conversation first."""
    query = _behind(person_id is not None, before_message_id is not None)
    params = {"person_id": person_id, "before_message_id": before_message_id}
    # Plain reads on a reader thread: one hop (issue 28, "CPU per turn").
    return await store.read(
        lambda connection: [(int(c), int(p)) for c, p in connection.execute(query, params).all()]
    )


def observer_behind(loop: PersonaLoop) -> Callable[[int, int], Awaitable[bool]]:
    """Whether a person has messages older than a given one the observer has not read
    (a new session's catch-up runs only then)."""

    async def behind(person_id: int, before_message_id: int) -> bool:
        if not loop.observe_enabled:
            return False
        return bool(await conversations_behind(loop.store, person_id, before_message_id))

    return behind


def observer_extractor(loop: PersonaLoop) -> Extractor:
    """The observe pass over every backlog of one person (or everyone), as an extractor."""

    async def extract(person_id: int | None) -> int:
        if not loop.observe_enabled:
            return 0
        read = 0
        for conversation_id, owner in await conversations_behind(loop.store, person_id):
            result = await loop.observe_now(conversation_id, owner)
            if result is not None:
                read += result.observed_messages
        return read

    return extract
