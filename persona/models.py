"""Tables of the persona loop: PersonaState versions, proposed rules, SyncScores,
anchors and rebases, observations and the observer's cursor.

They live on the core's ``Base`` so one Alembic history covers every table
(migration ``0004``). Times are aware UTC, as everywhere in the store.
"""

from __future__ import annotations

import enum
from datetime import date, datetime
from typing import Any

from sqlalchemy import JSON, Date, Enum, Float, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from gateway.store.models import Base, utcnow


def _enum_column(enum_type: type[enum.StrEnum]) -> Enum:
    """Stored as the member's string value in a VARCHAR, like the core's enums."""
    return Enum(
        enum_type,
        native_enum=False,
        length=16,
        values_callable=lambda members: [m.value for m in members],
    )


class RuleStatus(enum.StrEnum):
    PROPOSED = "proposed"
    CONFIRMED = "confirmed"
    REJECTED = "rejected"


class VerdictStatus(enum.StrEnum):
    SCORED = "scored"
    # The LLM judge answered twice with no usable JSON: no scores are invented.
    MALFORMED = "malformed"
    # The judge's model call failed (timeout, unavailable).
    FAILED = "failed"


class ActionKind(enum.StrEnum):
    REINFORCE = "reinforce"
    ANCHOR = "anchor"
    REBASE = "rebase"


class ObservationStatus(enum.StrEnum):
    ACTIVE = "active"
    # Replaced by a newer observation that contradicts it (kept for the record).
    SUPERSEDED = "superseded"
    # Folded by the reflector into a combined or promoted observation.
    CONDENSED = "condensed"


class PersonaVersion(Base):
    """One immutable PersonaState; the highest version is the current one."""

    __tablename__ = "persona_versions"

    id: Mapped[int] = mapped_column(primary_key=True)
    version: Mapped[int] = mapped_column(Integer, unique=True)
    state: Mapped[dict[str, Any]] = mapped_column(JSON)
    # What made this version: init, observe, confirm, reject, rollback.
    source: Mapped[str] = mapped_column(String(32))
    reason: Mapped[str] = mapped_column(String(300), default="")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class PersonaRule(Base):
    """A hard rule the person stated: proposed, then confirmed or rejected by them."""

    __tablename__ = "persona_rules"

    id: Mapped[int] = mapped_column(primary_key=True)
    text: Mapped[str] = mapped_column(Text)
    status: Mapped[RuleStatus] = mapped_column(
        _enum_column(RuleStatus), default=RuleStatus.PROPOSED, index=True
    )
    person_id: Mapped[int | None] = mapped_column(
        ForeignKey("people.id", ondelete="SET NULL"), default=None
    )
    source_message_id: Mapped[int | None] = mapped_column(
        ForeignKey("messages.id", ondelete="SET NULL"), default=None
    )
    # The PersonaState version the decision created.
    decided_version: Mapped[int | None] = mapped_column(Integer, default=None)
    proposed_at: Mapped[datetime] = mapped_column(default=utcnow)
    decided_at: Mapped[datetime | None] = mapped_column(default=None)


