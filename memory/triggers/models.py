"""The ``triggers`` table (migration 0020): one row per day ahead a message named."""

from __future__ import annotations

import enum
from datetime import date, datetime

from sqlalchemy import JSON, Date, Enum, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from gateway.store.models import Base, utcnow


class TriggerStatus(enum.StrEnum):
    # Its day has not come, or came with no turn of the person's yet.
    UPCOMING = "upcoming"
    # Its day came: shown in a Today block (or sent as a proactive message).
    FIRED = "fired"
    CANCELLED = "cancelled"


class Trigger(Base):
    __tablename__ = "triggers"
    __table_args__ = (
        # The Today stage: a person's triggers of one day.
        Index("ix_triggers_person_day", "person_id", "trigger_date"),
        # The proactive task: the triggers due and not yet sent.
        Index("ix_triggers_due", "trigger_date", "status"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    person_id: Mapped[int] = mapped_column(ForeignKey("people.id", ondelete="CASCADE"))
    # Where it was said: the proactive message goes back there.
    conversation_id: Mapped[int | None] = mapped_column(
        ForeignKey("conversations.id", ondelete="SET NULL"), default=None
    )
    channel: Mapped[str] = mapped_column(String(32), default="")
    message_id: Mapped[int | None] = mapped_column(
        ForeignKey("messages.id", ondelete="SET NULL"), default=None
    )
    # The day in the person's zone, and the words that named it ("next Friday").
    trigger_date: Mapped[date] = mapped_column(Date)
    phrase: Mapped[str] = mapped_column(String(100), default="")
    # The sentence that named the day, sanitised.
    context: Mapped[str] = mapped_column(Text, default="")
    # What the turn's Memory Pack held (its trace's kept ids).
    memory_ids: Mapped[list[int]] = mapped_column(JSON, default=list)
    status: Mapped[TriggerStatus] = mapped_column(
        Enum(
            TriggerStatus,
            native_enum=False,
            length=16,
            values_callable=lambda members: [m.value for m in members],
        ),
        default=TriggerStatus.UPCOMING,
    )
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    fired_at: Mapped[datetime | None] = mapped_column(default=None)
    # Set before the proactive message is handed on: a restart never sends it twice.
    proactive_at: Mapped[datetime | None] = mapped_column(default=None)
    cancelled_at: Mapped[datetime | None] = mapped_column(default=None)
    # The message that cancelled it (no key: the panel cancels with none).
    cancelled_by: Mapped[int | None] = mapped_column(Integer, default=None)
