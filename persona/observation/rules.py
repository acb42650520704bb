"""The rule-based observer and reflector: no model needed.

The observer picks out explicit "remember …", preferences, decisions and
plans, relations, first-person facts, feelings and dates by pattern; it quotes
rather than paraphrases and counts the messages it drew nothing from, so its
coverage is measured, not claimed. The reflector combines, promotes and
supersedes by slot (where someone lives, works, what they like …).
"""

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from gateway.tokens import estimate_tokens
from memory.timeparse import referred_day
from persona.observation.guards import (
    _content,
    _normalise,
    clean_for_observer,
    echoes_instructions,
)
from persona.observation.types import (
    _RANK,
    Category,
    KnownObservation,
    Merge,
    Observation,
    ObserveResult,
    Priority,
    Reflection,
    SourceMessage,
)

# -- the rule-based observer ------------------------------------------------------

_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_FILLER = re.compile(
    r"^(?:(?:hey|hi|hello|oh|wow|yeah|yes|well|so|haha|lol|omg|thanks|thank you|sure|ok|okay)"
    r"\b[\s,!.]*)+",
    re.I,
)
_REMEMBER = re.compile(
    r"\b(?:please\s+)?(?:remember|note|don't forget|keep in mind)\b(?: that)?\s+(.+)", re.I
)
_RULE = re.compile(
    r"^(?:please\s+)?(?:always|never|don't ever|do not ever|from now on|stop)\b", re.I
)
_PREFERENCE = re.compile(
    r"\b(?:i|we)\s+(?:really\s+|absolutely\s+|just\s+|do\s+|also\s+)?"
    r"(?:like|love|prefer|enjoy|hate|dislike|can't stand|adore|am into|'m into)\b"
    r"|\bmy\s+fav(?:ou)?rite\b|\bi'?m\s+(?:a\s+)?(?:big\s+)?fan of\b",
    re.I,
)
_DECISION = re.compile(
    r"\b(?:i|we)(?:'ve|\s+have)?\s+decided\b|\b(?:i|we)(?:'m|\s+am|'re|\s+are)\s+"
    r"(?:going to|planning|thinking (?:of|about)|about to|starting)\b|\b(?:i|we)(?:'ll|\s+will)\s+"
    r"(?!be\b)\w+|\b(?:i|we)\s+plan\b|\bmy plan\b|\bour plan\b|\bsigned up\b|\bbooked\b",
    re.I,
)
_RELATIONAL = re.compile(
    r"\bmy\s+(?:wife|husband|partner|boyfriend|girlfriend|mom|mum|mother|dad|father|parents|"
    r"sister|brother|siblings|son|daughter|kids?|children|friends?|boss|colleagues?|family|"
    r"grandma|grandmother|grandpa|grandfather|aunt|uncle|cousin|neighbou?r|team|dog|cat|pets?)\b",
    re.I,
)
_IRREGULAR_PAST = (
    "went|got|took|made|ran|won|lost|bought|found|had|met|wrote|read|built|began|gave|saw|"
    "sold|left|came|became|spent|taught|heard|kept|brought|drove|flew|swam|grew|threw|sang|"
    "chose|broke|caught|fell|held|paid|sent|told|wore|drew|ate|did"
)
_ADVERB = r"(?:just|also|finally|recently|actually|still|even|already|once|\w+ly)\s+"
_FACT = re.compile(
    r"\b(?:i|we)(?:'m|\s+am|'re|\s+are)\s+(?:a|an)\s+\w+|\b(?:i|we)\s+(?:work|live|study|"
    r"grew up|was born)\b|\bmy name is\b|\b(?:i|we)\s+have\s+(?:a|an|two|three|\d+)\b|"
    r"\bi(?:'ve|\s+have)\s+(?:been|got|had|\w+ed)\b|"
    # first-person past: "I (also) lost my job", "we painted the shed"
    rf"\b(?:i|we)\s+(?:{_ADVERB})?(?:[a-z]+ed|{_IRREGULAR_PAST})\b|"
    # ongoing: "I'm (currently) reading ..."
    r"\b(?:i|we)(?:'m|\s+am|'re|\s+are)\s+(?:currently\s+|still\s+|now\s+)?[a-z]+ing\b|"
    # about what is theirs: "my crew won ...", "our dog is ..."
    r"\b(?:my|our)\s+\w+(?:\s+\w+)?\s+(?:is|was|are|were|has|had|won|took|got)\b",
    re.I,
)
# Casual chat drops the subject: "Took a trip to Rome last week."
_SUBJECTLESS = re.compile(
    rf"^(?:{_ADVERB})?(?:[A-Z][a-z]+ed|(?:{_IRREGULAR_PAST.title()}))\b(?<!Need)(?<!Indeed)"
    r"(?<!Speed)(?<!Red)(?<!Bed)"
)
_FEELING = re.compile(
    r"\b(?:i|we)\s*(?:'m|\s+am|\s+feel|\s+felt|\s+was|\s+were|'re|\s+are)\s+(?:so\s+|really\s+|"
    r"very\s+|pretty\s+|a bit\s+|kind of\s+)?(happy|sad|stressed|anxious|excited|worried|tired|"
    r"lonely|overwhelmed|proud|grateful|thankful|nervous|upset|angry|scared|frustrated|"
    r"exhausted|thrilled|depressed|relieved|hopeful|inspired)\b",
    re.I,
)


