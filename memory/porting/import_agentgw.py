"""Reading ``agentgw.jsonl`` back: the same rows, the same ids when they are free.

The whole file is checked before anything is written, then written in one
transaction: a bad line changes nothing. A row already in the store (the same
``records.SAME_ROW`` columns) is not added again, so importing twice adds
nothing. Into an empty store every id is kept, so an export of the result is
byte-identical to the one imported; where an id is taken by another row, the
row gets a new id and every reference to it (foreign keys, ``source_message_ids``,
a trace's ``kept_ids``) follows. The ANN and full-text indexes catch up with
the new rows when they are next opened (they add the store's items they lack).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Table, insert, select, text, update
from sqlalchemy.engine import Connection

from gateway.store import Store
from memory.errors import PortingError
from memory.porting.conversations import new_id as fresh_id
from memory.porting.records import (
    FORMAT,
    ID_LISTS,
    READS,
    SAME_ROW,
    WHOLE_STORE,
    Record,
    all_references,
    from_plain,
    key_column,
    ordered,
    tables,
)


@dataclass
class Imported:
    path: Path
    added: dict[str, int] = field(default_factory=dict)
    kept: int = 0
    person_id: int | None = None


def read_records(path: Path, text: str) -> tuple[int, list[Record]]:
    """The person id of the header and the rows, checked; errors name file and line."""
    by_name = {t.name: t for t in tables()}
    lines = text.splitlines()
    if not lines:
        raise PortingError(f"{path}: empty file, not an agentgw export")
    try:
        head = json.loads(lines[0])
    except json.JSONDecodeError as exc:
        raise PortingError(f"{path}: line 1: not JSON ({exc.msg})") from exc
    if not isinstance(head, dict) or head.get("format") != FORMAT:
        raise PortingError(f"{path}: line 1: not an agentgw memory export (no format header)")
    if head.get("version") not in READS:
        raise PortingError(f"{path}: line 1: export version {head.get('version')} is unknown")
    records = []
    for number, line in enumerate(lines[1:], 2):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
            table = by_name[data["table"]]
            row = from_plain(table, data["row"])
        except json.JSONDecodeError as exc:
            raise PortingError(
                f"{path}: line {number} column {exc.colno}: not JSON ({exc.msg}); "
                "is the file cut short?"
            ) from exc
        except (KeyError, TypeError, ValueError) as exc:
            raise PortingError(
                f"{path}: line {number}: not a record of the export ({exc})"
            ) from exc
        records.append(Record(table.name, row))
    people = [r for r in records if r.table == "people"]
    if len(people) != 1:
        raise PortingError(f"{path}: holds {len(people)} people, an export holds one")
    return int(people[0].row["id"]), ordered(records)


def _tree_key(key: str, maps: dict[str, dict[int, int]]) -> str:
    """A tree node's key with the ids it names translated: ``item:<item id>``,
    ``note:<conversation id>:<day>:<speaker>``; clusters, topics and the root name none."""
    kind, _, rest = key.partition(":")
    if kind == "item" and rest.isdigit():
        return f"item:{maps['memory_items'].get(int(rest), int(rest))}"
    if kind == "note":
        conversation, _, tail = rest.partition(":")
        if conversation.isdigit():
            number = int(conversation)
            return f"note:{maps['conversations'].get(number, number)}:{tail}"
    return key


def _map_ids(table: str, row: dict[str, Any], maps: dict[str, dict[int, int]]) -> dict[str, Any]:
    """``row`` with the ids it names inside its values translated to this store's."""
    out = dict(row)
    for column, target in ID_LISTS.items():
        if column[0] == table and out.get(column[1]):
            out[column[1]] = [maps[target].get(i, i) for i in out[column[1]]]
    items = maps["memory_items"]
    if table in ("memory_tree_nodes", "memory_tree_versions"):
        out["key"] = _tree_key(out["key"], maps)
        # A version's children (absent from a file written before migration 0035).
        if "child_keys" in out:
            out["child_keys"] = [_tree_key(k, maps) for k in out["child_keys"] or []]
    if table == "memory_tree_nodes":
        out["parent_keys"] = [_tree_key(k, maps) for k in out.get("parent_keys") or []]
        # A quote is [iso date, speaker, sentence, item id].
        out["quotes"] = [
            [*q[:3], items.get(q[3], q[3])] if len(q) == 4 and isinstance(q[3], int) else q
            for q in out.get("quotes") or []
        ]
    if table == "profiles":
        named = {
            "item": "memory_items",
            "summary": "memory_summaries",
            "observation": "observations",
        }

        def source(ref: str) -> str:
            kind, _, number = ref.partition(":")
            if kind in named and number.isdigit():
                return f"{kind}:{maps[named[kind]].get(int(number), int(number))}"
            return ref

        out["lines"] = [
            {**line, "sources": [source(str(r)) for r in line.get("sources", [])]}
            if isinstance(line, dict)
            else line
            for line in out.get("lines") or []
        ]
    return out


