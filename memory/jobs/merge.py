"""The nightly merge of near-duplicates, and its undoing (issue 21).

Per person, the active non-episode items (facts, preferences, observations,
insights...) embedded by the current model are put in a throwaway hnswlib
index, and each asks it for its ``merge_neighbours``
nearest: the pairs above ``merge_cosine`` among those are the candidates
(n log n; all pairs, as first built, took minutes at 100k items). Groups form
around survivors, best first (confidence, then priority, accesses, newest):
each item not yet taken takes the untaken items above ``merge_cosine`` that
the conflict guard
(memory/jobs/guard.py) finds equal in numbers, dates and names. The others
are superseded by the survivor (status ``superseded``, ``superseded_by_id``),
never deleted; the survivor takes the union of their provenance and the sum
of their accesses and reinforcement (its confirmations). Each merge is a row
of ``memory_merges`` holding what the survivor was, so ``unmerge`` gives it
all back.

Where the work runs (memory/jobs/offload.py): the candidates are read here
a page at a time, and the k-NN and the grouping (pure Python over the pairs,
the guard's regular expressions) run in ``CpuWork``'s process, so the packs
served meanwhile never wait for this process's GIL behind them. The writes
stay here, a few statements per batch (executemany), not a few per merge; each
page read and each batch starts between packs (memory/pack_activity.py).

Resumable: merges are written a batch at a time, each batch one transaction
that re-checks every item is still active, and the next run reads what is
left from the store; a run killed mid-way loses or doubles nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any

import numpy as np
from sqlalchemy import Connection, bindparam, insert, select, update

from memory.jobs.merge_plan import Candidate, Found, Group, find_groups
from memory.jobs.offload import CpuWork
from memory.models import MemoryItem, MemoryMerge
from memory.service import MemoryService
from memory.types import ItemStatus, ItemType

log = logging.getLogger(__name__)


class MergeError(Exception):
    """A merge that cannot be undone (already undone, or its items moved on since)."""


# Candidates read per reader call: one page's rows are turned into Python objects
# in a reader thread of the serving process, which holds its GIL meanwhile.
PAGE = 2000
# Below this many candidates a person's k-NN and grouping run in a worker thread
# whatever ``cpu_work`` says: they hold the GIL a few ms, less than a process's start
# costs in CPU (~0.3 s: the interpreter, numpy, hnswlib), which a nightly between
# each of ``bench upkeep``'s replayed sessions would pay hundreds of times.
PROCESS_FROM = 1000
# Every type but the record (episodes: the messages themselves, never merged).
MERGED_TYPES = tuple(t for t in ItemType if t is not ItemType.EPISODE)


def _candidates(
    connection: Connection, person_id: int, model: str, after: int, limit: int
) -> tuple[list[Candidate], list[bytes]]:
    """A page of the person's merge candidates after id ``after``, and their vectors'
    bytes."""
    rows = connection.execute(
        select(
            MemoryItem.id,
            MemoryItem.type,
            MemoryItem.content,
            MemoryItem.confidence,
            MemoryItem.priority,
            MemoryItem.access_count,
            MemoryItem.refers_start,
            MemoryItem.refers_end,
            MemoryItem.embedding,
        )
        .where(
            MemoryItem.person_id == person_id,
            MemoryItem.status == ItemStatus.ACTIVE,
            # Listed, not "!= episode": the (person_id, type) index then skips the
            # person's episodes (a 100k store: 37 ms a page, where 167 ms scanned them).
            MemoryItem.type.in_(MERGED_TYPES),
            MemoryItem.embedding.is_not(None),
            MemoryItem.embedding_model == model,
            MemoryItem.id > after,
        )
        .order_by(MemoryItem.id)
        .limit(limit)
    ).all()
    found = [Candidate(r[0], r[1], r[2], r[3], r[4], r[5], (r[6], r[7])) for r in rows]
    return found, [r[8] or b"" for r in rows]


async def find(
    service: MemoryService,
    person_id: int,
    threshold: float,
    k: int = 20,
    *,
    cpu: CpuWork | None = None,
    new_after: int = 0,
    process_from: int = PROCESS_FROM,
) -> Found:
    """The person's merge groups as the store holds them now (nothing is changed);
    the computation runs where ``cpu`` says (default, and for fewer than
    ``process_from`` candidates: a worker thread)."""
    embedder = service.embedder
    if embedder is None:
        return Found([], {})
    model, width = embedder.model_name, 4 * embedder.dim
    items: list[Candidate] = []
    blobs: list[bytes] = []
    after = 0
    while True:
        await service.packs.quiet()
        page, page_blobs = await service.store.read(
            partial(_candidates, person_id=person_id, model=model, after=after, limit=PAGE)
        )
        for item, blob in zip(page, page_blobs, strict=True):
            if len(blob) == width:
                items.append(item)
                blobs.append(blob)
        if len(page) < PAGE:
            break
        after = page[-1].id
    if len(items) < 2:
        return Found([], {})
    # One copy of the bytes, not an array per row.
    matrix = np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(items), -1).copy()
    work = cpu if cpu is not None and len(items) >= process_from else CpuWork("thread")
    return await work.run(find_groups, items, matrix, threshold, k, new_after)


_ITEM = (
    MemoryItem.id,
    MemoryItem.status,
    MemoryItem.source_message_ids,
    MemoryItem.access_count,
    MemoryItem.strength,
    MemoryItem.last_accessed_at,
    MemoryItem.pinned,
    MemoryItem.priority,
)
# Ids per IN list: well under SQLite's and asyncpg's bound parameter limits.
_IN_CHUNK = 900
_MERGE = (
    MemoryMerge.id,
    MemoryMerge.person_id,
    MemoryMerge.survivor_id,
    MemoryMerge.merged_ids,
    MemoryMerge.before,
    MemoryMerge.added,
    MemoryMerge.created_at,
    MemoryMerge.undone_at,
)


def _apply(connection: Connection, person_id: int, groups: Sequence[Group], at: datetime) -> int:
    """Write a batch of merges in one transaction; how many items were superseded.

    Every item is read again here (one query for the batch) and a group keeps only
    its members still active; the batch's changes go as three executemany
    statements, so its cost in this process's Python does not grow a statement
    per merge."""
    wanted = [g.survivor.id for g in groups] + [m.id for g in groups for m, _ in g.members]
    rows = {
        row.id: row
        for start in range(0, len(wanted), _IN_CHUNK)
        for row in connection.execute(
            select(*_ITEM).where(
                MemoryItem.id.in_(wanted[start : start + _IN_CHUNK]),
                MemoryItem.status == ItemStatus.ACTIVE,
            )
        )
    }
    survivors: list[dict[str, Any]] = []
    superseded: list[dict[str, Any]] = []
    records: list[dict[str, Any]] = []
    for g in groups:
        survivor = rows.get(g.survivor.id)
        if survivor is None:
            continue  # moved on since it was read (forgotten, superseded)
        members = [(m, cos) for m, cos in g.members if m.id in rows]
        if not members:
            continue
        sources = list(survivor.source_message_ids)
        for m, _ in members:
            sources.extend(s for s in rows[m.id].source_message_ids if s not in sources)
        accesses = sum(rows[m.id].access_count for m, _ in members)
        strength = sum(rows[m.id].strength for m, _ in members)
        last = [survivor.last_accessed_at] + [rows[m.id].last_accessed_at for m, _ in members]
        seen = [t for t in last if t is not None]
        before = {
            "source_message_ids": list(survivor.source_message_ids),
            "pinned": survivor.pinned,
            "priority": survivor.priority,
            "last_accessed_at": (
                None if survivor.last_accessed_at is None else survivor.last_accessed_at.isoformat()
            ),
        }
        survivors.append(
            {
                "b_id": survivor.id,
                "b_sources": sources,
                "b_accesses": accesses,
                "b_strength": strength,
                "b_last": max(seen) if seen else None,
                "b_pinned": survivor.pinned or any(rows[m.id].pinned for m, _ in members),
                "b_priority": max([survivor.priority] + [rows[m.id].priority for m, _ in members]),
            }
        )
        ids = [m.id for m, _ in members]
        superseded.extend({"b_id": i, "b_survivor": survivor.id} for i in ids)
        records.append(
            {
                "person_id": person_id,
                "survivor_id": survivor.id,
                "merged_ids": ids,
                "similarities": [round(cos, 4) for _, cos in members],
                "before": before,
                "added": {"access_count": accesses, "strength": strength},
                "created_at": at,
            }
        )
    if not survivors:
        return 0
    column = MemoryItem.__table__.c
    connection.execute(
        update(MemoryItem)
        .where(MemoryItem.id == bindparam("b_id"))
        .values(
            source_message_ids=bindparam("b_sources", type_=column.source_message_ids.type),
            access_count=MemoryItem.access_count + bindparam("b_accesses"),
            strength=MemoryItem.strength + bindparam("b_strength"),
            last_accessed_at=bindparam("b_last", type_=column.last_accessed_at.type),
            pinned=bindparam("b_pinned", type_=column.pinned.type),
            priority=bindparam("b_priority", type_=column.priority.type),
        ),
        survivors,
    )
    connection.execute(
        update(MemoryItem)
        .where(MemoryItem.id == bindparam("b_id"))
        .values(
            status=ItemStatus.SUPERSEDED,
            superseded_by_id=bindparam("b_survivor"),
            status_changed_at=at,
        ),
        superseded,
    )
    connection.execute(insert(MemoryMerge), records)
    return len(superseded)


async def apply(
    service: MemoryService, person_id: int, groups: Sequence[Group], at: datetime
) -> int:
    """One batch of merges: committed together, then out of the person's indexes;
    started between packs (memory/pack_activity.py)."""
    await service.packs.quiet()
    # A batch of merges, many rows: alone, so no turn's write waits for its commit.
    merged = await service.store.write(lambda c: _apply(c, person_id, groups, at), alone=True)
    # After the commit: an index is a cache the store corrects at its next opening.
    await service.unrecall(person_id, [m.id for g in groups for m, _ in g.members])
    return merged


@dataclass(frozen=True)
class MergeRecord:
    id: int
    person_id: int
    survivor_id: int
    merged_ids: tuple[int, ...]
    created_at: datetime
    undone_at: datetime | None


def _as_utc(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _unmerge(connection: Connection, merge_id: int, at: datetime) -> MergeRecord:
    merge = connection.execute(select(*_MERGE).where(MemoryMerge.id == merge_id)).one_or_none()
    if merge is None:
        raise MergeError(f"no merge {merge_id}")
    if merge.undone_at is not None:
        raise MergeError(f"merge {merge_id} was already undone")
    survivor = connection.execute(
        select(*_ITEM).where(MemoryItem.id == merge.survivor_id)
    ).one_or_none()
    if survivor is None or survivor.status is not ItemStatus.ACTIVE:
        raise MergeError(
            f"merge {merge_id}: item {merge.survivor_id} is no longer active; "
            "undo what replaced it first"
        )
    held = connection.execute(
        select(MemoryItem.id).where(
            MemoryItem.id.in_(merge.merged_ids),
            MemoryItem.status == ItemStatus.SUPERSEDED,
            MemoryItem.superseded_by_id == merge.survivor_id,
        )
    ).scalars()
    moved = set(merge.merged_ids) - set(held)
    if moved:
        raise MergeError(f"merge {merge_id}: items {sorted(moved)} changed since; not undone")
    before: dict[str, Any] = merge.before
    added: dict[str, Any] = merge.added
    last: datetime | None = survivor.last_accessed_at
    # Use since the merge stays; otherwise the survivor's own last access comes back.
    if last is None or _as_utc(last) <= _as_utc(merge.created_at):
        last = (
            None
            if before["last_accessed_at"] is None
            else datetime.fromisoformat(before["last_accessed_at"])
        )
    connection.execute(
        update(MemoryItem)
        .where(MemoryItem.id == survivor.id)
        .values(
            source_message_ids=before["source_message_ids"],
            pinned=before["pinned"],
            priority=before["priority"],
            last_accessed_at=last,
            access_count=max(0, survivor.access_count - int(added["access_count"])),
            strength=survivor.strength - float(added["strength"]),
        )
    )
    connection.execute(
        update(MemoryItem)
        .where(MemoryItem.id.in_(merge.merged_ids))
        .values(status=ItemStatus.ACTIVE, superseded_by_id=None, status_changed_at=at)
    )
    connection.execute(update(MemoryMerge).where(MemoryMerge.id == merge_id).values(undone_at=at))
    return MergeRecord(
        merge.id,
        merge.person_id,
        merge.survivor_id,
        tuple(merge.merged_ids),
        merge.created_at,
        at,
    )


async def unmerge(service: MemoryService, merge_id: int, at: datetime | None = None) -> MergeRecord:
    """Undo one merge: its superseded items are active again and back in the indexes,
    and the survivor has its own provenance, pin, priority and counts back."""
    when = at or datetime.now(UTC)
    record = await service.store.write(lambda c: _unmerge(c, merge_id, when))
    await service.recall_again(record.person_id, record.merged_ids)
    await service._reindex(record.person_id, record.merged_ids)
    log.info("memory: merge %d undone; items %s active again", merge_id, record.merged_ids)
    return record


async def merges_of(
    service: MemoryService, survivor_ids: Sequence[int]
) -> dict[int, list[MergeRecord]]:
    """The merges not undone whose survivors are these items, by survivor."""
    if not survivor_ids:
        return {}
    async with service.store.reader() as session:
        rows = (
            await session.scalars(
                select(MemoryMerge)
                .where(
                    MemoryMerge.survivor_id.in_(list(survivor_ids)),
                    MemoryMerge.undone_at.is_(None),
                )
                .order_by(MemoryMerge.id)
            )
        ).all()
    found: dict[int, list[MergeRecord]] = {}
    for m in rows:
        found.setdefault(m.survivor_id, []).append(
            MergeRecord(m.id, m.person_id, m.survivor_id, tuple(m.merged_ids), m.created_at, None)
        )
    return found
