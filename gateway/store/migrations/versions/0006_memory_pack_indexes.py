"""indexes for the pack's pinned, active-topic and time-window candidates

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23 07:05:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


# Without them these queries read every item of the person on every pack (pinned
# and topic 8 and 5 ms at 10k items, the time window 65 ms at 100k, all linear).
# The window's "refers to" half ranges over the last day an item refers to.
# Plain CREATE INDEX, never a batch copy: on SQLite a batch migration rebuilds
# the table and drops the triggers that keep memory_fts in step with it.
def upgrade() -> None:
    op.create_index(
        "ix_memory_items_person_touched",
        "memory_items",
        ["person_id", "status", "last_accessed_at"],
    )
    op.create_index("ix_memory_items_person_pinned", "memory_items", ["person_id", "pinned"])
    op.create_index(
        "ix_memory_items_person_occurred", "memory_items", ["person_id", "status", "occurred_at"]
    )
    op.create_index(
        "ix_memory_items_person_refers",
        "memory_items",
        ["person_id", "status", sa.text("coalesce(refers_end, refers_start)")],
    )


def downgrade() -> None:
    op.drop_index("ix_memory_items_person_refers", table_name="memory_items")
    op.drop_index("ix_memory_items_person_occurred", table_name="memory_items")
    op.drop_index("ix_memory_items_person_pinned", table_name="memory_items")
    op.drop_index("ix_memory_items_person_touched", table_name="memory_items")
