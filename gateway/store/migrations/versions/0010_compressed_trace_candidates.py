"""a trace's candidates are stored zlib-compressed

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-23 23:40:00
"""

from __future__ import annotations

import zlib
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
# would change nothing but the declared type), and the stored traces are
# compressed in place, in batches: the space they free is used again before the
# file grows. ``CompressedJSON`` reads plain JSON as well. PostgreSQL's JSON
# column takes no bytes: it becomes BYTEA holding the old rows' JSON text.

BATCH = 500


def upgrade() -> None:
    connection = op.get_bind()
    if connection.dialect.name == "sqlite":
        _compress_stored(connection)
        return
    op.alter_column(
        "memory_traces",
        "candidates",
        type_=sa.LargeBinary(),
        postgresql_using="convert_to(candidates::text, 'UTF8')",
    )


def _compress_stored(connection: sa.Connection) -> None:
    after = 0
    while rows := connection.execute(
        sa.text(
            "SELECT id, candidates FROM memory_traces WHERE id > :after "
            "AND typeof(candidates) = 'text' ORDER BY id LIMIT :batch"
        ),
        {"after": after, "batch": BATCH},
    ).all():
        connection.execute(
            sa.text("UPDATE memory_traces SET candidates = :packed WHERE id = :id"),
            [{"id": row[0], "packed": zlib.compress(row[1].encode("utf-8"))} for row in rows],
        )
        after = rows[-1][0]


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        return
    # Compressed rows cannot be turned back into JSON by SQL alone.
    raise NotImplementedError("0010 cannot be undone on this database")
