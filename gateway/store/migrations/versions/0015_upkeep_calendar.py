"""the upkeep calendar: jobs with their last run and lease, and the history of runs

Revision ID: 0015
Revises: 0020
Create Date: 2026-11-25 12:45:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "upkeep_jobs",
        sa.Column("name", sa.String(length=32), nullable=False),
        sa.Column("schedule", sa.String(length=100), nullable=False),
        sa.Column("last_run_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_status", sa.String(length=16), nullable=True),
        sa.Column("last_counts", sa.JSON(), nullable=True),
        sa.Column("last_ok_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("lease_holder", sa.String(length=120), nullable=True),
        sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_upkeep_jobs")),
    )
    op.create_table(
        "upkeep_runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job", sa.String(length=32), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "status",
            sa.Enum(
                "running",
                "ok",
                "failed",
                "interrupted",
                name="runstatus",
                native_enum=False,
                length=16,
            ),
            nullable=False,
        ),
        sa.Column("counts", sa.JSON(), nullable=True),
        sa.Column("report", sa.JSON(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("person_id", sa.Integer(), nullable=True),
        sa.Column("dry_run", sa.Boolean(), nullable=False),
        sa.Column("holder", sa.String(length=120), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_upkeep_runs")),
    )
    op.create_index("ix_upkeep_runs_job_started", "upkeep_runs", ["job", "started_at"])


def downgrade() -> None:
    op.drop_index("ix_upkeep_runs_job_started", table_name="upkeep_runs")
    op.drop_table("upkeep_runs")
    op.drop_table("upkeep_jobs")
