"""Upkeep: reinforcement after a turn, the decay sweep and trace pruning (the hourly
job of the upkeep calendar, memory/jobs/hourly.py, runs the latter two).

One layer of ``memory.service.MemoryService`` (see the "Memory modules" section
of docs/DESIGN.md): each layer uses only the state and the layers below it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from memory import repo
from memory.decay import overlap
from memory.recall import Recall
from memory.repo import Reinforcement
from memory.state import (
    Reinforced,
    SweepStats,
)
from memory.types import Tier

_TIER_RANK = {Tier.ACTIVE: 0, Tier.WARM: 1, Tier.COLD: 2, Tier.ARCHIVED: 3}

# The service's one logger name, as before the split (log configs and tests name it).
log = logging.getLogger("memory.service")


class Upkeep(Recall):
    async def reinforce(
        self,
        turn_id: int,
        person_id: int,
        user_text: str,
        reply_text: str,
        at: datetime,
        *,
        fizzle: float | None = None,
    ) -> Reinforced:
        """Echo for items the person referred to or the reply used; fizzle for the rest."""
        await self.traces_saved(turn_id)
        kept_ids = await repo.kept_ids_for_turn(self.store, turn_id)
        if not kept_ids:
            return Reinforced()
        return await self.reinforce_items(
            kept_ids, person_id, user_text, reply_text, at, fizzle=fizzle
        )

    async def reinforce_items(
        self,
        kept_ids: Sequence[int],
        person_id: int,
        user_text: str,
        reply_text: str,
        at: datetime,
        *,
        fizzle: float | None = None,
    ) -> Reinforced:
        """Reinforce the items a pack held, by what the message and the reply did with them.

        ``fizzle``: the strength change of an item nobody used (default
        ``reinforce_unused``; negative while the budget is tight, gateway/budget.py)."""
        unused_change = self.decay.reinforce_unused if fizzle is None else fizzle
        items = await repo.get_items(self.store, kept_ids)
        threshold = self.config.use_overlap
        used, referred, unused, revived = [], [], [], []
        changes = []
        for item in items:
            if overlap(item.content, user_text) >= threshold:
                referred.append(item.id)
                changes.append(Reinforcement(item.id, self.decay.reinforce_referred, True))
            elif overlap(item.content, reply_text) >= threshold:
                used.append(item.id)
                changes.append(Reinforcement(item.id, self.decay.reinforce_used, True))
            else:
                unused.append(item.id)
                changes.append(Reinforcement(item.id, unused_change, False))
                continue
            if item.tier is Tier.ARCHIVED:
                revived.append(item.id)
        await repo.reinforce(self.store, changes, at)
        if revived:
            await self._reindex(person_id, revived)
            log.info("memory: archived items %s came back (referenced again)", revived)
        return Reinforced(tuple(used), tuple(referred), tuple(unused), tuple(revived))

    async def sweep(
        self,
        now: datetime,
        chunk: int = 5000,
        *,
        person_id: int | None = None,
        dry_run: bool = False,
        would: Callable[[str], None] | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> SweepStats:
        """Recompute every active item's tier; archived ones leave the ANN index
        (never an episode: ``DecayPolicy.tier_of``).

        ``person_id``: that person's items only. ``dry_run``: nothing changes;
        ``would`` hears each change it would make. ``progress`` hears the items
        seen so far after each chunk.
        """
        stats = SweepStats()
        after = 0
        while rows := await repo.decay_rows(self.store, after, chunk):
            after = rows[-1].id
            changes: dict[int, Tier] = {}
            leaving: dict[int, list[int]] = {}
            retained = self.decay.retention_at(rows, now)
            for row, retention in zip(rows, retained.tolist(), strict=True):
                if person_id is not None and row.person_id != person_id:
                    continue
                tier = self.decay.tier_of(row.type, retention)
                stats.seen += 1
                stats.tiers[tier.value] = stats.tiers.get(tier.value, 0) + 1
                # Only ever down: use (reinforce_items) and restore raise a tier, and the
                # weekly and monthly jobs lower some by domain TTL further than decay
                # would, which the hourly sweep must not undo.
                if _TIER_RANK[tier] > _TIER_RANK[row.tier]:
                    changes[row.id] = tier
                    if tier is Tier.ARCHIVED:
                        leaving.setdefault(row.person_id, []).append(row.id)
                    if would is not None:
                        would(f"item {row.id}: tier {row.tier.value} -> {tier.value}")
            if progress is not None:
                progress(stats.seen)
            if dry_run:
                stats.archived += sum(len(ids) for ids in leaving.values())
                continue
            await repo.set_tiers(self.store, changes)
            for owner, ids in leaving.items():
                stats.archived += len(ids)
                await self._unindex(owner, ids)
        return stats

    async def prune_traces(self, now: datetime) -> int:
        """Delete the traces older than ``trace_keep_days`` (none when it is 0); how many."""
        if self.config.trace_keep_days <= 0:
            return 0
        return await repo.prune_traces(
            self.store, now - timedelta(days=self.config.trace_keep_days)
        )
