"""memory item ids are never given twice (SQLite AUTOINCREMENT), deletes find what
they superseded by index, and the store gets an identity

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-23 23:20:00
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Without AUTOINCREMENT, SQLite gives a new row the highest id + 1, so once the
# newest item is deleted (the panel's delete) the next item gets its id.
# Everything that names items by id then names the wrong one: a pack's trace
# ("why did it remember that?"), and the ANN and full-text index files, which a
# restart catches up by comparing ids. PostgreSQL's sequences never go back, so
# only SQLite's table changes.
#
# SQLite cannot add AUTOINCREMENT to a table, so the table is made anew, with
# its own DDL, indexes and triggers copied from sqlite_master. The old one is
# renamed away first: the new table's self-reference (superseded_by_id) then
# points at itself, and dropping the old one (an implicit DELETE, with foreign
# keys on) sets nothing to NULL in the new one. The FTS5 table names its content
# table by name and the rowids are kept, so the full text stays valid.

_PK_COLUMN = re.compile(r"\bid INTEGER NOT NULL,")
_PK_CONSTRAINT = re.compile(r",\s*CONSTRAINT pk_memory_items PRIMARY KEY \(id\)")

# A random name for this database, written once: the index files beside it record
# it, so files left from another database (one deleted and made anew under the
# same data directory) are rebuilt rather than trusted.
STORE_INFO = "store_info"


def upgrade() -> None:
    connection = op.get_bind()
    op.create_table(
        STORE_INFO,
        sa.Column("key", sa.String(length=64), primary_key=True),
        sa.Column("value", sa.String(length=200), nullable=False),
    )
    connection.execute(
        sa.text(f"INSERT INTO {STORE_INFO} (key, value) VALUES ('store_id', :value)"),
        {"value": uuid.uuid4().hex},
    )
    if connection.dialect.name == "sqlite":
        _sqlite_autoincrement(connection)
    # The same scan made every delete of an item (the panel's) read the whole table,
    # and deleting many at once (a person's rows, by cascade) one scan per item.
    op.create_index("ix_memory_items_superseded_by", "memory_items", ["superseded_by_id"])


def _sqlite_autoincrement(connection: sa.Connection) -> None:
    def schema(kind: str) -> list[str]:
        return list(
            connection.execute(
                sa.text(
                    "SELECT sql FROM sqlite_master WHERE tbl_name = 'memory_items' "
                    "AND type = :kind AND sql IS NOT NULL ORDER BY rowid"
                ),
                {"kind": kind},
            ).scalars()
        )

    (table,) = schema("table")
    if "AUTOINCREMENT" in table.upper():
        return
    created = _PK_CONSTRAINT.sub("", table)
    created = _PK_COLUMN.sub(
        "id INTEGER NOT NULL CONSTRAINT pk_memory_items PRIMARY KEY AUTOINCREMENT,", created
    )
    if created.count("AUTOINCREMENT") != 1 or "PRIMARY KEY (id)" in created:
        raise RuntimeError(f"memory_items has a table definition 0009 does not know: {table}")
    indexes, triggers = schema("index"), schema("trigger")
    connection.exec_driver_sql("ALTER TABLE memory_items RENAME TO memory_items_0008")
    connection.exec_driver_sql(created)
    # Same DDL, so the same columns in the same order.
    connection.exec_driver_sql("INSERT INTO memory_items SELECT * FROM memory_items_0008")
    # Dropping a table deletes its rows first, and each deleted row looks for the rows
    # it superseded: without an index a scan per row (88 s for 10,000 items).
    connection.exec_driver_sql(
        "CREATE INDEX ix_memory_items_0008_superseded ON memory_items_0008 (superseded_by_id)"
    )
    connection.exec_driver_sql("DROP TABLE memory_items_0008")
    for statement in indexes + triggers:
        connection.exec_driver_sql(statement)


def downgrade() -> None:
    # The AUTOINCREMENT stays: ids that are never reused harm no older code.
    op.drop_index("ix_memory_items_superseded_by", table_name="memory_items")
    op.drop_table(STORE_INFO)
