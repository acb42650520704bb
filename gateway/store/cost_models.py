"""What each turn cost, and when the budget's mode changed (issue 22, budget-aware).

One ``turn_costs`` row per answered or failed turn that reached the model: its
tokens priced by ``budget.prices``, its embedding calls, pack time and database
time, the local day and the person, so spend can be summed per day and per
person. ``budget_modes`` keeps each mode change for the panel's chart.
"""

from __future__ import annotations

from datetime import date, datetime

from sqlalchemy import Date, Float, ForeignKey, Index, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from gateway.store.models import Base, utcnow


class TurnCost(Base):
    __tablename__ = "turn_costs"
    __table_args__ = (
        Index("ix_turn_costs_day", "day"),
        Index("ix_turn_costs_person_day", "person_id", "day"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    turn_id: Mapped[int | None] = mapped_column(
        ForeignKey("turns.id", ondelete="SET NULL"), unique=True, default=None
    )
    person_id: Mapped[int | None] = mapped_column(
        ForeignKey("people.id", ondelete="SET NULL"), default=None
    )
    channel: Mapped[str] = mapped_column(String(32), default="")
    # The day in agent.timezone (the month of the budget is counted in that zone too).
    day: Mapped[date] = mapped_column(Date)
    at: Mapped[datetime] = mapped_column(default=utcnow)
    model: Mapped[str] = mapped_column(String(100), default="")
    input_tokens: Mapped[int] = mapped_column(Integer, default=0)
    output_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cache_read_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cache_write_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cost_usd: Mapped[float] = mapped_column(Float, default=0.0)
    embed_calls: Mapped[int] = mapped_column(Integer, default=0)
    embed_texts: Mapped[int] = mapped_column(Integer, default=0)
    embed_ms: Mapped[float] = mapped_column(Float, default=0.0)
    pack_ms: Mapped[float] = mapped_column(Float, default=0.0)
    context_ms: Mapped[float] = mapped_column(Float, default=0.0)
    db_calls: Mapped[int] = mapped_column(Integer, default=0)
    db_ms: Mapped[float] = mapped_column(Float, default=0.0)
    # The budget's mode the turn ran in: normal, tight, over.
    mode: Mapped[str] = mapped_column(String(16), default="normal")


class BudgetModeChange(Base):
    __tablename__ = "budget_modes"

    id: Mapped[int] = mapped_column(primary_key=True)
    at: Mapped[datetime] = mapped_column(default=utcnow, index=True)
    month: Mapped[str] = mapped_column(String(7))
    previous: Mapped[str] = mapped_column(String(16))
    mode: Mapped[str] = mapped_column(String(16))
    spent_usd: Mapped[float] = mapped_column(Float)
    budget_usd: Mapped[float] = mapped_column(Float)
