"""The weekly upkeep job: categories, category summaries, domain TTLs, insights.

1. Every item without a category gets one (memory/categories.py; the utility
   model's when one is configured).
2. Items not used for their category's TTL (``[upkeep_jobs] ttl_days_*``) are
   archived: they leave the ANN index, full text still finds them, and a use
   brings them back (``MemoryService.reinforce_items``). Pinned items, persona
   and relational items never are, nor episodes: the messages are the record,
   and stay in dense search (the decay sweep and the monthly cold tier demote
   them, ranked lower by their retention, never out of the ANN index).
3. Per person and category, the summary is rebuilt from the active items alone
   (after 2), from scratch; one that reads differently is a new version
   (memory_summaries).
4. The archived items not yet summed up are clustered by similarity; each
   cluster of ``insight_min_items`` or more becomes one insight item linked to
   its sources (``source_item_ids``).
5. Each person's curated profile is rebuilt from those summaries and the
   observations (memory/continuity/profile.py, issue 24), capped at its budget.

Every step reads what is left to do from the store and commits per batch, so a
run killed mid-way is finished by the next one; a dry run only lists.
"""

from __future__ import annotations

import logging
from datetime import timedelta

import numpy as np

from gateway.config import ContinuityConfig
from memory.categories import CATEGORIES, Category, categorise
from memory.continuity.profile import ProfileBook
from memory.jobs import queries
from memory.jobs.base import Counts, JobContext
from memory.jobs.insights import make_insights
from memory.jobs.summaries import rebuild_summary
from memory.jobs.utility_calls import model_categories
from memory.ttl import DOMAINS, category_ttl, domain_ttls
from memory.types import RECORD_TYPES, Tier

log = logging.getLogger(__name__)


async def weekly(ctx: JobContext, continuity: ContinuityConfig | None = None) -> Counts:
    counts: Counts = {
        "categorised": 0,
        "summaries": 0,
        "archived": 0,
        "insights": 0,
        "profiles": 0,
    }
    counts["categorised"] = await backfill_categories(ctx)
    # Archived first: a summary is of what stays active after this run.
    counts["archived"] = await archive_by_ttl(ctx)
    people = await queries.people(ctx.service.store, ctx.person_id)
    for done, person_id in enumerate(people):
        for category in CATEGORIES:
            if await rebuild_summary(ctx, person_id, category):
                counts["summaries"] += 1
        ctx.progress(done + 1, 2 * len(people))
    for done, person_id in enumerate(people):
        counts["insights"] += await make_insights(ctx, person_id)
        ctx.progress(len(people) + done + 1, 2 * len(people))
    # 5. The curated profile, from the summaries just written (memory/continuity/profile.py).
    counts["profiles"] = await rebuild_profiles(ctx, people, continuity or ContinuityConfig())
    log.info("weekly upkeep: %s", counts)
    return counts


async def rebuild_profiles(ctx: JobContext, people: list[int], continuity: ContinuityConfig) -> int:
    """Rebuild each person's profile; how many changed (a dry run: none written)."""
    if not continuity.profile_enabled:
        return 0
    book = ProfileBook(ctx.service.store, continuity)
    changed = 0
    for person_id in people:
        if ctx.dry_run:
            ctx.would(f"rebuild the profile of person {person_id}")
            continue
        if await book.rebuild(person_id, ctx.now):
            changed += 1
    return changed


async def backfill_categories(ctx: JobContext) -> int:
    """Categorise the items that have no category yet; how many."""
    service = ctx.service
    model = service.embedder.model_name if service.embedder is not None else ""
    prototypes = await service.category_prototypes()
    done, after = 0, 0
    while rows := await queries.uncategorised(
        service.store, ctx.person_id, after, ctx.batch, model
    ):
        after = rows[-1].id
        found: dict[int, str] = {}
        if service.utility is not None:
            found = await model_categories(service.utility, rows)
        rest = [r for r in rows if r.id not in found]
        if rest:
            vectors = None
            if prototypes is not None:
                dim = prototypes.matrix.shape[1]
                vectors = np.stack(
                    [r.vector if r.vector is not None else np.zeros(dim, np.float32) for r in rest]
                )
            guessed = categorise(
                [r.type for r in rest],
                [r.content for r in rest],
                vectors,
                prototypes,
                service.jobs.category_min_similarity,
            )
            found |= {r.id: str(c) for r, c in zip(rest, guessed, strict=True)}
        if ctx.dry_run:
            for item_id, category in found.items():
                ctx.would(f"categorise item {item_id} as {category}")
        else:
            await queries.set_categories(service.store, found)
        done += len(found)
    return done


def ttl_days(ctx: JobContext, category: Category | None) -> float:
    """The category's TTL from the one table the trust pass's [stale] reads too."""
    return category_ttl(domain_ttls(ctx.service.jobs), category.value if category else None)


async def archive_by_ttl(ctx: JobContext) -> int:
    """Archive the items not used for their category's TTL; how many."""
    service = ctx.service
    archived = 0
    others = [str(c) for c in DOMAINS]
    groups: list[tuple[Category | None, list[str] | None]] = [(c, [str(c)]) for c in DOMAINS]
    groups.append((None, None))
    for category, names in groups:
        cutoff = ctx.now - timedelta(days=ttl_days(ctx, category))
        after = 0
        while rows := await queries.stale_ids(
            service.store,
            ctx.person_id,
            names,
            others,
            cutoff,
            (Tier.ACTIVE, Tier.WARM, Tier.COLD),
            after,
            ctx.batch,
            # The record is never archived by age (memory/types.py, RECORD_TYPES).
            except_types=RECORD_TYPES,
        ):
            after = rows[-1][0]
            if ctx.dry_run:
                for item_id, _ in rows:
                    ctx.would(
                        f"archive item {item_id} ({category or 'other'}, unused since "
                        f"before {cutoff.date()})"
                    )
                archived += len(rows)
                continue
            await queries.set_tier(service.store, [r[0] for r in rows], Tier.ARCHIVED, ctx.now)
            by_person: dict[int, list[int]] = {}
            for item_id, person_id in rows:
                by_person.setdefault(person_id, []).append(item_id)
            for person_id, ids in by_person.items():
                await service.unindex(person_id, ids)
            archived += len(rows)
    return archived