def _known_rows(
    connection: Connection, table: Table, person_id: int | None
) -> dict[tuple[Any, ...], Any]:
    """The identifying columns of the rows that could be the same as imported ones (the
    person's, where the table names a person), read once: one query per table, not
    one per row, which made a 5,000-item import quadratic (36 s)."""
    key = table.c[key_column(table)]
    query = select(key, *(table.c[c] for c in SAME_ROW[table.name]))
    if "person_id" in table.c:
        mine = table.c.person_id == person_id
        shared = table.name in ("lessons", "persona_rules")
        query = query.where(mine | table.c.person_id.is_(None) if shared else mine)
    return {tuple(row[1:]): row[0] for row in connection.execute(query)}


def write_records(
    connection: Connection, records: list[Record], person_id: int | None
) -> tuple[int, dict[str, int], int]:
    """Insert the rows (one transaction, the caller's); returns the person's id here,
    the rows added per table and the rows already present."""
    by_name = {t.name: t for t in tables()}
    rank = {t.name: n for n, t in enumerate(tables())}
    maps: dict[str, dict[int, int]] = {name: {} for name in by_name}
    deferred: list[tuple[str, int, str, int]] = []
    added: dict[str, int] = {}
    # Per table: the identifying columns of the rows already here -> their key.
    known: dict[str, dict[tuple[Any, ...], Any]] = {}
    # A gateway-wide history already begun here is the store's own: not joined.
    own_history = {
        name
        for name in WHOLE_STORE
        if connection.execute(select(by_name[name].c[key_column(by_name[name])]).limit(1)).first()
    }
    kept = 0
    for record in records:
        table = by_name[record.table]
        pk = key_column(table)
        refs = all_references(table)
        row = _map_ids(record.table, record.row, maps)
        if record.table in own_history:
            kept += 1
            continue
        old_id = int(row[pk])
        if record.table == "people" and person_id is not None:
            if (
                connection.execute(select(table.c.id).where(table.c.id == person_id)).first()
                is None
            ):
                raise PortingError(f"no person {person_id} in the store (--person)")
            maps["people"][old_id] = person_id
            kept += 1
            continue
        later = {}
        for column, target in refs.items():
            value = row.get(column)
            if value is None:
                continue
            if rank[target] >= rank[record.table] and column != pk:
                # A link inside the table, or to a table written later: set once all are in.
                later[column] = int(value)
                row[column] = None
            else:
                row[column] = maps[target].get(int(value), int(value))
        same = SAME_ROW[record.table]
        if record.table not in known:
            person = next(iter(maps["people"].values()), None)
            known[record.table] = _known_rows(connection, table, person)
        key = tuple(row[c] for c in same)
        found = known[record.table].get(key)
        if found is not None:
            if pk == "id":
                maps[record.table][old_id] = int(found)
            kept += 1
            continue
        if pk != "id":
            # One row per parent (a cursor, a promotion): its key is the mapped parent's id.
            connection.execute(insert(table).values(**row))
            known[record.table][key] = row[pk]
            added[record.table] = added.get(record.table, 0) + 1
            continue
        taken = connection.execute(select(table.c.id).where(table.c.id == old_id)).first()
        if taken is not None:
            del row["id"]
        new_id = fresh_id(connection.execute(insert(table).values(**row)))
        maps[record.table][old_id] = new_id
        known[record.table][key] = new_id
        added[record.table] = added.get(record.table, 0) + 1
        deferred.extend((record.table, new_id, c, v) for c, v in later.items())
    for name, row_id, column, value in deferred:
        table = by_name[name]
        target = all_references(table)[column]
        connection.execute(
            update(table)
            .where(table.c.id == row_id)
            .values({column: maps[target].get(value, value)})
        )
    if connection.dialect.name == "postgresql":
        # Rows written with their own ids leave a sequence behind them: the next
        # row the gateway adds would be given a taken id. (SQLite's AUTOINCREMENT
        # keeps up by itself.)
        for name in added:
            if key_column(by_name[name]) != "id":
                continue
            connection.execute(
                text(
                    f"SELECT setval(pg_get_serial_sequence('{name}', 'id'), "
                    f"(SELECT max(id) FROM {name}))"
                )
            )
    return maps["people"][next(iter(maps["people"]))], added, kept


async def import_file(store: Store, path: Path, text: str, person_id: int | None) -> Imported:
    _, records = read_records(path, text)
    # A whole export: alone, so no turn's write waits for its commit.
    person, added, kept = await store.write(
        lambda c: write_records(c, records, person_id), alone=True
    )
    return Imported(path, added, kept, person)
