"""The nightly rebalance of the memory trees (called from memory/jobs/nightly.py)."""

from __future__ import annotations

from sqlalchemy import select

from memory.jobs.base import JobContext
from memory.jobs.offload import CpuWork
from memory.models import MemoryItem
from memory.types import ItemStatus


async def rebalance(ctx: JobContext, cpu: CpuWork | None = None) -> int:
    """Rebuild every person's tree (or the one person of the run); how many were rebuilt.
    ``cpu``: where the rebuilds' clusterings run (the nightly's job process).
    Each rebuild is committed on its own, so a run stopped halfway keeps what it did
    and the next run simply rebuilds again (a rebuild is idempotent: unchanged
    summaries add no version)."""
    service = ctx.service
    if not service.config.tree:
        return 0
    if ctx.person_id is not None:
        people = [ctx.person_id]
    else:
        async with service.store.reader() as session:
            people = list(
                (
                    await session.scalars(
                        select(MemoryItem.person_id)
                        .distinct()
                        .where(MemoryItem.status == ItemStatus.ACTIVE)
                        .order_by(MemoryItem.person_id)
                    )
                ).all()
            )
    for done, person_id in enumerate(people, start=1):
        if ctx.dry_run:
            ctx.would(f"rebuild the memory tree of person {person_id}")
        else:
            await service.tree.rebuild(person_id, cpu)
        ctx.progress(done, len(people))
    return len(people)
