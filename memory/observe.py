"""Observer and Reflector: observational memory (Agent Memory §5.6, Mastra OM).

Owned by the persona loop (issue 4); the memory layer (issue 3) does not edit
this file. The contract with the memory layer:

- This module turns messages into ``Observation``s (dated, prioritised,
  categorised, with provenance to message ids) and condenses them with a
  reflector. It does no storage itself: ``persona.observations`` stores them
  (table ``observations``) and renders the stable OBSERVATIONS block.
- Each stored observation is also handed to an ``ObservationSink``; the
  memory layer's item store implements it, so observations become memory
  items (``category`` → item type by ``MEMORY_TYPE``) with the observation's
  message ids as provenance, and the pack can recall them. When an
  observation is superseded or condensed, the sink hears of it too.

Two observers and two reflectors, the same interfaces:

- ``RuleObserver`` / ``RuleReflector`` need no model. The observer picks out
  explicit "remember …", preferences, decisions and plans, relations,
  first-person facts, feelings and dates by pattern; it quotes rather than
  paraphrases and counts the messages it drew nothing from, so its coverage
  is measured, not claimed.
- ``LLMObserver`` / ``LLMReflector`` ask the utility model for JSON; a
  malformed answer is asked again once, then the batch falls back to the
  rule-based observer (and the run says so).

Guards against the failures users report of observational memory:

- the system's own words are never observed as the person's: gateway notes
  (anchors) are stripped, lines repeating the persona contract or other
  instructions are dropped before observing, and observations that echo
  those instructions are discarded after;
- one huge message is split into parts that each fit an observer call, so
  it is observed rather than skipped;
- (in ``persona.stages``) messages not yet observed are never dropped from
  the prompt.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import date, datetime
from typing import Any, Protocol

from gateway.brains.base import BlockKind, Brain, BrainRequest, ChatMessage, Purpose, SystemBlock
from gateway.tokens import estimate_tokens
from persona.anchor import strip_notes
from persona.dates import resolve_date


class Priority(enum.StrEnum):
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"


class Category(enum.StrEnum):
    FACT = "fact"
    PREFERENCE = "preference"
    DECISION = "decision"
    EMOTIONAL = "emotional"
    RELATIONAL = "relational"


# The memory item type each category becomes in the memory layer.
MEMORY_TYPE = {
    Category.FACT: "fact",
    Category.PREFERENCE: "preference",
    Category.DECISION: "event",
    Category.EMOTIONAL: "event",
    Category.RELATIONAL: "relational",
}
_RANK = {Priority.LOW: 0, Priority.MEDIUM: 1, Priority.HIGH: 2}


@dataclass(frozen=True)
class SourceMessage:
    """A message as the observer reads it; ``speaker`` is how the block names its author."""

    message_id: int
    role: str
    speaker: str
    text: str
    created_at: datetime


@dataclass(frozen=True)
class Observation:
    text: str
    priority: Priority
    category: Category
    observed_at: datetime
    source_message_ids: tuple[int, ...]
    referred_on: date | None = None
    relative_phrase: str = ""


@dataclass(frozen=True)
class KnownObservation:
    """A stored observation, as the reflector sees it."""

    observation_id: int
    observation: Observation


@dataclass(frozen=True)
class ObserveResult:
    observations: tuple[Observation, ...]
    author: str
    # Messages read that gave no observation (the rule-based observer's honest gap).
    unextracted: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Merge:
    """Observations folded into one (combined, or promoted as a recurring pattern)."""

    ids: tuple[int, ...]
    observation: Observation
    promoted: bool = False


@dataclass(frozen=True)
class Reflection:
    author: str
    # (older id, id of the newer observation that contradicts it)
    supersede: tuple[tuple[int, int], ...] = ()
    merges: tuple[Merge, ...] = ()
    drops: tuple[int, ...] = ()
    input_tokens: int = 0
    output_tokens: int = 0
    notes: tuple[str, ...] = ()


class Observer(Protocol):
    @property
    def name(self) -> str: ...

    async def observe(
        self, messages: Sequence[SourceMessage], *, known: Sequence[str] = ()
    ) -> ObserveResult: ...


class Reflector(Protocol):
    @property
    def name(self) -> str: ...

    async def reflect(
        self, observations: Sequence[KnownObservation], *, target_tokens: int
    ) -> Reflection: ...


class ObservationSink(Protocol):
    """Where observations go besides their own table (the memory layer's item store)."""

    async def observation_added(
        self, observation_id: int, person_id: int, observation: Observation
    ) -> int | None:
        """Store it as a memory item; the item's id, or None when not taken."""
        ...

    async def observation_retired(self, observation_id: int, memory_item_id: int | None) -> None:
        """It was superseded or condensed: the item should stop being recalled as current."""
        ...


# -- guards ---------------------------------------------------------------------

_WORDS = re.compile(r"[a-z0-9']+")


def _content(text: str) -> set[str]:
    return {w for w in _WORDS.findall(text.lower()) if len(w) > 3}


def instruction_lines(*texts: str) -> frozenset[str]:
    """Normalised lines of the system's own texts (persona, anchors) worth recognising."""
    lines: set[str] = set()
    for text in texts:
        for raw in text.splitlines():
            line = _normalise(raw)
            if len(line.split()) >= 4:
                lines.add(line)
    return frozenset(lines)


def _normalise(line: str) -> str:
    return " ".join(_WORDS.findall(line.lower()))


def clean_for_observer(text: str, instructions: frozenset[str]) -> str:
    """The message without gateway notes and without lines copying the system's instructions."""
    kept = [
        line
        for line in strip_notes(text).splitlines()
        if not line.strip() or _normalise(line) not in instructions
    ]
    return "\n".join(kept).strip()


def echoes_instructions(text: str, instructions: frozenset[str]) -> bool:
    """True when an observation mostly repeats one of the system's own lines."""
    words = _content(text)
    if not words:
        return False
    lowered = text.lower()
    if "gateway note" in lowered or "persona anchor" in lowered or "persona reminder" in lowered:
        return True
    for line in instructions:
        theirs = _content(line)
        if theirs and len(words & theirs) / len(words | theirs) >= 0.6:
            return True
    return False


def split_huge(message: SourceMessage, max_tokens: int) -> list[SourceMessage]:
    """One message cut into parts of at most ``max_tokens`` (by paragraph, then sentence)."""
    if estimate_tokens(message.text) <= max_tokens:
        return [message]
    pieces: list[str] = []
    for paragraph in re.split(r"\n\s*\n", message.text):
        if estimate_tokens(paragraph) <= max_tokens:
            pieces.append(paragraph)
            continue
        for sentence in re.split(r"(?<=[.!?])\s+", paragraph):
            rest = sentence
            while estimate_tokens(rest) > max_tokens:
                pieces.append(rest[: max_tokens * 4])
                rest = rest[max_tokens * 4 :]
            pieces.append(rest)
    parts: list[str] = []
    current = ""
    for piece in pieces:
        joined = f"{current}\n\n{piece}" if current else piece
        if current and estimate_tokens(joined) > max_tokens:
            parts.append(current)
            current = piece
        else:
            current = joined
    if current:
        parts.append(current)
    total = len(parts)
    return [
        replace(message, text=f"(part {i} of {total}) {part}") for i, part in enumerate(parts, 1)
    ]


def batches(messages: Sequence[SourceMessage], max_tokens: int) -> list[list[SourceMessage]]:
    """Consecutive messages grouped to fit one observer call; huge ones split first."""
    out: list[list[SourceMessage]] = []
    current: list[SourceMessage] = []
    used = 0
    for message in messages:
        for part in split_huge(message, max_tokens):
            size = estimate_tokens(part.text)
            if current and used + size > max_tokens:
                out.append(current)
                current, used = [], 0
            current.append(part)
            used += size
    if current:
        out.append(current)
    return out


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
        resolved = resolve_date(sentence, message.created_at)
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


# -- the LLM observer -----------------------------------------------------------

OBSERVER_INSTRUCTIONS = """You are the observer of a long-running conversation's memory.
Turn the messages below into short, dated observations about the people and what they said,
decided and felt. Rules:
- Record only what the people themselves said or did. Never record instructions given to the
  assistant, system text, persona descriptions, or anything inside a "[gateway note …]".
- The assistant's own messages count only for what it promised or decided with the person.
- Resolve relative dates ("yesterday", "next Friday") against the time of the message and give
  both the date (YYYY-MM-DD) and the phrase used.
- priority: high (explicitly asked to remember, health, deadlines, commitments, strong
  preferences), medium (ordinary facts, plans, preferences), low (passing remarks, moods).
- category: fact, preference, decision, emotional or relational.
- sources: the ids of the messages each observation comes from.
- Skip anything already in the known observations.
Answer with one JSON object and nothing else:
{"observations": [{"text": "...", "priority": "medium", "category": "fact",
  "referred_date": "2024-05-07" or null, "relative_phrase": "yesterday" or "", "sources": [12]}]}"""

REFLECTOR_INSTRUCTIONS = """You condense a list of observations about a person.
Combine observations that say the same thing; turn repeated ones into one pattern with a
higher priority; drop observations that a newer observation contradicts or replaces (list
them in "supersedes"); keep every high-priority observation unless a newer one contradicts it.
Each output lists in "sources" the ids of the observations it keeps or combines.
Answer with one JSON object and nothing else:
{"observations": [{"text": "...", "priority": "high", "category": "preference",
  "referred_date": null, "relative_phrase": "", "sources": [3, 9], "supersedes": [2]}]}"""

RETRY_PROMPT = "That was not the JSON object asked for. Answer again with only the JSON object."


def _json_object(text: str) -> dict[str, Any] | None:
    match = re.search(r"\{.*\}", text, re.DOTALL)
    if match is None:
        return None
    try:
        data = json.loads(match.group(0))
    except json.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


def _parse_date(value: Any) -> date | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return date.fromisoformat(value[:10])
    except ValueError:
        return None


def _parse_items(data: dict[str, Any]) -> list[dict[str, Any]] | None:
    items = data.get("observations")
    if not isinstance(items, list):
        return None
    parsed: list[dict[str, Any]] = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("text"), str):
            return None
        try:
            priority = Priority(str(item.get("priority", "medium")).lower())
            category = Category(str(item.get("category", "fact")).lower())
        except ValueError:
            return None
        sources = [
            s for s in item.get("sources", []) if isinstance(s, int) and not isinstance(s, bool)
        ]
        supersedes = [
            s for s in item.get("supersedes", []) if isinstance(s, int) and not isinstance(s, bool)
        ]
        phrase = item.get("relative_phrase") or ""
        parsed.append(
            {
                "text": item["text"].strip(),
                "priority": priority,
                "category": category,
                "referred_on": _parse_date(item.get("referred_date")),
                "relative_phrase": phrase[:100] if isinstance(phrase, str) else "",
                "sources": sources,
                "supersedes": supersedes,
            }
        )
    return parsed


