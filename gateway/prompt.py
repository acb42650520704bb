"""The prompt as stages build it, and its composition in a fixed order.

Order, as the provider's prompt cache reads it (tools → system → messages):
persona contract and observations (the system prompt, cache mark 1) → the
history (cache mark 2 on its last message) → the final user message: the
per-turn blocks (memory pack, time and channel, this turn's guidance) framed
as the gateway's, then the person's words. What changes every turn comes
after both marks, so turn N+1 reads turn N's whole prefix from the cache.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Any, Generic, Protocol, TypeVar, cast, runtime_checkable

from sqlalchemy import Connection
from sqlalchemy.exc import SQLAlchemyError

from gateway.brains.base import (
    BlockKind,
    BrainRequest,
    ChatMessage,
    Purpose,
    Recall,
    Role,
    SystemBlock,
)
from gateway.errors import AgentGWError, StoreError
from gateway.events import PackSize
from gateway.store import Store
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


R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)


@dataclass(frozen=True)
class StageRead(Generic[R_co]):
    """A context stage's read of the store: plain statements on a reader's connection."""

    # Names it among the turn's reads (two stages may share one: the persona facts).
    key: str
    work: Callable[[Connection], R_co]


@dataclass(frozen=True)
class _Outcome:
    value: object = None
    error: Exception | None = None


def _run_each(
    works: dict[str, Callable[[Connection], object]], connection: Connection
) -> dict[str, _Outcome]:
    outcomes: dict[str, _Outcome] = {}
    for key, work in works.items():
        try:
            outcomes[key] = _Outcome(work(connection))
        # Not swallowed: raised again in the stage that declared it (``TurnReads.take``),
        # so each read fails alone, in its own stage, as it did read alone.
        except Exception as exc:  # noqa: BLE001
            outcomes[key] = _Outcome(error=exc)
            # PostgreSQL aborts the transaction at a failed statement: the rest begin anew.
            connection.rollback()
    return outcomes


class TurnReads:
    """The reads the context stages declared before any of them ran (``ReadingStage``).

    They all run in one hop to a reader thread, in one read transaction, when the
    first of them is asked for; each stage then takes its own result (its error,
    if its read failed). Each stage's read was a hop of its own, ~55 µs of CPU
    between the loop and the thread besides the read (issue 28, "CPU per turn").
    """

    def __init__(self, store: Store, declared: Sequence[StageRead[Any]]) -> None:
        self._store = store
        self._waiting: dict[str, Callable[[Connection], object]] = {
            read.key: read.work for read in declared
        }
        self._done: dict[str, _Outcome] = {}

    @classmethod
    async def declared(
        cls, store: Store, stages: Sequence[ReadingStage], turn: TurnContext
    ) -> TurnReads:
        """The reads ``stages`` declare for ``turn``. A stage whose declaration fails
        (its person's zone unreadable) declares nothing: it reads, and fails, in its
        own stage, as before."""
        declared = []
        for stage in stages:
            with contextlib.suppress(AgentGWError):
                declared.append(await stage.declare(turn))
        return cls(store, declared)

    async def take(self, read: StageRead[R]) -> R:
        """``read``'s result: from the turn's one hop when it was declared, else read now."""
        if read.key in self._waiting:
            waiting, self._waiting = self._waiting, {}
            self._done.update(await self._store.read(partial(_run_each, waiting)))
        outcome = self._done.pop(read.key, None)
        if outcome is None:
            return await self._store.read(read.work)
        if isinstance(outcome.error, SQLAlchemyError):
            error = outcome.error
            raise StoreError(f"database error: {error.__class__.__name__}: {error}") from error
        if outcome.error is not None:
            raise outcome.error
        return cast(R, outcome.value)


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
    # The reads the stages declared (set by the pipeline; None: each stage reads its own).
    reads: TurnReads | None = None

    async def read(self, read: StageRead[R], store: Store) -> R:
        """What a stage reads: from the turn's declared reads (one hop for them all)
        when the pipeline gathered them, else read now."""
        if self.reads is not None:
            return await self.reads.take(read)
        return await store.read(read.work)

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


@runtime_checkable
class ReadingStage(ContextStage, Protocol):
    """A context stage that says what it reads of the store before any stage runs.

    The pipeline gathers the turn's declared reads (``TurnReads``); they run
    together when the first stage asks for its own (``PromptDraft.read``), so a
    stage's read may come before the stages between the first reading stage and
    itself: it must not read what those write (none of them writes what another
    reads). Applied alone, a stage reads its own.
    """

    async def declare(self, turn: TurnContext) -> StageRead[Any]: ...
