"""The trust pass: what the pack says about whether each memory is still true (issue 22).

Run on every pack, after its items are chosen and before the model reads it
(ADR-0079 "Trust Pass"). Each kept item may get tags, written literally at
the start of its line, in the trace, and in the panel's pack view:

- ``[superseded YYYY-MM-DD]``: a newer statement of its slot ended it that day
  (memory/validity.py); kept only when nothing better fit or the message asks
  about the past;
- ``[conflict]``: two kept, still valid items claim different values for one
  slot; the one with the higher confidence (tie: the newer) goes first. Also, at
  pack time, two statements of the writer's own that answer the message with
  different values though no write-time reading tied them (``query_conflicts``);
- ``[uncertain]``: confidence below ``UNCERTAIN_BELOW``;
- ``[stale]``: a slot's statement not said again for longer than its
  category's domain TTL (``[upkeep_jobs] ttl_days_*``, memory/ttl.py: the
  table the weekly archive uses); a frame's by its item's category.

Within one slot, the current statements go before the ended ones, wherever the
scores put them. The pack's frame explains the tags it uses (only those: a
pack without tags costs no more than before). Scoring: an ended statement's
score is multiplied by ``1 - penalty`` unless the message asks about the past.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, tzinfo

import numpy as np
from numpy.typing import NDArray

from gateway.clock import local
from memory.changes import own_values, value_kind
from memory.frames import is_frame_slot
from memory.ttl import category_ttl, slot_ttl

UNCERTAIN_BELOW = 0.3

LEGEND: dict[str, str] = {
    "conflict": "[conflict]: two memories disagree about the same thing; the first is "
    "likelier, but ask rather than assume",
    "superseded": "[superseded DATE]: no longer true since DATE (a newer memory replaced "
    "it); only for questions about the past",
    "uncertain": "[uncertain]: low confidence; do not state it as fact",
    "stale": "[stale]: not confirmed for a long time; it may have changed",
}


def ttl_days(slot: str, ttls: Mapping[str, float]) -> float:
    """How long a statement of ``slot`` stays fresh without being said again (days):
    its category's domain TTL, the table the weekly archive uses (memory/ttl.py)."""
    return slot_ttl(ttls, slot)


_PAST = re.compile(
    r"\b(?:used to|before|previous(?:ly)?|former(?:ly)?|old|earlier|last (?:year|month|week|"
    r"time|summer|winter|spring|autumn|fall)|back then|at (?:the|that) time|originally|"
    r"(?:did|was|were|had) (?:i|we|you|they|he|she)|years? ago|history)\b",
    re.I,
)


def asks_about_past(query: str, has_window: bool) -> bool:
    """Whether the message asks about the past (ended statements are not penalised)."""
    return has_window or bool(_PAST.search(query))


def ended(valid_until: datetime | None, now: datetime) -> bool:
    return valid_until is not None and valid_until <= now


def penalties(
    valid_until: Sequence[datetime | None], now: datetime, penalty: float
) -> NDArray[np.float64] | None:
    """The score multipliers of the candidates (None when no candidate has ended)."""
    factors = [1.0 - penalty if ended(v, now) else 1.0 for v in valid_until]
    if all(f == 1.0 for f in factors):
        return None
    return np.array(factors)


def item_tags(
    *,
    slot: str | None,
    confidence: float,
    valid_until: datetime | None,
    seen_at: datetime,
    now: datetime,
    zone: tzinfo,
    ttls: Mapping[str, float],
    category: str = "",
) -> list[str]:
    """An item's own tags (those that do not depend on the other kept items). A frame
    ("I drive a Civic", memory/frames.py) has no category of its own slot: its TTL is
    the item's category's ("I play bass in a band": hobbies, 60 days)."""
    tags = []
    if ended(valid_until, now):
        assert valid_until is not None
        tags.append(f"superseded {local(valid_until, zone).date().isoformat()}")
    elif slot is not None:
        ttl = category_ttl(ttls, category) if is_frame_slot(slot) else ttl_days(slot, ttls)
        if now - seen_at > timedelta(days=ttl):
            tags.append("stale")
    if confidence < UNCERTAIN_BELOW:
        tags.append("uncertain")
    return tags


def conflicts(slots: Sequence[tuple[str | None, str, bool]]) -> set[int]:
    """Indices of kept items that are valid and claim a value of a slot another valid kept
    item claims differently. Each entry: (slot, value, still valid)."""
    values: dict[str, set[str]] = {}
    for slot, value, valid in slots:
        # Frames (memory/frames.py) are no exclusive claims: "I use Vim at work" and "I
        # use VS Code for notebooks" are both true.
        if slot is not None and value and valid and not is_frame_slot(slot):
            values.setdefault(slot, set()).add(value)
    torn = {slot for slot, found in values.items() if len(found) > 1}
    return {n for n, (slot, value, valid) in enumerate(slots) if slot in torn and value and valid}


def slot_order(slots: Sequence[str | None], rank: Sequence[tuple[int, float, float]]) -> list[int]:
    """The kept items' order (indices) with each slot's items in the places the slot's
    items hold, current first: by ``rank`` (ended, -confidence, -time), ascending."""
    order = list(range(len(slots)))
    places: dict[str, list[int]] = {}
    for n, slot in enumerate(slots):
        if slot is not None:
            places.setdefault(slot, []).append(n)
    for members in places.values():
        if len(members) < 2:
            continue
        for place, member in zip(members, sorted(members, key=lambda n: rank[n]), strict=True):
            order[place] = member
    return order


