"""Clustering and extractive summaries of the memory tree (pure; run in a worker thread).

Clusters come from scikit-learn's GaussianMixture, the number of components
chosen by BIC (RAPTOR's recipe), on the leaves' vectors reduced by PCA (a
mixture over 384 dimensions with a few dozen points is degenerate). The
assignment is soft: a leaf whose second component's probability is at least
``SOFT_SHARE`` belongs to both. Summaries without a model are extractive: the
sentences nearest the TF-IDF centroid of the members, quoted verbatim with their
dates, preferring sentences of at least ``MIN_QUOTE_WORDS`` words (a quote that
short says little).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
import sklearn
from numpy.typing import NDArray
from sklearn.decomposition import PCA
from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS, TfidfVectorizer
from sklearn.mixture import GaussianMixture

# The model of a summary chosen among the members' own sentences (no model wrote it).
EXTRACTIVE = "extractive"
SOFT_SHARE = 0.3
MIN_QUOTE_WORDS = 8
# Components tried per clustering (BIC picks among them).
MAX_COMPONENTS = 12
# The lines a leaf keeps (its clusters' summaries are chosen among its leaves' lines).
LEAF_LINES = 3
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
# TfidfVectorizer's default token pattern.
_TOKEN = re.compile(r"(?u)\b\w\w+\b")


@dataclass(frozen=True)
class Quote:
    """A verbatim sentence of one item, with its date and who said it."""

    at: datetime
    speaker: str
    text: str
    item_id: int

    def render(self) -> str:
        who = f"{self.speaker}: " if self.speaker else ""
        return f'{self.at.date().isoformat()} {who}"{self.text}"'

    def as_list(self) -> list[object]:
        return [self.at.isoformat(), self.speaker, self.text, self.item_id]


@dataclass
class Leaf:
    """Level 0: one memory item, or a note (one speaker's episodes of one day)."""

    key: str
    item_ids: list[int]
    quotes: list[Quote]
    vector: NDArray[np.float32]
    speaker: str = ""
    # The mean of the items' vectors (kept so a note can grow without its items read).
    mean: NDArray[np.float32] | None = None
    # Its best lines (``leaf_lines``): what the leaf stores, and what its clusters'
    # summaries are ranked from (set by ``build``; computed once when the leaf changes).
    lines: list[Quote] | None = None

    def best_lines(self) -> list[Quote]:
        if self.lines is None:
            self.lines = leaf_lines(self.quotes)
        return self.lines

    @property
    def first_at(self) -> datetime:
        return min(q.at for q in self.quotes)

    @property
    def last_at(self) -> datetime:
        return max(q.at for q in self.quotes)


@dataclass
class Group:
    """A node above the leaves: its children's keys and its summary."""

    key: str
    level: int
    child_keys: list[str]
    item_ids: list[int] = field(default_factory=list)
    quotes: list[Quote] = field(default_factory=list)


def _words(text: str) -> list[str]:
    """TfidfVectorizer's own word analysis with ``stop_words="english"`` (lower case,
    its token pattern, English stop words out), as a callable: with the stop words
    given, every fit first checks them against the tokenizer, about a third of a
    small summary's cost (an update makes about five). Same matrices."""
    return [w for w in _TOKEN.findall(text.lower()) if w not in ENGLISH_STOP_WORDS]


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(text.strip()) if s.strip()]


def quotes_of(item_id: int, text: str, at: datetime, speaker: str) -> list[Quote]:
    return [Quote(at, speaker, s, item_id) for s in sentences(text)] or [
        Quote(at, speaker, text.strip(), item_id)
    ]


