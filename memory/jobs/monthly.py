"""The monthly upkeep job: re-embedding and drift, a full re-index, the cold tier, health.

1. Items embedded by another model version get vectors of this one (the
   re-embedding pass of memory/reembed.py), and a sample of stored vectors is
   compared with vectors computed now: the drift (cosine distance, max and mean).
2. Full re-index: on SQLite the FTS5 table is rebuilt from memory_items and
   optimised (merged into one b-tree); PostgreSQL has no FTS5 (its full text is
   each person's in-memory BM25 index, rebuilt whenever it is loaded), so there
   is nothing to do there. Every person's ANN index is built anew from the
   stored vectors, which drops the slots of deleted items.
3. Items not used for ``cold_after_days`` move to the cold tier: they stay in
   the ANN index and full text (findable as ever), ranked by decay as before.
4. The health report (memory/jobs/health.py) is left in ``ctx.report``.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any

import numpy as np

from memory import repo
from memory.jobs import queries
from memory.jobs.base import Counts, JobContext
from memory.jobs.health import health_report
from memory.state import embedding_text
from memory.types import Tier

log = logging.getLogger(__name__)


async def monthly(ctx: JobContext) -> Counts:
    counts: Counts = {}
    counts["reembedded"] = await reembed(ctx)
    drift = await vector_drift(ctx)
    counts |= {
        "drift_checked": drift["checked"],
        "drift_max": drift["max"],
        "drift_mean": drift["mean"],
    }
    ctx.progress(1, 4)
    reindexed = await reindex(ctx)
    counts |= {
        "fts_rebuilt": int(reindexed["fts"] == "rebuilt"),
        "indexes_rebuilt": reindexed["indexes"],
        "slots_dropped": reindexed["slots_dropped"],
    }
    ctx.progress(2, 4)
    counts["cold"] = await move_to_cold(ctx)
    ctx.progress(3, 4)
    service = ctx.service
    ctx.report.update(await health_report(service.store, service.index_dir, ctx.now, ctx.person_id))
    ctx.report["drift"] = drift
    ctx.report["reindex"] = reindexed
    ctx.progress(4, 4)
    log.info("monthly upkeep: %s", counts)
    return counts


async def reembed(ctx: JobContext) -> int:
    """Vectors of this model for the items of another (everyone's: the pass is global)."""
    service = ctx.service
    embedder = service.embedder
    if embedder is None:
        return 0
    if ctx.dry_run:
        people = await repo.people_with_stale_vectors(
            service.store, embedder.model_name, embedder.dim
        )
        for person_id in people:
            ctx.would(f"embed the items of person {person_id} with {embedder.model_name}")
        return 0
    return await service.backfill()


async def vector_drift(ctx: JobContext) -> dict[str, Any]:
    """Stored vectors of a random sample against the same texts embedded now."""
    service = ctx.service
    embedder = service.embedder
    empty = {"checked": 0, "max": 0.0, "mean": 0.0, "model": ""}
    if embedder is None:
        return empty
    sample = await queries.vector_sample(
        service.store, embedder.model_name, service.jobs.drift_sample
    )
    sample = [i for i in sample if i.vector is not None and i.vector.shape[0] == embedder.dim]
    if not sample:
        return empty | {"model": embedder.model_name}
    texts = [embedding_text(i.type, i.speaker, i.content) for i in sample]
    fresh = await asyncio.to_thread(embedder.embed, texts)
    stored = np.stack([i.vector for i in sample if i.vector is not None])
    # Clipped at 0: rounding makes a vector's distance to itself -1e-7 at times.
    distance = np.maximum(0.0, 1.0 - np.sum(stored * fresh, axis=1))
    return {
        "checked": len(sample),
        "max": round(float(distance.max()), 6),
        "mean": round(float(distance.mean()), 6),
        "model": embedder.model_name,
    }


async def reindex(ctx: JobContext) -> dict[str, Any]:
    service = ctx.service
    store = service.store
    people = await queries.people(store, ctx.person_id)
    if ctx.dry_run:
        ctx.would("rebuild and optimise the full-text index (FTS5)")
        for person_id in people:
            ctx.would(f"rebuild the ANN index of person {person_id}")
        return {"fts": "dry run", "indexes": 0, "slots_dropped": 0}
    if store.is_sqlite:

        def rebuild(connection: Any) -> None:
            connection.exec_driver_sql("INSERT INTO memory_fts(memory_fts) VALUES ('rebuild')")
            connection.exec_driver_sql("INSERT INTO memory_fts(memory_fts) VALUES ('optimize')")

        # Rewrites the whole full-text index: alone, no turn's write waits for it.
        await store.write(rebuild, alone=True)
        fts = "rebuilt"
    else:
        fts = (
            "not applicable: PostgreSQL has no FTS5; each person's BM25 index is "
            "rebuilt when it is loaded"
        )
    rebuilt = dropped = 0
    for person_id in people:
        done = await service.rebuild_index(person_id)
        if done is not None:
            rebuilt += 1
            dropped += done[1]
    return {"fts": fts, "indexes": rebuilt, "slots_dropped": dropped}


async def move_to_cold(ctx: JobContext) -> int:
    """Items not used for ``cold_after_days`` go to the cold tier; how many."""
    service = ctx.service
    cutoff = ctx.now - timedelta(days=service.jobs.cold_after_days)
    moved, after = 0, 0
    while rows := await queries.stale_ids(
        service.store,
        ctx.person_id,
        None,
        (),
        cutoff,
        (Tier.ACTIVE, Tier.WARM),
        after,
        ctx.batch,
    ):
        after = rows[-1][0]
        if ctx.dry_run:
            for item_id, _ in rows:
                ctx.would(
                    f"move item {item_id} to the cold tier (unused since before {cutoff.date()})"
                )
        else:
            await queries.set_tier(service.store, [r[0] for r in rows], Tier.COLD, ctx.now)
        moved += len(rows)
    return moved
