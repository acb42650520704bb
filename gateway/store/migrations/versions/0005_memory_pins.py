"""memory items can be pinned from the panel

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-22 13:45:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


# Plain ALTER TABLE, never a batch copy: on SQLite a batch migration rebuilds the
# table and drops the triggers that keep memory_fts in step with it.
def upgrade() -> None:
    op.add_column(
        "memory_items",
        sa.Column("pinned", sa.Boolean(), nullable=False, server_default=sa.false()),
    )


def downgrade() -> None:
    op.drop_column("memory_items", "pinned")
