"""The lossless record of one person's memory: table rows as JSON lines.

``agentgw.jsonl`` holds, for one person, every row of the tables memory is made
of — the person, their identities, conversations, messages and turns, memory
items (with their links: ``superseded_by_id``, ``pinned``, ``status``), pack
traces, lessons and persona rules (theirs and the global ones), observations and
the observer's cursors, the persona's versions, triggers, working memory,
decisions, handoffs, profiles, category summaries, merges, promotions and the
memory tree — column by column, so an import into an empty store writes back
the very same rows and ids. ``NOT_MEMORY`` names the tables left out and why.

Values are converted at this edge only: times as ISO-8601, days as
``YYYY-MM-DD``, bytes (vectors) as ``{"$bytes": base64}``, enums as their
value. The persona loop's tables belong to ``persona/``, which ``memory/`` must
not import: they are declared in ``persona_tables.py``.
"""

from __future__ import annotations

import base64
import enum
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from sqlalchemy import Date, DateTime, Enum, Table, select, true
from sqlalchemy.engine import Connection
from sqlalchemy.sql.elements import ColumnElement

import memory.continuity.handoff_models
import memory.continuity.models
import memory.models
import memory.tree.models
import memory.triggers.models  # noqa: F401  (their tables join the core's metadata)
from gateway.store.models import Base, UTCDateTime
from memory.porting.persona_tables import (
    LESSONS,
    OBSERVATIONS,
    OBSERVE_CURSORS,
    PERSONA_RULES,
    PERSONA_VERSIONS,
)

FORMAT = "agentgw-memory"
# 2 added observations, the observer's cursors, persona versions and rules, triggers,
# working memory, decisions, handoffs, profiles, category summaries, merges,
# promotions and the memory tree. A version 1 file (a subset) still reads.
VERSION = 2
READS = (1, 2)

# The tables of the record, parents before children (a row's references point up).
CORE_TABLES = (
    "people",
    "identities",
    "conversations",
    "messages",
    "turns",
    "memory_items",
    "memory_traces",
)
LATER_TABLES = (
    "triggers",
    "focus_entries",
    "decisions",
    "handoffs",
    "memory_summaries",
    "profiles",
    "memory_merges",
    "memory_promotions",
    "memory_tree_nodes",
    "memory_tree_versions",
)

# Tables of the store the record leaves out, and why (tests/test_memory_porting_tables.py
# fails on a table in neither list, so a new table must be placed in one).
NOT_MEMORY: dict[str, str] = {
    "link_codes": "short-lived codes that join identities; meaningless in another store",
    "link_attempts": "rate limiting of link codes",
    "access_refusals": "who was refused, for the operator",
    "store_info": "the store's own bookkeeping",
    "turn_costs": "what each turn cost (telemetry)",
    "budget_modes": "the month's spending mode (telemetry)",
    "upkeep_jobs": "the upkeep calendar of this gateway",
    "upkeep_runs": "the upkeep calendar's runs (telemetry)",
    "cluster_members": "the gateway processes of a cluster, live now (issue 25)",
    "cluster_leases": "which process runs each singleton now (issue 25)",
    "sync_scores": "the judge's verdicts on replies (telemetry of the persona loop)",
    "persona_actions": "anchors and rebases done to prompts (telemetry)",
    "observe_runs": "the observer's runs and their cost (telemetry)",
    "lesson_scans": "a cursor over sync_scores, which are not carried",
}


def tables() -> list[Table]:
    """The tables of the record, parents before children."""
    core = Base.metadata.tables
    return [
        *(core[n] for n in CORE_TABLES),
        LESSONS,
        OBSERVATIONS,
        OBSERVE_CURSORS,
        PERSONA_VERSIONS,
        PERSONA_RULES,
        *(core[n] for n in LATER_TABLES),
    ]


