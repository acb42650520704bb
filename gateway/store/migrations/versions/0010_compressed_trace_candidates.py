"""a trace's candidates are stored zlib-compressed

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-23 23:40:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Traces were ~40 KB a pack, most of a store's size (26,553 traces took 1.06 GB
# of a 1.5 GB benchmark store with 100k items); compressed, a tenth. SQLite keeps
# whatever a column is given, so its table stays as it is (a copy of every trace
# would change nothing but the declared type); older rows stay plain JSON, which
# ``CompressedJSON`` reads as before. PostgreSQL's JSON column takes no bytes:
# it becomes BYTEA holding the old rows' JSON text.


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        return
    op.alter_column(
        "memory_traces",
        "candidates",
        type_=sa.LargeBinary(),
        postgresql_using="convert_to(candidates::text, 'UTF8')",
    )


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        return
    # Compressed rows cannot be turned back into JSON by SQL alone.
    raise NotImplementedError("0010 cannot be undone on this database")
