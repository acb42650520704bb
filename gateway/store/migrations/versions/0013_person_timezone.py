"""each person may have a time zone of their own (a webchat page reports its browser's)

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-24 07:40:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Empty: the gateway's zone (agent.timezone) holds for them.
    op.add_column(
        "people",
        sa.Column("timezone", sa.String(length=64), nullable=False, server_default=""),
    )


def downgrade() -> None:
    op.drop_column("people", "timezone")
