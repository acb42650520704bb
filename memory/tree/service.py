"""The memory tree of each person: gathered from the store, built, updated, kept.

Level 0 holds the person's memory items (facts, preferences, observations,
insights: everything but episodes), one leaf each. Raw episodes are not
leaves; with ``memory.tree_episode_notes`` (on by default) one speaker's
episodes of one day of one conversation become one leaf, a *note*, so a store
that holds only conversation (LoCoMo, a fresh import) still has a tree. A
note's quotes are its episodes' sentences, verbatim, so it credits exactly the
turns it quotes.

``update`` is incremental: a new leaf joins its nearest cluster (and the
second nearest when within ``tree_soft_margin`` cosine: soft assignment), a
cluster past ``tree_cluster_max`` members splits by GaussianMixture/BIC, and
only the touched clusters, their topics and the root are summarised again.
``rebuild`` (the nightly job) clusters everything afresh; a new cluster takes
the key of the old one it shares most items with, so its history continues.
Every summary written is a new row of ``memory_tree_versions``; a summary
corrected by hand is kept by later builds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from typing import Any

import numpy as np
from sqlalchemy import delete, select

from gateway.clock import local_day
from gateway.config import MemoryConfig
from gateway.store import Store
from gateway.zones import PersonZones
from memory.models import MemoryItem
from memory.repo.vectors import stored_vectors
from memory.tree import build as tb
from memory.tree.models import TreeNode, TreeNodeVersion
from memory.types import ItemStatus, ItemType
from memory.utility import UtilityModel

log = logging.getLogger(__name__)

EXTRACTIVE = "extractive"
_ABSTRACT = (
    "Summarise these dated memories of one person in at most three short sentences. "
    "Say only what they state."
)


@dataclass
class NodeView:
    """A stored node as the pack and the panel read it."""

    key: str
    level: int
    summary: str
    item_ids: list[int]
    child_keys: list[str]
    parent_keys: list[str]
    quotes: list[tb.Quote]
    model: str
    version: int
    first_at: datetime | None
    last_at: datetime | None
    speakers: set[str] = field(default_factory=set)


def _aware(at: datetime) -> datetime:
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def _quote(raw: Sequence[Any]) -> tb.Quote:
    return tb.Quote(
        _aware(datetime.fromisoformat(str(raw[0]))), str(raw[1]), str(raw[2]), int(raw[3])
    )


def _view(row: TreeNode) -> NodeView:
    quotes = [_quote(q) for q in row.quotes]
    return NodeView(
        row.key,
        row.level,
        row.summary,
        list(row.item_ids),
        list(row.child_keys),
        list(row.parent_keys),
        quotes,
        row.model,
        row.version,
        row.first_at,
        row.last_at,
        {q.speaker for q in quotes},
    )


class MemoryTree:
    """Builds, updates and reads the people's trees (one per ``MemoryService``)."""

    def __init__(
        self,
        store: Store,
        config: MemoryConfig,
        zones: PersonZones,
        utility: Callable[[], UtilityModel | None],
    ) -> None:
        self.store = store
        self.config = config
        self.zones = zones
        self._utility = utility
        self._cache: dict[int, dict[str, NodeView]] = {}
        self._locks: dict[int, asyncio.Lock] = {}
        self._dirty: set[int] = set()
        self._task: asyncio.Task[None] | None = None
        # Whether the pack uses the tree (a bench measures the flat pack beside it).
        self.packing = True

    # -- reading -------------------------------------------------------------------

    async def nodes(self, person_id: int) -> dict[str, NodeView]:
        """The person's tree by key (cached until the tree changes)."""
        cached = self._cache.get(person_id)
        if cached is not None:
            return cached
        async with self.store.reader() as session:
            rows = (
                await session.scalars(select(TreeNode).where(TreeNode.person_id == person_id))
            ).all()
            found = {row.key: _view(row) for row in rows}
        for level in (1, 2, 3):
            for node in found.values():
                if node.level == level:
                    node.speakers = set().union(
                        *(found[k].speakers for k in node.child_keys if k in found)
                    )
        self._cache[person_id] = found
        return found

    async def versions(self, person_id: int, key: str) -> list[dict[str, Any]]:
        async with self.store.reader() as session:
            rows = (
                await session.scalars(
                    select(TreeNodeVersion)
                    .where(TreeNodeVersion.person_id == person_id, TreeNodeVersion.key == key)
                    .order_by(TreeNodeVersion.version)
                )
            ).all()
            return [
                {
                    "version": r.version,
                    "summary": r.summary,
                    "item_ids": list(r.item_ids),
                    "model": r.model,
                    "reason": r.reason,
                    "written_at": r.written_at.isoformat(),
                }
                for r in rows
            ]

    # -- the leaves ----------------------------------------------------------------

    async def leaves(self, person_id: int) -> list[tb.Leaf]:
        """The person's level 0 as it stands in the store (embedded items only)."""
        kinds = [MemoryItem.type != ItemType.EPISODE]
        async with self.store.reader() as session:
            rows = (
                await session.execute(
                    select(
                        MemoryItem.id,
                        MemoryItem.type,
                        MemoryItem.content,
                        MemoryItem.speaker,
                        MemoryItem.occurred_at,
                        MemoryItem.conversation_id,
                    )
                    .where(
                        MemoryItem.person_id == person_id,
                        MemoryItem.status == ItemStatus.ACTIVE,
                        MemoryItem.embedding.is_not(None),
                        *(() if self.config.tree_episode_notes else kinds),
                    )
                    .order_by(MemoryItem.occurred_at, MemoryItem.id)
                )
            ).all()
        found = await stored_vectors(self.store, [int(r[0]) for r in rows])
        zone = await self.zones.of(person_id)
        return await asyncio.to_thread(self._leaves, rows, found, zone)

    @staticmethod
    def _leaves(
        rows: Sequence[Any], found: dict[int, tuple[Any, str]], zone: tzinfo
    ) -> list[tb.Leaf]:
        leaves: list[tb.Leaf] = []
        notes: dict[str, tuple[list[int], list[tb.Quote], list[Any], str]] = {}
        for item_id, kind, content, speaker, said, conversation in rows:
            if item_id not in found:
                continue
            at = _aware(said)
            quotes = tb.quotes_of(int(item_id), content, at, speaker or "")
            if kind != ItemType.EPISODE:
                vector = tb.unit(found[item_id][0])
                leaves.append(tb.Leaf(f"item:{item_id}", [int(item_id)], quotes, vector, speaker))
                continue
            key = f"note:{conversation or 0}:{local_day(at, zone).isoformat()}:{speaker or ''}"
            ids, qs, vectors, _ = notes.setdefault(key, ([], [], [], speaker or ""))
            ids.append(int(item_id))
            qs.extend(quotes)
            vectors.append(found[item_id][0])
        for key, (ids, qs, vectors, speaker) in notes.items():
            vector = tb.unit(np.mean(np.stack(vectors), axis=0))
            leaves.append(tb.Leaf(key, ids, qs, vector, speaker))
        return leaves

    # -- building --------------------------------------------------------------------

    def _lock(self, person_id: int) -> asyncio.Lock:
        return self._locks.setdefault(person_id, asyncio.Lock())

    async def rebuild(self, person_id: int) -> int:
        """Cluster the person's whole tree afresh (the nightly job); nodes written."""
        async with self._lock(person_id):
            leaves = await self.leaves(person_id)
            built = await asyncio.to_thread(
                tb.build, leaves, self.config.tree_cluster_max, self.config.tree_topic_max
            )
            old = await self.nodes(person_id)
            _inherit_keys(built, old)
            return await self._save(person_id, built, "rebuild", replace_all=True)

    async def update(self, person_id: int) -> int:
        """Place the leaves not in the tree yet; summarise only the touched branch."""
        async with self._lock(person_id):
            old = await self.nodes(person_id)
            if not any(n.level == 1 for n in old.values()):
                leaves = await self.leaves(person_id)
                built = await asyncio.to_thread(
                    tb.build, leaves, self.config.tree_cluster_max, self.config.tree_topic_max
                )
                return await self._save(person_id, built, "build", replace_all=True)
            leaves = await self.leaves(person_id)
            placed = await asyncio.to_thread(self._place, leaves, old)
            if placed is None:
                return 0
            return await self._save(person_id, placed, "update", replace_all=False)

    def _place(self, leaves: list[tb.Leaf], old: dict[str, NodeView]) -> tb.Built | None:
        by_key = {leaf.key: leaf for leaf in leaves}
        clusters = {k: n for k, n in old.items() if n.level == 1}
        members = {k: [c for c in n.child_keys if c in by_key] for k, n in clusters.items()}
        touched: set[str] = set()
        keys = [k for k in members if members[k]]
        # Each cluster's centroid once, then kept as a running sum as leaves join
        # (not recomputed from every member per new leaf).
        sums = (
            np.stack([np.sum([by_key[c].vector for c in members[k]], axis=0) for k in keys])
            if keys
            else np.zeros((0, 1), np.float32)
        )
        for key, leaf in by_key.items():
            known = old.get(key)
            if known is not None:
                if set(known.item_ids) != set(leaf.item_ids):
                    # A note that grew (a later turn of the same day): its clusters change.
                    touched.update(known.parent_keys)
                continue
            if not keys:
                continue
            norms = np.linalg.norm(sums, axis=1, keepdims=True)
            centroids = (sums / np.where(norms == 0, 1, norms)).astype(np.float32)
            for row in tb.nearest(leaf.vector, centroids, self.config.tree_soft_margin):
                members[keys[row]].append(key)
                sums[row] += leaf.vector
                touched.add(keys[row])
        if not touched:
            return None
        topic_of = {c: k for k, n in old.items() if n.level == 2 for c in n.child_keys}
        topics = {k: list(n.child_keys) for k, n in old.items() if n.level == 2}
        counter = 1 + max((int(k.split(":")[1]) for k in clusters if k[2:].isdigit()), default=0)
        for key in sorted(touched):
            if len(members[key]) <= self.config.tree_cluster_max:
                continue
            rows = tb.soft_clusters(
                np.stack([by_key[c].vector for c in members[key]]),
                self.config.tree_cluster_max,
            )
            parts = [[members[key][r] for r in part] for part in rows]
            members[key] = parts[0]
            for part in parts[1:]:
                new = f"c:{counter}"
                counter += 1
                members[new] = part
                touched.add(new)
                topic = topic_of.get(key)
                if topic is not None:
                    topics[topic].append(new)
                    topic_of[new] = topic
        groups: list[tb.Group] = []
        for key in sorted(touched):
            group = tb.Group(
                key,
                1,
                members[key],
                sorted({i for c in members[key] for i in by_key[c].item_ids}),
            )
            tb.summarise(group, [q for c in members[key] for q in by_key[c].quotes], 3)
            groups.append(group)
        cluster_quotes = {g.key: g.quotes for g in groups} | {
            k: n.quotes for k, n in clusters.items() if k not in touched
        }
        cluster_items = {g.key: g.item_ids for g in groups} | {
            k: n.item_ids for k, n in clusters.items() if k not in touched
        }
        topic_groups = []
        for topic in sorted({topic_of[k] for k in touched if k in topic_of}):
            kids = topics[topic]
            group = tb.Group(
                topic, 2, kids, sorted({i for c in kids for i in cluster_items.get(c, [])})
            )
            tb.summarise(group, [q for c in kids for q in cluster_quotes.get(c, [])], 3)
            topic_groups.append(group)
        topic_quotes = {g.key: g.quotes for g in topic_groups} | {
            k: n.quotes
            for k, n in old.items()
            if n.level == 2 and k not in topics_touched(topic_groups)
        }
        root_old = old.get("root")
        kids = root_old.child_keys if root_old else sorted(topics)
        every = sorted(
            {i for t in kids for c in topics.get(t, []) for i in cluster_items.get(c, [])}
        )
        root = tb.Group("root", 3, kids, every)
        tb.summarise(
            root, [q for t in kids for q in topic_quotes.get(t, [])], min(5, max(2, len(kids)))
        )
        new_leaves = [
            leaf for key, leaf in by_key.items() if any(key in members[c] for c in touched)
        ]
        return tb.Built(new_leaves, groups, topic_groups, root)

    async def _abstract(self, quotes: Sequence[tb.Quote]) -> tuple[str, str] | None:
        utility = self._utility()
        if utility is None or not quotes:
            return None
        text = "\n".join(q.render() for q in quotes)
        try:
            summary = await utility.complete(_ABSTRACT, text, 200)
        except Exception:  # a model that fails leaves the extractive summary
            log.warning(
                "tree: the utility model failed; the summary stays extractive", exc_info=True
            )
            return None
        return summary.strip(), utility.name

    async def _save(
        self, person_id: int, built: tb.Built, reason: str, *, replace_all: bool
    ) -> int:
        now = datetime.now(UTC)
        parents: dict[str, list[str]] = {}
        for group in [*built.clusters, *built.topics, built.root]:
            for child in group.child_keys:
                parents.setdefault(child, []).append(group.key)
        specs: list[
            tuple[str, int, list[str], list[int], list[tb.Quote], datetime | None, datetime | None]
        ] = []
        for leaf in built.leaves:
            specs.append(
                (
                    leaf.key,
                    0,
                    [],
                    leaf.item_ids,
                    tb.key_quote(leaf.quotes),
                    leaf.first_at,
                    leaf.last_at,
                )
            )
        for group in [*built.clusters, *built.topics, built.root]:
            ats = [q.at for q in group.quotes]
            specs.append(
                (
                    group.key,
                    group.level,
                    group.child_keys,
                    group.item_ids,
                    group.quotes,
                    min(ats, default=None),
                    max(ats, default=None),
                )
            )
        written = 0
        # The utility model writes abstractive summaries in the nightly rebuild only, and
        # only for nodes whose members' quotes changed (the cost is bounded by what
        # changed, and the reply's path never waits on a model): between rebuilds, a
        # touched node carries its extractive summary.
        abstracts: dict[str, tuple[str, str]] = {}
        if reason == "rebuild" and self._utility() is not None:
            old = await self.nodes(person_id)
            for key, level, _, _, quotes, _, _ in specs:
                known = old.get(key)
                basis = [q.as_list() for q in quotes]
                if level == 0:
                    continue
                if (
                    known is not None
                    and known.model != EXTRACTIVE
                    and [q.as_list() for q in known.quotes] == basis
                ):
                    abstracts[key] = (known.summary, known.model)
                    continue
                abstract = await self._abstract(quotes)
                if abstract is not None:
                    abstracts[key] = abstract
        async with self.store.session() as session:
            existing = {
                row.key: row
                for row in (
                    await session.scalars(select(TreeNode).where(TreeNode.person_id == person_id))
                ).all()
            }
            for key, level, children, items, quotes, first, last in specs:
                # The quotes are kept as the summary's basis either way; the pack quotes
                # them only from an extractive node (an abstractive one credits nothing).
                stored_quotes = [q.as_list() for q in quotes]
                summary, model = abstracts.get(
                    key, ("\n".join(q.render() for q in quotes), EXTRACTIVE)
                )
                row = existing.pop(key, None)
                if row is None:
                    row = TreeNode(
                        person_id=person_id, key=key, level=level, version=0, corrected=False
                    )
                    session.add(row)
                row.level = level
                row.parent_keys = parents.get(
                    key, list(row.parent_keys or []) if not replace_all else []
                )
                row.child_keys = children
                row.first_at, row.last_at = first, last
                changed = (
                    row.summary != summary
                    or row.model != model
                    or list(row.item_ids or []) != items
                )
                row.item_ids = items
                if row.corrected:
                    # A person's correction outlives rebuilds: only the members change.
                    changed = False
                elif changed:
                    row.summary, row.model, row.quotes = summary, model, stored_quotes
                if changed or row.version == 0:
                    row.version += 1
                    row.updated_at = now
                    session.add(
                        TreeNodeVersion(
                            person_id=person_id,
                            key=key,
                            version=row.version,
                            summary=row.summary,
                            item_ids=items,
                            model=row.model,
                            reason=reason,
                            written_at=now,
                        )
                    )
                    written += 1
            if replace_all and existing:
                # Gone from the tree (their versions stay, for the record).
                await session.execute(
                    delete(TreeNode).where(TreeNode.id.in_([r.id for r in existing.values()]))
                )
        self._cache.pop(person_id, None)
        return written

    async def correct(self, person_id: int, key: str, summary: str) -> int:
        """A summary corrected by hand: a new version, kept by later builds."""
        now = datetime.now(UTC)
        async with self.store.session() as session:
            row = await session.scalar(
                select(TreeNode).where(TreeNode.person_id == person_id, TreeNode.key == key)
            )
            if row is None:
                raise KeyError(f"no tree node {key!r} for person {person_id}")
            row.summary, row.model, row.quotes, row.corrected = summary, "person", [], True
            row.version += 1
            row.updated_at = now
            session.add(
                TreeNodeVersion(
                    person_id=person_id,
                    key=key,
                    version=row.version,
                    summary=summary,
                    item_ids=list(row.item_ids),
                    model="person",
                    reason="correction",
                    written_at=now,
                )
            )
            version = row.version
        self._cache.pop(person_id, None)
        return version

    # -- off the reply's path ----------------------------------------------------------

    def schedule(self, people: Iterable[int]) -> None:
        """Queue the people's incremental updates (one worker, coalesced per person)."""
        self._dirty.update(people)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        while self._dirty:
            person_id = min(self._dirty)
            self._dirty.discard(person_id)
            started = time.perf_counter()
            try:
                await self.update(person_id)
            except Exception:  # the next write schedules it again; the reply never waits
                log.exception("tree: update of person %d failed", person_id)
            log.debug("tree: person %d updated in %.3fs", person_id, time.perf_counter() - started)

    async def idle(self) -> None:
        """Wait for the queued updates (tests, benches, shutdown)."""
        while self._task is not None and not self._task.done():
            with contextlib.suppress(Exception):
                await asyncio.shield(self._task)

    async def aclose(self) -> None:
        self._dirty.clear()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task


