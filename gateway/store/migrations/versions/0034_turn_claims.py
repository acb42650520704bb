"""a turn's claim in a cluster (issue 25): turns.claimed_by, turns.claim_until

Revision ID: 0034
Revises: 0027
Create Date: 2026-11-25 16:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0034"
down_revision: str | None = "0032"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("turns", sa.Column("claimed_by", sa.String(length=64), nullable=True))
    op.add_column("turns", sa.Column("claim_until", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("turns") as batch:
        batch.drop_column("claim_until")
        batch.drop_column("claimed_by")
