"""the cluster's members and leases (issue 25): cluster_members, cluster_leases

Revision ID: 0033
Revises: 0027
Create Date: 2026-11-25 16:10:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0033"
down_revision: str | None = "0027"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "cluster_members",
        sa.Column("id", sa.String(length=120), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("listen", sa.String(length=300), nullable=False),
        sa.Column("version", sa.String(length=40), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_cluster_members")),
    )
    op.create_index(op.f("ix_cluster_members_heartbeat_at"), "cluster_members", ["heartbeat_at"])
    op.create_table(
        "cluster_leases",
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("holder", sa.String(length=120), nullable=False),
        sa.Column("until", sa.DateTime(timezone=True), nullable=False),
        sa.Column("taken_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_cluster_leases")),
    )


def downgrade() -> None:
    op.drop_table("cluster_leases")
    op.drop_index(op.f("ix_cluster_members_heartbeat_at"), table_name="cluster_members")
    op.drop_table("cluster_members")
