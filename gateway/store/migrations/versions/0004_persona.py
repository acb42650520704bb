"""persona loop: persona versions and rules, SyncScores, anchors, observations

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22 09:26:31.255386
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "persona_versions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("state", sa.JSON(), nullable=False),
        sa.Column("source", sa.String(length=32), nullable=False),
        sa.Column("reason", sa.String(length=300), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_persona_versions")),
        sa.UniqueConstraint("version", name=op.f("uq_persona_versions_version")),
    )
    op.create_table(
        "observations",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("person_id", sa.Integer(), nullable=False),
        sa.Column("conversation_id", sa.Integer(), nullable=True),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("priority", sa.String(length=8), nullable=False),
        sa.Column("category", sa.String(length=16), nullable=False),
        sa.Column("observed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("referred_on", sa.Date(), nullable=True),
        sa.Column("relative_phrase", sa.String(length=100), nullable=False),
        sa.Column("source_message_ids", sa.JSON(), nullable=False),
        sa.Column(
            "status",
            sa.Enum(
                "active",
                "superseded",
                "condensed",
                name="observationstatus",
                native_enum=False,
                length=16,
            ),
            nullable=False,
        ),
        sa.Column("superseded_by", sa.Integer(), nullable=True),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("author", sa.String(length=100), nullable=False),
        sa.Column("tokens", sa.Integer(), nullable=False),
        sa.Column("memory_item_id", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_observations_conversation_id_conversations"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["person_id"],
            ["people.id"],
            name=op.f("fk_observations_person_id_people"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["superseded_by"],
            ["observations.id"],
            name=op.f("fk_observations_superseded_by_observations"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_observations")),
    )
    with op.batch_alter_table("observations", schema=None) as batch_op:
        batch_op.create_index(
            "ix_observations_person_status", ["person_id", "status"], unique=False
        )

    op.create_table(
        "observe_cursors",
        sa.Column("conversation_id", sa.Integer(), nullable=False),
        sa.Column("observed_through_message_id", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_observe_cursors_conversation_id_conversations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("conversation_id", name=op.f("pk_observe_cursors")),
    )
    op.create_table(
        "observe_runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("person_id", sa.Integer(), nullable=False),
        sa.Column("conversation_id", sa.Integer(), nullable=True),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("author", sa.String(length=100), nullable=False),
        sa.Column("input_messages", sa.Integer(), nullable=False),
        sa.Column("input_tokens", sa.Integer(), nullable=False),
        sa.Column("output_observations", sa.Integer(), nullable=False),
        sa.Column("output_tokens", sa.Integer(), nullable=False),
        sa.Column("unextracted_messages", sa.Integer(), nullable=False),
        sa.Column("latency_ms", sa.Float(), nullable=False),
        sa.Column("cost_usd", sa.Float(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_observe_runs_conversation_id_conversations"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["person_id"],
            ["people.id"],
            name=op.f("fk_observe_runs_person_id_people"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_observe_runs")),
    )
    with op.batch_alter_table("observe_runs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_observe_runs_person_id"), ["person_id"], unique=False)

    op.create_table(
        "persona_rules",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column(
            "status",
            sa.Enum(
                "proposed", "confirmed", "rejected", name="rulestatus", native_enum=False, length=16
            ),
            nullable=False,
        ),
        sa.Column("person_id", sa.Integer(), nullable=True),
        sa.Column("source_message_id", sa.Integer(), nullable=True),
        sa.Column("decided_version", sa.Integer(), nullable=True),
        sa.Column("proposed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["person_id"],
            ["people.id"],
            name=op.f("fk_persona_rules_person_id_people"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["source_message_id"],
            ["messages.id"],
            name=op.f("fk_persona_rules_source_message_id_messages"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_persona_rules")),
    )
    with op.batch_alter_table("persona_rules", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_persona_rules_status"), ["status"], unique=False)

    op.create_table(
        "persona_actions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("turn_id", sa.Integer(), nullable=False),
        sa.Column("conversation_id", sa.Integer(), nullable=False),
        sa.Column(
            "kind",
            sa.Enum(
                "reinforce", "anchor", "rebase", name="actionkind", native_enum=False, length=16
            ),
            nullable=False,
        ),
        sa.Column("tier", sa.String(length=16), nullable=False),
        sa.Column("ewma", sa.Float(), nullable=True),
        sa.Column("tokens", sa.Integer(), nullable=False),
        sa.Column("detail", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_persona_actions_conversation_id_conversations"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["turn_id"],
            ["turns.id"],
            name=op.f("fk_persona_actions_turn_id_turns"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_persona_actions")),
    )
    with op.batch_alter_table("persona_actions", schema=None) as batch_op:
        batch_op.create_index(
            "ix_persona_actions_conversation_turn", ["conversation_id", "turn_id"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_persona_actions_turn_id"), ["turn_id"], unique=False)

    op.create_table(
        "sync_scores",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("turn_id", sa.Integer(), nullable=False),
        sa.Column("conversation_id", sa.Integer(), nullable=False),
        sa.Column("reply_message_id", sa.Integer(), nullable=True),
        sa.Column(
            "status",
            sa.Enum(
                "scored", "malformed", "failed", name="verdictstatus", native_enum=False, length=16
            ),
            nullable=False,
        ),
        sa.Column("judge", sa.String(length=100), nullable=False),
        sa.Column("voice", sa.Float(), nullable=True),
        sa.Column("relational", sa.Float(), nullable=True),
        sa.Column("groundedness", sa.Float(), nullable=True),
        sa.Column("style", sa.Float(), nullable=True),
        sa.Column("constraints", sa.Float(), nullable=True),
        sa.Column("composite", sa.Float(), nullable=True),
        sa.Column("ewma", sa.Float(), nullable=True),
        sa.Column("trend", sa.String(length=16), nullable=False),
        sa.Column("tier", sa.String(length=16), nullable=False),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("latency_ms", sa.Float(), nullable=False),
        sa.Column("cost_usd", sa.Float(), nullable=False),
        sa.Column("input_tokens", sa.Integer(), nullable=False),
        sa.Column("output_tokens", sa.Integer(), nullable=False),
        sa.Column("detail", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_sync_scores_conversation_id_conversations"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["reply_message_id"],
            ["messages.id"],
            name=op.f("fk_sync_scores_reply_message_id_messages"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["turn_id"], ["turns.id"], name=op.f("fk_sync_scores_turn_id_turns"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sync_scores")),
        sa.UniqueConstraint("turn_id", name=op.f("uq_sync_scores_turn_id")),
    )
    with op.batch_alter_table("sync_scores", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_sync_scores_conversation_id"), ["conversation_id"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("sync_scores", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_sync_scores_conversation_id"))

    op.drop_table("sync_scores")
    with op.batch_alter_table("persona_actions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_persona_actions_turn_id"))
        batch_op.drop_index("ix_persona_actions_conversation_turn")

    op.drop_table("persona_actions")
    with op.batch_alter_table("persona_rules", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_persona_rules_status"))

    op.drop_table("persona_rules")
    with op.batch_alter_table("observe_runs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_observe_runs_person_id"))

    op.drop_table("observe_runs")
    op.drop_table("observe_cursors")
    with op.batch_alter_table("observations", schema=None) as batch_op:
        batch_op.drop_index("ix_observations_person_status")

    op.drop_table("observations")
    op.drop_table("persona_versions")
