"""indexes for the pack's pinned and active-topic candidates

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23 07:05:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


# Without them both queries read every item of the person on every pack (8 and
# 5 ms at 10k items, growing linearly). Plain CREATE INDEX, never a batch copy:
# on SQLite a batch migration rebuilds the table and drops the FTS triggers.
def upgrade() -> None:
    op.create_index(
        "ix_memory_items_person_touched",
        "memory_items",
        ["person_id", "status", "last_accessed_at"],
    )
    op.create_index("ix_memory_items_person_pinned", "memory_items", ["person_id", "pinned"])


def downgrade() -> None:
    op.drop_index("ix_memory_items_person_pinned", table_name="memory_items")
    op.drop_index("ix_memory_items_person_touched", table_name="memory_items")
