"""The one contract every model call goes through.

A ``Brain`` takes a ``BrainRequest`` (system blocks in a fixed order, the
messages, limits) and either streams the answer (``stream``: ``TextDelta``
events, then exactly one ``Completion``) or returns it whole (``complete``).
Adapters raise only ``gateway.errors.BrainError`` subclasses.
"""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import date
from typing import Literal, Protocol, runtime_checkable

from gateway.errors import BrainInterrupted

Role = Literal["user", "assistant"]


class Purpose(enum.StrEnum):
    """Which model a call needs: the reply model or the small utility model."""

    REPLY = "reply"
    UTILITY = "utility"


class BlockKind(enum.StrEnum):
    """What a system block holds; the order of kinds is the prompt's order."""

    PERSONA = "persona"
    OBSERVATIONS = "observations"
    MEMORY = "memory"
    GUIDANCE = "guidance"


@dataclass(frozen=True)
class SystemBlock:
    kind: BlockKind
    text: str
    # Ask the provider to cache the prompt up to and including this block.
    cache: bool = False


@dataclass(frozen=True)
class ChatMessage:
    role: Role
    text: str


@dataclass(frozen=True)
class Recollection:
    """One remembered thing as data: the day it was said, by whom, the text (sanitised)."""

    day: date
    # "user" for the person's own words, "assistant" for the agent's, "" for a stored
    # fact, preference... (``kind`` says which).
    role: str
    kind: str
    text: str


@dataclass(frozen=True)
class Recall:
    """What memory holds for this message, as data rather than prompt text.

    A model reads the MEMORY block; a brain that cannot read (the offline one)
    renders this for the person instead of showing the model's frame.
    """

    # What was just remembered or forgotten at the person's request, said to them.
    notes: tuple[str, ...] = ()
    # The Memory Pack's kept items, most relevant first.
    items: tuple[Recollection, ...] = ()
    # Set when the message asks what is remembered about the person: what memory holds
    # for them, this conversation included (newest first); None otherwise.
    about_person: tuple[Recollection, ...] | None = None
    # The offline brain's notice was already given in this conversation (from the stored
    # turns, so it holds across restarts).
    offline_notice_given: bool = False


@dataclass(frozen=True)
class BrainRequest:
    system: tuple[SystemBlock, ...]
    messages: tuple[ChatMessage, ...]
    purpose: Purpose = Purpose.REPLY
    max_tokens: int = 1024
    temperature: float | None = None
    recall: Recall = field(default_factory=Recall)

    def system_text(self) -> str:
        return "\n\n".join(block.text for block in self.system)


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class Completion:
    text: str
    model: str
    usage: Usage = field(default_factory=Usage)
    stop_reason: str = "end_turn"
    # False for the offline brain's notice ("no model is configured ..."): it is the
    # gateway talking, not the agent, so it is neither remembered nor judged as its voice.
    written_by_model: bool = True


BrainEvent = TextDelta | Completion


@runtime_checkable
class Brain(Protocol):
    """A model behind one small interface."""

    @property
    def name(self) -> str:
        """Short adapter name stored with each turn: claude, openai, offline, scripted."""
        ...

    def stream(self, request: BrainRequest) -> AsyncIterator[BrainEvent]:
        """Yield ``TextDelta``s as the answer grows, then one ``Completion``."""
        ...

    async def complete(self, request: BrainRequest) -> Completion:
        """The whole answer at once (utility calls: judge, observer)."""
        ...

    async def aclose(self) -> None:
        """Release connections."""
        ...


async def complete_from_stream(brain: Brain, request: BrainRequest) -> Completion:
    """``complete`` for adapters whose only native call is streaming."""
    async for event in brain.stream(request):
        if isinstance(event, Completion):
            return event
    raise BrainInterrupted(f"{brain.name}: stream ended without a completion")
