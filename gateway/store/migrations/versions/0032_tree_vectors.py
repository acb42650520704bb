"""the memory tree's node vectors, for incremental updates (issue 23)

Revision ID: 0032
Revises: 0027
Create Date: 2026-11-25 16:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0032"
down_revision: str | None = "0033"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Nullable: a tree built before this has none, and its next update rebuilds it.
    with op.batch_alter_table("memory_tree_nodes") as batch:
        batch.add_column(sa.Column("vector", sa.LargeBinary(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("memory_tree_nodes") as batch:
        batch.drop_column("vector")