def _quote(speaker: str, sentence: str, max_words: int = 40) -> str:
    words = sentence.split()
    text = " ".join(words[:max_words]) + ("…" if len(words) > max_words else "")
    return f"{speaker}: {text}"


def classify_sentence(sentence: str, role: str) -> tuple[Category, Priority] | None:
    """What a rule-based observer makes of one sentence, or None when nothing."""
    if role != "user":
        # The agent's own turns: only what it committed to (the rest is its voice,
        # which the persona track reads; its self-description is never a user fact).
        if re.search(
            r"\bi(?:'ll|\s+will)\s+(?:remind|send|check|follow up|look into)\b", sentence, re.I
        ):
            return Category.DECISION, Priority.MEDIUM
        return None
    if _REMEMBER.search(sentence):
        if _PREFERENCE.search(sentence):
            return Category.PREFERENCE, Priority.HIGH
        return Category.FACT, Priority.HIGH
    if _RULE.search(sentence):
        return Category.PREFERENCE, Priority.HIGH
    if _DECISION.search(sentence):
        return Category.DECISION, Priority.MEDIUM
    if _PREFERENCE.search(sentence):
        return Category.PREFERENCE, Priority.MEDIUM
    if _FEELING.search(sentence):
        return Category.EMOTIONAL, Priority.LOW
    if _RELATIONAL.search(sentence):
        return Category.RELATIONAL, Priority.MEDIUM
    if _FACT.search(sentence) or _SUBJECTLESS.search(sentence):
        return Category.FACT, Priority.MEDIUM
    return None


def rule_observations(message: SourceMessage, instructions: frozenset[str]) -> list[Observation]:
    text = clean_for_observer(message.text, instructions)
    found: list[Observation] = []
    for raw in _SENTENCE.split(text):
        sentence = _FILLER.sub("", raw.strip()).strip()
        if len(sentence.split()) < 3:
            continue
        verdict = classify_sentence(sentence, message.role)
        if verdict is None:
            continue
        category, priority = verdict
        resolved = referred_day(sentence, message.created_at)
        referred, phrase = resolved if resolved else (None, "")
        if (
            referred is not None
            and category is Category.DECISION
            and referred >= message.created_at.date()
        ):
            priority = Priority.HIGH  # a dated plan is what people most expect remembered
        text_out = _quote(message.speaker, sentence)
        if echoes_instructions(text_out, instructions):
            continue
        found.append(
            Observation(
                text=text_out,
                priority=priority,
                category=category,
                observed_at=message.created_at,
                source_message_ids=(message.message_id,),
                referred_on=referred,
                relative_phrase=phrase,
            )
        )
    return found


@dataclass
class RuleObserver:
    """Pattern-based: explicit statements only, quoted; says how much it left unread."""

    instructions: frozenset[str] = frozenset()

    @property
    def name(self) -> str:
        return "rules"

    async def observe(
        self, messages: Sequence[SourceMessage], *, known: Sequence[str] = ()
    ) -> ObserveResult:
        seen = {_normalise(k) for k in known}
        observations: list[Observation] = []
        unextracted = 0
        by_id: dict[int, list[Observation]] = {}
        for message in messages:
            found = [
                o
                for o in rule_observations(message, self.instructions)
                if _normalise(o.text) not in seen
            ]
            by_id.setdefault(message.message_id, []).extend(found)
            for o in found:
                seen.add(_normalise(o.text))
            observations.extend(found)
        unextracted = sum(1 for found in by_id.values() if not found)
        return ObserveResult(tuple(observations), self.name, unextracted=unextracted)


# -- reflectors -----------------------------------------------------------------

