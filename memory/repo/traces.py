"""Memory traces: what each pack chose and why, stored per turn and pruned.

Part of ``memory.repo`` (each query one short transaction on the Store).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from sqlalchemy import (
    Connection,
    bindparam,
    delete,
    insert,
    select,
)

from gateway.store import Store
from memory.models import MemoryTrace

# Built once (every turn stores one; issue 28, "CPU per turn").
_INSERT_TRACE = insert(MemoryTrace).returning(MemoryTrace.id)


async def save_trace(
    store: Store, trace: MemoryTrace, complete: Callable[[MemoryTrace], None] | None = None
) -> int:
    """Store a trace (not yet added to a session); its id.

    One Core insert in the store's writer thread: ``complete`` fills in the
    parts that are slow to build, and the JSON of a hundred candidates is
    serialised there, not on the event loop.
    """

    def insert_trace(connection: Connection) -> int:
        if complete is not None:
            complete(trace)
        values = {
            column.key: getattr(trace, column.key)
            for column in MemoryTrace.__table__.columns
            # Unset attributes are None: leave them to the columns' defaults.
            if column.key != "id" and getattr(trace, column.key) is not None
        }
        return int(connection.execute(_INSERT_TRACE, values).scalar_one())

    return await store.write(insert_trace)


async def prune_traces(store: Store, before: datetime, batch: int = 100) -> int:
    """Delete the traces made before ``before``, oldest first; how many.

    A batch per write, so the turns' own writes (messages, items, new traces)
    wait for one batch at most, not for a year of traces: 100 compressed traces
    took ~20 ms to delete (p50) on the 100k benchmark store.
    """
    oldest = (
        select(MemoryTrace.id)
        .where(MemoryTrace.created_at < before)
        .order_by(MemoryTrace.created_at)
        .limit(batch)
    )

    def delete_batch(connection: Connection) -> int:
        result = connection.execute(delete(MemoryTrace).where(MemoryTrace.id.in_(oldest)))
        return int(result.rowcount)

    deleted = 0
    while True:
        # Alone: a turn's write queued meanwhile does not wait for ~20 ms of deletes.
        removed = await store.write(delete_batch, alone=True)
        deleted += removed
        if removed < batch:
            return deleted


async def trace_for_turn(store: Store, turn_id: int) -> MemoryTrace | None:
    async with store.reader() as session:
        return await session.scalar(
            select(MemoryTrace)
            .where(MemoryTrace.turn_id == turn_id)
            .order_by(MemoryTrace.id.desc())
        )


# Built once, the turn bound at execution (every turn asks; issue 28, "CPU per turn").
_KEPT_IDS = (
    select(MemoryTrace.kept_ids)
    .where(MemoryTrace.turn_id == bindparam("turn_id"))
    .order_by(MemoryTrace.id.desc())
    .limit(1)
)


async def kept_ids_for_turn(store: Store, turn_id: int) -> list[int] | None:
    """The items the turn's pack kept (None: no trace): only that column, not the
    compressed candidates a whole trace would decompress and parse (every turn)."""
    params = {"turn_id": turn_id}
    kept = await store.read(lambda connection: connection.scalar(_KEPT_IDS, params))
    return None if kept is None else [int(i) for i in kept]
