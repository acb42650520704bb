"""link codes, link attempts and access refusals

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22 09:30:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "link_codes",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("person_id", sa.Integer(), nullable=False),
        sa.Column("code_sha256", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("used_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("used_by_identity_id", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(
            ["person_id"],
            ["people.id"],
            name=op.f("fk_link_codes_person_id_people"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["used_by_identity_id"],
            ["identities.id"],
            name=op.f("fk_link_codes_used_by_identity_id_identities"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_link_codes")),
        sa.UniqueConstraint("code_sha256", name=op.f("uq_link_codes_code_sha256")),
    )
    with op.batch_alter_table("link_codes", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_link_codes_person_id"), ["person_id"], unique=False)

    op.create_table(
        "link_attempts",
        sa.Column("identity_id", sa.Integer(), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("window_started_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["identity_id"],
            ["identities.id"],
            name=op.f("fk_link_attempts_identity_id_identities"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("identity_id", name=op.f("pk_link_attempts")),
    )
    op.create_table(
        "access_refusals",
        sa.Column("channel", sa.String(length=32), nullable=False),
        sa.Column("external_id", sa.String(length=200), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("channel", "external_id", name=op.f("pk_access_refusals")),
    )


def downgrade() -> None:
    op.drop_table("access_refusals")
    op.drop_table("link_attempts")
    with op.batch_alter_table("link_codes", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_link_codes_person_id"))
    op.drop_table("link_codes")