def legend(used: Mapping[str, bool]) -> str:
    """The frame's lines for the tags a pack uses ("" when none)."""
    lines = [LEGEND[name] for name in LEGEND if used.get(name)]
    if not lines:
        return ""
    return "Tags: " + "; ".join(lines) + ".\n"


def tag_text(tags: Sequence[str]) -> str:
    if not tags:  # nearly every line: no join, no generator
        return ""
    return "".join(f"[{t}] " for t in tags)


# Query-time conflicts: two statements of the speaker's own that both answer the
# message and name different values of one thing, which no rule at write time tied
# together ("I stay in Pune, Kothrud side" / "Shifted to Bengaluru last month").
# Both must be this near the message (cosine), and this near each other.
QUERY_RELEVANCE = 0.2
PAIR_SIMILARITY = 0.4
# Only the speaker's statements nearest the message are weighed (their values are read
# by regexes, ~0.05 ms a statement).
QUERY_NEAREST = 8
# Said this far apart at least: two messages of one sitting that no rule read as a
# change say more of one thing ("I'm learning German now" / "Learning German has been
# tough"), not two values of it.
APART = timedelta(days=1)


@dataclass(frozen=True)
class Statement:
    """What the query-time check reads of one kept item."""

    text: str
    speaker: str
    # The person's own statement (role user), still valid and not already tagged.
    eligible: bool
    # Its slot (memory/slots.py) or frame (memory/frames.py), None when it claims none.
    slot: str | None
    at: datetime
    # Cosine to the message (None without a vector).
    relevance: float | None


# The message asks about the person who writes it ("where do I live?", "what's my
# phone?"): the pack's statements of their own are what it weighs.
_ASKS_OF_ME = re.compile(r"\b(?:i|i'm|im|my|me|mine)\b", re.I)


def asks_of_me(query: str) -> bool:
    """Whether the message is about its writer (query-time conflicts weigh only then)."""
    return bool(_ASKS_OF_ME.search(query))


# A person's statements come back pack after pack: their values are read once.
_own_values = functools.lru_cache(maxsize=4096)(own_values)


def _decided(older: str | None, newer: str | None) -> bool:
    """Whether the write-time readings already decided two statements are not one
    thing's two values: two of one slot (a rule slot's are ``conflicts``'s, a frame's
    no exclusive claims), two rule slots or two "my X" frames (different attributes:
    "my dentist" and "my gym")."""
    if older is None or newer is None:
        return False
    if older == newer:
        return True
    kinds = [
        "my"
        if is_frame_slot(s) and s.partition(":")[2].startswith("~my_")
        else "frame"
        if is_frame_slot(s)
        else "rule"
        for s in (older, newer)
    ]
    return kinds[0] == kinds[1] and kinds[0] != "frame"


def query_conflicts(
    statements: Sequence[Statement], vectors: Sequence[NDArray[np.float32] | None]
) -> list[set[int]]:
    """The two kept statements (indices; none or one pair: a message asks one thing)
    that disagree about what the message asks: the same speaker's own statements, each
    at cosine >= ``QUERY_RELEVANCE`` to the message and >= ``PAIR_SIMILARITY`` to each
    other, the older a state the write path read (a slot or a frame), the newer naming
    a value (a name or a figure, memory/changes.py ``own_values``) the older does not,
    unless the write-time readings already decided (``_decided``). Of several such
    pairs, the one nearest the message. Nothing is ended: a question about the past
    still finds both, untagged (the caller does not ask then)."""
    near = [
        n
        for n, s in enumerate(statements)
        if s.eligible
        and vectors[n] is not None
        and s.relevance is not None
        and s.relevance >= QUERY_RELEVANCE
    ]
    # Both high in the message's ranking: the few nearest it (this bounds the cost).
    near = sorted(near, key=lambda n: -(statements[n].relevance or 0.0))[:QUERY_NEAREST]
    if len(near) < 2:
        return []
    matrix = np.stack([vectors[n] for n in near])  # type: ignore[misc]
    similar = matrix @ matrix.T
    # Read lazily: the regexes cost more than the products, and most pairs fail first.
    values: dict[int, frozenset[str]] = {}

    def of(n: int) -> frozenset[str]:
        if n not in values:
            values[n] = _own_values(statements[n].text)
        return values[n]

    best: tuple[float, set[int]] | None = None
    for a, i in enumerate(near):
        for b in range(a + 1, len(near)):
            j = near[b]
            old, new = (i, j) if statements[i].at <= statements[j].at else (j, i)
            so, sn = statements[old], statements[new]
            if so.speaker != sn.speaker or similar[a, b] < PAIR_SIMILARITY:
                continue
            # The older must be a state the write path read (a slot or a frame), not a
            # story of an afternoon.
            if sn.at - so.at < APART or so.slot is None or _decided(so.slot, sn.slot):
                continue
            # The pair that answers the message best (the lower of its two cosines).
            fit = min(so.relevance or 0.0, sn.relevance or 0.0)
            if best is not None and best[0] >= fit:
                continue
            # A value the older lacks, of a kind it names (a name for a name, a figure
            # for a figure: "17" is no answer to "Mango").
            kinds = {value_kind(v) for v in of(old)}
            if any(value_kind(v) in kinds for v in of(new) - of(old)):
                best = (fit, {old, new})
    return [best[1]] if best is not None else []
