"""The core's message types: what a channel hands the gateway, and what it gets back.

A channel turns its native events into ``Inbound`` and subscribes to the
``TurnEvent``s of the conversations it serves; it knows nothing of memory or
prompts. They live in the core (not in ``channels/``) so the router, the hub and
the pipeline never import a channel (docs/DESIGN.md, "Layers").
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class Inbound:
    """One message from a person.

    ``sender`` is the person's id on the channel (a webchat session id, a
    Telegram user id); ``client_id`` lets a client resend without the
    message being processed twice.
    """

    channel: str
    sender: str
    text: str
    received_at: datetime
    client_id: str | None = None
    display_name: str = ""


class TurnEventKind(enum.StrEnum):
    MESSAGE = "message"  # the inbound message was stored (for other open pages)
    DELTA = "delta"
    REPLY = "reply"
    ERROR = "error"
    WAITING = "waiting"  # the model has not sent its first token yet
    TOOL = "tool"  # the model called a tool: ``text`` is the "looked up …" line


@dataclass(frozen=True)
class TurnEvent:
    """Something that happened to a turn, published to its conversation.

    ``message_id`` is the inbound message; ``reply_id`` the stored reply
    (REPLY only); ``code`` the error code (ERROR only); ``partial`` the text
    streamed before a reply broke off, kept with the failed turn (ERROR only);
    ``waited_s`` how long the model has been silent (WAITING only). A TOOL event's
    ``text`` is the line shown for one tool call, its ``code`` "error" when it failed.
    """

    kind: TurnEventKind
    conversation_id: int
    message_id: int
    text: str = ""
    reply_id: int | None = None
    code: str = ""
    client_id: str | None = None
    created_at: datetime | None = None
    partial: str = ""
    waited_s: float = 0.0