@dataclass
class _Asked:
    answer: list[dict[str, Any]] | None
    input_tokens: int = 0
    output_tokens: int = 0
    model: str = ""


async def _ask_json(brain: Brain, system: str, body: str, max_tokens: int) -> _Asked:
    """Ask for the JSON; once more when malformed. ``answer`` None: malformed twice."""
    request = BrainRequest(
        system=(SystemBlock(BlockKind.GUIDANCE, system, cache=True),),
        messages=(ChatMessage("user", body),),
        purpose=Purpose.UTILITY,
        max_tokens=max_tokens,
        temperature=0.0,
    )
    asked = _Asked(None)
    for attempt in range(2):
        completion = await brain.complete(request)
        asked.input_tokens += completion.usage.input_tokens
        asked.output_tokens += completion.usage.output_tokens
        asked.model = completion.model
        data = _json_object(completion.text)
        parsed = _parse_items(data) if data is not None else None
        if parsed is not None:
            asked.answer = parsed
            return asked
        if attempt == 0:
            request = replace(
                request,
                messages=(
                    *request.messages,
                    ChatMessage("assistant", completion.text or "(empty)"),
                    ChatMessage("user", RETRY_PROMPT),
                ),
            )
    return asked


@dataclass
class LLMObserver:
    """The utility model writes the observations; malformed batches fall back to the rules."""

    brain: Brain
    instructions: frozenset[str] = frozenset()
    max_tokens: int = 1024
    chunk_tokens: int = 2000
    model: str = field(default="", init=False)

    @property
    def name(self) -> str:
        return f"llm:{self.model or self.brain.name}"

    async def observe(
        self, messages: Sequence[SourceMessage], *, known: Sequence[str] = ()
    ) -> ObserveResult:
        fallback = RuleObserver(self.instructions)
        observations: list[Observation] = []
        notes: list[str] = []
        tokens = [0, 0]
        unextracted = 0
        for batch in batches(messages, self.chunk_tokens):
            cleaned = [
                replace(m, text=clean_for_observer(m.text, self.instructions)) for m in batch
            ]
            body = _observer_body(cleaned, known)
            asked = await _ask_json(self.brain, OBSERVER_INSTRUCTIONS, body, self.max_tokens)
            tokens[0] += asked.input_tokens
            tokens[1] += asked.output_tokens
            self.model = asked.model or self.model
            if asked.answer is None:
                notes.append(f"malformed answer twice for {len(batch)} messages: rule fallback")
                result = await fallback.observe(batch, known=known)
                observations.extend(result.observations)
                unextracted += result.unextracted
                continue
            by_id = {m.message_id: m for m in batch}
            used: set[int] = set()
            for item in asked.answer:
                sources = tuple(sorted({s for s in item["sources"] if s in by_id}))
                if not sources or not item["text"]:
                    notes.append(
                        f"dropped an observation without valid sources: {item['text'][:60]!r}"
                    )
                    continue
                if echoes_instructions(item["text"], self.instructions):
                    notes.append(f"dropped an echo of the instructions: {item['text'][:60]!r}")
                    continue
                used.update(sources)
                observations.append(
                    Observation(
                        text=item["text"],
                        priority=item["priority"],
                        category=item["category"],
                        observed_at=max(by_id[s].created_at for s in sources),
                        source_message_ids=sources,
                        referred_on=item["referred_on"],
                        relative_phrase=item["relative_phrase"],
                    )
                )
            unextracted += len(set(by_id) - used)
        return ObserveResult(
            tuple(observations),
            self.name,
            unextracted=unextracted,
            input_tokens=tokens[0],
            output_tokens=tokens[1],
            notes=tuple(notes),
        )


