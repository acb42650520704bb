"""The memory tree of each person: gathered from the store, built, updated, kept.

Level 0 holds the person's memory items (facts, preferences, observations,
insights: everything but episodes), one leaf each. Raw episodes are not
leaves; with ``memory.tree_episode_notes`` (on by default) one speaker's
episodes of one day of one conversation become one leaf, a *note*, so a store
that holds only conversation (LoCoMo, a fresh import) still has a tree. A
note's quotes are its episodes' sentences, verbatim, so it credits exactly the
turns it quotes.

``update`` is incremental (memory/tree/grow.py): it reads only the items written
since the last update (the ids the write path queued) and the touched branch. A
new leaf joins its nearest cluster through the clusters' stored centroids (and
the second nearest when within ``tree_soft_margin`` cosine: soft assignment), a
cluster past ``tree_cluster_max`` leaves splits by GaussianMixture/BIC, and only
the touched clusters, their topics and the root are summarised again — in the
background, off the reply's path. ``rebuild`` (the nightly job) clusters
everything afresh; a new cluster takes the key of the old one it shares most
items with, so its history continues. Every summary written is a new row of
``memory_tree_versions``; a summary corrected by hand is kept by later builds.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray
from sqlalchemy import Connection, select

from gateway.config import MemoryConfig
from gateway.store import Store
from gateway.store.db import sqlite_file
from gateway.zones import PersonZones
from memory.embed import from_blob, to_blob
from memory.pack_activity import PackActivity
from memory.tree import build as tb
from memory.tree import grow, offline, rows
from memory.tree.models import TreeNode, TreeNodeVersion
from memory.tree.queue import UpdateQueue
from memory.tree.view import NodeView, aware, view_of
from memory.utility import UtilityModel

if TYPE_CHECKING:
    from memory.jobs.offload import CpuWork

log = logging.getLogger(__name__)

EXTRACTIVE = tb.EXTRACTIVE
# A person with no tree and more items than this is built by the nightly rebuild, not by
# an update (``MemoryTree._build_waits_for_the_night``).
FIRST_BUILD_MAX_ITEMS = 5000
_ABSTRACT = (
    "Summarise these dated memories of one person in at most three short sentences. "
    "Say only what they state."
)


class MemoryTree(UpdateQueue):
    """Builds, updates and reads the people's trees (one per ``MemoryService``); the
    updates' background queue is ``UpdateQueue``'s (memory/tree/queue.py)."""

    def __init__(
        self,
        store: Store,
        config: MemoryConfig,
        zones: PersonZones,
        utility: Callable[[], UtilityModel | None],
        packs: PackActivity | None = None,
    ) -> None:
        self.store = store
        # The packs under way: a rebuild's write steps around them.
        self.packs = packs
        self.config = config
        self.zones = zones
        self._utility = utility
        self._cache: dict[int, dict[str, NodeView]] = {}
        self._locks: dict[int, asyncio.Lock] = {}
        # People whose first build waits for the nightly rebuild (logged once each).
        self._deferred: set[int] = set()
        UpdateQueue.__init__(self)
        # Whether the pack uses the tree (a bench measures the flat pack beside it).
        self.packing = True

    # -- reading -------------------------------------------------------------------

    async def nodes(self, person_id: int) -> dict[str, NodeView]:
        """The person's tree by key (cached until the tree changes)."""
        cached = self._cache.get(person_id)
        if cached is not None:
            return cached
        found = {
            row.key: view_of(row)
            for row in await self.store.read(lambda c: rows.read_nodes(c, person_id))
        }
        _speakers(found, list(found.values()))
        self._cache[person_id] = found
        return found

    async def versions(self, person_id: int, key: str) -> list[dict[str, Any]]:
        """A node's versions, oldest first."""
        return (await self.versions_of(person_id, [key])).get(key, [])

    async def versions_of(
        self, person_id: int, keys: Sequence[str]
    ) -> dict[str, list[dict[str, Any]]]:
        """These nodes' versions, oldest first, in one read (the panel's page shows every
        node above the leaves: one query each was 281 at 100k items)."""
        found: dict[str, list[dict[str, Any]]] = {}
        for r in await self.store.read(lambda c: rows.read_versions(c, person_id, keys)):
            found.setdefault(r.key, []).append(
                {
                    "version": r.version,
                    "summary": r.summary,
                    "item_ids": list(r.item_ids),
                    "child_keys": list(r.child_keys),
                    "model": r.model,
                    "reason": r.reason,
                    "written_at": aware(r.written_at).isoformat(),
                }
            )
        return found

    # -- the leaves ----------------------------------------------------------------

    async def leaves(self, person_id: int) -> list[tb.Leaf]:
        """The person's level 0 as it stands in the store (embedded items only)."""
        episodes = self.config.tree_episode_notes
        found_rows, found = await self.store.read(
            lambda c: offline.read_leaf_rows(c, person_id, episodes=episodes)
        )
        zone = await self.zones.of(person_id)
        return await asyncio.to_thread(offline.leaves_of, found_rows, found, zone)

    # -- building --------------------------------------------------------------------

    def _lock(self, person_id: int) -> asyncio.Lock:
        return self._locks.setdefault(person_id, asyncio.Lock())

    async def rebuild(self, person_id: int, cpu: CpuWork | None = None) -> int:
        """Cluster the person's whole tree afresh (the nightly job); nodes written.

        With ``cpu`` (the nightly's ``CpuWork``) the two clusterings, most of a large
        rebuild's CPU (GMM over PCA: 17 of 22 s at 100k items), run where it says: in
        the job's own process by default, so they do not hold the serving process's
        GIL against the packs. The same functions build the same tree either way.
        The write starts between packs and pauses while one is under way
        (``packs``, memory/pack_activity.py)."""
        async with self._lock(person_id):
            cluster_max, topic_max = self.config.tree_cluster_max, self.config.tree_topic_max
            file_url = self.store.url.replace("+aiosqlite", "", 1)
            if cpu is not None and cpu.kind == "process" and sqlite_file(file_url) is not None:
                # The whole plan in the job's process, from the file: here only the write.
                old = await self.nodes(person_id)
                planned = await cpu.run(
                    offline.plan,
                    file_url,
                    person_id,
                    await self.zones.of(person_id),
                    episodes=self.config.tree_episode_notes,
                    cluster_max=cluster_max,
                    topic_max=topic_max,
                    old={
                        k: (n.level, set(n.item_ids)) for k, n in old.items() if n.level in (1, 2)
                    },
                )
                return await self._write(person_id, planned, "rebuild", replace_all=True)
            leaves = await self.leaves(person_id)
            if cpu is None or not leaves:
                built = await asyncio.to_thread(tb.build, leaves, cluster_max, topic_max)
            else:
                matrix = await asyncio.to_thread(tb.leaf_matrix, leaves)
                found = await cpu.run(tb.soft_clusters, matrix, cluster_max)
                clusters, centroids = await asyncio.to_thread(tb.clusters_of, leaves, matrix, found)
                topics = await cpu.run(tb.soft_clusters, centroids, topic_max)
                built = await asyncio.to_thread(tb.finish, leaves, clusters, topics)
            old = await self.nodes(person_id)
            tb.inherit_keys(built, {k: (n.level, set(n.item_ids)) for k, n in old.items()})
            return await self._save(person_id, built, "rebuild", replace_all=True)

    async def update(self, person_id: int) -> int:
        """Place the items queued for the person; summarise only the touched branch.
        Reads the new items and the touched clusters' members, never the whole tree's
        (memory/tree/grow.py); a person with no tree yet (or one built before nodes kept
        vectors) is built whole once."""
        async with self._lock(person_id):
            pending = sorted(self._pending.pop(person_id, set()))
            old = await self.nodes(person_id)
            if not any(n.level == 1 for n in old.values()) or any(
                n.vector is None for n in old.values() if n.level < 3
            ):
                if await self._build_waits_for_the_night(person_id):
                    return 0
                leaves = await self.leaves(person_id)
                built = await asyncio.to_thread(
                    tb.build, leaves, self.config.tree_cluster_max, self.config.tree_topic_max
                )
                tb.inherit_keys(built, {k: (n.level, set(n.item_ids)) for k, n in old.items()})
                return await self._save(person_id, built, "build", replace_all=True)
            if not pending:
                return 0
            # The queued items with their vectors, in one read.
            queued = await self._rows(person_id, pending, with_vectors=True)
            zone = await self.zones.of(person_id)
            items = [
                grow.NewItem(
                    offline.leaf_key(kind, int(item_id), said, speaker, conversation, zone),
                    int(item_id),
                    from_blob(vector),
                    speaker or "",
                )
                for item_id, kind, _, speaker, said, conversation, vector in queued
            ]
            if not items:
                return 0
            placed = await asyncio.to_thread(
                grow.place,
                old,
                items,
                self.config.tree_cluster_max,
                self.config.tree_topic_max,
                self.config.tree_soft_margin,
            )
            texts = {
                int(item_id): (content, aware(said), speaker or "")
                for item_id, _, content, speaker, said, _ in await self._rows(
                    person_id, placed.read_ids(old), active_only=False
                )
            }
            grown = await asyncio.to_thread(grow.summarise, placed, old, texts)
            return await self._save(
                person_id,
                grown.built,
                "update",
                replace_all=False,
                parents=grown.parents,
                vectors=grown.vectors,
            )

    async def _build_waits_for_the_night(self, person_id: int) -> bool:
        """Whether a person with no tree has too many items to build one now: the tree
        just turned on over a store that has them (at 100k items a build is about a
        minute of a worker thread). The nightly rebuild builds it, when it costs no
        reply anything; their queued ids are dropped (the rebuild reads every item)."""
        count = await self.store.read(
            lambda c: rows.count_items(c, person_id, episodes=self.config.tree_episode_notes)
        )
        if count <= FIRST_BUILD_MAX_ITEMS:
            return False
        if person_id not in self._deferred:
            self._deferred.add(person_id)
            log.info(
                "tree: person %d has %d items and no tree yet; the nightly job builds it",
                person_id,
                count,
            )
        return True

    async def _rows(
        self,
        person_id: int,
        ids: Sequence[int],
        *,
        active_only: bool = True,
        with_vectors: bool = False,
    ) -> list[Any]:
        """The leaves' columns of these items (of this person), in date order; with
        ``with_vectors`` the embedded ones only, each with its stored vector last."""
        found = await self.store.read(
            lambda c: rows.read_items(
                c,
                person_id,
                ids,
                active_only=active_only,
                episodes=self.config.tree_episode_notes,
                with_vectors=with_vectors,
            )
        )
        return sorted(found, key=lambda r: (aware(r[4]), r[0]))

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
        self,
        person_id: int,
        built: tb.Built,
        reason: str,
        *,
        replace_all: bool,
        parents: dict[str, list[str]] | None = None,
        vectors: dict[str, NDArray[np.float32]] | None = None,
    ) -> int:
        """Write the built nodes (all of them with ``replace_all``, else only these, with
        the ``parents`` the update worked out) and a version for each changed summary."""
        if parents is None:
            parents = offline.parents_of(built)
        if vectors is None:
            vectors = await asyncio.to_thread(built.vectors)
        # A leaf's line is a TF-IDF pick: a rebuild makes one per leaf, in a worker thread.
        specs = await asyncio.to_thread(offline.specs_of, built)
        return await self._write(
            person_id, offline.Plan(specs, vectors, parents), reason, replace_all=replace_all
        )

    async def _write(
        self, person_id: int, planned: offline.Plan, reason: str, *, replace_all: bool
    ) -> int:
        """Write ``planned``'s nodes and a version for each changed summary."""
        now = datetime.now(UTC)
        specs, vectors, parents = planned.specs, planned.vectors, planned.parents
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

        def node_write(spec: offline.Spec) -> rows.NodeWrite:
            key, level, children, items, quotes, first, last = spec
            return rows.NodeWrite(
                key,
                level,
                children,
                items,
                # The quotes are kept as the summary's basis either way; the pack quotes
                # them only from an extractive node (an abstractive one credits nothing).
                [q.as_list() for q in quotes],
                *abstracts.get(key, ("\n".join(q.render() for q in quotes), EXTRACTIVE)),
                first,
                last,
                to_blob(vectors[key]) if key in vectors else None,
                parents.get(key),
            )

        # A rebuild's write (the whole tree) steps around the packs: it starts between
        # two, and its thread pauses between chunks while one is under way.
        pause = self.packs.pause if self.packs is not None and reason == "rebuild" else None

        def write(connection: Connection) -> tuple[int, list[NodeView]]:
            # The rows are made here in the writer thread, not in the event loop.
            writes: list[rows.NodeWrite] = []
            for start in range(0, len(specs), rows.WRITE_CHUNK):
                if start and pause is not None:
                    pause()
                writes.extend(node_write(s) for s in specs[start : start + rows.WRITE_CHUNK])
            return rows.write_nodes(
                connection,
                person_id,
                writes,
                reason=reason,
                replace_all=replace_all,
                now=now,
                pause=pause,
            )

        if pause is not None and self.packs is not None:
            await self.packs.quiet()
        # Plain statements in the writer thread, one transaction (memory/tree/rows.py).
        # The whole tree (a build or rebuild) is long, and a rebuild's ``pause`` sleeps:
        # alone, so no turn's write waits in its transaction. An update's few nodes share one.
        written, stored = await self.store.write(write, alone=replace_all)
        views = {view.key: view for view in stored}
        cached = self._cache.get(person_id)
        if replace_all:
            # The written nodes are the whole tree: cached as they are, so the next pack
            # does not read them back (at 100k items a pack waited 1.8 s for that read).
            _speakers(views, [v for v in views.values() if v.level > 0])
            self._cache[person_id] = views
        elif cached is None:
            self._cache.pop(person_id, None)
        else:
            # The cached tree takes the written nodes in place: the next pack does not
            # read the whole tree again after every update.
            cached.update(views)
            _speakers(cached, [v for v in views.values() if v.level > 0])
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
                    child_keys=list(row.child_keys),
                    model="person",
                    reason="correction",
                    written_at=now,
                )
            )
            version = row.version
        self._cache.pop(person_id, None)
        return version


def members_of(nodes: Mapping[str, NodeView], key: str) -> list[int]:
    """The item ids under a node: its own list, or for the root (which keeps only its
    topics) the union of its topics' lists."""
    node = nodes[key]
    if node.level < 3:
        return node.item_ids
    return sorted({i for k in node.child_keys if k in nodes for i in nodes[k].item_ids})


def _speakers(nodes: dict[str, NodeView], groups: Sequence[NodeView]) -> None:
    """A group's speakers are its children's, level by level from the clusters up."""
    for level in (1, 2, 3):
        for node in groups:
            if node.level == level:
                node.speakers = set().union(
                    *(nodes[k].speakers for k in node.child_keys if k in nodes)
                )
