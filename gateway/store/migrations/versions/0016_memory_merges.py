"""nightly upkeep: merges of near-duplicate memory items (reversible) and promotions

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-25 13:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "memory_merges",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("person_id", sa.Integer(), nullable=False),
        sa.Column("survivor_id", sa.Integer(), nullable=False),
        sa.Column("merged_ids", sa.JSON(), nullable=False),
        sa.Column("similarities", sa.JSON(), nullable=False),
        sa.Column("before", sa.JSON(), nullable=False),
        sa.Column("added", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("undone_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["person_id"], ["people.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["survivor_id"], ["memory_items.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_memory_merges_person_id", "memory_merges", ["person_id"])
    op.create_index("ix_memory_merges_survivor_id", "memory_merges", ["survivor_id"])
    op.create_table(
        "memory_promotions",
        sa.Column("item_id", sa.Integer(), nullable=False),
        sa.Column("promoted_on", sa.Date(), nullable=False),
        sa.ForeignKeyConstraint(["item_id"], ["memory_items.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("item_id"),
    )


def downgrade() -> None:
    op.drop_table("memory_promotions")
    op.drop_index("ix_memory_merges_survivor_id", table_name="memory_merges")
    op.drop_index("ix_memory_merges_person_id", table_name="memory_merges")
    op.drop_table("memory_merges")