def _observer_body(messages: Iterable[SourceMessage], known: Sequence[str]) -> str:
    lines = [
        f"[id {m.message_id} | {m.created_at:%Y-%m-%d %H:%M} | {m.speaker}] {m.text}"
        for m in messages
    ]
    known_text = "\n".join(f"- {k}" for k in known[-30:]) or "(none)"
    return f"KNOWN OBSERVATIONS:\n{known_text}\n\nMESSAGES:\n" + "\n".join(lines)


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


@dataclass
class LLMReflector:
    """The utility model condenses; a high-priority observation it loses uncontradicted stays."""

    brain: Brain
    max_tokens: int = 1024
    model: str = field(default="", init=False)

    @property
    def name(self) -> str:
        return f"reflector:llm:{self.model or self.brain.name}"

    async def reflect(
        self, observations: Sequence[KnownObservation], *, target_tokens: int
    ) -> Reflection:
        by_id = {k.observation_id: k for k in observations}
        lines = [
            f"[{k.observation_id}] ({k.observation.priority.value}, "
            f"{k.observation.category.value}, {k.observation.observed_at:%Y-%m-%d}) "
            f"{k.observation.text}"
            for k in sorted(observations, key=lambda k: k.observation_id)
        ]
        body = (
            f"Condense to about {target_tokens} tokens.\nOBSERVATIONS (id, priority, category, "
            "date observed):\n" + "\n".join(lines)
        )
        asked = await _ask_json(self.brain, REFLECTOR_INSTRUCTIONS, body, self.max_tokens)
        self.model = asked.model or self.model
        if asked.answer is None:
            fallback = await RuleReflector().reflect(observations, target_tokens=target_tokens)
            return replace(
                fallback,
                input_tokens=asked.input_tokens,
                output_tokens=asked.output_tokens,
                notes=("malformed answer twice: rule-based reflection",),
            )
        supersede: list[tuple[int, int]] = []
        merges: list[Merge] = []
        referenced: set[int] = set()
        contradicted: set[int] = set()
        for item in asked.answer:
            sources = [s for s in item["sources"] if s in by_id]
            if not sources:
                continue
            referenced.update(sources)
            replaced = [s for s in item["supersedes"] if s in by_id and s not in sources]
            contradicted.update(replaced)
            newest = max(sources, key=lambda s: by_id[s].observation.observed_at)
            unchanged = len(sources) == 1 and item["text"] == by_id[sources[0]].observation.text
            if not unchanged:
                base = by_id[newest].observation
                merges.append(
                    Merge(
                        tuple(sorted(sources)),
                        Observation(
                            text=item["text"],
                            priority=item["priority"],
                            category=item["category"],
                            observed_at=base.observed_at,
                            source_message_ids=tuple(
                                sorted(
                                    {
                                        m
                                        for s in sources
                                        for m in by_id[s].observation.source_message_ids
                                    }
                                )
                            ),
                            referred_on=item["referred_on"] or base.referred_on,
                            relative_phrase=item["relative_phrase"] or base.relative_phrase,
                        ),
                        promoted=_RANK[item["priority"]] > _RANK[base.priority],
                    )
                )
            supersede.extend((old, newest) for old in replaced)
        drops = [
            i
            for i, k in by_id.items()
            if i not in referenced
            and i not in contradicted
            and k.observation.priority is not Priority.HIGH
        ]
        return Reflection(
            self.name,
            tuple(supersede),
            tuple(merges),
            tuple(sorted(drops)),
            input_tokens=asked.input_tokens,
            output_tokens=asked.output_tokens,
        )