class SyncScoreRow(Base):
    """The judge's verdict on one reply, with the conversation's EWMA after it."""

    __tablename__ = "sync_scores"

    id: Mapped[int] = mapped_column(primary_key=True)
    turn_id: Mapped[int] = mapped_column(ForeignKey("turns.id", ondelete="CASCADE"), unique=True)
    conversation_id: Mapped[int] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE"), index=True
    )
    reply_message_id: Mapped[int | None] = mapped_column(
        ForeignKey("messages.id", ondelete="SET NULL"), default=None
    )
    status: Mapped[VerdictStatus] = mapped_column(_enum_column(VerdictStatus))
    # "local" or "llm:<model>".
    judge: Mapped[str] = mapped_column(String(100))
    voice: Mapped[float | None] = mapped_column(Float, default=None)
    relational: Mapped[float | None] = mapped_column(Float, default=None)
    groundedness: Mapped[float | None] = mapped_column(Float, default=None)
    style: Mapped[float | None] = mapped_column(Float, default=None)
    constraints: Mapped[float | None] = mapped_column(Float, default=None)
    composite: Mapped[float | None] = mapped_column(Float, default=None)
    # EWMA, trend and tier of the conversation after this verdict (carried
    # over unchanged from the previous verdict when this one has no score).
    ewma: Mapped[float | None] = mapped_column(Float, default=None)
    trend: Mapped[str] = mapped_column(String(16), default="stable")
    tier: Mapped[str] = mapped_column(String(16), default="ok")
    samples: Mapped[int] = mapped_column(Integer, default=1)
    latency_ms: Mapped[float] = mapped_column(Float, default=0.0)
    cost_usd: Mapped[float] = mapped_column(Float, default=0.0)
    input_tokens: Mapped[int] = mapped_column(Integer, default=0)
    output_tokens: Mapped[int] = mapped_column(Integer, default=0)
    # Notes, the measured features, the raw answer of a malformed verdict.
    detail: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class PersonaAction(Base):
    """An anchor, reinforcement or rebase, stored with the turn whose prompt it touched."""

    __tablename__ = "persona_actions"
    __table_args__ = (Index("ix_persona_actions_conversation_turn", "conversation_id", "turn_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    turn_id: Mapped[int] = mapped_column(ForeignKey("turns.id", ondelete="CASCADE"), index=True)
    conversation_id: Mapped[int] = mapped_column(ForeignKey("conversations.id", ondelete="CASCADE"))
    kind: Mapped[ActionKind] = mapped_column(_enum_column(ActionKind))
    tier: Mapped[str] = mapped_column(String(16))
    ewma: Mapped[float | None] = mapped_column(Float, default=None)
    tokens: Mapped[int] = mapped_column(Integer, default=0)
    # Positions and texts of anchors; for a rebase its summary and first kept message.
    detail: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ObservationRow(Base):
    """A dated observation about a person, written by the observer or the reflector."""

    __tablename__ = "observations"
    __table_args__ = (Index("ix_observations_person_status", "person_id", "status"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    person_id: Mapped[int] = mapped_column(ForeignKey("people.id", ondelete="CASCADE"))
    conversation_id: Mapped[int | None] = mapped_column(
        ForeignKey("conversations.id", ondelete="SET NULL"), default=None
    )
    text: Mapped[str] = mapped_column(Text)
    priority: Mapped[str] = mapped_column(String(8))
    category: Mapped[str] = mapped_column(String(16))
    observed_at: Mapped[datetime] = mapped_column()
    referred_on: Mapped[date | None] = mapped_column(Date, default=None)
    relative_phrase: Mapped[str] = mapped_column(String(100), default="")
    # Ids of the messages it came from (for reflections: the union of its parts).
    source_message_ids: Mapped[list[int]] = mapped_column(JSON, default=list)
    status: Mapped[ObservationStatus] = mapped_column(
        _enum_column(ObservationStatus), default=ObservationStatus.ACTIVE
    )
    superseded_by: Mapped[int | None] = mapped_column(
        ForeignKey("observations.id", ondelete="SET NULL"), default=None
    )
    # 0 from the observer; n from the n-th reflection that rewrote it.
    generation: Mapped[int] = mapped_column(Integer, default=0)
    # "rules", "llm:<model>", "reflector:rules", ...
    author: Mapped[str] = mapped_column(String(100))
    tokens: Mapped[int] = mapped_column(Integer, default=0)
    # The memory item that mirrors it, when the memory layer took it.
    memory_item_id: Mapped[int | None] = mapped_column(Integer, default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ObserveCursor(Base):
    """How far the observer has read a conversation: every message up to this id."""

    __tablename__ = "observe_cursors"

    conversation_id: Mapped[int] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE"), primary_key=True
    )
    observed_through_message_id: Mapped[int] = mapped_column(Integer, default=0)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class ObserveRun(Base):
    """One observer or reflector pass: what went in, what came out, what it cost."""

    __tablename__ = "observe_runs"

    id: Mapped[int] = mapped_column(primary_key=True)
    person_id: Mapped[int] = mapped_column(ForeignKey("people.id", ondelete="CASCADE"), index=True)
    conversation_id: Mapped[int | None] = mapped_column(
        ForeignKey("conversations.id", ondelete="SET NULL"), default=None
    )
    # observer or reflector
    kind: Mapped[str] = mapped_column(String(16))
    author: Mapped[str] = mapped_column(String(100))
    input_messages: Mapped[int] = mapped_column(Integer, default=0)
    input_tokens: Mapped[int] = mapped_column(Integer, default=0)
    output_observations: Mapped[int] = mapped_column(Integer, default=0)
    output_tokens: Mapped[int] = mapped_column(Integer, default=0)
    # Messages the observer read and drew nothing from (the rule-based one is honest about it).
    unextracted_messages: Mapped[int] = mapped_column(Integer, default=0)
    latency_ms: Mapped[float] = mapped_column(Float, default=0.0)
    cost_usd: Mapped[float] = mapped_column(Float, default=0.0)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


# -- lessons from corrections (issue 22, migration 0019) ---------------------------


class LessonOrigin(enum.StrEnum):
    # The person corrected the agent in a message.
    CORRECTION = "correction"
    # The judge marked a reply as a mistake (a broken hard rule, a low score with notes).
    JUDGE = "judge"
    # Written by hand in the panel or with `agentgw lessons add`.
    MANUAL = "manual"


class Lesson(Base):
    """A short imperative the agent learned; in every prompt of its person (or of
    everyone, when ``person_id`` is null) while enabled and not replaced."""

    __tablename__ = "lessons"
    __table_args__ = (Index("ix_lessons_person_enabled", "person_id", "enabled"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    person_id: Mapped[int | None] = mapped_column(
        ForeignKey("people.id", ondelete="CASCADE"), default=None
    )
    text: Mapped[str] = mapped_column(Text)
    # What it is about ("name", "style:emoji"): a newer lesson on the slot replaces it.
    slot: Mapped[str] = mapped_column(String(200), default="")
    origin: Mapped[LessonOrigin] = mapped_column(_enum_column(LessonOrigin))
    # "rules", "llm:<model>", "panel", "cli".
    author: Mapped[str] = mapped_column(String(100), default="")
    source_message_id: Mapped[int | None] = mapped_column(
        ForeignKey("messages.id", ondelete="SET NULL"), default=None
    )
    enabled: Mapped[bool] = mapped_column(default=True)
    # Times the person taught it (a repeat counts, not a copy): the budget keeps these first.
    hits: Mapped[int] = mapped_column(Integer, default=1)
    tokens: Mapped[int] = mapped_column(Integer, default=0)
    replaced_by: Mapped[int | None] = mapped_column(
        ForeignKey("lessons.id", ondelete="SET NULL"), default=None
    )
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class LessonScan(Base):
    """How far the judge's verdicts of a conversation were read for mistakes."""

    __tablename__ = "lesson_scans"

    conversation_id: Mapped[int] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE"), primary_key=True
    )
    scanned_through_verdict_id: Mapped[int] = mapped_column(Integer, default=0)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
