"""a trace's candidates are stored zlib-compressed

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-23 23:40:00
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from typing import Any

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
# column takes no bytes: it becomes BYTEA holding the old rows' JSON text. A
# downgrade turns every compressed row back into JSON text.

BATCH = 500


def upgrade() -> None:
    connection = op.get_bind()
    if connection.dialect.name == "sqlite":
        _rewrite(connection, "typeof(candidates) = 'text'", _compress)
        return
    op.alter_column(
        "memory_traces",
        "candidates",
        type_=sa.LargeBinary(),
        postgresql_using="convert_to(candidates::text, 'UTF8')",
    )


def downgrade() -> None:
    # Older code reads the column as JSON: every compressed row goes back to text.
    connection = op.get_bind()
    if connection.dialect.name == "sqlite":
        _rewrite(connection, "typeof(candidates) = 'blob'", _decompress_text)
        return
    _rewrite(connection, "substring(candidates from 1 for 1) = '\\x78'::bytea", _decompress)
    op.alter_column(
        "memory_traces",
        "candidates",
        type_=sa.JSON(),
        postgresql_using="convert_from(candidates, 'UTF8')::json",
    )


def _compress(text: str) -> bytes:
    return zlib.compress(text.encode("utf-8"))


def _decompress(data: bytes) -> bytes:
    return zlib.decompress(bytes(data))


def _decompress_text(data: bytes) -> str:
    return _decompress(data).decode("utf-8")


def _rewrite(connection: sa.Connection, which: str, change: Callable[[Any], Any]) -> None:
    """``change`` the candidates of the traces ``which`` selects, a batch at a time."""
    after = 0
    while rows := connection.execute(
        sa.text(
            f"SELECT id, candidates FROM memory_traces WHERE id > :after AND {which} "
            "ORDER BY id LIMIT :batch"
        ),
        {"after": after, "batch": BATCH},
    ).all():
        connection.execute(
            sa.text("UPDATE memory_traces SET candidates = :value WHERE id = :id"),
            [{"id": row[0], "value": change(row[1])} for row in rows],
        )
        after = rows[-1][0]
