"""The memory tree in the pack: which level a query wants, and the pack of a broad one.

``classify`` decides per query, by rules on its words plus the spread of the
dense similarities (how much the best item stands out):

- **broad** (levels 2-3): a broad cue ("up to", "what do you know about",
  "tell me about", "catch me up", "overview", "recap", ...; not "recently",
  which asks for one recent thing as often as for a survey) and at
  most two content words besides the names; or no content word at all besides
  the names ("Caroline?"); or a broad cue and a flat similarity spread (the
  best ANN hit less than ``FLAT_SPREAD`` above the mean of the top 20).
- **thematic** (levels 1-2): a thematic cue and not broad. The cue asks for a
  range or a habit: a plural kind ("what kinds of", "what sorts of", "what
  types of"), "hobbies", "interests", or a habitual "usually", "in general",
  "tends to". The singular "what kind of X" is not one: it asks the kind of one
  thing ("What kind of pot did they make?"), a specific question.
  ``thematic_pack`` takes the ``THEME_CLUSTERS`` clusters whose centroids are
  nearest the query's vector (collapsed-tree retrieval over level 1, as RAPTOR
  found best), each under its topic (level 2): the topic's key line once, then
  the cluster's summary lines, within ``THEME_SHARE`` of the budget. The flat
  pack fills the rest, so the leaves a specific part of the question needs are
  still there.
- **specific** (leaves): everything else — the flat pack, unchanged.

A broad pack walks root → topics → clusters → leaves: the root's lines, then,
round-robin over the topics (so each theme is present before any has two
lines), each leaf's key sentence quoted verbatim with its date, for the
speaker the query names (everyone when it names none), until the budget is
spent; then it is rendered grouped by topic, in date order. A line quotes a
turn verbatim, so it credits that turn; an abstractive node's line credits
nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from memory.tree.build import EXTRACTIVE, Quote
from memory.tree.view import NodeView

FLAT_SPREAD = 0.05
# A thematic pack: this many clusters, within this share of the budget.
THEME_CLUSTERS = 3
THEME_SHARE = 0.2
_BROAD = re.compile(
    r"\b(up to|been doing|been up|what do you know|know about|tell me about|tell me everything|"
    r"catch me up|overview|recap|summar\w*|what'?s new|how has .* been)\b",
    re.I,
)
_THEMATIC = re.compile(
    r"\b(what (?:kinds|sorts|types) of|hobbies|interests|in general|usually|tends? to)\b", re.I
)
_WORD = re.compile(r"[a-z']+")
_STOP = frozenset(
    re.split(
        r"\s+",
        """a about all an and any anything are as at be been being can could did do does doing
    done for from had has have having he her hers him his how i i'm is it its just know
    lately me my of on or our recently she so tell that the their them they this to up
    us was we were what whats what's when where who whom why will with would you your
    everything been doing new catch overview recap summary summarise summarize""",
    )
)


@dataclass(frozen=True)
class Mode:
    name: str  # "specific", "thematic" or "broad"
    why: str


def content_words(query: str, names: Iterable[str]) -> list[str]:
    skip = _STOP | {n.lower() for n in names}
    words = [w.strip("'") for w in _WORD.findall(query.lower())]
    return [w for w in words if w and w not in skip and not w.endswith("'s")]


def classify(query: str, names: Iterable[str], sims: Sequence[float] = ()) -> Mode:
    names = list(names)
    words = content_words(query, names)
    cue = _BROAD.search(query)
    top = sorted(sims, reverse=True)[:20]
    spread = (top[0] - sum(top) / len(top)) if top else None
    if cue and len(words) <= 2:
        return Mode("broad", f"broad cue {cue.group(0)!r}, {len(words)} content words")
    if not words and any(n.lower() in query.lower() for n in names):
        return Mode("broad", "only a name")
    if cue and spread is not None and spread < FLAT_SPREAD:
        return Mode("broad", f"broad cue {cue.group(0)!r}, similarity spread {spread:.3f}")
    theme = _THEMATIC.search(query)
    if theme:
        return Mode("thematic", f"thematic cue {theme.group(0)!r}")
    return Mode("specific", f"{len(words)} content words")


@dataclass
class BroadPack:
    lines: list[str]
    credited: list[int]
    path: list[str] = field(default_factory=list)


def _fits(used: int, line: str, budget_chars: int) -> bool:
    return used + len(line) + 1 <= budget_chars


def broad_pack(
    nodes: dict[str, NodeView], speakers: set[str], budget_chars: int
) -> BroadPack | None:
    """Root, topics and their leaves within ``budget_chars`` (None: no tree yet)."""
    root = nodes.get("root")
    if root is None:
        return None

    def mine(q: Quote) -> bool:
        return not speakers or q.speaker.split(" ")[0] in speakers

    used = 0
    chosen_root: list[str] = []
    credited: list[int] = []
    path = ["root"]
    extractive = root.model == EXTRACTIVE
    for q in root.quotes[:2] if extractive else []:
        line = f"- {q.render()}"
        if mine(q) and _fits(used, line, budget_chars):
            chosen_root.append(line)
            used += len(line) + 1
            credited.append(q.item_id)
    if not extractive and root.summary:
        # An abstractive (or hand-corrected) root: shown, credits nothing.
        line = f"- {root.summary.splitlines()[0]}"
        if _fits(used, line, budget_chars):
            chosen_root.append(line)
            used += len(line) + 1
    topics = sorted(
        (nodes[k] for k in root.child_keys if k in nodes),
        key=lambda n: (n.first_at.isoformat() if n.first_at else "", n.key),
    )
    queues: list[tuple[NodeView, list[tuple[NodeView, NodeView]]]] = []
    seen: set[str] = set()
    for topic in topics:
        leaves: list[tuple[NodeView, NodeView]] = []
        for ck in topic.child_keys:
            cluster = nodes.get(ck)
            if cluster is None:
                continue
            for lk in cluster.child_keys:
                leaf = nodes.get(lk)
                if leaf is None or lk in seen or not leaf.quotes or not mine(leaf.quotes[0]):
                    continue
                seen.add(lk)
                leaves.append((cluster, leaf))
        leaves.sort(
            key=lambda cl: (cl[1].first_at.isoformat() if cl[1].first_at else "", cl[1].key)
        )
        if leaves:
            queues.append((topic, leaves))
    picked: dict[str, list[tuple[NodeView, NodeView]]] = {t.key: [] for t, _ in queues}
    heading = {t.key: f"[topic {t.key}]" for t, _ in queues}
    opened: set[str] = set()
    # Round-robin: every topic's first leaf before any topic's second.
    depth = 0
    while any(depth < len(q) for _, q in queues):
        for topic, queue in queues:
            if depth >= len(queue):
                continue
            cluster, leaf = queue[depth]
            line = f"- {leaf.quotes[0].render()}"
            cost = len(line) + 1 + (0 if topic.key in opened else len(heading[topic.key]) + 1)
            if used + cost > budget_chars:
                continue
            used += cost
            opened.add(topic.key)
            picked[topic.key].append((cluster, leaf))
        depth += 1
    lines = list(chosen_root)
    for topic, _ in queues:
        chosen = picked[topic.key]
        if not chosen:
            continue
        lines.append(heading[topic.key])
        for cluster, leaf in sorted(
            chosen, key=lambda cl: (cl[1].first_at.isoformat() if cl[1].first_at else "", cl[1].key)
        ):
            lines.append(f"- {leaf.quotes[0].render()}")
            credited.append(leaf.quotes[0].item_id)
            path.append(f"{topic.key}>{cluster.key}>{leaf.key}")
    return BroadPack(lines, credited, path)


def _line(node: NodeView, q: Quote | None) -> str:
    """A node's line: a quote (extractive), or its summary's first line (credits nothing)."""
    if q is not None:
        return f"- {q.render()}"
    return f"- {node.summary.splitlines()[0]}" if node.summary else ""


def thematic_pack(
    nodes: dict[str, NodeView],
    query: NDArray[np.float32],
    speakers: set[str],
    budget_chars: int,
    clusters: int = THEME_CLUSTERS,
) -> BroadPack | None:
    """The clusters nearest the query, under their topics, within ``budget_chars``
    (None: no cluster with a centroid, or none of the named speakers')."""
    found = [
        n
        for n in nodes.values()
        if n.level == 1 and n.vector is not None and (not speakers or n.speakers & speakers)
    ]
    if not found:
        return None
    matrix = np.stack([n.vector for n in found if n.vector is not None])
    norms = np.linalg.norm(matrix, axis=1)
    sims = (matrix @ query) / np.where(norms == 0, 1, norms)
    order = np.argsort(-sims, kind="stable")[:clusters]

    def mine(q: Quote) -> bool:
        return not speakers or q.speaker.split(" ")[0] in speakers

    lines: list[str] = []
    credited: list[int] = []
    path: list[str] = []
    used = 0
    opened: set[str] = set()
    for row in order:
        cluster = found[int(row)]
        topic = nodes.get(cluster.parent_keys[0]) if cluster.parent_keys else None
        heading = f"[theme {topic.key + ' > ' if topic else ''}{cluster.key}]"
        block = [heading]
        quoted: list[int] = []
        if topic is not None and topic.key not in opened:
            # The topic's own key line (level 2), once per topic.
            first = next((q for q in topic.quotes if mine(q)), None)
            extractive = topic.model == EXTRACTIVE
            line = _line(topic, first if extractive else None)
            if line and (not extractive or first is not None):
                block.append(line)
                quoted += [first.item_id] if extractive and first is not None else []
        if cluster.model == EXTRACTIVE:
            for q in cluster.quotes:
                if mine(q) and f"- {q.render()}" not in block:
                    block.append(f"- {q.render()}")
                    quoted.append(q.item_id)
        elif cluster.summary:
            block.append(_line(cluster, None))
        cost = sum(len(line) + 1 for line in block)
        if len(block) < 2 or not _fits(used, "x" * (cost - 1), budget_chars):
            continue
        used += cost
        lines.extend(block)
        credited.extend(i for i in quoted if i not in credited)
        if topic is not None:
            opened.add(topic.key)
        path.append(
            f"{topic.key + '>' if topic else ''}{cluster.key} (cosine {float(sims[int(row)]):.3f})"
        )
    return BroadPack(lines, credited, path) if lines else None
