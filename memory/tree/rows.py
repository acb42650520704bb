"""The memory tree's reads and writes, as plain Core statements (run by ``Store.read``
and ``Store.write``, in the store's reader and writer threads on SQLite).

An update is a few statements: the queued items with their vectors, the changed
leaves' sentences, then the touched nodes written and their new versions added in
one transaction. Through an ORM session each statement was several hops between
the event loop and aiosqlite's thread, and the unit of work on top: about half of a
small person's update (17 ms of CPU) went there.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, bindparam, delete, func, insert, select, update
from sqlalchemy.engine import Connection

from memory.models import MemoryItem
from memory.tree.models import TreeNode, TreeNodeVersion
from memory.tree.view import NodeView, node_view
from memory.types import ItemStatus, ItemType

NODES = cast(Table, TreeNode.__table__)
VERSIONS = cast(Table, TreeNodeVersion.__table__)
_ITEMS = cast(Table, MemoryItem.__table__)
# Ids per IN list (SQLite's variable limit is far above; a statement stays small).
CHUNK = 5000
# Nodes written per statement of a large write, with ``pause`` between them (a rebuild
# writes ~4,700 nodes at 100k items: 0.33 s of this thread's Python in one go).
WRITE_CHUNK = 250


def read_nodes(connection: Connection, person_id: int) -> list[Any]:
    """The person's nodes, every column."""
    return list(connection.execute(select(NODES).where(NODES.c.person_id == person_id)).all())


def count_items(connection: Connection, person_id: int, *, episodes: bool) -> int:
    """How many of the person's items a full build would read (active, embedded)."""
    where = [
        _ITEMS.c.person_id == person_id,
        _ITEMS.c.status == ItemStatus.ACTIVE,
        _ITEMS.c.embedding.is_not(None),
    ]
    if not episodes:
        where.append(_ITEMS.c.type != ItemType.EPISODE)
    query = select(func.count()).select_from(_ITEMS).where(*where)
    return int(connection.execute(query).scalar_one())


def read_versions(connection: Connection, person_id: int, keys: Sequence[str]) -> list[Any]:
    """These nodes' versions, by key and version."""
    out: list[Any] = []
    for start in range(0, len(keys), CHUNK):
        part = list(keys[start : start + CHUNK])
        out.extend(
            connection.execute(
                select(VERSIONS)
                .where(VERSIONS.c.person_id == person_id, VERSIONS.c.key.in_(part))
                .order_by(VERSIONS.c.key, VERSIONS.c.version)
            )
        )
    return out


def read_items(
    connection: Connection,
    person_id: int,
    ids: Sequence[int],
    *,
    active_only: bool,
    episodes: bool,
    with_vectors: bool,
) -> list[Any]:
    """The leaves' columns of these items of this person (id, type, content, speaker,
    said at, conversation, and the stored vector with ``with_vectors``: then only the
    embedded ones); not in any order.

    Looked up by id alone, the person, status and type checked here: with them in the
    WHERE clause SQLite chose a person index over the id list and read every item of
    the person (12 ms of an update's 34 at 100k items)."""
    wanted = [
        _ITEMS.c.id,
        _ITEMS.c.type,
        _ITEMS.c.content,
        _ITEMS.c.speaker,
        _ITEMS.c.occurred_at,
        _ITEMS.c.conversation_id,
        *([_ITEMS.c.embedding] if with_vectors else []),
    ]
    checked = [_ITEMS.c.person_id, _ITEMS.c.status]
    out: list[Any] = []
    for start in range(0, len(ids), CHUNK):
        part = list(ids[start : start + CHUNK])
        for row in connection.execute(select(*wanted, *checked).where(_ITEMS.c.id.in_(part))):
            kept = tuple(row[: len(wanted)])
            if row.person_id != person_id or (with_vectors and kept[-1] is None):
                continue
            if active_only and row.status != ItemStatus.ACTIVE:
                continue
            if not episodes and row.type == ItemType.EPISODE:
                continue
            out.append(kept)
    return out


@dataclass(frozen=True)
class NodeWrite:
    """One node as a build or an update made it, to be written over what is stored."""

    key: str
    level: int
    children: list[str]
    items: list[int]
    # Extractive quotes as stored ([iso date, speaker, sentence, item id]).
    quotes: list[list[object]]
    summary: str
    model: str
    first_at: datetime | None
    last_at: datetime | None
    vector: bytes | None
    # None: keep the stored parents (an update that did not move the node).
    parents: list[str] | None


