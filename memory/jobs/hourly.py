"""The hourly job: the decay sweep (tiers; archived items leave the ANN index),
traces past ``memory.trace_keep_days`` deleted, and the index files saved.

It was ``MemoryService.upkeep_forever``'s pass; on the calendar it is recorded
like every other job. Idempotent: a second run at the same time changes nothing.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from sqlalchemy import Connection, func, select

from memory.jobs.base import Counts, JobContext
from memory.models import MemoryTrace

log = logging.getLogger("memory.service")


async def hourly(ctx: JobContext) -> Counts:
    service = ctx.service
    stats = await service.sweep(
        ctx.now,
        person_id=ctx.person_id,
        dry_run=ctx.dry_run,
        would=ctx.would if ctx.dry_run else None,
        progress=lambda seen: ctx.progress(seen, None),
    )
    keep_days = service.config.trace_keep_days
    pruned = 0
    # Traces belong to turns, not people: a run for one person leaves them.
    if keep_days > 0 and ctx.person_id is None:
        cutoff = ctx.now - timedelta(days=keep_days)
        if ctx.dry_run:

            def count(connection: Connection) -> int:
                query = select(func.count()).where(MemoryTrace.created_at < cutoff)
                return int(connection.execute(query).scalar_one())

            pruned = await service.store.read(count)
            if pruned:
                ctx.would(f"{pruned} traces made before {cutoff:%Y-%m-%d %H:%M} UTC deleted")
        else:
            pruned = await service.prune_traces(ctx.now)
    if not ctx.dry_run:
        await service.save_indexes()
    # A pass that changed nothing is not news on the console (one runs at every start).
    log.log(
        logging.INFO if (stats.archived or pruned) and not ctx.dry_run else logging.DEBUG,
        "memory upkeep: %d items, tiers %s, %d archived, %d traces past their keep deleted",
        stats.seen,
        stats.tiers,
        stats.archived,
        pruned,
    )
    return {"items_seen": stats.seen, "archived": stats.archived, "traces_deleted": pruned}
