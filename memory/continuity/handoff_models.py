"""The ``handoffs`` and ``profiles`` tables (migration 0026).

Both are append-only: the newest row is the one in force, an edit (panel, CLI) is
a new row, so what the agent was told at any time can be read back.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from gateway.store.models import Base, utcnow


class Handoff(Base):
    """A session's handoff note: what was discussed, what is open, what comes next."""

    __tablename__ = "handoffs"
    __table_args__ = (Index("ix_handoffs_person", "person_id", "id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    person_id: Mapped[int] = mapped_column(ForeignKey("people.id", ondelete="CASCADE"))
    # The conversation (so the channel) the session was in; None when written by hand.
    conversation_id: Mapped[int | None] = mapped_column(
        ForeignKey("conversations.id", ondelete="SET NULL"), default=None
    )
    text: Mapped[str] = mapped_column(Text)
    # "extractive", the utility model's name, "cli" or "panel".
    method: Mapped[str] = mapped_column(String(100))
    # The newest message the note covers: the next session's note starts after it.
    through_message_id: Mapped[int | None] = mapped_column(Integer, default=None)
    tokens: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Profile(Base):
    """One version of a person's curated profile ("what I know about you")."""

    __tablename__ = "profiles"
    __table_args__ = (Index("ix_profiles_person", "person_id", "id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    person_id: Mapped[int] = mapped_column(ForeignKey("people.id", ondelete="CASCADE"))
    # [{"text": ..., "sources": ["summary:12", "observation:40", ...]}, ...]
    lines: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    tokens: Mapped[int] = mapped_column(Integer, default=0)
    method: Mapped[str] = mapped_column(String(100), default="extractive")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
