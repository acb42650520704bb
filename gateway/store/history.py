"""A conversation's messages as a (re)connecting page shows them: each with its turn's
state, a failed reply's partial text and a reply's tool lines.

Part of the core's queries (``gateway.store.repo``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import BindParameter, Connection, Integer, Row, bindparam, select

from gateway.store.db import Store
from gateway.store.models import Message, MessageRole, Turn, TurnStatus


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
    # For user messages whose turn failed mid-reply: the text it had streamed.
    partial_text: str | None = None
    # For replies: the "looked up …" lines of the memory tools the model called first
    # (line, failed), so a page that reconnects shows them as the live one did.
    tool_lines: tuple[tuple[str, bool], ...] = ()


def tool_lines(calls: list[dict[str, Any]] | None) -> tuple[tuple[str, bool], ...]:
    """The page's lines of a turn's stored tool calls (``turns.tool_calls``)."""
    return tuple(
        (str(call.get("line", "")), bool(call.get("error")))
        for call in calls or ()
        if isinstance(call, dict) and call.get("line")
    )


# Every page that connects reads these: built once, plain rows, one hop (issue 28).
_MESSAGES = (
    select(
        Message.id,
        Message.role,
        Message.text,
        Message.channel,
        Message.created_at,
        Message.client_id,
    )
    .where(
        Message.conversation_id == bindparam("conversation_id"),
        Message.id > bindparam("after_id"),
    )
    .order_by(Message.id.desc())
    .limit(bindparam("limit", type_=Integer))
)
_IDS: BindParameter[list[int]] = bindparam("ids", expanding=True)
_TURNS = select(
    Turn.inbound_message_id,
    Turn.reply_message_id,
    Turn.status,
    Turn.error_code,
    Turn.partial_text,
    Turn.tool_calls,
).where(Turn.inbound_message_id.in_(_IDS) | Turn.reply_message_id.in_(_IDS))


async def conversation_history(
    store: Store, conversation_id: int, *, after_id: int = 0, limit: int = 100
) -> list[HistoryEntry]:
    """Messages of a conversation for a (re)connecting page, oldest first."""
    params = {"conversation_id": conversation_id, "after_id": after_id, "limit": limit}

    def read(connection: Connection) -> tuple[list[Row[Any]], list[Row[Any]]]:
        messages: list[Row[Any]] = list(connection.execute(_MESSAGES, params))
        ids = [m.id for m in messages]
        return messages, list(connection.execute(_TURNS, {"ids": ids})) if ids else []

    messages, turns = await store.read(read)
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
                partial_text=turn.partial_text if turn else None,
                tool_lines=tool_lines(replied.tool_calls) if replied else (),
            )
        )
    return entries
