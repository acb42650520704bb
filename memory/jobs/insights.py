"""Insights: one sentence for each cluster of similar archived items.

The archived items no insight stands for yet are clustered (scikit-learn's
agglomerative clustering, cosine distance, average linkage, cut at
``insight_distance``) in a worker thread; each cluster of ``insight_min_items``
or more becomes an ``insight`` item whose ``source_item_ids`` are its items.
Without a model the sentence is extractive: the item nearest the cluster's
centroid, quoted with the span of dates. Items of smaller clusters wait for a
later run, when more have been archived beside them.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from memory.jobs import queries
from memory.jobs.base import JobContext
from memory.jobs.queries import JobItem
from memory.jobs.utility_calls import INSIGHT_INSTRUCTIONS, model_text
from memory.repo import NewItem
from memory.types import ItemType

QUOTE_CHARS = 300
# An insight keeps at most this many of its sources' message ids (its provenance in
# the pack); source_item_ids keeps every item.
MESSAGE_IDS = 50


def clusters(matrix: NDArray[np.float32], distance: float) -> list[list[int]]:
    """Rows grouped by similarity (blocking: run it in a worker thread)."""
    from sklearn.cluster import AgglomerativeClustering

    if len(matrix) < 2:
        return [[0]] if len(matrix) else []
    labels = AgglomerativeClustering(
        n_clusters=None, distance_threshold=distance, metric="cosine", linkage="average"
    ).fit_predict(matrix)
    groups: dict[int, list[int]] = {}
    for row, label in enumerate(labels.tolist()):
        groups.setdefault(int(label), []).append(row)
    return list(groups.values())


def central_item(items: Sequence[JobItem]) -> JobItem:
    matrix = np.stack([i.vector for i in items if i.vector is not None])
    return items[int(np.argmax(matrix @ matrix.mean(axis=0)))]


def extractive_insight(items: Sequence[JobItem]) -> str:
    centre = central_item(items)
    first = min(i.occurred_at for i in items)
    last = max(i.occurred_at for i in items)
    quote = " ".join(centre.content.split())
    if len(quote) > QUOTE_CHARS:
        quote = quote[: QUOTE_CHARS - 1] + "…"
    return (
        f"A recurring theme in {len(items)} older memories "
        f"({first:%Y-%m-%d} to {last:%Y-%m-%d}): “{quote}”"
    )


async def make_insights(ctx: JobContext, person_id: int) -> int:
    """The person's new insight items; how many."""
    service = ctx.service
    jobs = service.jobs
    if service.embedder is None:
        return 0
    covered = await queries.covered_by_insights(service.store, person_id)
    model = service.embedder.model_name
    archived = await queries.archived_ids(service.store, person_id, model)
    # Only the vectors of the items clustered this run are read (a big store's
    # archive holds 100,000 of them).
    chosen = [i for i in archived if i not in covered][: jobs.insight_max_items]
    if len(chosen) < jobs.insight_min_items:
        return 0
    items = [
        i for i in await queries.job_items(service.store, chosen, model) if i.vector is not None
    ]
    if len(items) < jobs.insight_min_items:
        return 0
    matrix = np.stack([i.vector for i in items if i.vector is not None])
    groups = await asyncio.to_thread(clusters, matrix, jobs.insight_distance)
    made = 0
    pending: list[NewItem] = []
    for rows in groups:
        if len(rows) < jobs.insight_min_items:
            continue
        members = [items[r] for r in rows]
        text = None
        if service.utility is not None:
            text = await model_text(service.utility, INSIGHT_INSTRUCTIONS, members, 120)
        if text is None:
            text = extractive_insight(members)
        if ctx.dry_run:
            ctx.would(f"insight of person {person_id} from items {[m.id for m in members]}: {text}")
            made += 1
            continue
        messages = sorted({m for i in members for m in i.source_message_ids})[-MESSAGE_IDS:]
        pending.append(
            NewItem(
                person_id=person_id,
                type=ItemType.INSIGHT,
                content=text,
                # Written now (its text gives the span of its sources' dates): dated
                # at its sources' last, it would be archived or cold at once.
                occurred_at=ctx.now,
                author="upkeep",
                source_message_ids=tuple(messages),
                category=Counter(i.category for i in members).most_common(1)[0][0],
                source_item_ids=tuple(sorted(i.id for i in members)),
            )
        )
        if len(pending) >= ctx.batch:
            made += len(await service.add_items(pending))
            pending = []
    if pending:
        made += len(await service.add_items(pending))
    return made
