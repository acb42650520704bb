"""How far the observer is behind (metrics, /readyz): unread messages per conversation.

A conversation always holds some unread messages — a pass runs once they reach
``observe.observer_tokens`` — so the numbers that matter are the totals (a
gauge) and the conversations past a much larger threshold, which only a failing
or starved observer leaves behind (``/readyz`` says degraded).
"""

from __future__ import annotations

from sqlalchemy import Connection, and_, func, select

from gateway.events import ObserverBacklog
from gateway.store.models import Message
from persona.models import ObserveCursor


def observer_backlog(connection: Connection, threshold_tokens: int) -> ObserverBacklog:
    """One grouped read: unread messages and tokens of each conversation."""
    unread = (
        select(Message.conversation_id, func.count(), func.coalesce(func.sum(Message.tokens), 0))
        .outerjoin(ObserveCursor, ObserveCursor.conversation_id == Message.conversation_id)
        .where(and_(Message.id > func.coalesce(ObserveCursor.observed_through_message_id, 0)))
        .group_by(Message.conversation_id)
    )
    messages = tokens = over = largest = 0
    for _conversation, count, size in connection.execute(unread):
        messages += int(count)
        tokens += int(size)
        largest = max(largest, int(size))
        if size >= threshold_tokens:
            over += 1
    return ObserverBacklog(messages, tokens, over, largest, threshold_tokens)
