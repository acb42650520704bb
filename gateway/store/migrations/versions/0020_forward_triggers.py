"""forward triggers: a day ahead a message named, shown on that day (issue 22)

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-25 13:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "triggers",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "person_id",
            sa.Integer(),
            sa.ForeignKey("people.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column(
            "conversation_id",
            sa.Integer(),
            sa.ForeignKey("conversations.id", ondelete="SET NULL"),
            nullable=True,
        ),
        sa.Column("channel", sa.String(32), nullable=False),
        sa.Column(
            "message_id",
            sa.Integer(),
            sa.ForeignKey("messages.id", ondelete="SET NULL"),
            nullable=True,
        ),
        sa.Column("trigger_date", sa.Date(), nullable=False),
        sa.Column("phrase", sa.String(100), nullable=False),
        sa.Column("context", sa.Text(), nullable=False),
        sa.Column("memory_ids", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("fired_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("proactive_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("cancelled_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("cancelled_by", sa.Integer(), nullable=True),
    )
    op.create_index("ix_triggers_person_day", "triggers", ["person_id", "trigger_date"])
    op.create_index("ix_triggers_due", "triggers", ["trigger_date", "status"])


def downgrade() -> None:
    op.drop_index("ix_triggers_due", "triggers")
    op.drop_index("ix_triggers_person_day", "triggers")
    op.drop_table("triggers")
