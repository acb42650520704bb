"""The nightly job body (issue 21): merge near-duplicates, promote what packs used,
and extract what the extractors have not read yet.

``nightly(ctx)`` follows the contract of memory/jobs/base.py: everything it
still has to do is read from the store, work is committed a batch at a time,
and a dry run changes nothing but lists each merge and promotion it would make.

1. Merge (memory/jobs/merge.py): per person, near-duplicate non-episode items
   become one, reversibly; pairs that differ in a number, a date or a name are
   conflicts and stay apart. ``conflicts`` counts those with an item stored since
   the last nightly (a mark in ``store_info``); ``conflicts_known`` all of them.
   The k-NN and the grouping run in the run's own process (``cpu_work``,
   memory/jobs/offload.py), so the packs served meanwhile keep their pace.
2. Promote: every item a pack kept since the last nightly (the ``kept_ids`` of
   the traces past a watermark) gains ``promote_step`` priority up to
   ``promote_max``, at most once a day (``memory_promotions`` remembers the
   day, so a second run the same day, or a run resumed after a kill, adds
   nothing).
3. Extract: each registered extractor (the observer, registered by the app)
   processes the stored turns it has not processed.
4. Rebalance: each person's memory tree is rebuilt whole (issue 23); its two
   clusterings run in the run's own process too (most of a large rebuild's CPU).

What still runs in the serving process (the reads, the batches of writes, the
tree's one write) starts between packs and steps around them
(memory/pack_activity.py).
"""

from __future__ import annotations

import logging
from datetime import date
from functools import partial

from sqlalchemy import Connection, func, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from gateway.config import UpkeepJobsConfig
from memory import repo
from memory.jobs import merge, merge_plan
from memory.jobs.base import Counts, JobContext
from memory.jobs.offload import CpuWork
from memory.models import MemoryItem, MemoryPromotion, MemoryTrace
from memory.tree import job as tree_job
from memory.types import ItemStatus

log = logging.getLogger(__name__)

# The last trace whose kept items were promoted (``store_info``): "since the last nightly".
PROMOTED_THROUGH = "nightly.promoted_through_trace"
# The highest item id the last merge pass (a run for everyone) read: a conflict
# between older items was counted then.
CONFLICTS_THROUGH = "nightly.conflicts_through_item"
# Traces read at a time by the promotion: each chunk starts between packs, and its
# rows (``kept_ids``, JSON) are decoded in a reader thread (``Store.read``); through an
# async session they were decoded in the event loop, 2,000 traces at a time, and the
# packs under the promotion were the slowest of a 100k nightly (docs/DESIGN.md).
_TRACE_CHUNK = 500


async def nightly(ctx: JobContext, settings: UpkeepJobsConfig | None = None) -> Counts:
    """The nightly body; ``settings`` default to the built-in ``[upkeep_jobs]`` ones
    (the calendar passes the configured ones)."""
    knobs = settings if settings is not None else UpkeepJobsConfig()
    async with CpuWork(knobs.cpu_work) as cpu:
        merged, conflicts, known = await merge_duplicates(
            ctx, knobs.merge_cosine, knobs.merge_neighbours, cpu
        )
        promoted = await promote_used(ctx, knobs.promote_step, knobs.promote_max)
        extracted = await extract_backlog(ctx)
        # 4. The memory trees rebuilt whole (memory/tree/job.py), after the merges; their
        # clusterings in the same job process as the merges' k-NN.
        rebalanced = await tree_job.rebalance(ctx, cpu)
    return {
        "merged": merged,
        "promoted": promoted,
        "extracted": extracted,
        "conflicts": conflicts,
        "conflicts_known": known,
        "tree_rebalanced": rebalanced,
    }


async def _people(ctx: JobContext) -> list[int]:
    """Who has items that may merge. Not filtered by status: that would read every
    row (a 100k store: 80 ms), where the (person_id, type) index alone answers
    this (13 ms); a person with nothing active costs ``find`` one indexed read."""
    if ctx.person_id is not None:
        return [ctx.person_id]
    async with ctx.service.store.reader() as session:
        rows = await session.scalars(
            select(MemoryItem.person_id)
            .distinct()
            .where(MemoryItem.type.in_(merge.MERGED_TYPES))
            .order_by(MemoryItem.person_id)
        )
        return list(rows.all())


