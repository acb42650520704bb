"""lessons from corrections (issue 22): the lessons and how far verdicts were read

Revision ID: 0019
Revises: 0014
Create Date: 2026-11-25 12:50:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "lessons",
        sa.Column("id", sa.Integer(), nullable=False),
        # Null: a lesson for every person.
        sa.Column("person_id", sa.Integer(), nullable=True),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("slot", sa.String(length=200), nullable=False),
        sa.Column(
            "origin",
            sa.Enum(
                "correction",
                "judge",
                "manual",
                name="lessonorigin",
                native_enum=False,
                length=16,
            ),
            nullable=False,
        ),
        sa.Column("author", sa.String(length=100), nullable=False),
        sa.Column("source_message_id", sa.Integer(), nullable=True),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("hits", sa.Integer(), nullable=False),
        sa.Column("tokens", sa.Integer(), nullable=False),
        sa.Column("replaced_by", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["person_id"],
            ["people.id"],
            name=op.f("fk_lessons_person_id_people"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["source_message_id"],
            ["messages.id"],
            name=op.f("fk_lessons_source_message_id_messages"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["replaced_by"],
            ["lessons.id"],
            name=op.f("fk_lessons_replaced_by_lessons"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_lessons")),
    )
    with op.batch_alter_table("lessons", schema=None) as batch_op:
        batch_op.create_index("ix_lessons_person_enabled", ["person_id", "enabled"], unique=False)
    op.create_table(
        "lesson_scans",
        sa.Column("conversation_id", sa.Integer(), nullable=False),
        sa.Column("scanned_through_verdict_id", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_lesson_scans_conversation_id_conversations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("conversation_id", name=op.f("pk_lesson_scans")),
    )


def downgrade() -> None:
    op.drop_table("lesson_scans")
    with op.batch_alter_table("lessons", schema=None) as batch_op:
        batch_op.drop_index("ix_lessons_person_enabled")
    op.drop_table("lessons")
