"""the offline brain's notices, stored as the agent's episodes before, removed from memory

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-24 05:45:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The first line of every notice the offline brain (gateway/brains/offline.py) wrote,
# as it was written: a migration must not follow later changes to that text.
NOTICE = "No language model is configured, so I can't write a real reply yet."

# Until now each notice became an assistant episode. It quotes the Memory Pack, so
# later packs recalled copies of it. The messages stay (the history shows them);
# only the memory items go. The full text follows by its delete trigger on SQLite;
# both indexes drop ids the store no longer holds when they are next loaded.
_NOTICES = (
    "FROM memory_items WHERE type = 'episode' AND role = 'assistant' "
    "AND substr(content, 1, :length) = :notice"
)


def upgrade() -> None:
    bind = op.get_bind()
    params = {"length": len(NOTICE), "notice": NOTICE}
    # Nothing should point at an episode, but a link left would block the delete.
    bind.execute(
        sa.text(
            f"UPDATE memory_items SET superseded_by_id = NULL "
            f"WHERE superseded_by_id IN (SELECT id {_NOTICES})"
        ),
        params,
    )
    bind.execute(sa.text(f"DELETE {_NOTICES}"), params)


def downgrade() -> None:
    # What was deleted was a copy of stored messages; older code does without it.
    pass
