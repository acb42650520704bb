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

Two observers and two reflectors, the same interfaces (this module holds the
types, protocols and guards they share):

- ``RuleObserver`` / ``RuleReflector`` (``memory.observe_rules``) need no
  model. The observer picks out explicit "remember …", preferences,
  decisions and plans, relations, first-person facts, feelings and dates by
  pattern; it quotes rather than paraphrases and counts the messages it drew
  nothing from, so its coverage is measured, not claimed.
- ``LLMObserver`` / ``LLMReflector`` (``memory.observe_llm``) ask the utility
  model for JSON; a malformed answer is asked again once, then the batch
  falls back to the rule-based observer (and the run says so).

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
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import date, datetime
from typing import Protocol

from gateway.tokens import estimate_tokens
from memory.passages import passages
from persona.anchor import strip_notes


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
    """One message cut into parts of at most ``max_tokens`` (as memory's passages are:
    by paragraph, then line, sentence and word)."""
    if estimate_tokens(message.text) <= max_tokens:
        return [message]
    parts = passages(message.text, max_tokens * 4)  # estimate_tokens: 4 characters a token
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