_KEPT = (
    NODES.c.id,
    NODES.c.key,
    NODES.c.parent_keys,
    NODES.c.item_ids,
    NODES.c.child_keys,
    NODES.c.summary,
    NODES.c.quotes,
    NODES.c.model,
    NODES.c.version,
    NODES.c.corrected,
    NODES.c.updated_at,
)


def write_nodes(
    connection: Connection,
    person_id: int,
    nodes: Sequence[NodeWrite],
    *,
    reason: str,
    replace_all: bool,
    now: datetime,
    pause: Callable[[], object] | None = None,
) -> tuple[int, list[NodeView]]:
    """Write ``nodes`` over the stored ones (with ``replace_all`` the stored nodes not
    among them are deleted; their versions stay) and a version for each node whose
    summary, model or members changed: nothing is overwritten silently. A summary a
    person corrected is kept (only the members move). How many versions were written,
    and the rows as written. ``pause`` is called between chunks of ``WRITE_CHUNK``
    nodes, inside the one transaction (the nightly's: while a pack is under way, this
    thread lets go of the GIL; memory/pack_activity.py)."""
    query = select(*_KEPT).where(NODES.c.person_id == person_id)
    existing: dict[str, Any] = {}
    keys = [n.key for n in nodes]
    if replace_all:
        existing = {row.key: row for row in connection.execute(query)}
    else:
        for start in range(0, len(keys), CHUNK):
            part = keys[start : start + CHUNK]
            existing.update(
                {row.key: row for row in connection.execute(query.where(NODES.c.key.in_(part)))}
            )
    updates: list[dict[str, Any]] = []
    inserts: list[dict[str, Any]] = []
    versions: list[dict[str, Any]] = []
    written: list[NodeView] = []
    count = 0
    for n, node in enumerate(nodes):
        if n and n % WRITE_CHUNK == 0:
            count += _flush(connection, updates, inserts, versions)
            if pause is not None:
                pause()
        row = existing.pop(node.key, None)
        if node.parents is not None:
            parents = node.parents
        else:
            parents = list(row.parent_keys or []) if row is not None and not replace_all else []
        summary, model, quotes = node.summary, node.model, node.quotes
        version = 0
        if row is not None:
            # Members are the items and the children (the root's are its topics only).
            changed = (
                row.summary != node.summary
                or row.model != node.model
                or list(row.item_ids or []) != node.items
                or sorted(row.child_keys or []) != sorted(node.children)
            )
            version = row.version
            if row.corrected or not changed:
                # A person's correction outlives rebuilds: only the members change.
                summary, model, quotes = row.summary, row.model, list(row.quotes or [])
                changed = False
        else:
            changed = True
        values: dict[str, Any] = {
            "level": node.level,
            "parent_keys": parents,
            "item_ids": node.items,
            "child_keys": node.children,
            "summary": summary,
            "quotes": quotes,
            "model": model,
            "first_at": node.first_at,
            "last_at": node.last_at,
            "vector": node.vector,
            "version": version + 1 if changed else version,
            "updated_at": now if changed or row is None else row.updated_at,
        }
        if changed:
            versions.append(
                {
                    "person_id": person_id,
                    "key": node.key,
                    "version": values["version"],
                    "summary": summary,
                    "item_ids": node.items,
                    "child_keys": node.children,
                    "model": model,
                    "reason": reason,
                    "written_at": now,
                }
            )
        if row is None:
            inserts.append({"person_id": person_id, "key": node.key, "corrected": False, **values})
        else:
            updates.append({"node_id": row.id, **values})
        written.append(
            node_view(
                node.key,
                node.level,
                summary,
                node.items,
                node.children,
                parents,
                quotes,
                model,
                values["version"],
                node.first_at,
                node.last_at,
                node.vector,
            )
        )
    count += _flush(connection, updates, inserts, versions)
    if replace_all and existing:
        gone = [row.id for row in existing.values()]
        for start in range(0, len(gone), CHUNK):
            connection.execute(delete(NODES).where(NODES.c.id.in_(gone[start : start + CHUNK])))
    return count, written


def _flush(
    connection: Connection,
    updates: list[dict[str, Any]],
    inserts: list[dict[str, Any]],
    versions: list[dict[str, Any]],
) -> int:
    """Execute what ``write_nodes`` gathered so far and empty the lists; how many
    versions that wrote."""
    if updates:
        connection.execute(update(NODES).where(NODES.c.id == bindparam("node_id")), updates)
    if inserts:
        connection.execute(insert(NODES), inserts)
    if versions:
        connection.execute(insert(VERSIONS), versions)
    done = len(versions)
    updates.clear()
    inserts.clear()
    versions.clear()
    return done
