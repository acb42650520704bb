"""Category summaries: rebuilt from the person's active items, from scratch, versioned.

Without a model a summary is extractive: the ``summary_items`` items nearest the
category's centroid (the most central), quoted with their dates, oldest first.
With the utility model it is the model's few sentences over the most central
items. A rebuild that would read the same (the same text; for the model, the
same items) writes nothing; any other is a new version, never an overwrite.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from memory.categories import Category
from memory.jobs import queries
from memory.jobs.base import JobContext
from memory.jobs.queries import JobItem
from memory.jobs.utility_calls import SUMMARY_INSTRUCTIONS, model_text

# The most central items the model is shown for a summary.
MODEL_ITEMS = 40
QUOTE_CHARS = 240


def central(items: Sequence[JobItem], k: int) -> list[JobItem]:
    """The ``k`` items nearest the centroid of their vectors (items without a vector
    after them, newest first), in the order they happened."""
    with_vectors = [i for i in items if i.vector is not None]
    score: dict[int, float] = {}
    if with_vectors:
        matrix = np.stack([i.vector for i in with_vectors if i.vector is not None])
        centroid = matrix.mean(axis=0)
        norm = float(np.linalg.norm(centroid))
        if norm > 0:
            sims = matrix @ (centroid / norm)
            score = {i.id: float(s) for i, s in zip(with_vectors, sims.tolist(), strict=True)}
    ranked = sorted(items, key=lambda i: (-score.get(i.id, -2.0), -i.occurred_at.timestamp()))
    return sorted(ranked[:k], key=lambda i: (i.occurred_at, i.id))


def _quote(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= QUOTE_CHARS else text[: QUOTE_CHARS - 1] + "…"


def extractive(category: Category, chosen: Sequence[JobItem], total: int) -> str:
    if not chosen:
        return ""
    lines = [f"{category.value.capitalize()}: {total} active item{'s' if total != 1 else ''}."]
    lines += [f"- “{_quote(i.content)}” ({i.occurred_at:%Y-%m-%d})" for i in chosen]
    return "\n".join(lines)


async def rebuild_summary(ctx: JobContext, person_id: int, category: Category) -> bool:
    """Rebuild one summary; whether a new version was (or, dry, would be) written."""
    service = ctx.service
    model = service.embedder.model_name if service.embedder is not None else ""
    items = await queries.summary_items(service.store, person_id, str(category), model)
    latest = await queries.latest_summary(service.store, person_id, str(category))
    if not items and (latest is None or not latest.text):
        return False
    utility = service.utility
    text: str | None = None
    if utility is not None and items:
        basis = central(items, MODEL_ITEMS)
        ids = tuple(i.id for i in basis)
        if latest is not None and latest.item_ids == ids and latest.method == utility.name:
            return False
        text = await model_text(utility, SUMMARY_INSTRUCTIONS, basis, 300)
        method = utility.name
    if text is None:
        basis = central(items, service.jobs.summary_items)
        ids = tuple(i.id for i in basis)
        text = extractive(category, basis, len(items))
        method = "extractive"
        if latest is not None and latest.text == text:
            return False
    version = 1 if latest is None else latest.version + 1
    if ctx.dry_run:
        ctx.would(
            f"summary of person {person_id}, {category}: version {version} "
            f"from {len(items)} active items"
        )
        return True
    await queries.add_summary(
        service.store, person_id, str(category), version, text, ids, method, len(items), ctx.now
    )
    return True
