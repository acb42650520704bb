"""stored messages get their salience as priority

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23 08:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from memory.salience import salience

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BATCH = 2000


# Data only: episodes stored before salience existed have priority 0, which would
# rank them below every new message. Only untouched rows are scored, so a
# priority set in the panel stays. Content is not changed, so the FTS triggers
# do not fire.
def upgrade() -> None:
    connection = op.get_bind()
    after = 0
    while True:
        rows = connection.execute(
            sa.text(
                "SELECT id, content FROM memory_items WHERE type = 'episode' "
                "AND priority = 0 AND id > :after ORDER BY id LIMIT :batch"
            ),
            {"after": after, "batch": BATCH},
        ).all()
        if not rows:
            return
        connection.execute(
            sa.text("UPDATE memory_items SET priority = :priority WHERE id = :id"),
            [{"id": int(row[0]), "priority": salience(row[1])} for row in rows],
        )
        after = int(rows[-1][0])


def downgrade() -> None:
    # The scores are valid priorities under any revision: nothing to undo.
    pass