def central(quotes: Sequence[Quote], k: int, *, per_item: int = 1) -> list[Quote]:
    """The ``k`` quotes nearest the members' TF-IDF centroid (at most ``per_item``
    from one item), long enough ones first, in date order."""
    pool = [q for q in quotes if len(q.text.split()) >= MIN_QUOTE_WORDS] or list(quotes)
    if len(pool) <= 1:
        return pool[:k]
    try:
        # A few dozen sentences: sklearn's checks of its own parameters cost about as
        # much as the fit (the input is ours, a list of strings).
        with sklearn.config_context(skip_parameter_validation=True):
            matrix = TfidfVectorizer(analyzer=_words).fit_transform([q.text for q in pool])
    except ValueError:  # only stop words
        return sorted(pool[:k], key=lambda q: q.at)
    centroid = np.asarray(matrix.mean(axis=0)).ravel()
    scores = matrix @ centroid
    order = sorted(range(len(pool)), key=lambda i: (-float(scores[i]), i))
    chosen: list[Quote] = []
    taken: dict[int, int] = {}
    for i in order:
        q = pool[i]
        if taken.get(q.item_id, 0) >= per_item:
            continue
        chosen.append(q)
        taken[q.item_id] = taken.get(q.item_id, 0) + 1
        if len(chosen) == k:
            break
    return sorted(chosen, key=lambda q: (q.at, q.item_id))


