"""memory items get a category (and an insight its sources); category summaries with versions

Revision ID: 0017
Revises: 0018
Create Date: 2026-11-25 13:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # "": not categorised yet; the weekly job backfills it.
    # Plain ALTER TABLE ADD COLUMN: a batch copy of memory_items would drop its FTS5 triggers.
    op.add_column(
        "memory_items",
        sa.Column("category", sa.String(length=16), nullable=False, server_default=""),
    )
    op.add_column(
        "memory_items",
        sa.Column("source_item_ids", sa.JSON(), nullable=False, server_default="[]"),
    )
    op.create_index(
        "ix_memory_items_person_category", "memory_items", ["person_id", "category", "status"]
    )
    op.create_table(
        "memory_summaries",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "person_id",
            sa.Integer(),
            sa.ForeignKey("people.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("category", sa.String(length=16), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("item_ids", sa.JSON(), nullable=False),
        sa.Column("method", sa.String(length=100), nullable=False),
        sa.Column("items", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index(
        "ix_memory_summaries_person_category",
        "memory_summaries",
        ["person_id", "category", "version"],
        unique=True,
    )


def downgrade() -> None:
    op.drop_index("ix_memory_summaries_person_category", table_name="memory_summaries")
    op.drop_table("memory_summaries")
    op.drop_index("ix_memory_items_person_category", table_name="memory_items")
    op.drop_column("memory_items", "source_item_ids")
    op.drop_column("memory_items", "category")
