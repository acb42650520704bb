"""Tables of the core: people, identities, conversations, messages, turns.

Times are stored as UTC and always come back timezone-aware (``UTCDateTime``),
whatever the backend keeps.
"""

from __future__ import annotations

import enum
import json
import zlib
from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    DateTime,
    Enum,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """A DateTime that refuses naive values and returns aware UTC ones."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the store; use timezone-aware UTC")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


class CompressedJSON(TypeDecorator[Any]):
    """JSON kept zlib-compressed: for large documents nobody queries inside.

    A pack's trace is ~33 KB of JSON with 130 candidates and ~3.3 KB compressed
    (0.6 ms more in the writer thread, 0.8 ms to read back). Rows written as
    plain JSON before (text in SQLite, its bytes in PostgreSQL after 0010) read
    as they were: zlib data starts with 0x78, JSON never does.
    """

    impl = LargeBinary
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> bytes | None:
        if value is None:
            return None
        return zlib.compress(json.dumps(value, separators=(",", ":")).encode("utf-8"))

    def process_result_value(self, value: Any, dialect: Dialect) -> Any:
        if value is None:
            return None
        if isinstance(value, str):
            return json.loads(value)
        data = bytes(value)
        return json.loads(zlib.decompress(data) if data[:1] == b"\x78" else data)


def _str_enum(enum_type: type[enum.StrEnum]) -> Enum:
    """Enum stored as its string values in a VARCHAR (no native type to migrate)."""
    return Enum(
        enum_type,
        native_enum=False,
        length=16,
        values_callable=lambda members: [m.value for m in members],
    )


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map: ClassVar[dict[Any, Any]] = {datetime: UTCDateTime, dict[str, Any]: JSON}


class MessageRole(enum.StrEnum):
    USER = "user"
    ASSISTANT = "assistant"


class TurnStatus(enum.StrEnum):
    RECEIVED = "received"
    GENERATING = "generating"
    REPLIED = "replied"
    FAILED = "failed"


class Person(Base):
    __tablename__ = "people"

    id: Mapped[int] = mapped_column(primary_key=True)
    display_name: Mapped[str] = mapped_column(String(200), default="")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # Their own IANA zone (a webchat page reports its browser's); empty: agent.timezone.
    timezone: Mapped[str] = mapped_column(String(64), default="", server_default="")

    identities: Mapped[list[Identity]] = relationship(back_populates="person")


class Identity(Base):
    """One address of a person on one channel (webchat session, Telegram user id)."""

    __tablename__ = "identities"
    __table_args__ = (UniqueConstraint("channel", "external_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    person_id: Mapped[int] = mapped_column(ForeignKey("people.id", ondelete="CASCADE"), index=True)
    channel: Mapped[str] = mapped_column(String(32))
    external_id: Mapped[str] = mapped_column(String(200))
    display_name: Mapped[str] = mapped_column(String(200), default="")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    person: Mapped[Person] = relationship(back_populates="identities")


class Conversation(Base):
    """The running conversation of one identity: conversations are per channel."""

    __tablename__ = "conversations"

    id: Mapped[int] = mapped_column(primary_key=True)
    person_id: Mapped[int] = mapped_column(ForeignKey("people.id", ondelete="CASCADE"), index=True)
    identity_id: Mapped[int] = mapped_column(
        ForeignKey("identities.id", ondelete="CASCADE"), unique=True
    )
    channel: Mapped[str] = mapped_column(String(32))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class Message(Base):
    __tablename__ = "messages"
    __table_args__ = (
        # A client resending the same message id is answered, not processed twice.
        UniqueConstraint("conversation_id", "client_id", name="uq_messages_client"),
        Index("ix_messages_conversation_created", "conversation_id", "id"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    conversation_id: Mapped[int] = mapped_column(ForeignKey("conversations.id", ondelete="CASCADE"))
    person_id: Mapped[int] = mapped_column(ForeignKey("people.id", ondelete="CASCADE"), index=True)
    role: Mapped[MessageRole] = mapped_column(_str_enum(MessageRole))
    channel: Mapped[str] = mapped_column(String(32))
    text: Mapped[str] = mapped_column(Text)
    client_id: Mapped[str | None] = mapped_column(String(100), default=None)
    tokens: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Turn(Base):
    """One inbound message and what the gateway did with it."""

    __tablename__ = "turns"

    id: Mapped[int] = mapped_column(primary_key=True)
    conversation_id: Mapped[int] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE"), index=True
    )
    inbound_message_id: Mapped[int] = mapped_column(
        ForeignKey("messages.id", ondelete="CASCADE"), unique=True
    )
    reply_message_id: Mapped[int | None] = mapped_column(
        ForeignKey("messages.id", ondelete="SET NULL"), default=None
    )
    status: Mapped[TurnStatus] = mapped_column(
        _str_enum(TurnStatus),
        default=TurnStatus.RECEIVED,
        index=True,
    )
    error_code: Mapped[str | None] = mapped_column(String(64), default=None)
    error_message: Mapped[str | None] = mapped_column(Text, default=None)
    # What a broken reply had streamed before it broke off (failed turns only).
    partial_text: Mapped[str | None] = mapped_column(Text, default=None)
    brain: Mapped[str] = mapped_column(String(32), default="")
    model: Mapped[str] = mapped_column(String(100), default="")
    input_tokens: Mapped[int] = mapped_column(Integer, default=0)
    output_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cache_read_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cache_write_tokens: Mapped[int] = mapped_column(Integer, default=0)
    # The prompt's parts by size, for the panel: {"persona": 210, "history": 1800, ...}
    context_tokens: Mapped[dict[str, Any]] = mapped_column(default=dict)
    # The gateway's own overhead: received -> brain called, brain done -> delivered.
    prepare_ms: Mapped[float | None] = mapped_column(default=None)
    brain_ms: Mapped[float | None] = mapped_column(default=None)
    deliver_ms: Mapped[float | None] = mapped_column(default=None)
    # Each stage of the turn, from its stage events (written after the after-turn
    # stages): [{"phase", "stage", "start_ms", "duration_ms", "code"?}, ...].
    stages: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON, default=None)
    # The model's tool calls (gateway/tools.py), in order: [{"name", "arguments",
    # "result", "line", "error", "ms"}, ...]; None for a turn without any.
    tool_calls: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON, default=None)
    received_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(default=None)
    finished_at: Mapped[datetime | None] = mapped_column(default=None)
    # A cluster's claim on the turn (gateway/store/claims.py): the process running
    # it and until when, renewed while it runs; null on SQLite (in-process lanes).
    claimed_by: Mapped[str | None] = mapped_column(String(64), default=None)
    claim_until: Mapped[datetime | None] = mapped_column(default=None)


class LinkCode(Base):
    """A one-time code that joins another channel's identity to this person.

    Only the SHA-256 of the code is kept; a code is live until ``expires_at``
    and until ``used_at`` is set.
    """

    __tablename__ = "link_codes"

    id: Mapped[int] = mapped_column(primary_key=True)
    person_id: Mapped[int] = mapped_column(ForeignKey("people.id", ondelete="CASCADE"), index=True)
    code_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime] = mapped_column()
    used_at: Mapped[datetime | None] = mapped_column(default=None)
    used_by_identity_id: Mapped[int | None] = mapped_column(
        ForeignKey("identities.id", ondelete="SET NULL"), default=None
    )


class LinkAttempt(Base):
    """Wrong link codes tried by one identity, to stop guessing."""

    __tablename__ = "link_attempts"

    identity_id: Mapped[int] = mapped_column(
        ForeignKey("identities.id", ondelete="CASCADE"), primary_key=True
    )
    failures: Mapped[int] = mapped_column(Integer, default=0)
    window_started_at: Mapped[datetime] = mapped_column(default=utcnow)


class AccessRefusal(Base):
    """How often a stranger was refused: the only thing kept about them."""

    __tablename__ = "access_refusals"

    channel: Mapped[str] = mapped_column(String(32), primary_key=True)
    external_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    count: Mapped[int] = mapped_column(Integer, default=0)


class StoreInfo(Base):
    """Facts about the database itself; ``store_id`` names it (migration 0009)."""

    __tablename__ = "store_info"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(String(200))
