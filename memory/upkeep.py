"""Upkeep: reinforcement after a turn, the hourly decay sweep and trace pruning.

One layer of ``memory.service.MemoryService`` (see the "Memory modules" section
of docs/DESIGN.md): each layer uses only the state and the layers below it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from memory import repo
from memory.decay import overlap
from memory.recall import Recall
from memory.repo import Reinforcement
from memory.state import (
    Reinforced,
    SweepStats,
)
from memory.types import Tier

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
        trace = await repo.trace_for_turn(self.store, turn_id)
        if trace is None or not trace.kept_ids:
            return Reinforced()
        return await self.reinforce_items(
            trace.kept_ids, person_id, user_text, reply_text, at, fizzle=fizzle
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

    async def sweep(self, now: datetime, chunk: int = 5000) -> SweepStats:
        """Recompute every active item's tier; archived ones leave the ANN index."""
        stats = SweepStats()
        after = 0
        while rows := await repo.decay_rows(self.store, after, chunk):
            after = rows[-1].id
            changes: dict[int, Tier] = {}
            leaving: dict[int, list[int]] = {}
            retained = self.decay.retention_at(rows, now)
            for row, retention in zip(rows, retained.tolist(), strict=True):
                tier = self.decay.tier(retention)
                stats.seen += 1
                stats.tiers[tier.value] = stats.tiers.get(tier.value, 0) + 1
                if tier is not row.tier:
                    changes[row.id] = tier
                    if tier is Tier.ARCHIVED:
                        leaving.setdefault(row.person_id, []).append(row.id)
            await repo.set_tiers(self.store, changes)
            for person_id, ids in leaving.items():
                stats.archived += len(ids)
                await self._unindex(person_id, ids)
        return stats

    async def prune_traces(self, now: datetime) -> int:
        """Delete the traces older than ``trace_keep_days`` (none when it is 0); how many."""
        if self.config.trace_keep_days <= 0:
            return 0
        return await repo.prune_traces(
            self.store, now - timedelta(days=self.config.trace_keep_days)
        )

    async def upkeep_forever(self) -> None:
        """Decay sweep, trace pruning and index saves now and every ``upkeep_interval_s``
        (a supervised task)."""
        while True:
            upkeep = asyncio.ensure_future(self._upkeep_pass())
            try:
                await asyncio.shield(upkeep)
            except asyncio.CancelledError:
                # A stop lets the pass under way finish: cut in a query, its connection
                # was left to SQLAlchemy's finaliser, which logged a traceback (one pass
                # runs at every start, so a stop soon after a start met it).
                await upkeep
                raise
            await asyncio.sleep(self.config.upkeep_interval_s)

    async def _upkeep_pass(self) -> None:
        now = datetime.now(UTC)
        stats = await self.sweep(now)
        pruned = await self.prune_traces(now)
        await self.save_indexes()
        # A pass that changed nothing is not news on the console (one runs at every start).
        log.log(
            logging.INFO if stats.archived or pruned else logging.DEBUG,
            "memory upkeep: %d items, tiers %s, %d archived, %d traces past their keep deleted",
            stats.seen,
            stats.tiers,
            stats.archived,
            pruned,
        )
