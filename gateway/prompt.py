"""The prompt as stages build it, and its composition in a fixed order.

Order, as the provider's prompt cache reads it (tools → system → messages):
persona contract and observations (the system prompt, cache mark 1) → the
history (cache mark 2 on its last message) → the final user message: the
per-turn blocks (memory pack, time and channel, this turn's guidance) framed
as the gateway's, then the person's words. What changes every turn comes
after both marks, so turn N+1 reads turn N's whole prefix from the cache.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol, TypeVar

from gateway.brains.base import (
    BlockKind,
    BrainRequest,
    ChatMessage,
    Purpose,
    Recall,
    Role,
    SystemBlock,
)
from gateway.events import PackSize
from gateway.tokens import estimate_tokens

# Blocks of these kinds change rarely; the cache mark goes on the last of them.
STABLE_KINDS = (BlockKind.PERSONA, BlockKind.OBSERVATIONS)
ORDER = (BlockKind.PERSONA, BlockKind.OBSERVATIONS, BlockKind.MEMORY, BlockKind.GUIDANCE)


@dataclass(frozen=True)
class PastMessage:
    message_id: int
    role: Role
    text: str
    tokens: int
    created_at: datetime


T = TypeVar("T")


@dataclass(frozen=True)
class HistoryEntry:
    """One message of the verbatim history, with the stored message it is (if any)."""

    role: Role
    text: str
    # None for text a stage wrote into the history itself.
    message_id: int | None = None


@dataclass(frozen=True)
class TurnContext:
    """What the stages know about the turn being answered, read once when it starts.

    ``recent`` holds the conversation's latest messages before this one,
    oldest first (read once by the pipeline for every stage); ``turn_number``
    is this turn's place in its conversation (1 for the first), counted in
    the same transaction.
    """

    turn_id: int
    conversation_id: int
    person_id: int
    channel: str
    message_id: int
    text: str
    received_at: datetime
    recent: tuple[PastMessage, ...] = ()
    turn_number: int = 0


@dataclass
class PromptDraft:
    """Filled by the context stages, then composed into a ``BrainRequest``."""

    blocks: dict[BlockKind, list[str]] = field(default_factory=dict)
    # The verbatim history, each entry with its message id: no stage has to find them again.
    history: list[HistoryEntry] = field(default_factory=list)
    # The messages the history budget kept (set by the history stage): the memory
    # pack never holds them, also when a later stage (a standing rebase) drops one.
    window_ids: frozenset[int] = frozenset()
    # The messages the memory pack holds: no later stage puts one back in the history.
    packed_message_ids: frozenset[int] = frozenset()
    # The same memory as data, for a brain that cannot read the prompt (offline).
    recall: Recall = field(default_factory=Recall)
    # Facts of this turn a layer reads once and its later stages share, by type.
    facts: dict[type, object] = field(default_factory=dict)

    def fact(self, kind: type[T]) -> T | None:
        found = self.facts.get(kind)
        return found if isinstance(found, kind) else None

    # Set by the memory stage: the pack's size, for the metrics (empty packs count too).
    pack: PackSize | None = None
    # The stage adding now (the pipeline sets it), and the tokens each stage added: the
    # trace and the panel's turn view show which blocks went in and their sizes.
    stage: str = ""
    by_stage: dict[str, int] = field(default_factory=dict)

    def add(self, kind: BlockKind, text: str) -> None:
        if text.strip():
            self.blocks.setdefault(kind, []).append(text.strip())
            name = f"stage:{self.stage or kind.value}"
            self.by_stage[name] = self.by_stage.get(name, 0) + estimate_tokens(text.strip())

    def sizes(self, message: str) -> dict[str, int]:
        sizes = {
            kind.value: estimate_tokens("\n\n".join(self.blocks[kind])) for kind in self.blocks
        }
        sizes["history"] = sum(estimate_tokens(m.text) for m in self.history)
        sizes["message"] = estimate_tokens(message)
        sizes.update(self.by_stage)
        return sizes

    def compose(
        self,
        message: str,
        *,
        max_tokens: int,
        temperature: float | None = None,
        cache: bool = True,
    ) -> BrainRequest:
        present = [kind for kind in ORDER if self.blocks.get(kind)]
        stable = [kind for kind in present if kind in STABLE_KINDS]
        # The cache's layout (tools → system → messages): the stable blocks first, marked
        # at their end; then the history, marked at its last message, which the next turn
        # repeats; the per-turn blocks (pack, clock, guidance) come last, framed in the
        # final user message by the brain, so no per-turn text sits inside a cached prefix.
        system = tuple(
            SystemBlock(kind, "\n\n".join(self.blocks[kind]), cache=cache and kind is stable[-1])
            for kind in stable
        ) + tuple(
            SystemBlock(kind, "\n\n".join(self.blocks[kind]), per_turn=True)
            for kind in present
            if kind not in STABLE_KINDS
        )
        last = len(self.history) - 1
        history = (
            ChatMessage(e.role, e.text, cache=cache and i == last)
            for i, e in enumerate(self.history)
        )
        messages = (*history, ChatMessage("user", message))
        return BrainRequest(
            system=system,
            messages=messages,
            purpose=Purpose.REPLY,
            max_tokens=max_tokens,
            temperature=temperature,
            recall=self.recall,
        )


@dataclass(frozen=True)
class TurnOutcome:
    """How a turn ended: the prompt sent (if it got that far) and the reply or the error."""

    request: BrainRequest | None
    reply_id: int | None = None
    reply_text: str | None = None
    reply_at: datetime | None = None
    error_code: str | None = None
    # False when the reply is the offline brain's notice, not the agent's words.
    written_by_model: bool = True


class AfterTurnStage(Protocol):
    """Runs once a turn has ended and its reply was delivered (memory ingest, judge, observe).

    Runs in the conversation's lane, so the next turn sees its effects; slow
    work (model calls) belongs in a supervised background task it starts.
    """

    @property
    def name(self) -> str: ...

    async def after_turn(self, turn: TurnContext, outcome: TurnOutcome) -> None: ...


class ContextStage(Protocol):
    """One step that adds to the prompt of a turn (persona, history, pack, anchors)."""

    @property
    def name(self) -> str: ...

    async def apply(self, turn: TurnContext, draft: PromptDraft) -> None: ...
