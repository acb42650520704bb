"""Each gateway of a cluster keeps its own indexes; the store is the truth (issue 25).

Every process holds, for the people it serves, an ANN index and a full-text
index in its own memory and data directory, never shared. When one process
changes which items are searchable (stores new ones, supersedes, forgets,
archives, restores), the others must see it at their next pack. So the
memory service publishes each change as a small notification on the
``agentgw_items`` channel (``{"from", "person", "op", "ids"}``; a list too long
for one payload becomes "read the whole person again"), and every other
process applies it to the indexes it has open:

- ``add``/``restore``: the ids that are searchable now (read from the store:
  active, and for the ANN index not archived and embedded) are added, with
  their stored vectors (never embedded again);
- ``drop``: the ids leave both indexes; ``unindex``: they leave the ANN index.

A person whose indexes are not open in a process needs nothing: opening them
reads the store and catches up (``Indexes._open_index``). A notification
missed while the LISTEN connection was down is made good at reconnection by
reconciling every open index with the store (``PgListener``'s
``on_reconnect``). Notifications are a nudge, not the record: the pack reads
the items themselves from the store, so an index entry that is briefly stale
costs a candidate, never a wrong quote.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING

from sqlalchemy import Connection, select

from gateway.store.notify import MAX_PAYLOAD_BYTES, PgListener, notify
from memory.models import MemoryItem
from memory.state import ChangeOp
from memory.types import ItemStatus, Tier

if TYPE_CHECKING:
    from memory.service import MemoryService

log = logging.getLogger(__name__)

CHANNEL = "agentgw_items"
OPS: frozenset[str] = frozenset(("add", "restore", "drop", "unindex"))


def _payload(origin: str, person_id: int, op: ChangeOp, ids: Sequence[int]) -> str:
    body = json.dumps({"from": origin, "person": person_id, "op": op, "ids": list(ids)})
    if len(body.encode()) <= MAX_PAYLOAD_BYTES:
        return body
    # Too many ids for one notification: the receivers read the person from the store.
    return json.dumps({"from": origin, "person": person_id, "op": "resync", "ids": []})


class IndexFeed:
    """Publishes this service's index changes and applies the other processes' ones."""

    def __init__(self, service: MemoryService, listener: PgListener) -> None:
        self.service = service
        self.listener = listener
        # Tells this process's own notifications apart (it has applied them already).
        self.origin = uuid.uuid4().hex
        self.applied = 0
        # Applied one at a time and in arrival order: a drop never overtakes its add.
        self._order = asyncio.Lock()

    async def start(self) -> None:
        await self.listener.subscribe(CHANNEL, self._received, self.reconcile)
        self.service.publish = self.publish

    async def aclose(self) -> None:
        if self.service.publish == self.publish:
            self.service.publish = None

    async def publish(self, op: ChangeOp, person_id: int, ids: Sequence[int]) -> None:
        if not ids:
            return
        payload = _payload(self.origin, person_id, op, ids)
        await self.service.store.write(lambda connection: notify(connection, CHANNEL, payload))

    async def _received(self, payload: str) -> None:
        try:
            message = json.loads(payload)
            origin, person_id = str(message["from"]), int(message["person"])
            op, ids = str(message["op"]), [int(i) for i in message["ids"]]
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("memory feed: unreadable notification %r: %s", payload[:200], exc)
            return
        if origin == self.origin:
            return
        async with self._order:
            if op == "resync":
                await self._reconcile_person(person_id)
            elif op in OPS:
                await self._apply(op, person_id, ids)
            else:
                log.warning("memory feed: unknown change %r", op)
                return
            self.applied += 1

    async def _apply(self, op: str, person_id: int, ids: list[int]) -> None:
        service = self.service
        index = service._indexes.get(person_id)
        if op in ("drop", "unindex"):
            if index is not None:
                await asyncio.to_thread(index.delete, ids)
            if op == "drop":
                await service._lexical_changed(person_id, ids, restore=False)
            return
        if index is not None and person_id not in service._reembedding:
            indexable = await service.store.read(lambda c: _indexable_among(c, ids))
            if indexable:
                matrix = await service._current_vectors(indexable)
                await asyncio.to_thread(index.add, indexable, matrix)
        # Only those still recallable are read back into the full-text index.
        await service._lexical_changed(person_id, ids, restore=True)

    async def _reconcile_person(self, person_id: int) -> None:
        service = self.service
        index = service._indexes.get(person_id)
        if index is not None and person_id not in service._reembedding:
            await service._fill_index(index, person_id, index.keep_only)
        lexical = service._lexical.get(person_id)
        if lexical is not None:
            await service._catch_up_lexical(lexical, person_id, 5000)

    async def reconcile(self) -> None:
        """Bring every open index to what the store holds (after missed notifications)."""
        async with self._order:
            people = set(self.service._indexes) | set(self.service._lexical)
            for person_id in sorted(people):
                await self._reconcile_person(person_id)
        log.info("memory feed: %d people's indexes reconciled with the store", len(people))


def _indexable_among(connection: Connection, ids: Sequence[int]) -> list[int]:
    """Those of ``ids`` that belong in an ANN index: active, not archived, embedded."""
    return list(
        connection.execute(
            select(MemoryItem.id)
            .where(
                MemoryItem.id.in_(list(ids)),
                MemoryItem.status == ItemStatus.ACTIVE,
                MemoryItem.tier != Tier.ARCHIVED,
                MemoryItem.embedding.is_not(None),
            )
            .order_by(MemoryItem.id)
        ).scalars()
    )