async def merge_duplicates(
    ctx: JobContext, threshold: float, neighbours: int = 20, cpu: CpuWork | None = None
) -> tuple[int, int, int]:
    """Merge each person's near-duplicates; (items superseded, conflicts new since the
    last run, conflicts kept apart in all)."""
    if ctx.service.embedder is None:
        log.info("nightly: no embedder, so no merges (they need vectors)")
        return 0, 0, 0
    store = ctx.service.store
    counted_through = int(await repo.store_fact(store, CONFLICTS_THROUGH) or 0)
    async with store.reader() as session:
        newest = int(await session.scalar(select(func.max(MemoryItem.id))) or 0)
    people = await _people(ctx)
    merged = conflicts = known = 0
    for done, person_id in enumerate(people, start=1):
        found = await merge.find(
            ctx.service, person_id, threshold, neighbours, cpu=cpu, new_after=counted_through
        )
        known += sum(found.conflicts.values())
        conflicts += found.new_conflicts
        if ctx.dry_run:
            for g in found.groups:
                for member, cosine in g.members:
                    ctx.would(
                        f"merge #{member.id} {member.content!r} into #{g.survivor.id} "
                        f"{g.survivor.content!r} (person {person_id}, cosine {cosine:.3f})"
                    )
                    merged += 1
        else:
            batch: list[merge_plan.Group] = []
            size = 0
            for g in found.groups:
                batch.append(g)
                size += len(g.members)
                if size >= ctx.batch:
                    merged += await merge.apply(ctx.service, person_id, batch, ctx.now)
                    batch, size = [], 0
                    # Between batches: what is committed stays if the run stops here.
                    ctx.progress(merged, None)
            if batch:
                merged += await merge.apply(ctx.service, person_id, batch, ctx.now)
        ctx.progress(done, len(people))
    # Only a complete run for everyone moves the mark (as the promotions' does).
    if not ctx.dry_run and ctx.person_id is None and newest > counted_through:
        await repo.set_store_fact(store, CONFLICTS_THROUGH, str(newest))
    if merged:
        log.info(
            "nightly: %d near-duplicate items merged, %d conflicts kept (%d new)",
            merged,
            known,
            conflicts,
        )
    return merged, conflicts, known


def _upsert_promotions(connection: Connection, ids: list[int], day: date) -> None:
    rows = [{"item_id": i, "promoted_on": day} for i in ids]
    if connection.dialect.name == "postgresql":
        pg = pg_insert(MemoryPromotion).values(rows)
        connection.execute(
            pg.on_conflict_do_update(
                index_elements=["item_id"], set_={"promoted_on": pg.excluded.promoted_on}
            )
        )
    else:
        lite = sqlite_insert(MemoryPromotion).values(rows)
        connection.execute(
            lite.on_conflict_do_update(
                index_elements=["item_id"], set_={"promoted_on": lite.excluded.promoted_on}
            )
        )


def _promote(
    connection: Connection, ids: list[int], day: date, step: float, cap: float
) -> list[tuple[int, float]]:
    """Raise the priority of those of ``ids`` active and not promoted on ``day``;
    (id, priority before) of each raised."""
    done_today = set(
        connection.execute(
            select(MemoryPromotion.item_id).where(
                MemoryPromotion.item_id.in_(ids), MemoryPromotion.promoted_on == day
            )
        ).scalars()
    )
    rows = connection.execute(
        select(MemoryItem.id, MemoryItem.priority).where(
            MemoryItem.id.in_([i for i in ids if i not in done_today]),
            MemoryItem.status == ItemStatus.ACTIVE,
        )
    ).all()
    raised = [(int(i), float(p)) for i, p in rows if p < cap]
    if raised:
        connection.execute(
            update(MemoryItem)
            .where(MemoryItem.id.in_([i for i, _ in raised]))
            .values(priority=func.min(MemoryItem.priority + step, cap))
            if connection.dialect.name == "sqlite"
            else update(MemoryItem)
            .where(MemoryItem.id.in_([i for i, _ in raised]))
            .values(priority=func.least(MemoryItem.priority + step, cap))
        )
        _upsert_promotions(connection, [i for i, _ in raised], day)
    return raised


