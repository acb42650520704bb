"""The persona loop's tables as far as the record reads and writes them.

They belong to ``persona/`` (persona/models.py), which ``memory/`` must not import
(the layer rule): each is declared here with every column it has, so the record
stays lossless. ``tests/test_memory_porting_tables.py`` checks these declarations
against persona/models.py, so a column added there and not here fails a test.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    Date,
    ForeignKey,
    Integer,
    MetaData,
    String,
    Table,
    Text,
)

from gateway.store.models import UTCDateTime

_META = MetaData()

LESSONS = Table(
    "lessons",
    _META,
    Column("id", Integer, primary_key=True),
    Column("person_id", Integer, ForeignKey("people.id"), nullable=True),
    Column("text", Text),
    Column("slot", String(200)),
    Column("origin", String(16)),
    Column("author", String(100)),
    Column("source_message_id", Integer, ForeignKey("messages.id"), nullable=True),
    Column("enabled", Boolean),
    Column("hits", Integer),
    Column("tokens", Integer),
    Column("replaced_by", Integer, ForeignKey("lessons.id"), nullable=True),
    Column("created_at", UTCDateTime),
    Column("updated_at", UTCDateTime),
)

OBSERVATIONS = Table(
    "observations",
    _META,
    Column("id", Integer, primary_key=True),
    Column("person_id", Integer, ForeignKey("people.id")),
    Column("conversation_id", Integer, ForeignKey("conversations.id"), nullable=True),
    Column("text", Text),
    Column("priority", String(8)),
    Column("category", String(16)),
    Column("observed_at", UTCDateTime),
    Column("referred_on", Date, nullable=True),
    Column("relative_phrase", String(100)),
    Column("source_message_ids", JSON),
    Column("status", String(16)),
    Column("superseded_by", Integer, ForeignKey("observations.id"), nullable=True),
    Column("generation", Integer),
    Column("author", String(100)),
    Column("tokens", Integer),
    Column("memory_item_id", Integer, nullable=True),
    Column("created_at", UTCDateTime),
)

# How far the observer read each conversation: without it an import would be read again.
OBSERVE_CURSORS = Table(
    "observe_cursors",
    _META,
    Column("conversation_id", Integer, ForeignKey("conversations.id"), primary_key=True),
    Column("observed_through_message_id", Integer),
    Column("updated_at", UTCDateTime),
)

# The gateway's PersonaState history: one for everyone, so carried in every export.
PERSONA_VERSIONS = Table(
    "persona_versions",
    _META,
    Column("id", Integer, primary_key=True),
    Column("version", Integer),
    Column("state", JSON),
    Column("source", String(32)),
    Column("reason", String(300)),
    Column("created_at", UTCDateTime),
)

PERSONA_RULES = Table(
    "persona_rules",
    _META,
    Column("id", Integer, primary_key=True),
    Column("text", Text),
    Column("status", String(16)),
    Column("person_id", Integer, ForeignKey("people.id"), nullable=True),
    Column("source_message_id", Integer, ForeignKey("messages.id"), nullable=True),
    Column("decided_version", Integer, nullable=True),
    Column("proposed_at", UTCDateTime),
    Column("decided_at", UTCDateTime, nullable=True),
)
