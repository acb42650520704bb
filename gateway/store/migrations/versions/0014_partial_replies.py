"""a failed turn keeps the text its broken reply had streamed (a partial reply)

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-25 10:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # On the turn, not as a message: a partial reply is never part of a prompt's
    # history nor of memory, and a retry replaces it.
    op.add_column("turns", sa.Column("partial_text", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("turns", "partial_text")
