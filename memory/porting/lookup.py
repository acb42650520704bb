"""``agentgw memory search`` and ``agentgw memory show``: progressive disclosure.

``search`` runs the pack's own retrieval (ANN + full text + pinned + time
window, the same scores) and prints the best candidates short, with ids and
scores; ``show ID`` prints one item whole, with where it came from and its
versions (what it replaced, what replaced it) and its paths in the memory tree
(root > topic > cluster > leaf). An agent reads the short list
and opens only what it needs.

Both only read the store, so they run beside a running gateway: the search's
indexes are built in a temporary folder of its own (from the stored vectors,
nothing re-embedded), never in the gateway's ``memory-index``, and no trace is
stored.
"""

from __future__ import annotations

import asyncio
import dataclasses
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.config import Config
from gateway.store import Store
from gateway.store.models import Conversation, Message, Person
from memory import repo
from memory.errors import PortingError
from memory.models import MemoryItem
from memory.state import PackRequest
from memory.tree.models import TreeNode


@dataclass(frozen=True)
class Hit:
    id: int
    text: str
    score: float
    said_at: datetime
    type: str
    speaker: str
    kept: bool

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "text": self.text,
            "score": round(self.score, 4),
            "date": self.said_at.isoformat(),
            "type": self.type,
            "speaker": self.speaker,
            "kept": self.kept,
        }


async def the_person(store: Store, wanted: int | None) -> int:
    """``wanted`` (checked), or the store's only person."""
    async with store.reader() as session:
        if wanted is not None:
            if await session.get(Person, wanted) is None:
                raise PortingError(f"no person {wanted} in the store")
            return wanted
        ids = list((await session.scalars(select(Person.id).order_by(Person.id).limit(2))).all())
        if len(ids) == 1:
            return int(ids[0])
        if not ids:
            raise PortingError("the store holds nobody yet")
        count = await session.scalar(select(func.count()).select_from(Person))
        raise PortingError(f"the store holds {count} people: say whose memory (--person)")


async def search(store: Store, config: Config, person_id: int, query: str, limit: int) -> list[Hit]:
    from memory.service import MemoryService, load_embedder

    memory = dataclasses.replace(config.memory, store_traces=False)
    embedder = None
    if memory.embedder == "minilm":
        embedder = await asyncio.to_thread(load_embedder, memory)
    with tempfile.TemporaryDirectory(prefix="agentgw-search-") as scratch:
        service = MemoryService(store, memory, Path(scratch), embedder)
        try:
            await service.lexical(person_id, wait=True)
            pack = await service.build_pack(
                PackRequest(person_id=person_id, text=query, at=datetime.now(UTC))
            )
        finally:
            await service.aclose()
    ranked = sorted(pack.result.trace, key=lambda c: (-float(c["score"]), int(c["id"])))[:limit]
    rows = {i.id: i for i in await repo.get_items(store, [int(c["id"]) for c in ranked])}
    return [
        Hit(
            id=int(c["id"]),
            text=rows[int(c["id"])].content,
            score=float(c["score"]),
            said_at=rows[int(c["id"])].occurred_at,
            type=rows[int(c["id"])].type.value,
            speaker=rows[int(c["id"])].speaker,
            kept=c.get("decision") == "kept",
        )
        for c in ranked
        if int(c["id"]) in rows
    ]


def _item_json(item: MemoryItem) -> dict[str, Any]:
    return {
        "id": item.id,
        "person_id": item.person_id,
        "type": item.type.value,
        "text": item.content,
        "speaker": item.speaker,
        "role": item.role,
        "author": item.author,
        "channel": item.channel,
        "status": item.status.value,
        "pinned": item.pinned,
        "tier": item.tier.value,
        "date": item.occurred_at.isoformat(),
        "created_at": item.created_at.isoformat(),
        "refers": [d.isoformat() if d else None for d in (item.refers_start, item.refers_end)],
        "source_ref": item.source_ref,
        "superseded_by": item.superseded_by_id,
    }


async def tree_paths(session: AsyncSession, item: MemoryItem) -> list[list[str]]:
    """The item's paths in its person's memory tree, root first (a leaf in two clusters
    has two); none while the tree has not placed it. Reads the leaf's candidates (its
    own key, or the notes of its conversation) and the nodes above the leaves."""
    leaf_keys = or_(
        TreeNode.key == f"item:{item.id}",
        TreeNode.key.like(f"note:{item.conversation_id or 0}:%"),
    )
    mine = TreeNode.person_id == item.person_id
    leaves = [
        (key, list(parents))
        for key, ids, parents in (
            await session.execute(
                select(TreeNode.key, TreeNode.item_ids, TreeNode.parent_keys).where(
                    mine, TreeNode.level == 0, leaf_keys
                )
            )
        ).all()
        if item.id in ids
    ]
    above = {
        key: list(parents)
        for key, parents in (
            await session.execute(
                select(TreeNode.key, TreeNode.parent_keys).where(mine, TreeNode.level > 0)
            )
        ).all()
    }

    def up(key: str, parents: list[str]) -> list[list[str]]:
        found = [p for p in parents if p in above]
        if not found:
            return [[key]]
        return [[*path, key] for p in found for path in up(p, above[p])]

    return [path for key, parents in leaves for path in up(key, parents)]


async def show(store: Store, item_id: int) -> dict[str, Any]:
    """One item with its provenance (source messages), versions, oldest first, and its
    paths in the memory tree."""
    async with store.reader() as session:
        item = await session.get(MemoryItem, item_id)
        if item is None:
            raise PortingError(f"no memory item {item_id}")
        # Versions: follow what replaced it forward, and what it replaced backward.
        chain = [item]
        seen = {item.id}
        while chain[-1].superseded_by_id is not None and chain[-1].superseded_by_id not in seen:
            newer = await session.get(MemoryItem, chain[-1].superseded_by_id)
            if newer is None:
                break
            chain.append(newer)
            seen.add(newer.id)
        older = list(
            (
                await session.scalars(
                    select(MemoryItem)
                    .where(MemoryItem.superseded_by_id == item_id)
                    .order_by(MemoryItem.occurred_at, MemoryItem.id)
                )
            ).all()
        )
        sources = []
        for message_id in item.source_message_ids:
            message = await session.get(Message, message_id)
            if message is None:
                continue
            conversation = await session.get(Conversation, message.conversation_id)
            sources.append(
                {
                    "message_id": message.id,
                    "conversation_id": message.conversation_id,
                    "channel": conversation.channel if conversation else message.channel,
                    "role": message.role.value,
                    "date": message.created_at.isoformat(),
                    "text": message.text,
                    "client_id": message.client_id,
                }
            )
        paths = await tree_paths(session, item)
    return {
        "item": _item_json(item),
        "sources": sources,
        "versions": [_item_json(i) for i in (*older, *chain)],
        "tree": paths,
    }
