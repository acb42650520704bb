"""the memory tree: nodes and their summaries' versions (issue 23)

Revision ID: 0025
Revises: 0026
Create Date: 2026-11-25 14:15:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0025"
down_revision: str | None = "0026"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "memory_tree_nodes",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "person_id",
            sa.Integer(),
            sa.ForeignKey("people.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("key", sa.String(200), nullable=False),
        sa.Column("level", sa.Integer(), nullable=False),
        sa.Column("parent_keys", sa.JSON(), nullable=False),
        sa.Column("item_ids", sa.JSON(), nullable=False),
        sa.Column("child_keys", sa.JSON(), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("quotes", sa.JSON(), nullable=False),
        sa.Column("model", sa.String(100), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("corrected", sa.Boolean(), nullable=False),
        sa.Column("first_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index(
        "ix_memory_tree_nodes_person_level", "memory_tree_nodes", ["person_id", "level"]
    )
    op.create_table(
        "memory_tree_versions",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "person_id",
            sa.Integer(),
            sa.ForeignKey("people.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("key", sa.String(200), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("item_ids", sa.JSON(), nullable=False),
        sa.Column("model", sa.String(100), nullable=False),
        sa.Column("reason", sa.String(20), nullable=False),
        sa.Column("written_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index(
        "ix_memory_tree_versions_node", "memory_tree_versions", ["person_id", "key", "version"]
    )


def downgrade() -> None:
    op.drop_index("ix_memory_tree_versions_node", table_name="memory_tree_versions")
    op.drop_table("memory_tree_versions")
    op.drop_index("ix_memory_tree_nodes_person_level", table_name="memory_tree_nodes")
    op.drop_table("memory_tree_nodes")