def _planned(ids: list[int], connection: Connection) -> list[tuple[int, float, date | None]]:
    """For a dry run: each active item's priority and the day it was last promoted."""
    rows = connection.execute(
        select(MemoryItem.id, MemoryItem.priority, MemoryPromotion.promoted_on)
        .outerjoin(MemoryPromotion, MemoryPromotion.item_id == MemoryItem.id)
        .where(MemoryItem.id.in_(ids), MemoryItem.status == ItemStatus.ACTIVE)
    ).all()
    return [(int(i), float(p), on) for i, p, on in rows]


def _kept_in(
    connection: Connection, after: int, through: int, person_id: int | None
) -> list[tuple[int, list[int]]]:
    """A chunk of the traces ``after`` < id <= ``through``: (id, kept ids) each."""
    query = (
        select(MemoryTrace.id, MemoryTrace.kept_ids)
        .where(MemoryTrace.id > after, MemoryTrace.id <= through)
        .order_by(MemoryTrace.id)
        .limit(_TRACE_CHUNK)
    )
    if person_id is not None:
        query = query.where(MemoryTrace.person_id == person_id)
    return [(int(i), list(kept or [])) for i, kept in connection.execute(query)]


async def _used_since(ctx: JobContext, after: int, through: int) -> list[int]:
    """The items packs kept in traces ``after`` < id <= ``through`` (of one person
    when the run is for one), each once, in order."""
    seen: dict[int, None] = {}
    while after < through:
        await ctx.service.packs.quiet()
        rows = await ctx.service.store.read(
            partial(_kept_in, after=after, through=through, person_id=ctx.person_id)
        )
        if not rows:
            break
        for _, kept in rows:
            seen.update(dict.fromkeys(kept or []))
        after = rows[-1][0]
    return list(seen)


async def promote_used(ctx: JobContext, step: float, cap: float) -> int:
    """Items used in a pack since the last nightly: priority + ``step`` (up to ``cap``),
    once a day per item; how many were raised."""
    await ctx.service.traces_saved()
    store = ctx.service.store
    after = int(await repo.store_fact(store, PROMOTED_THROUGH) or 0)
    async with store.reader() as session:
        through = int(await session.scalar(select(func.max(MemoryTrace.id))) or 0)
    ids = await _used_since(ctx, after, through)
    day = ctx.now.date()
    promoted = 0
    for start in range(0, len(ids), ctx.batch):
        chunk = ids[start : start + ctx.batch]
        if ctx.dry_run:
            for item_id, priority, on in await store.read(partial(_planned, chunk)):
                if on != day and priority < cap:
                    ctx.would(
                        f"promote #{item_id}: priority {priority:.2f} → "
                        f"{min(priority + step, cap):.2f}"
                    )
                    promoted += 1
            continue
        await ctx.service.packs.quiet()
        # A chunk of many items: alone, so no turn's write waits for its commit.
        raised = await store.write(
            partial(_promote, ids=chunk, day=day, step=step, cap=cap), alone=True
        )
        promoted += len(raised)
    # Only a run for everyone moves the mark: one person's run leaves the others' traces.
    if not ctx.dry_run and ctx.person_id is None and through > after:
        await repo.set_store_fact(store, PROMOTED_THROUGH, str(through))
    return promoted


async def extract_backlog(ctx: JobContext) -> int:
    """Run every registered extractor over the turns it has not processed; how many."""
    if ctx.dry_run:
        for n, _ in enumerate(ctx.extractors, start=1):
            ctx.would(f"run extractor {n} over the turns it has not processed")
        return 0
    extracted = 0
    for extractor in ctx.extractors:
        extracted += await extractor(ctx.person_id)
    return extracted