_SLOTS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("residence", re.compile(r"\b(?:live|living|lives|moved|moving) (?:in|to)\b", re.I)),
    ("work", re.compile(r"\b(?:work|working|works) (?:at|for|as)\b|\bmy (?:new )?job\b", re.I)),
    ("name", re.compile(r"\bmy name is\b|\bcall me\b", re.I)),
    ("relationship", re.compile(r"\b(?:married|engaged|divorced|single|broke up|dating)\b", re.I)),
)
_FAVOURITE = re.compile(r"\bfav(?:ou)?rite (\w+)", re.I)
_LIKES = re.compile(
    r"\b(?:(?:really |absolutely |also )?(like|love|enjoy|prefer|adore)|"
    r"(hate|dislike|can't stand|don't like|do not like|no longer like|stopped liking))\s+(\w+)",
    re.I,
)


def slot_of(observation: Observation) -> tuple[str, str] | None:
    """(speaker, slot): observations about the same thing, where a newer one replaces an older."""
    speaker, _, body = observation.text.partition(":")
    if not body:
        speaker, body = "", observation.text
    favourite = _FAVOURITE.search(body)
    if favourite:
        return speaker, f"favourite:{favourite.group(1).lower()}"
    likes = _LIKES.search(body)
    if likes:
        return speaker, f"likes:{likes.group(3).lower().rstrip('s')}"
    for name, pattern in _SLOTS:
        if pattern.search(body):
            return speaker, name
    return None


def _jaccard(a: str, b: str) -> float:
    x, y = _content(a), _content(b)
    return len(x & y) / len(x | y) if x and y else 0.0


def _raise(priority: Priority) -> Priority:
    return Priority.HIGH if priority is not Priority.LOW else Priority.MEDIUM


@dataclass
class RuleReflector:
    """Supersede by slot, combine near-duplicates, promote what recurs, drop low-priority excess.

    High-priority observations are never dropped for space, nor is one that
    just superseded another (it holds the current truth of its slot).
    """

    duplicate_jaccard: float = 0.7
    recurring_min: int = 3

    @property
    def name(self) -> str:
        return "reflector:rules"

    async def reflect(
        self, observations: Sequence[KnownObservation], *, target_tokens: int
    ) -> Reflection:
        ordered = sorted(observations, key=lambda k: (k.observation.observed_at, k.observation_id))
        retired: set[int] = set()
        supersede: list[tuple[int, int]] = []
        latest_by_slot: dict[tuple[str, str], KnownObservation] = {}
        for known in reversed(ordered):
            slot = slot_of(known.observation)
            if slot is None:
                continue
            newer = latest_by_slot.get(slot)
            if newer is None:
                latest_by_slot[slot] = known
            elif _jaccard(newer.observation.text, known.observation.text) < 0.9:
                supersede.append((known.observation_id, newer.observation_id))
                retired.add(known.observation_id)
        merges: list[Merge] = []
        alive = [k for k in ordered if k.observation_id not in retired]
        groups: list[list[KnownObservation]] = []
        for known in alive:
            for group in groups:
                if (
                    _jaccard(group[-1].observation.text, known.observation.text)
                    >= self.duplicate_jaccard
                ):
                    group.append(known)
                    break
            else:
                groups.append([known])
        for group in groups:
            if len(group) < 2:
                continue
            newest = group[-1].observation
            priority = max((k.observation.priority for k in group), key=_RANK.__getitem__)
            days = {k.observation.observed_at.date() for k in group}
            promoted = len(group) >= self.recurring_min and len(days) >= 2
            text = newest.text
            if promoted:
                priority = _raise(priority)
                text = f"{text} (recurring: {len(group)} times since {min(days):%Y-%m-%d})"
            sources = tuple(sorted({s for k in group for s in k.observation.source_message_ids}))
            merges.append(
                Merge(
                    tuple(k.observation_id for k in group),
                    replace(newest, text=text, priority=priority, source_message_ids=sources),
                    promoted=promoted,
                )
            )
            retired.update(k.observation_id for k in group)
        kept_tokens = sum(
            estimate_tokens(k.observation.text) for k in alive if k.observation_id not in retired
        ) + sum(estimate_tokens(m.observation.text) for m in merges)
        drops: list[int] = []
        winners = {newer for _older, newer in supersede}
        # Low-priority ones go first; medium ones only when far over the target.
        for priority, limit in (
            (Priority.LOW, target_tokens),
            (Priority.MEDIUM, 2 * target_tokens),
        ):
            for known in alive:
                if kept_tokens <= limit:
                    break
                if known.observation_id in retired or known.observation.priority is not priority:
                    continue
                if known.observation_id in winners:
                    continue  # it holds the current truth of its slot
                drops.append(known.observation_id)
                retired.add(known.observation_id)
                kept_tokens -= estimate_tokens(known.observation.text)
        return Reflection(self.name, tuple(supersede), tuple(merges), tuple(drops))
