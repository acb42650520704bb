"""memory items, pack traces and the FTS5 index of items

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22 10:56:04.165975
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Full text of the items (BM25), as an external-content FTS5 table kept in step
# by triggers: the porter stemmer lets "hiking" find "hike". fts5vocab exposes
# document frequencies so the pack can leave out terms that match everything.
FTS_UP = (
    """
    CREATE VIRTUAL TABLE memory_fts USING fts5(
        content, speaker,
        content='memory_items', content_rowid='id',
        tokenize='porter unicode61 remove_diacritics 2'
    )
    """,
    "CREATE VIRTUAL TABLE memory_fts_vocab USING fts5vocab(memory_fts, 'row')",
    """
    CREATE TRIGGER memory_items_fts_insert AFTER INSERT ON memory_items BEGIN
        INSERT INTO memory_fts(rowid, content, speaker)
        VALUES (new.id, new.content, new.speaker);
    END
    """,
    """
    CREATE TRIGGER memory_items_fts_delete AFTER DELETE ON memory_items BEGIN
        INSERT INTO memory_fts(memory_fts, rowid, content, speaker)
        VALUES ('delete', old.id, old.content, old.speaker);
    END
    """,
    """
    CREATE TRIGGER memory_items_fts_update AFTER UPDATE OF content, speaker ON memory_items BEGIN
        INSERT INTO memory_fts(memory_fts, rowid, content, speaker)
        VALUES ('delete', old.id, old.content, old.speaker);
        INSERT INTO memory_fts(rowid, content, speaker)
        VALUES (new.id, new.content, new.speaker);
    END
    """,
)
FTS_DOWN = (
    "DROP TRIGGER IF EXISTS memory_items_fts_update",
    "DROP TRIGGER IF EXISTS memory_items_fts_delete",
    "DROP TRIGGER IF EXISTS memory_items_fts_insert",
    "DROP TABLE IF EXISTS memory_fts_vocab",
    "DROP TABLE IF EXISTS memory_fts",
)


def upgrade() -> None:
    op.create_table(
        "memory_items",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("person_id", sa.Integer(), nullable=False),
        sa.Column(
            "type",
            sa.Enum(
                "fact",
                "preference",
                "persona",
                "relational",
                "procedural",
                "event",
                "episode",
                name="itemtype",
                native_enum=False,
                length=16,
            ),
            nullable=False,
        ),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("speaker", sa.String(length=200), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("author", sa.String(length=32), nullable=False),
        sa.Column("channel", sa.String(length=32), nullable=False),
        sa.Column("conversation_id", sa.Integer(), nullable=True),
        sa.Column("source_message_ids", sa.JSON(), nullable=False),
        sa.Column("source_ref", sa.String(length=100), nullable=False),
        sa.Column("observation_id", sa.Integer(), nullable=True),
        sa.Column("priority", sa.Float(), nullable=False),
        sa.Column("confidence", sa.Float(), nullable=False),
        sa.Column(
            "status",
            sa.Enum(
                "active", "superseded", "forgotten", name="itemstatus", native_enum=False, length=16
            ),
            nullable=False,
        ),
        sa.Column(
            "tier",
            sa.Enum(
                "active", "warm", "cold", "archived", name="tier", native_enum=False, length=16
            ),
            nullable=False,
        ),
        sa.Column("strength", sa.Float(), nullable=False),
        sa.Column("access_count", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("occurred_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_accessed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("refers_start", sa.Date(), nullable=True),
        sa.Column("refers_end", sa.Date(), nullable=True),
        sa.Column("superseded_by_id", sa.Integer(), nullable=True),
        sa.Column("status_changed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("embedding", sa.LargeBinary(), nullable=True),
        sa.Column("embedding_model", sa.String(length=100), nullable=False),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_memory_items_conversation_id_conversations"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["person_id"],
            ["people.id"],
            name=op.f("fk_memory_items_person_id_people"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["superseded_by_id"],
            ["memory_items.id"],
            name=op.f("fk_memory_items_superseded_by_id_memory_items"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_memory_items")),
    )
    with op.batch_alter_table("memory_items", schema=None) as batch_op:
        batch_op.create_index(
            "ix_memory_items_conversation", ["conversation_id", "id"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_memory_items_observation_id"), ["observation_id"], unique=False
        )
        batch_op.create_index(
            "ix_memory_items_person_state", ["person_id", "status", "tier"], unique=False
        )
        batch_op.create_index(
            "ix_memory_items_person_ref", ["person_id", "source_ref"], unique=False
        )
        batch_op.create_index("ix_memory_items_person_type", ["person_id", "type"], unique=False)

    op.create_table(
        "memory_traces",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("turn_id", sa.Integer(), nullable=True),
        sa.Column("person_id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("query", sa.Text(), nullable=False),
        sa.Column("budget_tokens", sa.Integer(), nullable=False),
        sa.Column("used_tokens", sa.Integer(), nullable=False),
        sa.Column("time_window", sa.JSON(), nullable=True),
        sa.Column("candidates", sa.JSON(), nullable=False),
        sa.Column("kept_ids", sa.JSON(), nullable=False),
        sa.Column("filtered", sa.JSON(), nullable=False),
        sa.Column("notes", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["person_id"],
            ["people.id"],
            name=op.f("fk_memory_traces_person_id_people"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["turn_id"],
            ["turns.id"],
            name=op.f("fk_memory_traces_turn_id_turns"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_memory_traces")),
    )
    with op.batch_alter_table("memory_traces", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_memory_traces_person_id"), ["person_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_memory_traces_turn_id"), ["turn_id"], unique=False)

    if op.get_bind().dialect.name == "sqlite":
        for statement in FTS_UP:
            op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for statement in FTS_DOWN:
            op.execute(statement)
    with op.batch_alter_table("memory_traces", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_memory_traces_turn_id"))
        batch_op.drop_index(batch_op.f("ix_memory_traces_person_id"))

    op.drop_table("memory_traces")
    with op.batch_alter_table("memory_items", schema=None) as batch_op:
        batch_op.drop_index("ix_memory_items_person_type")
        batch_op.drop_index("ix_memory_items_person_ref")
        batch_op.drop_index("ix_memory_items_person_state")
        batch_op.drop_index(batch_op.f("ix_memory_items_observation_id"))
        batch_op.drop_index("ix_memory_items_conversation")

    op.drop_table("memory_items")
