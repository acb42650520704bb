"""The memory tree's incremental update (pure; runs in a worker thread).

An update reads only the new items and the touched branch, never the whole tree's
members: every node stores a vector (``TreeNode.vector``) — a leaf its mean item
vector, a cluster the sum of its leaves' unit vectors, a topic the sum of its
clusters' unit centroids — so placing a leaf is one product with the clusters'
centroids and keeping them current is one addition.

``place`` puts each new item in its leaf: a note that already exists grows (its
mean moves, and so do its clusters' sums), a new leaf joins its nearest cluster
and, when the second is within ``margin`` cosine, that one too (soft assignment).
A cluster past ``cluster_max`` leaves splits (GaussianMixture with BIC over its
own leaves' vectors, ``build.soft_clusters``); the new clusters join the split
one's topic, and a topic past ``topic_max`` clusters splits the same way (hard:
a cluster has one topic). ``summarise`` then ranks the changed leaves' lines
again from their own sentences (read by the caller for those leaves only) and
writes the touched clusters' summaries from their leaves' lines (the stored ones
for the leaves that did not change), their topics' from the clusters' quotes,
and the root's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from memory.tree import build as tb


class NodeLike(Protocol):
    """What ``place`` reads of a stored node (``view.NodeView`` has these)."""

    key: str
    level: int
    item_ids: list[int]
    child_keys: list[str]
    parent_keys: list[str]
    quotes: list[tb.Quote]
    model: str
    vector: NDArray[np.float32] | None


@dataclass(frozen=True)
class NewItem:
    """A new memory item: the leaf it belongs to, and its vector."""

    key: str
    item_id: int
    vector: NDArray[np.float32]
    speaker: str


@dataclass
class LeafState:
    item_ids: list[int]
    mean: NDArray[np.float32]
    speaker: str


@dataclass
class Placement:
    """The touched branch after placing the new items (full state of each node)."""

    leaves: dict[str, LeafState] = field(default_factory=dict)
    leaf_parents: dict[str, list[str]] = field(default_factory=dict)
    # Clusters whose members changed (summaries to write), and their members and sums.
    touched: set[str] = field(default_factory=set)
    members: dict[str, list[str]] = field(default_factory=dict)
    sums: dict[str, NDArray[np.float32]] = field(default_factory=dict)
    # Clusters that only changed topic (written again for their parent key).
    moved: set[str] = field(default_factory=set)
    cluster_topic: dict[str, str] = field(default_factory=dict)
    topics: dict[str, list[str]] = field(default_factory=dict)
    root_kids: list[str] = field(default_factory=list)

    def read_ids(self, old: Mapping[str, NodeLike]) -> list[int]:
        """The items whose sentences are ranked again: the changed leaves' only (a
        touched cluster's summary is ranked from its leaves' stored lines)."""
        return sorted({i for state in self.leaves.values() for i in state.item_ids})

    def leaf_items(self, key: str, old: Mapping[str, NodeLike]) -> list[int]:
        state = self.leaves.get(key)
        return state.item_ids if state is not None else list(old[key].item_ids)


def _int_suffix(key: str) -> int:
    tail = key.partition(":")[2]
    return int(tail) if tail.isdigit() else -1


def place(
    old: Mapping[str, NodeLike],
    items: Sequence[NewItem],
    cluster_max: int,
    topic_max: int,
    margin: float,
) -> Placement:
    out = Placement()
    clusters = [k for k, n in old.items() if n.level == 1]
    index = {k: row for row, k in enumerate(clusters)}
    sums = np.stack([_vector(old[k]) for k in clusters]).astype(np.float32)
    norms = np.linalg.norm(sums, axis=1)

    def touch(cluster: str) -> None:
        if cluster not in out.touched:
            out.touched.add(cluster)
            out.members[cluster] = list(old[cluster].child_keys)

    def parents(leaf: str) -> list[str]:
        if leaf not in out.leaf_parents:
            known = old.get(leaf)
            out.leaf_parents[leaf] = list(known.parent_keys) if known is not None else []
        return out.leaf_parents[leaf]

    for item in items:
        state = out.leaves.get(item.key)
        known = old.get(item.key)
        if state is None and known is not None:
            if item.item_id in known.item_ids:
                continue
            state = LeafState(list(known.item_ids), _vector(known), item.speaker)
            out.leaves[item.key] = state
        if state is not None:
            if item.item_id in state.item_ids:
                continue
            # A note that grows (a later turn of the same day): its mean moves, and with
            # it the sums of the clusters that hold it.
            before = tb.unit(state.mean)
            count = len(state.item_ids)
            state.mean = ((state.mean * count + item.vector) / (count + 1)).astype(np.float32)
            state.item_ids.append(item.item_id)
            delta = tb.unit(state.mean) - before
            for cluster in parents(item.key):
                if cluster in index:
                    touch(cluster)
                    sums[index[cluster]] += delta
                    norms[index[cluster]] = np.linalg.norm(sums[index[cluster]])
            continue
        out.leaves[item.key] = LeafState(
            [item.item_id], item.vector.astype(np.float32), item.speaker
        )
        vector = tb.unit(item.vector)
        centroids = (sums / np.where(norms == 0, 1, norms)[:, None]).astype(np.float32)
        chosen = [clusters[r] for r in tb.nearest(vector, centroids, margin)]
        out.leaf_parents[item.key] = list(chosen)
        for cluster in chosen:
            touch(cluster)
            out.members[cluster].append(item.key)
            sums[index[cluster]] += vector
            norms[index[cluster]] = np.linalg.norm(sums[index[cluster]])
    for cluster in out.touched:
        out.sums[cluster] = sums[index[cluster]].copy()
    _split_clusters(out, old, cluster_max, parents)
    _split_topics(out, old, topic_max)
    return out


def _vector(node: NodeLike) -> NDArray[np.float32]:
    if node.vector is None:
        raise ValueError(f"tree node {node.key} has no vector")
    return node.vector


def _leaf_unit(out: Placement, old: Mapping[str, NodeLike], key: str) -> NDArray[np.float32]:
    state = out.leaves.get(key)
    return tb.unit(state.mean if state is not None else _vector(old[key]))


def _split_clusters(
    out: Placement,
    old: Mapping[str, NodeLike],
    cluster_max: int,
    parents: Callable[[str], list[str]],
) -> None:
    topic_of = {c: k for k, n in old.items() if n.level == 2 for c in n.child_keys}
    counter = 1 + max((_int_suffix(k) for k, n in old.items() if n.level == 1), default=-1)
    for key in sorted(out.touched):
        members = out.members[key]
        if len(members) <= cluster_max:
            continue
        units = np.stack([_leaf_unit(out, old, m) for m in members])
        parts = [[members[r] for r in rows] for rows in tb.soft_clusters(units, cluster_max)]
        if len(parts) < 2:
            continue
        names = [key] + [f"c:{counter + n}" for n in range(len(parts) - 1)]
        counter += len(parts) - 1
        for name, part in zip(names, parts, strict=True):
            out.members[name] = part
            out.sums[name] = np.sum([_leaf_unit(out, old, m) for m in part], axis=0).astype(
                np.float32
            )
            out.touched.add(name)
        for leaf in members:
            found = parents(leaf)
            kept = [p for p in found if p != key]
            found[:] = kept + [n for n, part in zip(names, parts, strict=True) if leaf in part]
        topic = topic_of.get(key)
        if topic is not None:
            kids = out.topics.setdefault(topic, list(old[topic].child_keys))
            kids.extend(names[1:])
            for name in names:
                out.cluster_topic[name] = topic
    for key in out.touched:
        topic = out.cluster_topic.get(key) or topic_of.get(key)
        if topic is not None:
            out.cluster_topic[key] = topic
            out.topics.setdefault(topic, list(old[topic].child_keys))


def cluster_unit(out: Placement, old: Mapping[str, NodeLike], key: str) -> NDArray[np.float32]:
    return tb.unit(out.sums[key] if key in out.sums else _vector(old[key]))


def _split_topics(out: Placement, old: Mapping[str, NodeLike], topic_max: int) -> None:
    root = old.get("root")
    out.root_kids = list(root.child_keys) if root is not None else sorted(out.topics)
    counter = 1 + max((_int_suffix(k) for k, n in old.items() if n.level == 2), default=-1)
    for topic in sorted(out.topics):
        kids = out.topics[topic]
        if len(kids) <= topic_max:
            continue
        units = np.stack([cluster_unit(out, old, c) for c in kids])
        placed: set[int] = set()
        parts: list[list[str]] = []
        for rows in tb.soft_clusters(units, topic_max):
            # A cluster in one topic only (as the full build does).
            mine = [r for r in rows if r not in placed]
            placed.update(mine)
            if mine:
                parts.append([kids[r] for r in mine])
        if len(parts) < 2:
            continue
        names = [topic] + [f"t:{counter + n}" for n in range(len(parts) - 1)]
        counter += len(parts) - 1
        for name, part in zip(names, parts, strict=True):
            out.topics[name] = part
            for cluster in part:
                if out.cluster_topic.get(cluster) != name:
                    out.cluster_topic[cluster] = name
                    if cluster not in out.touched:
                        out.moved.add(cluster)
        out.root_kids.extend(names[1:])


@dataclass
class Grown:
    """The nodes an update writes, whole, with their parents and vectors."""

    built: tb.Built
    parents: dict[str, list[str]]
    vectors: dict[str, NDArray[np.float32]]


def summarise(
    out: Placement,
    old: Mapping[str, NodeLike],
    texts: Mapping[int, tuple[str, datetime, str]],
) -> Grown:
    """The touched branch's summaries: the changed leaves' lines from their sentences
    (``texts``: item id → content, date, speaker, for the changed leaves' items), the
    touched clusters' from their leaves' lines, then their topics and the root."""

    def quotes(leaf: str) -> list[tb.Quote]:
        found: list[tb.Quote] = []
        for item_id in out.leaf_items(leaf, old):
            if item_id in texts:
                content, at, speaker = texts[item_id]
                found.extend(tb.quotes_of(item_id, content, at, speaker))
        return found

    parents: dict[str, list[str]] = {}
    vectors: dict[str, NDArray[np.float32]] = {}
    leaves: list[tb.Leaf] = []
    # A changed leaf's lines are ranked again from its own sentences, once; every other
    # leaf's are its stored quotes.
    lines: dict[str, list[tb.Quote]] = {}
    for key, state in out.leaves.items():
        leaf = tb.Leaf(key, list(state.item_ids), quotes(key), tb.unit(state.mean), state.speaker)
        lines[key] = leaf.best_lines()
        leaves.append(leaf)
        vectors[key] = state.mean
        parents[key] = out.leaf_parents.get(key, [])

    def lines_of(leaf: str) -> list[tb.Quote]:
        return lines[leaf] if leaf in lines else list(old[leaf].quotes)

    def kept_quotes(
        key: str, children: list[str], fresh: Callable[[str], bool]
    ) -> list[tb.Quote] | None:
        """The node's stored quotes when its summary would come out the same: an
        extractive node with the same children, none of whose lines changed (``central``
        gives the same pick for the same input). A grown note whose best lines stay as
        they were then costs one ranking, not one per level."""
        node = old.get(key)
        if node is None or node.model != tb.EXTRACTIVE or list(node.child_keys) != children:
            return None
        if any(fresh(child) for child in children):
            return None
        return list(node.quotes)

    def leaf_fresh(leaf: str) -> bool:
        return leaf not in old or (leaf in lines and lines[leaf] != list(old[leaf].quotes))

    # Leaves that changed cluster in a split (their own node is otherwise unchanged).
    for key, found in out.leaf_parents.items():
        if key not in out.leaves and key in old:
            parents[key] = found
    moved_leaves = [k for k in out.leaf_parents if k not in out.leaves and k in old]
    clusters: list[tb.Group] = []
    cluster_quotes: dict[str, list[tb.Quote]] = {}
    cluster_items: dict[str, list[int]] = {}
    for key in sorted(out.touched):
        members = out.members[key]
        group = tb.Group(
            key, 1, members, sorted({i for m in members for i in out.leaf_items(m, old)})
        )
        same = kept_quotes(key, members, leaf_fresh)
        if same is not None:
            group.quotes = same
        else:
            tb.summarise(group, [q for m in members for q in lines_of(m)], 3)
        clusters.append(group)
        vectors[key] = out.sums[key]
        cluster_quotes[key], cluster_items[key] = group.quotes, group.item_ids
    for key in sorted(out.moved):
        node = old[key]
        group = tb.Group(key, 1, list(node.child_keys), list(node.item_ids), list(node.quotes))
        clusters.append(group)
        vectors[key] = _vector(node)
    for group in clusters:
        topic = out.cluster_topic.get(group.key)
        parents[group.key] = [topic] if topic is not None else []

    def quotes_of_cluster(key: str) -> list[tb.Quote]:
        return cluster_quotes[key] if key in cluster_quotes else list(old[key].quotes)

    def items_of_cluster(key: str) -> list[int]:
        return cluster_items[key] if key in cluster_items else list(old[key].item_ids)

    def cluster_fresh(key: str) -> bool:
        return key not in old or (
            key in cluster_quotes and cluster_quotes[key] != list(old[key].quotes)
        )

    topics: list[tb.Group] = []
    for key in sorted(out.topics):
        kids = out.topics[key]
        group = tb.Group(key, 2, kids, sorted({i for c in kids for i in items_of_cluster(c)}))
        same = kept_quotes(key, kids, cluster_fresh)
        if same is not None:
            group.quotes = same
        else:
            tb.summarise(group, [q for c in kids for q in quotes_of_cluster(c)], 3)
        topics.append(group)
        vectors[key] = np.sum([cluster_unit(out, old, c) for c in kids], axis=0).astype(np.float32)
        parents[key] = ["root"]
    topic_quotes = {g.key: g.quotes for g in topics}

    def topic_fresh(key: str) -> bool:
        return key not in old or (
            key in topic_quotes and topic_quotes[key] != list(old[key].quotes)
        )

    root = tb.Group("root", 3, list(out.root_kids))
    same = kept_quotes("root", root.child_keys, topic_fresh)
    if same is not None:
        root.quotes = same
    else:
        tb.summarise(
            root,
            [
                q
                for t in out.root_kids
                for q in (topic_quotes[t] if t in topic_quotes else old[t].quotes)
            ],
            min(5, max(2, len(out.root_kids))),
        )
    # A leaf that only moved keeps its own line: its stored quote, no read needed.
    for key in moved_leaves:
        node = old[key]
        kept = list(node.quotes)
        leaves.append(tb.Leaf(key, list(node.item_ids), kept, tb.unit(_vector(node)), lines=kept))
        vectors[key] = _vector(node)
    return Grown(tb.Built(leaves, clusters, topics, root), parents, vectors)