def topics_touched(groups: Sequence[tb.Group]) -> set[str]:
    return {g.key for g in groups}


def _inherit_keys(built: tb.Built, old: dict[str, NodeView]) -> None:
    """A rebuilt cluster or topic takes the key of the old node it shares most items
    with (Jaccard ≥ 0.5), so its version history continues; the others get fresh keys."""
    for level, groups in ((1, built.clusters), (2, built.topics)):
        prefix = "c" if level == 1 else "t"
        olds = {k: set(n.item_ids) for k, n in old.items() if n.level == level}
        taken: set[str] = set()
        renamed: dict[str, str] = {}
        fresh = 1 + max((int(k[2:]) for k in olds if k[2:].isdigit()), default=-1)
        for group in groups:
            mine = set(group.item_ids)
            best, score = None, 0.5
            for key, items in olds.items():
                if key in taken or not items:
                    continue
                jaccard = len(mine & items) / len(mine | items)
                if jaccard >= score:
                    best, score = key, jaccard
            if best is None:
                best = f"{prefix}:{fresh}"
                fresh += 1
            taken.add(best)
            renamed[group.key] = best
        for group in groups:
            group.key = renamed[group.key]
        parents = built.topics if level == 1 else [built.root]
        for parent in parents:
            parent.child_keys = [renamed.get(k, k) for k in parent.child_keys]
