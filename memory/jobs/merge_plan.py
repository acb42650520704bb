"""The nightly merge's plan: which items are one item said twice (issue 21).

Pure computation over what memory/jobs/merge.py read from the store: the
candidates' vectors go into a throwaway hnswlib index, each asks it for its
nearest, and groups form around survivors, each taking the neighbours the
conflict guard (memory/jobs/guard.py) lets through. It imports nothing of the
store or the service: it runs in the job's own process (memory/jobs/offload.py),
which imports this module and little else.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date

import numpy as np
from numpy.typing import NDArray

from memory.jobs.guard import Specifics, conflict, specifics
from memory.types import ItemType


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
    # Of those, the pairs with an item newer than ``new_after`` (``find``): the ones
    # a previous night did not already count.
    new_conflicts: int = 0


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


def group(
    items: Sequence[Candidate], near: Sequence[Sequence[tuple[int, float]]], new_after: int = 0
) -> Found:
    """Survivors best first, each taking its untaken neighbours the guard lets through;
    a conflict is new when one of its items' ids is above ``new_after``."""
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
    new_conflicts = 0
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
                    if max(items[i].id, items[j].id) > new_after:
                        new_conflicts += 1
                continue
            members.append((items[j], cosine))
        if members:
            taken.add(i)
            taken.update(_index_of(items, m.id) for m, _ in members)
            groups.append(Group(items[i], members))
    return Found(groups, conflicts, new_conflicts)


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


def find_groups(
    items: Sequence[Candidate],
    matrix: NDArray[np.float32],
    threshold: float,
    k: int,
    new_after: int,
) -> Found:
    """The k-NN and the grouping: pure computation, run in ``CpuWork``'s process."""
    return group(items, neighbours(matrix, threshold, k), new_after)
