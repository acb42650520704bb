"""episodes are the record, never archived by age (issue 21): archived ones back to cold

The decay sweep used to archive old episodes, which took them out of the ANN
index; from now on an episode's lowest tier by age is cold (memory/types.py,
RECORD_AGE_FLOOR). The episodes already archived come back to the cold tier
here, and each person's ANN index takes them in when it next opens (an index
is brought in step with the store's indexable items on load). Downgrade has
nothing to undo: which episodes were archived before is not kept, and cold
is a tier the old code knows.

Revision ID: 0029
Revises: 0027
Create Date: 2026-11-25 16:10:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0029"
down_revision: str | None = "0034"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(
        sa.text(
            "UPDATE memory_items SET tier = 'cold' WHERE type = 'episode' AND tier = 'archived'"
        )
    )


def downgrade() -> None:
    # Cold episodes are valid under the old rules too; nothing to restore.
    pass
