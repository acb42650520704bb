"""turn costs and budget mode changes (issue 22, budget-aware)

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-25 13:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "turn_costs",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "turn_id",
            sa.Integer(),
            sa.ForeignKey("turns.id", name="fk_turn_costs_turn_id_turns", ondelete="SET NULL"),
            nullable=True,
        ),
        sa.Column(
            "person_id",
            sa.Integer(),
            sa.ForeignKey("people.id", name="fk_turn_costs_person_id_people", ondelete="SET NULL"),
            nullable=True,
        ),
        sa.Column("channel", sa.String(32), nullable=False),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("model", sa.String(100), nullable=False),
        sa.Column("input_tokens", sa.Integer(), nullable=False),
        sa.Column("output_tokens", sa.Integer(), nullable=False),
        sa.Column("cache_read_tokens", sa.Integer(), nullable=False),
        sa.Column("cache_write_tokens", sa.Integer(), nullable=False),
        sa.Column("cost_usd", sa.Float(), nullable=False),
        sa.Column("embed_calls", sa.Integer(), nullable=False),
        sa.Column("embed_texts", sa.Integer(), nullable=False),
        sa.Column("embed_ms", sa.Float(), nullable=False),
        sa.Column("pack_ms", sa.Float(), nullable=False),
        sa.Column("context_ms", sa.Float(), nullable=False),
        sa.Column("db_calls", sa.Integer(), nullable=False),
        sa.Column("db_ms", sa.Float(), nullable=False),
        sa.Column("mode", sa.String(16), nullable=False),
        sa.UniqueConstraint("turn_id", name="uq_turn_costs_turn_id"),
    )
    op.create_index("ix_turn_costs_day", "turn_costs", ["day"])
    op.create_index("ix_turn_costs_person_day", "turn_costs", ["person_id", "day"])
    op.create_table(
        "budget_modes",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("month", sa.String(7), nullable=False),
        sa.Column("previous", sa.String(16), nullable=False),
        sa.Column("mode", sa.String(16), nullable=False),
        sa.Column("spent_usd", sa.Float(), nullable=False),
        sa.Column("budget_usd", sa.Float(), nullable=False),
    )
    op.create_index("ix_budget_modes_at", "budget_modes", ["at"])


def downgrade() -> None:
    op.drop_index("ix_budget_modes_at", "budget_modes")
    op.drop_table("budget_modes")
    op.drop_index("ix_turn_costs_person_day", "turn_costs")
    op.drop_index("ix_turn_costs_day", "turn_costs")
    op.drop_table("turn_costs")
