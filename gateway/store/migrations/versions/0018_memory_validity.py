"""memory items hold the slot they claim and how long they were valid (issue 22)

Revision ID: 0018
Revises: 0016
Create Date: 2026-11-25 13:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


# Plain ALTER TABLE, never a batch copy: on SQLite a batch migration rebuilds the
# table and drops the triggers that keep memory_fts in step with it. Every column is
# nullable or has a default, so existing rows need no backfill: they simply claim no
# slot and stay valid.
def upgrade() -> None:
    op.add_column("memory_items", sa.Column("slot", sa.String(120), nullable=True))
    op.add_column(
        "memory_items",
        sa.Column("slot_value", sa.String(200), nullable=False, server_default=""),
    )
    op.add_column(
        "memory_items", sa.Column("valid_until", sa.DateTime(timezone=True), nullable=True)
    )
    # The item that replaced it. No foreign key: SQLite cannot add one to an existing
    # table without a rebuild (see above); a dangling id only loses the link's target.
    op.add_column("memory_items", sa.Column("replaced_by_id", sa.Integer(), nullable=True))
    op.add_column(
        "memory_items", sa.Column("confirmed_at", sa.DateTime(timezone=True), nullable=True)
    )
    op.create_index("ix_memory_items_person_slot", "memory_items", ["person_id", "slot"])


def downgrade() -> None:
    op.drop_index("ix_memory_items_person_slot", table_name="memory_items")
    for column in ("confirmed_at", "replaced_by_id", "valid_until", "slot_value", "slot"):
        op.drop_column("memory_items", column)