def soft_clusters(vectors: NDArray[np.float32], max_size: int, seed: int = 0) -> list[list[int]]:
    """Row indices per cluster (a row may be in two); GMM with BIC over PCA."""
    n = len(vectors)
    if n <= max_size or n < 4:
        return [list(range(n))]
    dims = min(10, n - 2, vectors.shape[1])
    reduced = PCA(n_components=dims, random_state=seed).fit_transform(vectors)
    lowest = max(2, -(-n // max_size))
    highest = max(lowest, min(MAX_COMPONENTS + lowest, n // 2))
    best: GaussianMixture | None = None
    best_bic = float("inf")
    for k in range(lowest, highest + 1):
        gmm = GaussianMixture(k, covariance_type="diag", random_state=seed, reg_covar=1e-4)
        gmm.fit(reduced)
        bic = float(gmm.bic(reduced))
        if bic < best_bic:
            best, best_bic = gmm, bic
    assert best is not None
    probs = best.predict_proba(reduced)
    groups: dict[int, list[int]] = {}
    for row, p in enumerate(probs):
        order = np.argsort(-p)
        groups.setdefault(int(order[0]), []).append(row)
        if len(order) > 1 and p[order[1]] >= SOFT_SHARE:
            groups.setdefault(int(order[1]), []).append(row)
    clusters = [sorted(set(g)) for _, g in sorted(groups.items())]
    # A component still past the limit (BIC preferred a coarse fit) splits again.
    out: list[list[int]] = []
    for members in clusters:
        if len(members) > max_size and len(members) < n:
            sub = soft_clusters(vectors[members], max_size, seed)
            out.extend([members[i] for i in s] for s in sub)
        else:
            out.append(members)
    return out


def unit(v: NDArray[np.float32]) -> NDArray[np.float32]:
    norm = float(np.linalg.norm(v))
    return (v / norm).astype(np.float32) if norm else v.astype(np.float32)


@dataclass
class Built:
    leaves: list[Leaf]
    clusters: list[Group]
    topics: list[Group]
    root: Group

    def vectors(self) -> dict[str, NDArray[np.float32]]:
        """Each node's stored vector: a leaf's mean item vector, a cluster's sum of its
        leaves' unit vectors, a topic's sum of its clusters' unit centroids."""
        out: dict[str, NDArray[np.float32]] = {}
        units: dict[str, NDArray[np.float32]] = {}
        for leaf in self.leaves:
            out[leaf.key] = leaf.mean if leaf.mean is not None else leaf.vector
            units[leaf.key] = leaf.vector
        for group in self.clusters:
            kids = [units[k] for k in group.child_keys if k in units]
            if kids:
                out[group.key] = np.sum(kids, axis=0).astype(np.float32)
                units[group.key] = unit(out[group.key])
        for group in self.topics:
            kids = [units[k] for k in group.child_keys if k in units]
            if kids:
                out[group.key] = np.sum(kids, axis=0).astype(np.float32)
        return out


def summarise(group: Group, quotes: Sequence[Quote], k: int) -> None:
    group.quotes = central(quotes, k)


def build(leaves: Sequence[Leaf], cluster_max: int, topic_max: int, *, seed: int = 0) -> Built:
    """The whole tree over ``leaves``: clusters (level 1), topics (2), the root (3).

    In three steps so that a caller can run the two clusterings elsewhere (the
    nightly rebuild runs them in the job's own process, memory/tree/service.py):
    ``leaf_matrix`` → ``soft_clusters`` → ``clusters_of`` → ``soft_clusters`` of
    the centroids → ``finish``."""
    leaves = list(leaves)
    if not leaves:
        return Built([], [], [], Group("root", 3, []))
    matrix = leaf_matrix(leaves)
    clusters, centroids = clusters_of(leaves, matrix, soft_clusters(matrix, cluster_max, seed))
    return finish(leaves, clusters, soft_clusters(centroids, topic_max, seed))


def leaf_matrix(leaves: Sequence[Leaf]) -> NDArray[np.float32]:
    """The leaves' vectors, a row each: what the clusters of level 1 are found in."""
    return np.stack([leaf.vector for leaf in leaves])


def clusters_of(
    leaves: Sequence[Leaf], matrix: NDArray[np.float32], found: Sequence[Sequence[int]]
) -> tuple[list[Group], NDArray[np.float32]]:
    """Level 1 from ``soft_clusters``' rows of ``matrix``: the clusters, summarised, and
    their unit centroids (a row each, what the topics are found in)."""
    clusters: list[Group] = []
    centres: list[NDArray[np.float32]] = []
    for n, rows in enumerate(found):
        centres.append(unit(matrix[list(rows)].mean(axis=0)))
        members = [leaves[r] for r in rows]
        group = Group(
            f"c:{n}",
            1,
            [m.key for m in members],
            sorted({i for m in members for i in m.item_ids}),
        )
        # From the members' best lines, not all their sentences: an incremental update
        # then re-ranks ~3 lines per leaf instead of every sentence of every member.
        summarise(group, [q for m in members for q in m.best_lines()], 3)
        clusters.append(group)
    return clusters, np.stack(centres)


def finish(
    leaves: Sequence[Leaf], clusters: Sequence[Group], found: Sequence[Sequence[int]]
) -> Built:
    """Levels 2 and 3 from ``soft_clusters``' rows of the clusters' centroids."""
    topics: list[Group] = []
    placed: set[int] = set()
    for n, rows_found in enumerate(found):
        # A cluster in one topic only: topics partition the clusters (soft below, hard here).
        rows = [r for r in rows_found if r not in placed]
        placed.update(rows)
        if not rows:
            continue
        group = Group(
            f"t:{n}",
            2,
            [clusters[r].key for r in rows],
            sorted({i for r in rows for i in clusters[r].item_ids}),
        )
        summarise(group, [q for r in rows for q in clusters[r].quotes], 3)
        topics.append(group)
    # The root's members are its topics: no list of every item (TreeNode's docstring).
    root = Group("root", 3, [t.key for t in topics])
    summarise(root, [q for t in topics for q in t.quotes], min(5, max(2, len(topics))))
    return Built(list(leaves), list(clusters), topics, root)


def nearest(
    vector: NDArray[np.float32], centroids: NDArray[np.float32], margin: float
) -> list[int]:
    """The nearest cluster, and the second when within ``margin`` cosine of it."""
    if len(centroids) == 0:
        return []
    sims = centroids @ vector
    order = np.argsort(-sims, kind="stable")
    chosen = [int(order[0])]
    if len(order) > 1 and sims[order[1]] >= sims[order[0]] - margin:
        chosen.append(int(order[1]))
    return chosen


def leaf_lines(quotes: Sequence[Quote]) -> list[Quote]:
    """A leaf's best lines: its ``LEAF_LINES`` most central long-enough sentences, the
    key line first — the shortest of them (a broad pack quotes one line per leaf, the
    first, so a shorter line leaves room for more). Its clusters are summarised from
    these lines."""
    top = central(quotes, LEAF_LINES)
    if not top:
        return []
    key = min(top, key=lambda q: (len(q.text), q.at))
    return [key, *(q for q in top if q is not key)]


def inherit_keys(built: Built, old: Mapping[str, tuple[int, set[int]]]) -> None:
    """A rebuilt cluster or topic takes the key of the old node (``old``: key → level,
    item ids) it shares most items with (Jaccard ≥ 0.5), so its version history
    continues; the others get fresh keys."""
    for level, groups in ((1, built.clusters), (2, built.topics)):
        prefix = "c" if level == 1 else "t"
        olds = {k: items for k, (lv, items) in old.items() if lv == level}
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
