"""the memory tree's root keeps its topics as its members, not every item id; nodes by key

The root held the id of every item of its person (100,000 at 100k items), and an
update wrote that list twice (the node and its new version), about 0.8 MB each
time, for a list its topics already hold. From here the root's members are its
topics (``child_keys``), and a version records the child keys its node had, so
the root's history still says what it was made of. The roots' stored item lists
are emptied here; their old versions keep theirs, as they were written.
An update reads and writes its few nodes by key: an index on (person, key) keeps
SQLite from reading every node of the person (item lists and all) to find them.
Downgrade drops the index and the versions' child keys; an emptied root list is
filled again by the next update or rebuild of the old code.

Revision ID: 0035
Revises: 0029
Create Date: 2026-11-28 02:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0035"
down_revision: str | None = "0029"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("memory_tree_versions") as batch:
        batch.add_column(sa.Column("child_keys", sa.JSON(), nullable=False, server_default="[]"))
    op.execute(sa.text("UPDATE memory_tree_nodes SET item_ids = '[]' WHERE level = 3"))
    op.create_index("ix_memory_tree_nodes_person_key", "memory_tree_nodes", ["person_id", "key"])


def downgrade() -> None:
    op.drop_index("ix_memory_tree_nodes_person_key", table_name="memory_tree_nodes")
    with op.batch_alter_table("memory_tree_versions") as batch:
        batch.drop_column("child_keys")
