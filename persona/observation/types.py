"""The observation types, and the contracts of observers, reflectors and sinks.

Observational memory (Agent Memory §5.6, Mastra OM): an observer turns
messages into ``Observation``s (dated, prioritised, categorised, with
provenance to message ids) and a reflector condenses them. Two of each share
these interfaces: ``RuleObserver`` / ``RuleReflector`` (``.rules``, no model)
and ``LLMObserver`` / ``LLMReflector`` (``.llm``, the utility model answering
JSON, falling back to the rules). Neither stores anything: ``.log`` keeps them
(table ``observations``), ``.block`` renders the stable OBSERVATIONS block,
``.run`` decides when a pass runs. Each stored observation is also handed to an
``ObservationSink``; ``.sink`` is the memory layer's (``category`` → item type
by ``MEMORY_TYPE``, the observation's message ids as provenance), so the pack
can recall observations, and hears when one is superseded or condensed.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Protocol


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
