"""an index on when each trace was made, for deleting those past their keep

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-24 01:40:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


# Upkeep deletes traces older than memory.trace_keep_days, a batch at a time, oldest
# first. Without this index each batch would scan every trace to find them. Plain
# CREATE INDEX, as in 0006.
def upgrade() -> None:
    op.create_index("ix_memory_traces_created_at", "memory_traces", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_memory_traces_created_at", table_name="memory_traces")