def key_column(table: Table) -> str:
    """The primary key's column: ``id``, or the parent's id for a one-per-parent table."""
    (column,) = table.primary_key.columns
    return str(column.name)


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
    "observations": ("person_id", "created_at", "text"),
    "observe_cursors": ("conversation_id",),
    "persona_versions": ("version",),
    "persona_rules": ("text", "proposed_at"),
    "triggers": ("person_id", "created_at", "trigger_date", "phrase"),
    "focus_entries": ("person_id", "created_at", "action", "text"),
    "decisions": ("person_id", "created_at", "text"),
    "handoffs": ("person_id", "created_at", "text"),
    "memory_summaries": ("person_id", "category", "version"),
    "profiles": ("person_id", "created_at"),
    "memory_merges": ("person_id", "created_at", "survivor_id"),
    "memory_promotions": ("item_id",),
    "memory_tree_nodes": ("person_id", "key"),
    "memory_tree_versions": ("person_id", "key", "version"),
}

# One history for the whole gateway: written only into a store that has none of it
# (importing a person must not replace the persona of a gateway that has one).
WHOLE_STORE = frozenset({"persona_versions"})

# Ids kept inside JSON columns: which table they name.
ID_LISTS: dict[tuple[str, str], str] = {
    ("memory_items", "source_message_ids"): "messages",
    ("memory_items", "source_item_ids"): "memory_items",
    ("memory_traces", "kept_ids"): "memory_items",
    ("observations", "source_message_ids"): "messages",
    ("triggers", "memory_ids"): "memory_items",
    ("memory_summaries", "item_ids"): "memory_items",
    ("memory_merges", "merged_ids"): "memory_items",
    ("memory_tree_nodes", "item_ids"): "memory_items",
    ("memory_tree_versions", "item_ids"): "memory_items",
}

# Ids in plain integer columns (no foreign key in the schema): which table they name.
SOFT_REFS: dict[tuple[str, str], str] = {
    ("memory_items", "observation_id"): "observations",
    ("memory_items", "replaced_by_id"): "memory_items",
    ("observations", "memory_item_id"): "memory_items",
    ("observe_cursors", "observed_through_message_id"): "messages",
    ("triggers", "cancelled_by"): "messages",
    ("handoffs", "through_message_id"): "messages",
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
        elif isinstance(column_type, UTCDateTime | DateTime):
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
    key = table.c[key_column(table)]
    found = connection.execute(select(table).where(where).order_by(key))
    return [Record(table.name, dict(row._mapping)) for row in found]


def read_person(connection: Connection, person_id: int) -> list[Record]:
    """Every row of the record for one person, parents first, each table by id."""
    t = {table.name: table for table in tables()}
    people, conversations = t["people"], t["conversations"]
    records = _rows(connection, people, people.c.id == person_id)
    if not records:
        return []
    mine = select(conversations.c.id).where(conversations.c.person_id == person_id)
    items = t["memory_items"]
    my_items = select(items.c.id).where(items.c.person_id == person_id)
    for table in tables()[1:]:
        where: ColumnElement[bool]
        if table.name in ("turns", "observe_cursors"):
            where = table.c.conversation_id.in_(mine)
        elif table.name == "memory_promotions":
            where = table.c.item_id.in_(my_items)
        elif table.name in WHOLE_STORE:
            where = true()
        elif table.name in ("lessons", "persona_rules"):
            # Theirs and the ones for everyone (no person).
            where = (table.c.person_id == person_id) | table.c.person_id.is_(None)
        else:
            where = table.c.person_id == person_id
        records += _rows(connection, table, where)
    return records


def references(table: Table) -> dict[str, str]:
    """Column name -> the table its ids name (foreign keys)."""
    return {
        column.name: next(iter(column.foreign_keys)).target_fullname.split(".")[0]
        for column in table.columns
        if column.foreign_keys
    }


def all_references(table: Table) -> dict[str, str]:
    """Column name -> the table its ids name: foreign keys and ``SOFT_REFS``."""
    soft = {c: target for (name, c), target in SOFT_REFS.items() if name == table.name}
    return references(table) | soft


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
