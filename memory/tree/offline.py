"""A person's tree planned whole from the SQLite file, in the nightly's job process.

The nightly rebuild (memory/tree/service.py) used to read every leaf, rank every
leaf's lines and summarise every cluster in the serving process's threads: at 100k
items ~8 s of Python that made each pack overlapping it wait for the GIL at every
hand-off between its threads (docs/DESIGN.md, "The tree's rebuild in the nightly").
``plan`` does all of it where the job's other CPU-bound steps run
(memory/jobs/offload.py): it opens the database file itself (read only: SQLite's
WAL lets it read beside the gateway's writers), builds the tree, and returns only
what is written — each node's key, level, members, lines and vector. The serving
process then writes that in one transaction. PostgreSQL stays on the in-process path:
the child would need a synchronous driver the gateway does not install.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, tzinfo
from typing import Any

import numpy as np
from numpy.typing import NDArray
from sqlalchemy import Connection, create_engine, select
from sqlalchemy.pool import NullPool

from gateway.clock import local_day
from memory.embed import from_blob
from memory.models import MemoryItem
from memory.tree import build as tb
from memory.tree.view import aware
from memory.types import ItemStatus, ItemType

# Node to write: key, level, children, items, quotes, first and last date.
Spec = tuple[str, int, list[str], list[int], list[tb.Quote], datetime | None, datetime | None]
# Vectors read a chunk of ids at a time (SQLite's bound-parameter limit).
CHUNK = 5000


@dataclass
class Plan:
    """What a rebuild writes: the nodes, their vectors, and each node's parents."""

    specs: list[Spec]
    vectors: dict[str, NDArray[np.float32]]
    parents: dict[str, list[str]]


def leaf_key(
    kind: ItemType,
    item_id: int,
    said: datetime,
    speaker: str | None,
    conversation: int | None,
    zone: tzinfo,
) -> str:
    """An item's own leaf, or an episode's note: one speaker's episodes of one day."""
    if kind != ItemType.EPISODE:
        return f"item:{item_id}"
    return f"note:{conversation or 0}:{local_day(aware(said), zone).isoformat()}:{speaker or ''}"


def read_leaf_rows(
    connection: Connection, person_id: int, *, episodes: bool
) -> tuple[list[Any], dict[int, NDArray[np.float32]]]:
    """The person's embedded active items in date order, and their vectors by id."""
    kinds = () if episodes else (MemoryItem.type != ItemType.EPISODE,)
    rows = list(
        connection.execute(
            select(
                MemoryItem.id,
                MemoryItem.type,
                MemoryItem.content,
                MemoryItem.speaker,
                MemoryItem.occurred_at,
                MemoryItem.conversation_id,
            )
            .where(
                MemoryItem.person_id == person_id,
                MemoryItem.status == ItemStatus.ACTIVE,
                MemoryItem.embedding.is_not(None),
                *kinds,
            )
            .order_by(MemoryItem.occurred_at, MemoryItem.id)
        )
    )
    ids = [int(r[0]) for r in rows]
    found: dict[int, NDArray[np.float32]] = {}
    for start in range(0, len(ids), CHUNK):
        part = ids[start : start + CHUNK]
        for item_id, blob in connection.execute(
            select(MemoryItem.id, MemoryItem.embedding).where(
                MemoryItem.id.in_(part), MemoryItem.embedding.is_not(None)
            )
        ):
            if blob is not None:
                found[int(item_id)] = from_blob(blob)
    return rows, found


def leaves_of(
    rows: Sequence[Any], found: Mapping[int, NDArray[np.float32]], zone: tzinfo
) -> list[tb.Leaf]:
    """Level 0 from ``read_leaf_rows``: an item a leaf, a day's episodes a note."""
    leaves: list[tb.Leaf] = []
    notes: dict[str, tuple[list[int], list[tb.Quote], list[Any], str]] = {}
    for item_id, kind, content, speaker, said, conversation in rows:
        if item_id not in found:
            continue
        at = aware(said)
        quotes = tb.quotes_of(int(item_id), content, at, speaker or "")
        if kind != ItemType.EPISODE:
            raw = found[item_id]
            leaves.append(
                tb.Leaf(f"item:{item_id}", [int(item_id)], quotes, tb.unit(raw), speaker, raw)
            )
            continue
        key = leaf_key(kind, int(item_id), at, speaker, conversation, zone)
        ids, qs, vectors, _ = notes.setdefault(key, ([], [], [], speaker or ""))
        ids.append(int(item_id))
        qs.extend(quotes)
        vectors.append(found[item_id])
    for key, (ids, qs, vectors, speaker) in notes.items():
        mean = np.mean(np.stack(vectors), axis=0).astype(np.float32)
        leaves.append(tb.Leaf(key, ids, qs, tb.unit(mean), speaker, mean))
    return leaves


def specs_of(built: tb.Built) -> list[Spec]:
    """Each node to write, leaves first (a leaf's lines are its best ones)."""
    specs: list[Spec] = []
    for leaf in built.leaves:
        specs.append(
            (leaf.key, 0, [], leaf.item_ids, leaf.best_lines(), leaf.first_at, leaf.last_at)
        )
    for group in [*built.clusters, *built.topics, built.root]:
        ats = [q.at for q in group.quotes]
        specs.append(
            (
                group.key,
                group.level,
                group.child_keys,
                group.item_ids,
                group.quotes,
                min(ats, default=None),
                max(ats, default=None),
            )
        )
    return specs


def parents_of(built: tb.Built) -> dict[str, list[str]]:
    """Each node's parents: a leaf may sit in two clusters."""
    parents: dict[str, list[str]] = {}
    for group in [*built.clusters, *built.topics, built.root]:
        for child in group.child_keys:
            parents.setdefault(child, []).append(group.key)
    return parents


def plan_built(built: tb.Built) -> Plan:
    """What ``built`` writes."""
    return Plan(specs_of(built), built.vectors(), parents_of(built))


def plan(
    url: str,
    person_id: int,
    zone: tzinfo,
    *,
    episodes: bool,
    cluster_max: int,
    topic_max: int,
    old: Mapping[str, tuple[int, set[int]]],
) -> Plan:
    """The person's tree built afresh from the SQLite database at ``url`` (a plain
    ``sqlite:///`` URL); ``old``: the stored nodes' levels and items, whose keys the
    rebuilt clusters and topics take (``tb.inherit_keys``)."""
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as connection:
            rows, found = read_leaf_rows(connection, person_id, episodes=episodes)
    finally:
        engine.dispose()
    built = tb.build(leaves_of(rows, found, zone), cluster_max, topic_max)
    tb.inherit_keys(built, old)
    return plan_built(built)
