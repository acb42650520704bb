"""Current facts: a new statement of a slot ends the older one (issue 22).

Every item written (a message's episode, an observation, a remembered fact)
is read for the slots it claims (``memory/slots.py``, rules; or a
``SlotJudge``, the utility model, when one is set). An older, still valid
statement of the same subject and attribute with a different value then gets
``valid_until`` (when the new one was said) and ``replaced_by_id``; nothing
is deleted and nothing stops being recallable: the pack ranks an ended item
lower and tags it (``memory/trust.py``), so "where did I live last year?"
still finds it.

What may end what, so that unrelated facts never end each other (Graphiti
#1728): only a statement of the same subject (the speaker) and the same
attribute; a value said again confirms rather than ends; two different values
said within ``memory.conflict_window_h`` of each other without the newer
naming the older ("from Lisbon") are a conflict, and both stay valid for the
trust pass to flag. The new statement is always stored before anything is
ended (mem0 #4536: a contradiction that removed the old fact and lost the new).

Without a rule's claim, a statement very close (cosine) to a current one of
the same subject that names a different name, number or date takes over its
slot (the fallback). An agent's reply right after an ended statement that
repeated its value ("Lisbon sounds lovely!") is ended with it.

One layer of ``memory.service.MemoryService`` (see the "Memory modules" section
of docs/DESIGN.md): each layer uses only the state and the layers below it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal, Protocol

import numpy as np
from numpy.typing import NDArray

from memory.changes import Change, change_of, ends
from memory.frames import (
    Frame,
    frame_of,
    frames,
    holds_all,
    is_frame_slot,
    same_object,
    scopes_agree,
    slot_attribute,
    stem,
)
from memory.reembed import Reembedding
from memory.repo import NewItem
from memory.repo import validity as slots_repo
from memory.repo.validity import SlotRow
from memory.slots import Claim, claims, normal, split_quoted, subject_of
from memory.statuses import STATUS_FRAMES
from memory.types import ItemStatus, ItemType

log = logging.getLogger("memory.service")

# How many of the messages after an ended statement are read for an agent reply that
# repeated its value.
REPLIES_READ = 2
# How many of the speaker's older messages a change said in other words is read against
# (memory/changes.py), newest first.
CHANGE_LOOKBACK = 200
# The candidates a slot judge is shown: the subject's current statements, nearest first.
JUDGE_CANDIDATES = 12
# A cosine at which a current statement is worth showing a judge at all.
JUDGE_MIN_SIMILARITY = 0.35

# A change strong enough for a rule's claim to end a frame it did not name: "I switched
# to a Pixel phone", not "I got a new job" (which its own slot already reads).
_SWITCHED = re.compile(
    r"\b(?:switched|changed|swapped|moved\s+(?:on|over|to)|instead|no\s+longer|anymore)\b",
    re.I,
)
# A bare "I moved to X" is a move of home when X is nearer one of these than any thing
# (MiniLM, one word each: "Porto" 0.44 / 0.27, "Firefox" 0.20 / 0.62, "a four-day week"
# 0.23 / 0.56); no list of places is kept.
PLACES = ("a city", "a town", "a country", "a neighbourhood", "a place to live")
THINGS = (
    *("an app", "a browser", "a program", "a product", "a brand", "a company"),
    *("a service", "a schedule", "a tool"),
)
_NAMED = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][\w'-]+|\b\d[\d:/.,-]*\b")
_FIRST_PERSON = re.compile(r"\b(?:i|i'm|i've|my|we|we're|our|me)\b", re.I)


@dataclass(frozen=True)
class SlotFact:
    """A current statement, as a judge sees it."""

    id: int
    slot: str
    value: str
    content: str


@dataclass(frozen=True)
class SlotDecision:
    """ADD: a new slot (or nothing to end); UPDATE: it replaces ``replaces``; NONE: no
    claim about a slot. ``attribute`` and ``value``: what the statement claims."""

    action: Literal["ADD", "UPDATE", "NONE"]
    attribute: str = ""
    value: str = ""
    replaces: tuple[int, ...] = ()


class SlotJudge(Protocol):
    """Decides, with a model, what a statement does to the current ones (mem0's update
    step). ``None``: no answer (a failed call); the rules decide instead."""

    async def decide(
        self, subject: str, statement: str, current: Sequence[SlotFact]
    ) -> SlotDecision | None: ...


def _named(text: str) -> set[str]:
    """The names, numbers and dates a statement holds (capitalised words not opening a
    sentence, figures), lower case."""
    return {m.group(0).lower().strip(".,") for m in _NAMED.finditer(text)} - {"i"}


def _may_fall_back(text: str, item: NewItem) -> bool:
    return (
        item.vector is not None
        and "?" not in text
        and bool(_FIRST_PERSON.search(text))
        and bool(_named(text))
    )


class Validity(Reembedding):
    # Set by the app when ``memory.slot_judge`` is "llm" and a utility model exists.
    slot_judge: SlotJudge | None = None
    # The place and thing prototypes' vectors (embedded at the first bare move).
    _place_vectors: tuple[NDArray[np.float32], NDArray[np.float32]] | None = None

    async def apply_validity(self, ids: Sequence[int], items: Sequence[NewItem]) -> int:
        """Slots of the new items, and the older statements they end; how many ended."""
        if not self.config.validity:
            return 0
        ended = 0
        for item_id, item in zip(ids, items, strict=True):
            if item.status is not ItemStatus.ACTIVE:
                continue
            try:
                ended += await self._validity_of(item_id, item)
            except Exception:
                # A failed slot check leaves both statements valid; the item is stored.
                log.exception("memory: slot check of item %d failed", item_id)
        return ended

    async def _validity_of(self, item_id: int, item: NewItem) -> int:
        ended = await self._by_rules(item_id, item)
        if ended or not self.config.change_cues or self.slot_judge is not None:
            return ended
        if item.type is not ItemType.EPISODE or item.role not in ("", "user"):
            return 0
        change = change_of(item.content)
        if change is None:
            return 0
        return await self._changed_topic(item_id, item, change)

    async def _changed_topic(self, item_id: int, item: NewItem, change: Change) -> int:
        """A change the rules did not read ends the speaker's older statements of it:
        each of the same kind of slot (a favourite of the same thing, a plan of the
        same event), and each naming the thing it changed ("left Ozone", "quit the
        choir"); within the speaker's last ``CHANGE_LOOKBACK`` messages."""
        older = await slots_repo.older_statements(
            self.store, item.person_id, item.speaker, item.role, item.occurred_at, CHANGE_LOOKBACK
        )
        ending = [row for row in older if row.id != item_id and ends(change, row.content)]
        if ending:
            log.info("memory %d: a change in other words (%s)", item_id, sorted(change.kinds))
        return await self._end(item_id, item, ending)

    async def _by_rules(self, item_id: int, item: NewItem) -> int:
        text, speaker = item.content, item.speaker
        if item.type is not ItemType.EPISODE:
            quoted, body = split_quoted(item.content)
            text, speaker = body, quoted or speaker
        subject = subject_of(speaker, item.role or "user")
        found = claims(text, item.occurred_at)
        # A statement no rule reads may still be a state of the speaker (memory/frames.py).
        framed = frames(text) if not found and self.config.frames else []
        # Most messages claim nothing and could not take a slot by the fallback either:
        # they cost no query (LoCoMo: 5 of 2,760 turns claim a slot).
        if not found and not framed and self.slot_judge is None and not _may_fall_back(text, item):
            return 0
        model = self.embedder.model_name if self.embedder is not None else ""
        rows = await slots_repo.current_of_subject(self.store, item.person_id, subject, model)
        current = [r for r in rows if r.id != item_id and r.occurred_at <= item.occurred_at]
        # Statements said after this one but stored before it (an observation written
        # by a later observer pass, an import): one of them may already end it.
        newer = [r for r in rows if r.id != item_id and r.occurred_at > item.occurred_at]
        # With a judge, every statement that is not a question is the model's to read
        # (one utility call per stored statement, as mem0's update step).
        if self.slot_judge is not None and "?" not in text:
            decided = await self._judged(item_id, item, subject, text, current)
            if decided is not None:
                return decided
        if framed:
            ended = await self._framed(item_id, item, subject, text, framed, current)
            return ended or await self._fallback(item_id, item, subject, text, current)
        if not found:
            return await self._fallback(item_id, item, subject, text, current)
        ended = 0
        own: tuple[str, str] | None = None
        found = [await self._placed(claim, subject, current) for claim in found]
        for claim in found:
            if claim.gone:
                ended += await self._end(item_id, item, _holding(claim.old, current))
                continue
            attribute = claim.attribute or self._attribute_of_old(claim, subject, current)
            if not attribute:
                continue
            slot = f"{subject}:{attribute}"
            own = own or (slot, claim.value)
            settled = await self._settle(item_id, item, slot, claim, current)
            ended += settled
            # A status that ended ("I got laid off", "I graduated") ends its frames too;
            # one that names what ended ("I quit X") only when X was its value.
            if claim.ends and self.config.frames and (settled or not claim.old):
                ended += await self._end(
                    item_id, item, _status_frames(attribute, text, subject, current)
                )
        if own is not None:
            await slots_repo.set_slot(self.store, item_id, *own)
            await self._ended_by_newer(item_id, item.occurred_at, own, newer)
        if not ended and self.config.frames and _SWITCHED.search(text):
            # "I switched to a Pixel phone" after "I've had an iPhone for years": the
            # rule's slot held nothing; the state it changes was said as a frame.
            ended += await self._changed_frame(item_id, item, text, (), current)
        return ended

    async def _framed(
        self,
        item_id: int,
        item: NewItem,
        subject: str,
        text: str,
        framed: Sequence[Frame],
        current: Sequence[SlotRow],
    ) -> int:
        """A statement read as frames: each ends the older frames of its verb that it
        says changed (see memory/frames.py); the first gives the item its slot."""
        ending: list[SlotRow] = []
        confirmed: list[int] = []
        for frame in framed:
            slot = f"{subject}:{slot_attribute(frame)}"
            for row in current:
                if row.slot != slot or row in ending:
                    continue
                old = frame_of(row.content, frame.key)
                if old is None:
                    continue
                if frame.negated:
                    # "I no longer drink coffee": the frames of that verb (and object).
                    if not frame.object or (
                        holds_all(old.object, frame.object)
                        if frame.strict
                        else same_object(old.object, frame.object)
                    ):
                        ending.append(row)
                elif (
                    frame.change
                    and not frame.partitive
                    and frame.key != "have"  # things one has add up: only "sold" ends one
                    and frame.object
                    and not same_object(old.object, frame.object)
                    and scopes_agree(old.scope, frame.scope)
                ):
                    ending.append(row)
                elif frame.object and normal(old.object) == normal(frame.object):
                    confirmed.append(row.id)  # said again: fresh for ``[stale]``
        first = framed[0]
        await slots_repo.set_slot(
            self.store, item_id, f"{subject}:{slot_attribute(first)}", first.object
        )
        await slots_repo.confirm(self.store, confirmed, item.occurred_at)
        ended = await self._end(item_id, item, ending)
        if not ended and any(
            f.change and not f.partitive and not f.key.startswith("my ") for f in framed
        ):
            keys = tuple(slot_attribute(f) for f in framed)
            ended += await self._changed_frame(item_id, item, text, keys, current, framed)
        return ended

    async def _changed_frame(
        self,
        item_id: int,
        item: NewItem,
        text: str,
        own_keys: Sequence[str],
        current: Sequence[SlotRow],
        framed: Sequence[Frame] = (),
    ) -> int:
        """A statement that says it changed and ended nothing else ends the subject's
        nearest older frame statement (cosine at least ``change_fallback_similarity``).
        Not one of its own verbs (their frames decided), and, when the statement is a
        frame itself (another verb for the same thing: "I cycle to the office now"),
        only one that shares a content word with it."""
        vector = item.vector
        if vector is None:
            return 0
        words = {stem(w) for f in framed for w in f.object.split()}
        words |= {w for f in framed for w in f.scope}
        best: tuple[float, SlotRow] | None = None
        for row in current:
            attribute = row.slot.partition(":")[2]
            if not is_frame_slot(row.slot) or attribute in own_keys or row.vector is None:
                continue
            if attribute.startswith("~my_"):
                continue  # "my dentist" and "my gym" are different things
            if framed:
                old = frame_of(row.content, attribute[1:].replace("_", " "))
                if old is None:
                    continue
                theirs = {stem(w) for w in old.object.split()} | set(old.scope)
                if not words & theirs:
                    continue
            cosine = float(row.vector @ vector)
            if cosine >= self.config.change_fallback_similarity and (
                best is None or cosine > best[0]
            ):
                best = (cosine, row)
        if best is None:
            return 0
        return await self._end(item_id, item, [best[1]])

    async def _ended_by_newer(
        self, item_id: int, said: datetime, own: tuple[str, str], newer: Sequence[SlotRow]
    ) -> None:
        """A statement stored late is ended by the first newer one of its slot that
        says another value (past the conflict window), as if it had come in order."""
        slot, value = own
        window = timedelta(hours=self.config.conflict_window_h)
        for row in sorted(newer, key=lambda r: r.occurred_at):
            if row.slot != slot or not row.value or _same(row.value, value):
                continue
            if row.occurred_at - said < window:
                continue  # the same day: a conflict, both stay valid
            await slots_repo.end_items(self.store, [item_id], row.occurred_at, row.id)
            log.info("memory %d ended by the newer %d (%s)", item_id, row.id, slot)
            return

    async def _placed(self, claim: Claim, subject: str, current: Sequence[SlotRow]) -> Claim:
        """A bare "I moved to X" claims where one lives when X is a place: named as
        the move's end from a current residence ("from Lisbon"), or nearer, by the
        embedder, to places than to things (``PLACES`` / ``THINGS``). Otherwise it
        is a switch of something else ("I've moved to Chrome", "we moved to a
        four-day week"): the slot of the old value it names, if any."""
        if not claim.needs_place:
            return claim
        residence = f"{subject}:residence"
        if claim.old and any(r.slot == residence and _same(r.value, claim.old) for r in current):
            return claim
        if await self._a_place(claim.value):
            return claim
        log.info("memory: %r is no place; a switch, not a move", claim.value)
        return Claim("", claim.value, old=claim.old)

    async def _a_place(self, value: str) -> bool:
        if self._place_vectors is None:
            vectors = await self._embed([*PLACES, *THINGS])
            if vectors is None:
                return True  # no embedder: the rule's reading stands
            self._place_vectors = (vectors[: len(PLACES)], vectors[len(PLACES) :])
        found = await self._embed([value])
        if found is None:
            return True
        places, things = self._place_vectors
        return float((places @ found[0]).max()) > float((things @ found[0]).max())

    @staticmethod
    def _attribute_of_old(claim: Claim, subject: str, current: Sequence[SlotRow]) -> str:
        """ "I switched from Vim to Emacs": the slot that holds "vim"."""
        if not claim.old:
            return ""
        for row in reversed(current):
            if row.value and _same(row.value, claim.old):
                return row.slot.partition(":")[2]
        return ""

    async def _settle(
        self, item_id: int, item: NewItem, slot: str, claim: Claim, current: Sequence[SlotRow]
    ) -> int:
        window = timedelta(hours=self.config.conflict_window_h)
        ending, confirmed = [], []
        for row, value in _statements_of(slot, current):
            if claim.until is not None and row.occurred_at.date() > claim.until:
                continue  # said after the event it names ("I graduated back in 2015")
            if claim.ends:
                if value:
                    # A named old value ends that value; an unnamed one, any.
                    if not claim.old or _same(value, claim.old):
                        ending.append(row)
                elif _ended_it(row.content, slot):
                    # "since I lost my job" after "I lost my job as a banker": the same
                    # state said again, not a change.
                    confirmed.append(row.id)
                elif not claim.old:
                    ending.append(row)  # a value not named ("I got promoted") ends too
            elif value and _same(value, claim.value):
                confirmed.append(row.id)
            elif claim.old and value and _same(value, claim.old):
                ending.append(row)  # named as what changed: a change, however soon
            elif claim.renews:
                ending.append(row)  # "I got promoted", "I'm the manager now"
            elif value and item.occurred_at - row.occurred_at < window:
                continue  # two values the same day: a conflict, both stay valid
            else:
                ending.append(row)
        await slots_repo.confirm(self.store, confirmed, item.occurred_at)
        return await self._end(item_id, item, ending)

    async def _end(self, item_id: int, item: NewItem, rows: Sequence[SlotRow]) -> int:
        if not rows:
            return 0
        await slots_repo.end_items(self.store, [r.id for r in rows], item.occurred_at, item_id)
        for row in rows:
            await self._outdate_replies(item_id, item, row)
        log.info("memory %d ends %s (%s)", item_id, [r.id for r in rows], rows[0].slot)
        return len(rows)

    async def _outdate_replies(self, item_id: int, item: NewItem, row: SlotRow) -> None:
        """The agent's replies right after ``row`` that repeated its value end with it."""
        if row.conversation_id is None or not row.value:
            return
        after = await slots_repo.replies_after(
            self.store, row.conversation_id, row.id, REPLIES_READ
        )
        echoes = [
            reply_id
            for reply_id, role, content in after
            if role == "assistant" and reply_id != item_id and row.value in content.lower()
        ]
        await slots_repo.end_items(
            self.store, echoes, item.occurred_at, item_id, slot=(row.slot, row.value)
        )

    async def _fallback(
        self, item_id: int, item: NewItem, subject: str, text: str, current: Sequence[SlotRow]
    ) -> int:
        """No rule's claim: a statement this close to a current one of the subject,
        first person, naming a name, number or date the older does not, takes its slot."""
        vector = item.vector
        if vector is None or not current or not _FIRST_PERSON.search(text):
            return 0
        named = _named(text)
        if not named:
            return 0
        best: tuple[float, SlotRow] | None = None
        for row in current:
            # Rule slots only: a frame is ended by a frame's own reading.
            if row.vector is None or not row.value or is_frame_slot(row.slot):
                continue
            cosine = float(row.vector @ vector)
            if cosine < self.config.slot_fallback_similarity:
                continue
            if row.value in text.lower():
                continue  # the same value said again
            new = named - _named(row.content)
            if new and (best is None or cosine > best[0]):
                best = (cosine, row)
        if best is None:
            return 0
        row = best[1]
        value = normal(" ".join(sorted(named - _named(row.content))))
        await slots_repo.set_slot(self.store, item_id, row.slot, value)
        return await self._end(item_id, item, [row])

    async def _judged(
        self,
        item_id: int,
        item: NewItem,
        subject: str,
        text: str,
        current: Sequence[SlotRow],
    ) -> int | None:
        """The judge's decision applied; None when it gave none (the rules decide)."""
        assert self.slot_judge is not None
        shown = _nearest(current, item.vector)[:JUDGE_CANDIDATES]
        facts = [SlotFact(r.id, r.slot.partition(":")[2], r.value, r.content) for r in shown]
        decision = await self.slot_judge.decide(subject, text, facts)
        if decision is None:
            return None
        if decision.action == "NONE":
            return 0
        attribute = re.sub(r"[^a-z0-9_]+", "_", decision.attribute.lower()).strip("_")
        if decision.action == "UPDATE" and not attribute:
            # The slot of what it replaces.
            first = next((r for r in shown if r.id in decision.replaces), None)
            attribute = first.slot.partition(":")[2] if first is not None else ""
        if attribute:
            await slots_repo.set_slot(
                self.store, item_id, f"{subject}:{attribute}", normal(decision.value)
            )
        if decision.action != "UPDATE":
            return 0
        # Only what it was shown: a judge never ends another subject's statement.
        ending = [r for r in shown if r.id in set(decision.replaces)]
        return await self._end(item_id, item, ending)


def _statements_of(slot: str, current: Sequence[SlotRow]) -> list[tuple[SlotRow, str]]:
    """The current statements of ``slot`` with their values: those it is the slot of,
    and those whose slot is another of the same subject but that claim this one too
    ("I'm a nurse at St Mary's" is stored under its title, and says its employer)."""
    subject, _, attribute = slot.partition(":")
    out = []
    for row in current:
        if row.slot == slot:
            out.append((row, row.value))
        elif not is_frame_slot(row.slot) and row.slot.partition(":")[0] == subject:
            also = next((c for c in claims(row.content) if c.attribute == attribute), None)
            if also is not None and not also.ends and also.value:
                out.append((row, also.value))
    return out


def _ended_it(content: str, slot: str) -> bool:
    """Whether a statement said that ``slot`` ended ("I got laid off" for employer)."""
    attribute = slot.partition(":")[2]
    return any(c.attribute == attribute and c.ends for c in claims(content))


def _holding(name: str, current: Sequence[SlotRow]) -> list[SlotRow]:
    """The statements of a name ("my cat's name is Miso"), a partner, or of a thing one
    has ("we have a cat called Miso") that hold ``name``: someone or something gone."""
    out = []
    for row in current:
        attribute = row.slot.partition(":")[2]
        kept = is_frame_slot(row.slot) or attribute == "partner" or attribute.endswith("_name")
        if kept and row.value and name in row.value.split():
            out.append(row)
    return out


def _status_frames(
    attribute: str, text: str, subject: str, current: Sequence[SlotRow]
) -> list[SlotRow]:
    """A status that ended also ends what was said of it as a frame: the frames of its
    verbs ("I study law" when one graduated), and those of a verb the ending names as
    a gerund ("I retired after thirty years of teaching": "I teach maths")."""
    verbs = set(STATUS_FRAMES.get(attribute, ()))
    if verbs or attribute == "employer":
        verbs |= {stem(w) for w in re.findall(r"\b[a-z]{3,}ing\b", text.lower())}
    if not verbs:
        return []
    return [
        row
        for row in current
        if is_frame_slot(row.slot)
        and row.slot.partition(":")[0] == subject
        and row.slot.partition(":")[2][1:].split("_")[0] in verbs
    ]


def _same(a: str, b: str) -> bool:
    """One value named two ways ("acme" and "acme corp")."""
    a, b = normal(a), normal(b)
    return a == b or (
        len(a) > 2
        and len(b) > 2
        and (a in b.split() or b in a.split() or a.startswith(b + " ") or b.startswith(a + " "))
    )


def _nearest(rows: Sequence[SlotRow], vector: NDArray[np.float32] | None) -> list[SlotRow]:
    if vector is None:
        return list(reversed(rows))
    scored = [
        (float(r.vector @ vector) if r.vector is not None else JUDGE_MIN_SIMILARITY, r)
        for r in rows
    ]
    return [r for s, r in sorted(scored, key=lambda p: -p[0]) if s >= JUDGE_MIN_SIMILARITY]
