"""The lossless record of one person's memory: table rows as JSON lines.

``agentgw.jsonl`` holds, for one person, every row of the tables memory is made
of — the person, their identities, conversations, messages and turns, memory
items (with their links: ``superseded_by_id``, ``pinned``, ``status``), pack
traces, and lessons (theirs and the global ones) — column by column, so an
import into an empty store writes back the very same rows and ids.

Values are converted at this edge only: times as ISO-8601, days as
``YYYY-MM-DD``, bytes (vectors) as ``{"$bytes": base64}``, enums as their
value. Lessons belong to ``persona/``, which ``memory/`` must not import: their
table is described here by the columns this record carries.
"""

from __future__ import annotations

import base64
import enum
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from sqlalchemy import (
    Boolean,
    Column,
    Date,
    Enum,
    ForeignKey,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    select,
)
from sqlalchemy.engine import Connection

import memory.models  # noqa: F401  (the memory tables join the core's metadata)
from gateway.store.models import Base, UTCDateTime

FORMAT = "agentgw-memory"
VERSION = 1

# The lessons table, as far as this record reads and writes it (persona/models.py).
_LESSONS_META = MetaData()
LESSONS = Table(
    "lessons",
    _LESSONS_META,
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


def tables() -> list[Table]:
    """The tables of the record, parents before children."""
    core = Base.metadata.tables
    names = (
        "people",
        "identities",
        "conversations",
        "messages",
        "turns",
        "memory_items",
        "memory_traces",
    )
    return [*(core[n] for n in names), LESSONS]


# What makes a row the same row in another store (after its references are mapped):
# importing an export twice finds these and adds nothing.
SAME_ROW: dict[str, tuple[str, ...]] = {
    "people": ("created_at", "display_name"),
    "identities": ("channel", "external_id"),
    "conversations": ("identity_id",),
    "messages": ("conversation_id", "created_at", "text"),
    "turns": ("inbound_message_id",),
    "memory_items": ("person_id", "type", "content", "created_at"),
    "memory_traces": ("person_id", "created_at", "query"),
    "lessons": ("text", "created_at"),
}

# Ids kept inside JSON columns: which table they name.
ID_LISTS: dict[tuple[str, str], str] = {
    ("memory_items", "source_message_ids"): "messages",
    ("memory_traces", "kept_ids"): "memory_items",
}


@dataclass(frozen=True)
class Record:
    """One row: its table's name and its values as Python objects."""

    table: str
    row: dict[str, Any]


def _plain(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, bytes | memoryview):
        return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, enum.Enum):
        return value.value
    return value


def to_line(record: Record) -> str:
    row = {k: _plain(v) for k, v in record.row.items()}
    return json.dumps({"table": record.table, "row": row}, sort_keys=True, ensure_ascii=False)


def header_line(person_id: int) -> str:
    return json.dumps(
        {"format": FORMAT, "version": VERSION, "person_id": person_id}, sort_keys=True
    )


def from_plain(table: Table, row: dict[str, Any]) -> dict[str, Any]:
    """A row read from a JSON line, as the table's columns take it."""
    out: dict[str, Any] = {}
    for name, value in row.items():
        if name not in table.c:
            raise ValueError(f"unknown column {table.name}.{name}")
        column_type = table.c[name].type
        if value is None:
            out[name] = None
        elif isinstance(column_type, UTCDateTime):
            out[name] = datetime.fromisoformat(value)
        elif isinstance(column_type, Date):
            out[name] = date.fromisoformat(value)
        elif isinstance(value, dict) and set(value) == {"$bytes"}:
            out[name] = base64.b64decode(value["$bytes"])
        elif isinstance(column_type, Enum) and column_type.enum_class is not None:
            out[name] = column_type.enum_class(value)
        else:
            out[name] = value
    return out


def _rows(connection: Connection, table: Table, where: Any) -> list[Record]:
    found = connection.execute(select(table).where(where).order_by(table.c.id))
    return [Record(table.name, dict(row._mapping)) for row in found]


def read_person(connection: Connection, person_id: int) -> list[Record]:
    """Every row of the record for one person, parents first, each table by id."""
    t = {table.name: table for table in tables()}
    people, identities = t["people"], t["identities"]
    conversations, turns = t["conversations"], t["turns"]
    records = _rows(connection, people, people.c.id == person_id)
    if not records:
        return []
    records += _rows(connection, identities, identities.c.person_id == person_id)
    records += _rows(connection, conversations, conversations.c.person_id == person_id)
    records += _rows(connection, t["messages"], t["messages"].c.person_id == person_id)
    mine = select(conversations.c.id).where(conversations.c.person_id == person_id)
    records += _rows(connection, turns, turns.c.conversation_id.in_(mine))
    records += _rows(connection, t["memory_items"], t["memory_items"].c.person_id == person_id)
    records += _rows(connection, t["memory_traces"], t["memory_traces"].c.person_id == person_id)
    lessons = t["lessons"]
    records += _rows(
        connection, lessons, (lessons.c.person_id == person_id) | lessons.c.person_id.is_(None)
    )
    return records


def references(table: Table) -> dict[str, str]:
    """Column name -> the table its ids name (foreign keys)."""
    return {
        column.name: next(iter(column.foreign_keys)).target_fullname.split(".")[0]
        for column in table.columns
        if column.foreign_keys
    }


def person_ids(connection: Connection) -> list[int]:
    people = Base.metadata.tables["people"]
    return [int(i) for i in connection.execute(select(people.c.id).order_by(people.c.id)).scalars()]


def by_table(records: Iterable[Record]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {t.name: [] for t in tables()}
    for record in records:
        out[record.table].append(record.row)
    return out


def ordered(records: Sequence[Record]) -> list[Record]:
    """Parents before children (the order of ``tables()``), each table in file order."""
    rank = {t.name: n for n, t in enumerate(tables())}
    return sorted(records, key=lambda r: rank[r.table])
