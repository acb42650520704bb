"""The ``focus_entries`` and ``decisions`` tables (migration 0023).

Both are append-only: a focus is set, updated and cleared by new rows (the newest
``set`` not followed by a ``clear`` is the focus); a decision is never edited, a
later one that reverses it names it in ``reverses_id``.
"""

from __future__ import annotations

import enum
from datetime import datetime

from sqlalchemy import JSON, Enum, ForeignKey, Index, Text
from sqlalchemy.orm import Mapped, mapped_column

from gateway.store.models import Base, utcnow


def _enum(kind: type[enum.StrEnum]) -> Enum:
    return Enum(
        kind,
        native_enum=False,
        length=16,
        values_callable=lambda members: [m.value for m in members],
    )


class FocusAction(enum.StrEnum):
    # A new focus: replaces the one before.
    SET = "set"
    # A timestamped note on the current focus; touching it keeps it from fading.
    UPDATE = "update"
    # No focus from here on.
    CLEAR = "clear"


class Origin(enum.StrEnum):
    CHAT = "chat"
    PANEL = "panel"
    CLI = "cli"
    # The model's own tool call (memory/tools.py).
    MODEL = "model"


class FocusEntry(Base):
    __tablename__ = "focus_entries"
    # The current focus: a person's newest rows.
    __table_args__ = (Index("ix_focus_entries_person", "person_id", "id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    person_id: Mapped[int] = mapped_column(ForeignKey("people.id", ondelete="CASCADE"))
    action: Mapped[FocusAction] = mapped_column(_enum(FocusAction))
    text: Mapped[str] = mapped_column(Text, default="")
    origin: Mapped[Origin] = mapped_column(_enum(Origin))
    source_message_id: Mapped[int | None] = mapped_column(
        ForeignKey("messages.id", ondelete="SET NULL"), default=None
    )
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Decision(Base):
    __tablename__ = "decisions"
    __table_args__ = (Index("ix_decisions_person", "person_id", "id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    person_id: Mapped[int] = mapped_column(ForeignKey("people.id", ondelete="CASCADE"))
    text: Mapped[str] = mapped_column(Text)
    tags: Mapped[list[str]] = mapped_column(JSON, default=list)
    origin: Mapped[Origin] = mapped_column(_enum(Origin))
    source_message_id: Mapped[int | None] = mapped_column(
        ForeignKey("messages.id", ondelete="SET NULL"), default=None
    )
    # The earlier decision this one reverses (that row is never changed).
    reverses_id: Mapped[int | None] = mapped_column(
        ForeignKey("decisions.id", ondelete="SET NULL"), default=None
    )
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
