"""The nightly merge of near-duplicates, and its undoing (issue 21).

Per person, the active non-episode items (facts, preferences, observations,
insights...) embedded by the current model are put in a throwaway hnswlib
index in a worker thread, and each asks it for its ``merge_neighbours``
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

Resumable: merges are written a batch at a time, each batch one transaction
that re-checks every item is still active, and the next run reads what is
left from the store; a run killed mid-way loses or doubles nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any

import numpy as np
from numpy.typing import NDArray
from sqlalchemy import Connection, insert, select, update

from memory.embed import from_blob
from memory.jobs.guard import Specifics, conflict, specifics
from memory.models import MemoryItem, MemoryMerge
from memory.service import MemoryService
from memory.types import ItemStatus, ItemType

log = logging.getLogger(__name__)


class MergeError(Exception):
    """A merge that cannot be undone (already undone, or its items moved on since)."""


@dataclass(frozen=True)
class Candidate:
    id: int
    type: ItemType
    content: str
    confidence: float
    priority: float
    access_count: int
    refers: tuple[date | None, date | None]


@dataclass
class Group:
    survivor: Candidate
    members: list[tuple[Candidate, float]] = field(default_factory=list)


@dataclass
class Found:
    groups: list[Group]
    # Pairs above the threshold the guard kept apart, by reason (number, date, name).
    conflicts: dict[str, int]


def _candidates(
    connection: Connection, person_id: int, model: str
) -> tuple[list[Candidate], NDArray[np.float32]]:
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
            MemoryItem.type != ItemType.EPISODE,
            MemoryItem.embedding.is_not(None),
            MemoryItem.embedding_model == model,
        )
        .order_by(MemoryItem.id)
    ).all()
    found = [Candidate(r[0], r[1], r[2], r[3], r[4], r[5], (r[6], r[7])) for r in rows]
    vectors = [from_blob(r[8] or b"") for r in rows]
    matrix = np.stack(vectors) if vectors else np.zeros((0, 0), np.float32)
    return found, matrix


def neighbours(
    matrix: NDArray[np.float32], threshold: float, k: int = 20
) -> list[list[tuple[int, float]]]:
    """Each row's other rows above ``threshold`` (cosine: the rows are unit vectors)
    among its ``k`` nearest, found by an hnswlib index of the rows: ~n log n, where
    all pairs were n² (minutes at 100k items). The lists are made symmetric (an ANN
    search can find j from i and miss i from j), so a survivor sees every item that
    found it. An item with more than ``k`` duplicates keeps the rest for the next
    night (each merge leaves fewer). Blocking: run it in a thread."""
    import hnswlib

    n = matrix.shape[0]
    found: list[list[tuple[int, float]]] = [[] for _ in range(n)]
    if n < 2:
        return found
    wanted = min(k, n - 1) + 1  # +1: a row finds itself first
    index = hnswlib.Index(space="ip", dim=matrix.shape[1])
    index.init_index(max_elements=n, ef_construction=max(100, 2 * wanted), M=16)
    # One thread: the gateway's packs share the machine while the nightly runs.
    index.add_items(matrix, np.arange(n), num_threads=1)
    index.set_ef(max(64, 2 * wanted))
    labels, distances = index.knn_query(matrix, k=wanted, num_threads=1)
    # hnswlib's "ip" distance is 1 - inner product.
    similarity = 1.0 - distances
    rows, cols = np.nonzero((similarity > threshold) & (labels != np.arange(n)[:, None]))
    pairs: dict[tuple[int, int], float] = {}
    for r, c in zip(rows.tolist(), cols.tolist(), strict=True):
        j = int(labels[r, c])
        pairs[(min(r, j), max(r, j))] = float(similarity[r, c])
    for (i, j), cosine in pairs.items():
        found[i].append((j, cosine))
        found[j].append((i, cosine))
    return found


def group(items: Sequence[Candidate], near: Sequence[Sequence[tuple[int, float]]]) -> Found:
    """Survivors best first, each taking its untaken neighbours the guard lets through."""
    order = sorted(
        range(len(items)),
        key=lambda i: (
            -items[i].confidence,
            -items[i].priority,
            -items[i].access_count,
            -items[i].id,
        ),
    )
    taken: set[int] = set()
    groups: list[Group] = []
    conflicts: dict[str, int] = {}
    counted: set[tuple[int, int]] = set()
    cache: dict[int, Specifics] = {}

    def spec(i: int) -> Specifics:
        if i not in cache:
            cache[i] = specifics(items[i].content, items[i].refers)
        return cache[i]

    for i in order:
        if i in taken or not near[i]:
            continue
        members: list[tuple[Candidate, float]] = []
        for j, cosine in sorted(near[i], key=lambda pair: -pair[1]):
            if j in taken:
                continue
            why = conflict(spec(i), spec(j))
            if why is not None:
                pair = (min(i, j), max(i, j))
                if pair not in counted:
                    counted.add(pair)
                    conflicts[why] = conflicts.get(why, 0) + 1
                continue
            members.append((items[j], cosine))
        if members:
            taken.add(i)
            taken.update(_index_of(items, m.id) for m, _ in members)
            groups.append(Group(items[i], members))
    return Found(groups, conflicts)


def _index_of(items: Sequence[Candidate], item_id: int) -> int:
    # Items are in id order (the query sorts them): a binary search.
    lo, hi = 0, len(items)
    while lo < hi:
        mid = (lo + hi) // 2
        if items[mid].id < item_id:
            lo = mid + 1
        else:
            hi = mid
    return lo


async def find(service: MemoryService, person_id: int, threshold: float, k: int = 20) -> Found:
    """The person's merge groups as the store holds them now (nothing is changed)."""
    embedder = service.embedder
    if embedder is None:
        return Found([], {})
    model = embedder.model_name
    items, matrix = await service.store.read(
        lambda connection: _candidates(connection, person_id, model)
    )
    if len(items) < 2:
        return Found([], {})

    def work() -> Found:
        return group(items, neighbours(matrix, threshold, k))

    return await asyncio.to_thread(work)


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
    """Write a batch of merges in one transaction; how many items were superseded."""
    merged = 0
    for g in groups:
        survivor = connection.execute(
            select(*_ITEM).where(
                MemoryItem.id == g.survivor.id, MemoryItem.status == ItemStatus.ACTIVE
            )
        ).one_or_none()
        if survivor is None:
            continue  # moved on since it was read (forgotten, superseded)
        wanted = [m.id for m, _ in g.members]
        rows = {
            row.id: row
            for row in connection.execute(
                select(*_ITEM).where(
                    MemoryItem.id.in_(wanted), MemoryItem.status == ItemStatus.ACTIVE
                )
            )
        }
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
        connection.execute(
            update(MemoryItem)
            .where(MemoryItem.id == survivor.id)
            .values(
                source_message_ids=sources,
                access_count=MemoryItem.access_count + accesses,
                strength=MemoryItem.strength + strength,
                last_accessed_at=max(seen) if seen else None,
                pinned=survivor.pinned or any(rows[m.id].pinned for m, _ in members),
                priority=max([survivor.priority] + [rows[m.id].priority for m, _ in members]),
            )
        )
        ids = [m.id for m, _ in members]
        connection.execute(
            update(MemoryItem)
            .where(MemoryItem.id.in_(ids))
            .values(
                status=ItemStatus.SUPERSEDED,
                superseded_by_id=survivor.id,
                status_changed_at=at,
            )
        )
        connection.execute(
            insert(MemoryMerge).values(
                person_id=person_id,
                survivor_id=survivor.id,
                merged_ids=ids,
                similarities=[round(cos, 4) for _, cos in members],
                before=before,
                added={"access_count": accesses, "strength": strength},
                created_at=at,
            )
        )
        merged += len(ids)
    return merged


async def apply(
    service: MemoryService, person_id: int, groups: Sequence[Group], at: datetime
) -> int:
    """One batch of merges: committed together, then out of the person's indexes."""
    merged = await service.store.write(lambda c: _apply(c, person_id, groups, at))
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
